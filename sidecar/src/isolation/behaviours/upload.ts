/**
 * POST /upload/image and /upload/mask.
 *
 * A caller who does not see everything uploads into their own folder (isolation/user-folders.ts)
 * whatever subfolder they asked for: the form's `subfolder` becomes `<their folder>/<subfolder>`
 * (kept when it already starts with their folder), and the host's answer names it, so the
 * frontend and API clients use it unchanged. The place the host will write is resolved by the
 * host (its handler's own steps, with the edited subfolder) and must be inside their folder;
 * a subfolder or file name that would leave it is refused (400 VALIDATION_FAILED), whatever
 * exists. An overwrite can only ever replace a file of their own, and the host's renaming
 * (`name (1).png`) only ever sees their own files: no answer depends on anyone else's files.
 * A mask's `original_ref` is resolved the way the host reads it and must be a file they may
 * read; one they may not read and one that does not exist get the same 403 NOT_OWNER.
 *
 * Administrators (and everyone while users are not separated) upload where they ask; the file
 * then belongs to them (the ownership table, as before per-user folders).
 */
import { denyDecision } from '../../kernel/answers.js'
import type { RespondDecision } from '../../kernel/protocol.js'
import { fileKey, folderOf, normalSegments, type FileType } from '../ownership.js'
import { mayReadFile, placeOf, userFolder } from '../user-folders.js'
import type { RouteBehaviour } from '../../kernel/behaviour.js'
import type { BehaviourDeps, ContentGate } from './deps.js'

const UPLOAD_TYPES: ReadonlySet<string> = new Set(['input', 'temp', 'output'])
/** how long the watcher leaves new files of an upload's folder to the upload (the host writes within it) */
const UPLOAD_WINDOW_MS = 30_000

/**
 * The subfolder inside `own` for the subfolder a client asked for (`/` separators, `.` and `..`
 * taken as the host's normpath takes them), or null when it would leave the folder.
 */
export function ownSubfolder(asked: string, own: string): string | null {
  if (asked.startsWith('/')) return null
  const parts = normalSegments(asked, /\//)
  if (parts === null) return null
  if (parts[0] === own) parts.shift()
  return [own, ...parts].join('/')
}

/** The form step's state (and the filter's after it): who uploads, and whether they choose the place. */
interface UploadState {
  owner: string
  seesAll: boolean
  /** the content-safety policy applies to the uploader: a mask may not copy an image it marked */
  sfw: boolean
}

type MaskRef = { filename: string; type?: unknown; subfolder?: unknown }

/** original_ref as the host's mask handler reads it (JSON naming a file), or a refusal (never the client's object itself as one). */
function maskRef(raw: string | undefined): { ref: MaskRef } | { refusal: RespondDecision } {
  // the host's mask handler reads original_ref unconditionally (json.loads(None) would be its 500)
  if (raw === undefined) return { refusal: denyDecision('VALIDATION_FAILED', 'original_ref is required') }
  let parsed: unknown
  try {
    parsed = JSON.parse(raw)
  } catch {
    return { refusal: denyDecision('VALIDATION_FAILED', 'original_ref must be JSON') }
  }
  if (typeof parsed !== 'object' || parsed === null || typeof (parsed as { filename?: unknown }).filename !== 'string') {
    return { refusal: denyDecision('VALIDATION_FAILED', 'original_ref must name a file') }
  }
  return { ref: parsed as MaskRef }
}

/** The resolve item of a mask's original: only the fields the host reads (a key of the client's, `op`, never reaches the resolver). */
const refItem = (ref: MaskRef) =>
  ({ op: 'mask_ref' as const, filename: ref.filename, ...('type' in ref ? { type: ref.type } : {}), ...('subfolder' in ref ? { subfolder: ref.subfolder } : {}) })

/** The refusal when a mask's original is an image the content-safety policy marked (a copy would lose the mark); null otherwise. */
async function markedOriginal(gate: ContentGate, original: { file?: boolean; path?: string } | undefined): Promise<RespondDecision | null> {
  if (original?.file !== true || original.path === undefined || !(await gate.marked([original.path]))) return null
  return denyDecision('PERMISSION_DENIED', 'original_ref is an image marked NSFW, which your account may not use')
}

export function uploadBehaviour(deps: BehaviourDeps, mask: boolean): RouteBehaviour<UploadState> {
  return {
    decide({ pass, principal, owner, seesAll, steps }) {
      return { ...pass, need_form: { ctx: steps.form({ owner, seesAll, sfw: mask && deps.contentGate?.()?.applies(principal) === true }) } }
    },
    async form(state, msg, host, steps) {
      const type = msg.fields.type || 'input'
      const gate = state.sfw ? deps.contentGate?.() ?? null : null
      if (state.seesAll) {
        if (gate !== null) {
          const read = maskRef(msg.fields.original_ref)
          if ('refusal' in read) return read.refusal
          const marked = await markedOriginal(gate, (await host.resolve([refItem(read.ref)])).results[0])
          if (marked !== null) return marked
        }
        const target = fileKey(type as FileType, msg.fields.subfolder ?? '', msg.files.image || 'x')
        if (target !== null && UPLOAD_TYPES.has(type)) deps.ownership.uploadStarting(folderOf(target), UPLOAD_WINDOW_MS)
        return { action: 'pass', filter: steps.filter('upload', state) }
      }
      if (!UPLOAD_TYPES.has(type)) return denyDecision('VALIDATION_FAILED', 'type must be input, temp or output')
      const own = userFolder(state.owner)
      const subfolder = ownSubfolder(msg.fields.subfolder ?? '', own)
      if (subfolder === null) return denyDecision('VALIDATION_FAILED', 'subfolder must be a relative folder that stays inside your own')
      const filename = msg.files.image
      const items = [{ op: 'upload' as const, type, subfolder, filename: filename ?? '' }]
      let ref: MaskRef | undefined
      if (mask) {
        const read = maskRef(msg.fields.original_ref)
        if ('refusal' in read) return read.refusal
        ref = read.ref
      }
      const { results, roots } = await host.resolve([...items, ...(ref === undefined ? [] : [refItem(ref)])])
      // where the host will write, with the edited subfolder: inside their folder, or refused (an
      // absolute or climbing file name, a symlink out; a shape the host itself refuses, too)
      const target = results[0]
      const where = target?.path === undefined ? null : placeOf(target.path, roots)
      if (where === null || where.type !== type || !where.rel.startsWith(`${own}/`)) {
        return denyDecision('VALIDATION_FAILED', 'The file must be a file name inside your own folder')
      }
      if (ref !== undefined) {
        const original = results[1]
        // the host's own 400/403 for the reference: it reads nothing then; anything else must be a file they may read
        const hostRefuses = original?.status === 400 || original?.status === 403
        if (!hostRefuses && !mayReadFile(original, roots, state.owner, deps.ownership)) {
          return denyDecision('NOT_OWNER', 'original_ref is not a file of yours')
        }
        const marked = gate === null ? null : await markedOriginal(gate, original)
        if (marked !== null) return marked
      }
      return { action: 'pass', set_fields: { subfolder }, filter: steps.filter('upload', state) }
    },
    async filter(state, msg, payload) {
      if (msg.status !== 200) return { action: 'keep' }
      // a file in their own folder: theirs by its path; their LoadImage lists change (object-info.ts)
      if (!state.seesAll) {
        deps.ownership.folderChanged()
        return { action: 'keep' }
      }
      let stored: { name?: unknown; subfolder?: unknown; type?: unknown }
      try {
        stored = JSON.parse(payload.toString('utf8')) as typeof stored
      } catch {
        return { action: 'keep' }
      }
      if (typeof stored.name === 'string' && typeof stored.type === 'string' && UPLOAD_TYPES.has(stored.type)) {
        const key = fileKey(stored.type as FileType, typeof stored.subfolder === 'string' ? stored.subfolder : '', stored.name)
        if (key !== null) {
          deps.ownership.uploadDone(folderOf(key))
          await deps.ownership.addFileOwner(key, state.owner, undefined, new Date(deps.clock()))
        }
      }
      return { action: 'keep' }
    },
  }
}
