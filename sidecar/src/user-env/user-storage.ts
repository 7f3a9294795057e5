/**
 * A user's own storage on the host: the folders that are theirs by construction, what is in
 * them, and their removal (an administrator's purge).
 *
 * A user with id `<id>` owns exactly four folders, each one level inside one of the host's
 * folders (the host's facts name them): `<user dir>/<id>/` (ComfyUI's per-user userdata: their
 * workflows, settings) and `u_<id>/` at the top of `input/`, `output/` and `temp/`
 * (isolation/user-folders.ts). Nothing else is theirs here: the shared set (`<user dir>/default/`)
 * and the shared area of the three folders are never counted or touched, even for files the
 * ownership table gives them.
 *
 * Guarantees:
 * - a place is built from the host folder's real path and a name made from the user id (which
 *   must be a UUID, so it holds no separator, no `..` and is never `default`); what is at that
 *   place is used only when it is a plain folder: a symlink (or a file) there is reported as
 *   `not_own` and never entered or removed, wherever it points;
 * - walks never follow a symlink (an entry that is a link counts as itself) and stop after
 *   `MAX_ENTRIES` entries per call (`truncated`), so a huge output folder costs a bounded time;
 *   they use the async fs API, so decisions on the same event loop keep being answered;
 * - a purge removes what is inside each of the user's plain folders, entry by entry (a link is
 *   unlinked, never followed), and keeps the folders themselves, which the host recreates as it
 *   needs them anyway.
 * Not guarded: a process that can write the host's folders directly and swaps a user's folder for
 *   a link between the look and the removal (nothing reachable over HTTP can make a link there).
 *
 * The sidecar reads these folders itself, as the workflows feature's owned routes do
 * (workflows/workflow-store.ts): owned routes run on the sidecar's HTTP side, not on the decision
 * path, and the sidecar runs on the host's machine (the plugin starts it).
 */
import type { Dirent } from 'node:fs'
import { lstat, readdir, realpath, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { isUserId, userFolder } from '../isolation/user-folders.js'
import type { HostFacts } from '../kernel/protocol.js'
import { WORKFLOWS_DIR } from '../workflows/workflow-store.js'

export const FOLDER_KINDS = ['userdata', 'input', 'output', 'temp'] as const
export type FolderKind = (typeof FOLDER_KINDS)[number]

/** entries one status (or the measure before a purge) looks at, over all four folders */
export const MAX_ENTRIES = 200_000

const FACT: Record<FolderKind, keyof HostFacts> = { userdata: 'user_dir', input: 'input_dir', output: 'output_dir', temp: 'temp_dir' }
/** how the answer names a folder: relative to the host folder of its kind */
const LABEL: Record<FolderKind, string> = { userdata: 'user', input: 'input', output: 'output', temp: 'temp' }

/**
 * - `folder`: a plain folder, the user's;
 * - `none`: nothing there yet (or the host folder itself does not exist);
 * - `not_own`: something other than a plain folder is there (a symlink, a file): never entered;
 * - `unknown`: the host has not named that folder (no hello yet).
 */
export type PlaceState = 'folder' | 'none' | 'not_own' | 'unknown'

export interface UserPlace {
  kind: FolderKind
  /** `<kind's host folder>/<name>`, e.g. `output/u_<id>` (never absolute) */
  label: string
  /** the absolute path (real parent + the name); null while the host has not named the folder */
  path: string | null
  state: PlaceState
}

export interface FolderUsage {
  kind: FolderKind
  label: string
  path: string | null
  state: PlaceState
  files: number
  bytes: number
}

export interface StorageStatus {
  folders: FolderUsage[]
  /** the user's workflows (`<user dir>/<id>/workflows/`, hidden names left out, as ComfyUI lists them) */
  workflows: { count: number; bytes: number }
  /** the walk stopped at MAX_ENTRIES: counts are lower bounds */
  truncated: boolean
}

export interface PurgedFolder extends FolderUsage {
  /** what failed to go (an fs error code), when something did */
  failed?: string
}

export interface PurgeReport {
  folders: PurgedFolder[]
  workflows: { count: number; bytes: number }
  files: number
  bytes: number
  truncated: boolean
}

/** The name of a user's folder in a host folder of `kind`; throws for anything but a user id. */
export function folderName(kind: FolderKind, userId: string): string {
  if (!isUserId(userId)) throw new Error('a per-user folder is named from a user id (a UUID)')
  return kind === 'userdata' ? userId : userFolder(userId)
}

interface Budget {
  left: number
  /** an entry was left out */
  cut: boolean
}

interface Tally {
  files: number
  bytes: number
  workflows: { count: number; bytes: number }
}

const isHidden = (rel: string): boolean => rel.split('/').some((segment) => segment.startsWith('.'))

/** Counts every entry under `dir` that is not a folder (links as themselves), never following a link. */
async function walk(dir: string, rel: string, tally: Tally, budget: Budget, countWorkflows: boolean): Promise<void> {
  let entries: Dirent[]
  try {
    entries = await readdir(dir, { withFileTypes: true })
  } catch {
    return
  }
  for (const entry of entries) {
    if (budget.left <= 0) {
      budget.cut = true
      return
    }
    budget.left--
    const full = join(dir, entry.name)
    const path = rel === '' ? entry.name : `${rel}/${entry.name}`
    if (entry.isDirectory()) {
      await walk(full, path, tally, budget, countWorkflows)
      continue
    }
    let size = 0
    try {
      size = (await lstat(full)).size
    } catch {
      continue // gone meanwhile
    }
    tally.files++
    tally.bytes += size
    if (countWorkflows && entry.isFile() && path.startsWith(`${WORKFLOWS_DIR}/`) && !isHidden(path)) {
      tally.workflows.count++
      tally.workflows.bytes += size
    }
  }
}

export class UserStorage {
  constructor(private readonly facts: () => HostFacts, private readonly maxEntries = MAX_ENTRIES) {}

  /** The user's four places and what is at each (see PlaceState). */
  async places(userId: string): Promise<UserPlace[]> {
    const facts = this.facts()
    return Promise.all(FOLDER_KINDS.map(async (kind): Promise<UserPlace> => {
      const name = folderName(kind, userId)
      const label = `${LABEL[kind]}/${name}`
      const base = facts[FACT[kind]]
      if (typeof base !== 'string' || base === '') return { kind, label, path: null, state: 'unknown' }
      let realBase: string
      try {
        realBase = await realpath(base)
      } catch {
        return { kind, label, path: join(base, name), state: 'none' }
      }
      const path = join(realBase, name)
      try {
        const st = await lstat(path)
        return { kind, label, path, state: st.isDirectory() ? 'folder' : 'not_own' }
      } catch {
        return { kind, label, path, state: 'none' }
      }
    }))
  }

  /** Whether the user has any plain folder of their own (one look per folder, no walk). */
  async hasFolders(userId: string): Promise<FolderKind[]> {
    return (await this.places(userId)).filter((p) => p.state === 'folder').map((p) => p.kind)
  }

  async status(userId: string): Promise<StorageStatus> {
    const budget: Budget = { left: this.maxEntries, cut: false }
    const workflows = { count: 0, bytes: 0 }
    const folders: FolderUsage[] = []
    for (const place of await this.places(userId)) {
      const tally: Tally = { files: 0, bytes: 0, workflows }
      if (place.state === 'folder' && place.path !== null) await walk(place.path, '', tally, budget, place.kind === 'userdata')
      folders.push({ ...place, files: tally.files, bytes: tally.bytes })
    }
    return { folders, workflows, truncated: budget.cut }
  }

  /** Removes what is inside each of the user's plain folders; reports what was there. */
  async purge(userId: string): Promise<PurgeReport> {
    const before = await this.status(userId)
    const folders: PurgedFolder[] = []
    for (const usage of before.folders) {
      if (usage.state !== 'folder' || usage.path === null) {
        folders.push(usage)
        continue
      }
      const failed = await emptyFolder(usage.path)
      folders.push(failed === null ? usage : { ...usage, failed })
    }
    return {
      folders,
      workflows: before.workflows,
      files: folders.reduce((n, f) => n + f.files, 0),
      bytes: folders.reduce((n, f) => n + f.bytes, 0),
      truncated: before.truncated,
    }
  }
}

/** Removes every entry inside `dir` (a link is unlinked, never followed); the first error code, or null. */
async function emptyFolder(dir: string): Promise<string | null> {
  let failed: string | null = null
  let names: string[]
  try {
    // checked again right before: the place must still be a plain folder
    if (!(await lstat(dir)).isDirectory()) return 'ENOTDIR'
    names = await readdir(dir)
  } catch (err) {
    return (err as NodeJS.ErrnoException).code ?? 'EIO'
  }
  for (const name of names) {
    try {
      await rm(join(dir, name), { recursive: true, force: true })
    } catch (err) {
      failed ??= (err as NodeJS.ErrnoException).code ?? 'EIO'
    }
  }
  return failed
}
