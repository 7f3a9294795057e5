/**
 * GET /object_info and /object_info/{class}: for a caller who does not see everything, every
 * option list of every node (file lists of LoadImage, LoadLatent, LoadImageOutput, folder lists
 * of LoadImageSetFromFolderNode, and those of other packages' nodes alike: no table of nodes)
 * loses the options that name something of another owner: a name inside another owner's
 * folder (isolation/user-folders.ts, by its shape), and a file of the shared area the ownership
 * table gives to others (uploads from before per-user folders; `[output]`/`[temp]` names nobody
 * owns are the administrators').
 *
 * Model lists (models/behaviours.ts): for a caller without
 * `can_view_all_comfyui_items`, every input the host reports as a model list
 * keeps only the granted items (and the list's non-file options). A caller who
 * sees everything and every model gets no filter step at all.
 *
 * Cost: the host's answer is hundreds of KB; where its lists sit is found once
 * per distinct answer (cached by its hash; one pass in slices, option-lists.ts,
 * so other users' decisions go on meanwhile), and each caller's edit is cached by
 * (answer, owner, ownership version, grant set, model cache and facts version):
 * users with the same grants share one edit. Everything outside those lists is
 * the host's text byte for byte (its 64-bit `max` values included).
 */
import { createHash } from 'node:crypto'
import { applySplices, type Splice } from '../json-spans.js'
import { fileKey, type Ownership } from '../ownership.js'
import { mayRead, userFolder } from '../user-folders.js'
import type { RouteBehaviour } from '../../kernel/behaviour.js'
import type { BehaviourDeps } from './deps.js'
import { objectInfoModelKeep, objectInfoModelKey, promptModelCheck, type ModelCheck, type ModelDeps, type ModelView } from '../../models/behaviours.js'
import { optionListsOf, type OptionList } from './option-lists.js'
import type { HostLink } from '../../kernel/host-link.js'

interface Layout {
  text: string
  lists: OptionList[]
}

async function layoutOf(text: string): Promise<Layout> {
  return { text, lists: await optionListsOf(text) }
}

const LAYOUTS_KEPT = 4
const EDITS_KEPT = 64

/** The filter's state: whose uploads and files, and whose model grants (null: every model). */
interface ObjectInfoState {
  owner: string
  seesAll: boolean
  models: ModelCheck
}

export function objectInfoBehaviour(deps: BehaviourDeps & ModelDeps): RouteBehaviour<ObjectInfoState> {
  // a promise per answer: requests that arrive while its scan runs wait for the same scan
  const layouts = new Map<string, Promise<Layout>>()
  const edits = new Map<string, Buffer | 'keep'>()
  const remember = <V>(map: Map<string, V>, key: string, value: V, limit: number): V => {
    if (map.size >= limit) map.delete(map.keys().next().value as string)
    map.set(key, value)
    return value
  }
  /**
   * Everything an edit depends on besides the host's answer: whose uploads (and their version),
   * and the model view. The plugin may reuse a result for a byte-identical answer under the same
   * memo (protocol `filter.memo`), so a change of any of these must change it.
   */
  const memoOf = (owner: string, seesAll: boolean, view: ModelView | null): string =>
    `${seesAll ? 'all' : `${owner} ${deps.ownership.filesVersion}`} ${objectInfoModelKey(deps, view)}`
  return {
    keepable: true,
    decide({ pass, owner, seesAll, principal, steps }) {
      const models = promptModelCheck(deps, principal)
      if (seesAll && models === null) return pass
      const memo = memoOf(owner, seesAll, models === null ? null : deps.models.viewFor(models))
      return { ...pass, filter: { ...steps.filter('object_info', { owner, seesAll, models }), memo } }
    },
    async filter(state, msg, payload, host) {
      if (msg.status !== 200) return { action: 'keep' }
      const hash = createHash('sha1').update(payload).digest('hex')
      const view: ModelView | null = state.models === null ? null : deps.models.viewFor(state.models)
      const memo = memoOf(state.owner, state.seesAll, view)
      const editKey = `${hash} ${memo}`
      let edit = edits.get(editKey)
      if (edit === undefined) {
        const scan = layouts.get(hash) ?? remember(layouts, hash, layoutOf(payload.toString('utf8')).catch((err: unknown) => {
          layouts.delete(hash) // a failed scan is not remembered
          throw err
        }), LAYOUTS_KEPT)
        const layout = await scan
        const own = state.seesAll ? new Map<string, string[]>() : await ownUploads(host, state.owner, layout.lists)
        const splices: Splice[] = []
        for (const list of layout.lists) {
          const mine = list.uploadKind === undefined ? undefined : own.get(list.uploadKind)?.filter((name) => !list.entries.some((e) => e.name === name))
          const fileOk = state.seesAll ? null : (name: string) => optionVisible(name, state.owner, deps.ownership)
          const modelOk = view === null ? null : objectInfoModelKeep(deps, view, list.cls, list.input, list.entries.map((e) => e.name))
          if (fileOk === null && modelOk === null) continue
          const kept = list.entries.filter((e) => (fileOk === null || fileOk(e.name)) && (modelOk === null || modelOk(e.name)))
          const added = (mine ?? []).map((name) => ({ name, raw: JSON.stringify(name) }))
          if (kept.length !== list.entries.length || added.length > 0) splices.push({ start: list.start, end: list.end, text: `[${[...kept, ...added].map((e) => e.raw).join(', ')}]` })
          // a default that was taken out of the list becomes the first entry left
          if (list.default && list.entries.some((e) => e.name === list.default!.name) && !kept.some((e) => e.name === list.default!.name)) {
            splices.push({ start: list.default.start, end: list.default.end, text: kept[0]?.raw ?? '""' })
          }
        }
        edit = remember(edits, editKey, splices.length === 0 ? 'keep' : Buffer.from(applySplices(layout.text, splices), 'utf8'), EDITS_KEPT)
      }
      return edit === 'keep' ? { action: 'keep', memo } : { answer: { action: 'replace', memo }, payload: edit }
    },
  }
}


const ANNOTATION = / \[(output|input|temp)\]$/

/** Whether an option (a file or folder name, maybe annotated) may be shown to `owner`. */
export function optionVisible(option: string, owner: string, ownership: Ownership): boolean {
  const annotated = ANNOTATION.exec(option)
  const type = (annotated?.[1] ?? 'input') as 'input' | 'output' | 'temp'
  const key = fileKey(type, '', annotated ? option.slice(0, annotated.index) : option)
  if (key === null) return true // not a name of a file the host keeps
  return mayRead({ type, rel: key.slice(type.length + 1) }, {}, owner, ownership)
}

/** The content types of ComfyUI's `filter_files_content_types` an upload input's kind lists. */
const UPLOAD_CONTENT: Record<string, string> = { image: 'image', audio: 'audio', video: 'video' }

/**
 * The caller's own uploads for each kind of upload input the answer has (`image` → the image files of
 * their input folder): the host lists only the top of `input/`, where per-user folders keep nothing,
 * so LoadImage and its kin get them added (names as the upload's answer gives them).
 */
async function ownUploads(host: HostLink, owner: string, lists: OptionList[]): Promise<Map<string, string[]>> {
  const kinds = [...new Set(lists.map((l) => l.uploadKind).filter((k): k is string => k !== undefined && k in UPLOAD_CONTENT))]
  const found = new Map<string, string[]>()
  if (kinds.length === 0) return found
  const folder = userFolder(owner)
  const { results } = await host.resolve(kinds.map((kind) => ({ op: 'list' as const, folder, content_types: [UPLOAD_CONTENT[kind]] })))
  kinds.forEach((kind, i) => found.set(kind, results[i]?.files ?? []))
  return found
}
