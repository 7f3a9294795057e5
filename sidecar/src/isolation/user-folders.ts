/**
 * Per-user folders: isolation by construction where the gate chooses the place (issue 21).
 *
 * Each owner's uploads and outputs live in a folder of their own at the top of ComfyUI's
 * `input/`, `output/` and `temp/`: `u_<user id>` for a user (the id, not the name, so a rename
 * or a look-alike name changes nothing), `o_<16 hex>` for an owner that is not a user (a guest
 * session, an anonymous role: a hash of its owner key). Whose a file is there is a fact of its
 * path; no table is consulted.
 *
 * Everything else in the three folders is the shared area, as before per-user folders: an
 * input nobody owns is everyone's (the shared inputs), an output or temp file nobody owns is
 * the administrators' only, and a file the ownership table gives owners (uploads and outputs
 * from before the upgrade, previews the host names itself) is its owners'.
 *
 * Decisions are made on real paths the host resolved (kernel/host-link.ts): `placeOf` finds
 * the folder a real path is in, `mayRead` says whether an owner may read what is there.
 */
import { createHash } from 'node:crypto'
import { sep } from 'node:path'
import type { Place } from '../kernel/host-link.js'
import type { FileType, Ownership } from './ownership.js'

const UUID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'
const FOLDER = `u_${UUID}|o_[0-9a-f]{16}`
const USER_ID = new RegExp(`^${UUID}$`)
/** the names per-user folders have; nothing else at the top of a folder is one */
export const USER_FOLDER = new RegExp(`^(${FOLDER})$`, 'i')

/** Whether `id` is a user id (a UUID, as UserRepository makes them) rather than another owner key. */
export const isUserId = (id: string): boolean => USER_ID.test(id)

/** The folder of an owner key (kernel/behaviour.ts ownerKey). */
export function userFolder(owner: string): string {
  if (isUserId(owner)) return `u_${owner}`
  return `o_${createHash('sha256').update(owner).digest('hex').slice(0, 16)}`
}

export type Roots = Partial<Record<FileType, string>>

/** Where a real path is: which of the host's folders, and the path inside it (`/` separators, '' for the folder itself). */
export interface Where {
  type: FileType
  rel: string
}

export function placeOf(path: string, roots: Roots): Where | null {
  for (const type of ['input', 'output', 'temp'] as const) {
    const root = roots[type]
    if (root === undefined || root === '') continue
    if (path === root) return { type, rel: '' }
    if (path.startsWith(root + sep)) return { type, rel: path.slice(root.length + 1).split(sep).join('/') }
  }
  return null
}

/** The per-user folder a path inside a host folder is in, or null (the shared area, or the folder itself). */
export function folderOfRel(rel: string): string | null {
  const first = rel.split('/', 1)[0]
  return USER_FOLDER.test(first) ? first : null
}

/**
 * Whether `owner` (who does not see everything) may read what is at `where`: inside a per-user
 * folder, only its owner; in the shared area, a file by the ownership table (input: everyone's
 * when nobody owns it), a folder when nothing under it is another's (input only).
 */
export function mayRead(where: Where, place: Place, owner: string, ownership: Ownership): boolean {
  // matched without case: on a case-insensitive host `U_<ID>` is the same folder as `u_<id>`
  const folder = folderOfRel(where.rel)
  if (folder !== null) return folder.toLowerCase() === userFolder(owner)
  if (where.rel === '') return false
  const key = `${where.type}/${where.rel}`
  if (place.dir === true) {
    if (where.type !== 'input') return false
    const { own, owned } = ownership.filesOfType('input', owner)
    for (const k of owned) if (k.startsWith(`${key}/`) && !own.has(k)) return false
    return true
  }
  const record = ownership.file(key)
  if (record) return record.owners.includes(owner)
  return where.type === 'input'
}

/** Whether the host will read a file at this resolved place that `owner` may read (see mayRead). */
export function mayReadFile(place: Place | undefined, roots: Roots, owner: string, ownership: Ownership): boolean {
  const where = place?.path === undefined ? null : placeOf(place.path, roots)
  return place?.file === true && where !== null && mayRead(where, place, owner, ownership)
}

/** Whether a file key (`output/u_<id>/x.png`) is inside a per-user folder: its owner's by its path. */
export const inUserFolder = (key: string): boolean => folderOfRel(key.slice(key.indexOf('/') + 1)) !== null

const FOLDER_NAMES = new RegExp(FOLDER, 'gi')
// a folder name and the path after it, up to the quote that ends the name (JSON text, or a Python repr inside it)
const FOLDER_PATHS = new RegExp(String.raw`(?:${FOLDER})(?:[\\/][^'"]*)?`, 'gi')

/**
 * `text` with every per-user folder but `owner`'s own replaced, with whatever path follows it, by
 * `u_hidden` (a host answer that lists folders: neither whose they are nor what is inside shows).
 */
export function withoutOthersFolders(text: string, owner: string): string {
  const own = userFolder(owner)
  // inside one's own folder a subfolder may carry another's id (a name the caller chose): hidden too
  const names = (found: string): string => found.replace(FOLDER_NAMES, (name) => (name.toLowerCase() === own ? name : 'u_hidden'))
  return text.replace(FOLDER_PATHS, (found) => (found.split(/[\\/]/, 1)[0].toLowerCase() === own ? names(found) : 'u_hidden'))
}
