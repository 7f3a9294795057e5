/**
 * GET /object_info and /object_info/{class}: the lists of input files (the
 * options of every input the host marks `image_upload` or another `*_upload`,
 * e.g. LoadImage, LoadImageMask and the loaders of other custom nodes) show a
 * caller who does not see everything only their own uploads and the shared
 * inputs (host-files.ts).
 *
 * Cost: the host's answer is hundreds of KB; where its lists sit is found once
 * per distinct answer (cached by its hash), and each caller's edit is cached by
 * (answer, owner, ownership version). Everything outside those lists is the
 * host's text byte for byte (its 64-bit `max` values included).
 */
import { createHash } from 'node:crypto'
import { applySplices, arrayElements, objectMembers, rootStart, type Splice } from '../isolation/json-spans.js'
import { fileKey } from '../isolation/ownership.js'
import type { BehaviourDeps, RouteBehaviour } from './context.js'
import { mayView } from './host-files.js'

/** One list of input files in the answer: where its array sits, and its entries. */
interface FileList {
  start: number
  end: number
  entries: Array<{ name: string; raw: string }>
}

interface Layout {
  text: string
  lists: FileList[]
}

const UPLOAD_FLAG = /_upload"\s*:\s*true/

/** Where the upload-file lists are in one node class's `input`. */
function listsOfClass(text: string, classStart: number, out: FileList[]): void {
  if (text[classStart] !== '{') return
  for (const field of objectMembers(text, classStart).members) {
    if (field.key !== 'input' || text[field.valueStart] !== '{') continue
    for (const section of objectMembers(text, field.valueStart).members) {
      if (text[section.valueStart] !== '{') continue
      for (const input of objectMembers(text, section.valueStart).members) {
        if (text[input.valueStart] !== '[') continue
        const parts = arrayElements(text, input.valueStart).elements
        const [options, config] = parts
        if (!options || !config || text[options.start] !== '[' || text[config.start] !== '{') continue
        if (!objectMembers(text, config.start).members.some((m) => m.key.endsWith('_upload') && text.slice(m.valueStart, m.valueEnd) === 'true')) continue
        const entries = arrayElements(text, options.start).elements.map((e) => {
          const raw = text.slice(e.start, e.end)
          const value = JSON.parse(raw) as unknown
          return { name: typeof value === 'string' ? value : '', raw }
        })
        out.push({ start: options.start, end: options.end, entries })
      }
    }
  }
}

function layoutOf(text: string): Layout {
  const lists: FileList[] = []
  if (UPLOAD_FLAG.test(text)) {
    for (const cls of objectMembers(text, rootStart(text)).members) listsOfClass(text, cls.valueStart, lists)
  }
  return { text, lists }
}

const LAYOUTS_KEPT = 4
const EDITS_KEPT = 64

export function objectInfoBehaviour(deps: BehaviourDeps): RouteBehaviour {
  const layouts = new Map<string, Layout>()
  const edits = new Map<string, Buffer | 'keep'>()
  const remember = <V>(map: Map<string, V>, key: string, value: V, limit: number): V => {
    if (map.size >= limit) map.delete(map.keys().next().value as string)
    map.set(key, value)
    return value
  }
  return {
    decide({ pass, owner, seesAll }) {
      if (seesAll) return pass
      return { ...pass, filter: { name: 'object_info', ctx: { kind: 'object-info', owner, seesAll } } }
    },
    filter(ctx, msg, payload) {
      if (msg.status !== 200) return { action: 'keep' }
      const hash = createHash('sha1').update(payload).digest('hex')
      const editKey = `${hash} ${ctx.owner} ${deps.ownership.filesVersion}`
      let edit = edits.get(editKey)
      if (edit === undefined) {
        const layout = layouts.get(hash) ?? remember(layouts, hash, layoutOf(payload.toString('utf8')), LAYOUTS_KEPT)
        const splices: Splice[] = []
        for (const list of layout.lists) {
          const kept = list.entries.filter((e) => {
            const key = fileKey('input', '', e.name)
            return key !== null && mayView(deps.ownership, key, ctx.owner)
          })
          if (kept.length !== list.entries.length) splices.push({ start: list.start, end: list.end, text: `[${kept.map((e) => e.raw).join(', ')}]` })
        }
        edit = remember(edits, editKey, splices.length === 0 ? 'keep' : Buffer.from(applySplices(layout.text, splices), 'utf8'), EDITS_KEPT)
      }
      return edit === 'keep' ? { action: 'keep' } : { answer: { action: 'replace' }, payload: edit }
    },
  }
}

