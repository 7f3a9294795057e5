/**
 * GET /object_info and /object_info/{class}: the lists of input files (the
 * options of every input the host marks `image_upload` or another `*_upload`,
 * e.g. LoadImage, LoadImageMask and the loaders of other custom nodes) show a
 * caller who does not see everything only their own uploads and the shared
 * inputs (host-files.ts).
 *
 * Model lists (behaviours/models.ts): for a caller without
 * `can_view_all_comfyui_items`, every input the host reports as a model list
 * keeps only the granted items (and the list's non-file options). A caller who
 * sees everything and every model gets no filter step at all.
 *
 * Cost: the host's answer is hundreds of KB; where its lists sit is found once
 * per distinct answer (cached by its hash), and each caller's edit is cached by
 * (answer, owner, ownership version, grant set, model cache and facts version):
 * users with the same grants share one edit. Everything outside those lists is
 * the host's text byte for byte (its 64-bit `max` values included).
 */
import { createHash } from 'node:crypto'
import { applySplices, arrayElements, objectMembers, rootStart, type Splice } from '../isolation/json-spans.js'
import { fileKey } from '../isolation/ownership.js'
import type { BehaviourDeps, RouteBehaviour } from './context.js'
import { mayView } from './host-files.js'
import { objectInfoModelKeep, objectInfoModelKey, type ModelDeps, type ModelView } from './models.js'

/** One list of options in the answer (input files, models, other combos): where its array sits, and its entries. */
interface FileList {
  start: number
  end: number
  entries: Array<{ name: string; raw: string }>
  cls: string
  input: string
  /** the host marks it `*_upload`: a list of input files */
  upload: boolean
  /** where the input's string `default` sits, if it has one (it may name an entry the caller must not see) */
  default?: { start: number; end: number; name: string }
}

interface Layout {
  text: string
  lists: FileList[]
}

/** Where the option lists are in one node class's `input` (`[[options], {config}]`, or `["COMBO", {options}]`). */
function listsOfClass(text: string, cls: string, classStart: number, out: FileList[]): void {
  if (text[classStart] !== '{') return
  for (const field of objectMembers(text, classStart).members) {
    if (field.key !== 'input' || text[field.valueStart] !== '{') continue
    for (const section of objectMembers(text, field.valueStart).members) {
      if (text[section.valueStart] !== '{') continue
      for (const input of objectMembers(text, section.valueStart).members) {
        if (text[input.valueStart] !== '[') continue
        const parts = arrayElements(text, input.valueStart).elements
        let options: { start: number; end: number } | undefined = parts[0]
        const config = parts[1]
        const configMembers = config && text[config.start] === '{' ? objectMembers(text, config.start).members : []
        if (options && text.slice(options.start, options.end) === '"COMBO"') {
          const listed = configMembers.find((m) => m.key === 'options')
          options = listed ? { start: listed.valueStart, end: listed.valueEnd } : undefined
        }
        if (!options || text[options.start] !== '[') continue
        const upload = configMembers.some((m) => m.key.endsWith('_upload') && text.slice(m.valueStart, m.valueEnd) === 'true')
        const entries = arrayElements(text, options.start).elements.map((e) => {
          const raw = text.slice(e.start, e.end)
          const value = JSON.parse(raw) as unknown
          return { name: typeof value === 'string' ? value : '', raw }
        })
        const def = configMembers.find((m) => m.key === 'default' && text[m.valueStart] === '"')
        const defaultSpan = def ? { start: def.valueStart, end: def.valueEnd, name: JSON.parse(text.slice(def.valueStart, def.valueEnd)) as string } : undefined
        out.push({ start: options.start, end: options.end, entries, cls, input: input.key, upload, default: defaultSpan })
      }
    }
  }
}

function layoutOf(text: string): Layout {
  const lists: FileList[] = []
  for (const cls of objectMembers(text, rootStart(text)).members) listsOfClass(text, cls.key, cls.valueStart, lists)
  return { text, lists }
}

const LAYOUTS_KEPT = 4
const EDITS_KEPT = 64

export function objectInfoBehaviour(deps: BehaviourDeps & ModelDeps): RouteBehaviour {
  const layouts = new Map<string, Layout>()
  const edits = new Map<string, Buffer | 'keep'>()
  const remember = <V>(map: Map<string, V>, key: string, value: V, limit: number): V => {
    if (map.size >= limit) map.delete(map.keys().next().value as string)
    map.set(key, value)
    return value
  }
  return {
    decide({ pass, owner, seesAll, principal }) {
      const models = deps.models.restricted(principal)
      if (seesAll && !models) return pass
      const ctx = { kind: 'object-info', owner, seesAll, ...(models ? { models_user: principal.userId } : {}) }
      return { ...pass, filter: { name: 'object_info', ctx } }
    },
    filter(ctx, msg, payload) {
      if (msg.status !== 200) return { action: 'keep' }
      const hash = createHash('sha1').update(payload).digest('hex')
      const view: ModelView | null = 'models_user' in ctx ? deps.models.viewFor(typeof ctx.models_user === 'string' ? ctx.models_user : null) : null
      const uploads = ctx.seesAll ? 'all' : `${ctx.owner} ${deps.ownership.filesVersion}`
      const editKey = `${hash} ${uploads} ${objectInfoModelKey(deps, view)}`
      let edit = edits.get(editKey)
      if (edit === undefined) {
        const layout = layouts.get(hash) ?? remember(layouts, hash, layoutOf(payload.toString('utf8')), LAYOUTS_KEPT)
        const splices: Splice[] = []
        for (const list of layout.lists) {
          const fileOk = list.upload && !ctx.seesAll
            ? (name: string) => {
                const key = fileKey('input', '', name)
                return key !== null && mayView(deps.ownership, key, ctx.owner)
              }
            : null
          const modelOk = view === null ? null : objectInfoModelKeep(deps, view, list.cls, list.input, list.entries.map((e) => e.name))
          if (fileOk === null && modelOk === null) continue
          const kept = list.entries.filter((e) => (fileOk === null || fileOk(e.name)) && (modelOk === null || modelOk(e.name)))
          if (kept.length !== list.entries.length) splices.push({ start: list.start, end: list.end, text: `[${kept.map((e) => e.raw).join(', ')}]` })
          // a default that was taken out of the list becomes the first entry left
          if (list.default && list.entries.some((e) => e.name === list.default!.name) && !kept.some((e) => e.name === list.default!.name)) {
            splices.push({ start: list.default.start, end: list.default.end, text: kept[0]?.raw ?? '""' })
          }
        }
        edit = remember(edits, editKey, splices.length === 0 ? 'keep' : Buffer.from(applySplices(layout.text, splices), 'utf8'), EDITS_KEPT)
      }
      return edit === 'keep' ? { action: 'keep' } : { answer: { action: 'replace' }, payload: edit }
    },
  }
}

