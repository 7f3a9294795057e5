/**
 * POST /upload/image and /upload/mask: the stored file belongs to the uploader.
 *
 * The plugin parses the form the way the host handler will (the handler reuses
 * it) and the sidecar sees its text fields and file names. For a caller who
 * does not see everything: an overwrite may only replace a file of their own
 * (or create one); a mask's `original_ref` must be a file they may view (the
 * host reads it to compose the mask). After the host stored the file, its
 * answer `{name, subfolder, type}` names it, and the uploader becomes an owner.
 */
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { denyDecision } from '../decide/answers.js'
import { fileKey, folderOf, type FileType } from '../isolation/ownership.js'
import type { BehaviourDeps, RouteBehaviour } from './context.js'
import { mayView, namedFile } from './host-files.js'

const UPLOAD_TYPES: ReadonlySet<string> = new Set(['input', 'temp', 'output'])
/** how long the watcher leaves new files of an upload's folder to the upload (the host writes within it) */
const UPLOAD_WINDOW_MS = 30_000

export function uploadBehaviour(deps: BehaviourDeps, mask: boolean): RouteBehaviour {
  const dirOf = (type: FileType): string | undefined => deps.host.facts[`${type}_dir`]
  return {
    decide({ pass, owner, seesAll }) {
      return { ...pass, need_form: { ctx: { kind: mask ? 'upload-mask' : 'upload-image', owner, seesAll } } }
    },
    form(ctx, msg) {
      const decision = { action: 'pass', filter: { name: 'upload', ctx } } as const
      const target = fileKey(((msg.fields.type || 'input') as FileType), msg.fields.subfolder ?? '', msg.files.image || 'x')
      if (target !== null && UPLOAD_TYPES.has(msg.fields.type || 'input')) deps.ownership.uploadStarting(folderOf(target), UPLOAD_WINDOW_MS)
      if (ctx.seesAll) return decision
      const type = msg.fields.type || 'input'
      const overwrite = msg.fields.overwrite === 'true' || msg.fields.overwrite === '1'
      const filename = msg.files.image
      // an absolute subfolder or name replaces the folder in os.path.join: it can only name what a
      // relative one names, and it would name it under another key here
      if ((msg.fields.subfolder ?? '').startsWith('/') || (filename ?? '').startsWith('/')) {
        return denyDecision('VALIDATION_FAILED', 'subfolder and file name must be relative')
      }
      if (overwrite && UPLOAD_TYPES.has(type) && filename) {
        const key = fileKey(type as FileType, msg.fields.subfolder ?? '', filename)
        if (key !== null && !mayOverwrite(key, ctx.owner)) return denyDecision('NOT_OWNER', 'That file belongs to another user')
      }
      if (mask && msg.fields.original_ref !== undefined) {
        let ref: unknown
        try {
          ref = JSON.parse(msg.fields.original_ref)
        } catch {
          return denyDecision('VALIDATION_FAILED', 'original_ref must be JSON')
        }
        if (typeof ref !== 'object' || ref === null || typeof (ref as { filename?: unknown }).filename !== 'string') {
          return denyDecision('VALIDATION_FAILED', 'original_ref must name a file')
        }
        const r = ref as { filename: string; subfolder?: unknown; type?: unknown }
        // the host reads original_ref with its whole relative name (no base name, unlike /view)
        const named = namedFile({ filename: r.filename, type: typeof r.type === 'string' ? r.type : 'output', subfolder: typeof r.subfolder === 'string' ? r.subfolder : null }, 'whole')
        if (named === 'refuse' || (named !== null && !mayView(deps.ownership, named.key, ctx.owner))) return denyDecision('NOT_OWNER', 'original_ref is not yours')
      }
      return decision
    },
    async filter(ctx, msg, payload) {
      if (msg.status !== 200) return { action: 'keep' }
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
          await deps.ownership.addFileOwner(key, ctx.owner, undefined, new Date(deps.clock()))
        }
      }
      return { action: 'keep' }
    },
  }

  /** An overwrite replaces bytes others may rely on: only a file of one's own, or a new one. */
  function mayOverwrite(key: string, owner: string): boolean {
    const record = deps.ownership.file(key)
    if (record) return record.owners.includes(owner)
    const slash = key.indexOf('/')
    const dir = dirOf(key.slice(0, slash) as FileType)
    return dir !== undefined && !existsSync(join(dir, key.slice(slash + 1)))
  }
}
