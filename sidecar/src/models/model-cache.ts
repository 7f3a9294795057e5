/**
 * The host's model folders and their items, kept current by watching the disk.
 *
 * Folders come from the host facts (`model_folders`: name → paths, and
 * `model_folder_extensions`: name → extensions, both read from ComfyUI's
 * `folder_paths.folder_names_and_paths` after every custom node loaded, so
 * extra_model_paths.yaml entries and folders other custom nodes add are in).
 * Items are what ComfyUI's `get_filename_list` would list: every file under a
 * folder's paths (symlinks followed, `.git` skipped), relative with `/`,
 * filtered by extension (an empty extension list means every file), the union
 * over the paths.
 *
 * Invariants: readers (the decision path) only read in-memory maps, never the
 * disk; a rebuild builds new maps beside the old ones and swaps them once the
 * scan is complete, so a decision never sees a half-scanned folder; `version`
 * grows on every change, so caches keyed on it never serve a stale answer.
 *
 * Watching: tree-watcher.ts, one `fs.watch` (inotify) per directory, never per
 * file; a file added, renamed or removed is in the maps within about SETTLE_MS.
 * Why not chokidar: measured on 3,000 files it held the event loop for
 * 300-670 ms while it set up (it stats and tracks every file); this costs one
 * readdir per directory, about 8 ms in all. A folder path that does not exist
 * yet is waited for: a watcher on its nearest existing parent enters it once it
 * appears.
 * `custom_nodes` is not a model folder (it is the host's code, and ComfyUI's own
 * /experiment/models leaves it out): it is never watched or listed.
 */
import { readdir, stat } from 'node:fs/promises'
import { extname, join, normalize, sep } from 'node:path'
import type { FastifyBaseLogger } from 'fastify'
import { TreeWatcher } from '../isolation/tree-watcher.js'

export interface ModelFolder {
  name: string
  paths: string[]
  /** lower-case, with the dot; empty: every file */
  extensions: string[]
}

/**
 * Where a download's partial file lives while it arrives: a directory of this name inside the
 * model folder it lands in (the same file system, so the finished file is linked into place). It
 * is never watched or listed: every write to a file in a watched directory wakes the event loop
 * that makes decisions (inotify reports each one), hundreds of times a second per download. What
 * it holds ends in `.authsvc-partial`, an extension no built-in model folder lists; the host
 * still lists it in a folder that takes every file, and loads any name inside such a directory,
 * so a name that reaches into one is never a model for a principal limited to grants
 * (ModelAccess.inStaging).
 */
export const DOWNLOAD_STAGING_DIR = '.authsvc-partial'
/** Directory names inside model folders that are never entered. */
const NEVER_ENTERED: ReadonlySet<string> = new Set(['.git', DOWNLOAD_STAGING_DIR])

/** Folder names never treated as model folders. */
export const NOT_MODEL_FOLDERS: ReadonlySet<string> = new Set(['custom_nodes'])

const isStringArray = (v: unknown): v is string[] => Array.isArray(v) && v.every((s) => typeof s === 'string')

/** The model folders named in host facts, checked at the boundary (anything malformed is left out). */
export function modelFoldersOf(facts: unknown): ModelFolder[] {
  if (typeof facts !== 'object' || facts === null) return []
  const f = facts as { model_folders?: unknown; model_folder_extensions?: unknown }
  if (typeof f.model_folders !== 'object' || f.model_folders === null) return []
  const exts = typeof f.model_folder_extensions === 'object' && f.model_folder_extensions !== null ? (f.model_folder_extensions as Record<string, unknown>) : {}
  const out: ModelFolder[] = []
  for (const [name, paths] of Object.entries(f.model_folders as Record<string, unknown>)) {
    if (NOT_MODEL_FOLDERS.has(name) || !isStringArray(paths)) continue
    const e = exts[name]
    out.push({ name, paths: [...paths], extensions: isStringArray(e) ? e.map((x) => x.toLowerCase()) : [] })
  }
  return out.sort((a, b) => a.name.localeCompare(b.name))
}

/** folder → item → the indexes of the folder paths that hold it */
type Items = Map<string, Map<string, Set<number>>>

const fits = (folder: ModelFolder, name: string): boolean => folder.extensions.length === 0 || folder.extensions.includes(extname(name).toLowerCase())

/** ComfyUI's Diffusers models are folders (extension "folder"): DiffusersLoader lists each folder holding a `model_index.json`, relative, `.` for the folder itself. */
const FOLDER_MODEL_MARKER = 'model_index.json'

/** The item a file under a model folder makes: itself when its extension fits; for a folder of folder models, the folder its marker file is in; else none. */
function itemOf(folder: ModelFolder, name: string): string | null {
  if (folder.extensions.length === 1 && folder.extensions[0] === 'folder') {
    if (name !== FOLDER_MODEL_MARKER && !name.endsWith(`/${FOLDER_MODEL_MARKER}`)) return null
    return name === FOLDER_MODEL_MARKER ? '.' : name.slice(0, -FOLDER_MODEL_MARKER.length - 1)
  }
  return fits(folder, name) ? name : null
}

/** Every file under `dir`, relative with `/`, following symlinks (as os.walk(followlinks=True)), skipping `.git` and the download staging directory. */
async function walk(dir: string, seen = new Set<string>()): Promise<string[]> {
  const out: string[] = []
  const visit = async (abs: string, rel: string): Promise<void> => {
    let real: string
    try {
      const s = await stat(abs)
      if (!s.isDirectory()) return
      real = `${s.dev}:${s.ino}`
    } catch {
      return
    }
    if (seen.has(real)) return // a symlink loop
    seen.add(real)
    let entries
    try {
      entries = await readdir(abs, { withFileTypes: true })
    } catch {
      return
    }
    for (const e of entries) {
      const childRel = rel === '' ? e.name : `${rel}/${e.name}`
      const childAbs = join(abs, e.name)
      if (e.isDirectory() || e.isSymbolicLink()) {
        if (NEVER_ENTERED.has(e.name)) continue
        let isDir = e.isDirectory()
        let isFile = false
        if (e.isSymbolicLink()) {
          try {
            const s = await stat(childAbs)
            isDir = s.isDirectory()
            isFile = s.isFile()
          } catch {
            continue
          }
        }
        if (isDir) await visit(childAbs, childRel)
        else if (isFile) out.push(childRel)
      } else if (e.isFile()) {
        out.push(childRel)
      }
    }
  }
  await visit(dir, '')
  return out
}

/** The items of one folder as the host would list them right now (a fresh walk: the "live" admin lists). */
export async function listFolderNow(folder: ModelFolder): Promise<string[]> {
  const names = new Set<string>()
  for (const path of folder.paths) {
    for (const rel of await walk(path)) {
      const item = itemOf(folder, rel)
      if (item !== null) names.add(item)
    }
  }
  return [...names].sort()
}

export class ModelCache {
  private folders = new Map<string, ModelFolder>()
  private items: Items = new Map()
  private watcher: TreeWatcher | null = null
  private key = ''
  /** rebuilds run one after the other: a scan is never cut short by the next one */
  private chain: Promise<void> = Promise.resolve()
  /** grows on every change of folders or items */
  version = 0
  /** called on every change of `version`, once the change is visible */
  onChange: () => void = () => {}
  refreshedAt = 0

  constructor(
    private readonly log: Pick<FastifyBaseLogger, 'warn' | 'error'>,
    private readonly now: () => number = Date.now,
  ) {}

  folderNames(): string[] {
    return [...this.folders.keys()]
  }

  folder(name: string): ModelFolder | undefined {
    return this.folders.get(name)
  }

  /** The cached items of a folder, sorted; undefined for an unknown folder. */
  list(folder: string): string[] | undefined {
    if (!this.folders.has(folder)) return undefined
    return [...(this.items.get(folder)?.keys() ?? [])].sort()
  }

  /** How many items the folder has (0 for an unknown folder). */
  size(folder: string): number {
    return this.items.get(folder)?.size ?? 0
  }

  has(folder: string, item: string): boolean {
    return this.items.get(folder)?.has(item) === true
  }

  /** Folders whose items include `item` (exact name). */
  foldersHolding(item: string): string[] {
    const out: string[] = []
    for (const [folder, items] of this.items) if (items.has(item)) out.push(folder)
    return out
  }

  get itemsCount(): number {
    let n = 0
    for (const items of this.items.values()) n += items.size
    return n
  }

  /** Watches these folders; a no-op when they are the ones already watched. Resolves once the scan is in. */
  setFolders(folders: ModelFolder[]): Promise<void> {
    const key = JSON.stringify(folders)
    if (key === this.key) return this.chain
    this.key = key
    return this.rebuild(() => folders)
  }

  /** Scans everything again (POST /model-cache/refresh) and resolves when the new items are in place. */
  refresh(): Promise<void> {
    return this.rebuild(() => [...this.folders.values()])
  }

  private rebuild(folders: () => ModelFolder[]): Promise<void> {
    const run = this.chain.then(() => this.scan(folders()))
    // a failed scan is logged and leaves the previous items in force; the chain goes on
    this.chain = run.catch((err: unknown) => this.log.error({ err }, 'model folder scan failed'))
    return run
  }

  private async scan(folders: ModelFolder[]): Promise<void> {
    const items: Items = new Map(folders.map((f) => [f.name, new Map()]))
    // each folder path as the watcher reports the files under it: joined (normalised), so `a//b`
    // and `a/./b` are `a/b` there; computed once per scan, not per file
    const prefixes = folders.map((f) => f.paths.map((dir) => {
      const normal = normalize(dir)
      return normal.endsWith(sep) ? normal : normal + sep
    }))
    // where a file belongs: (folder, path index, item), for every folder path that holds it
    const placesOf = (abs: string): Array<[string, number, string]> => {
      const out: Array<[string, number, string]> = []
      folders.forEach((f, at) => {
        prefixes[at].forEach((prefix, index) => {
          if (!abs.startsWith(prefix)) return
          const name = abs.slice(prefix.length).split(sep).join('/')
          const item = itemOf(f, name)
          if (item !== null) out.push([f.name, index, item])
        })
      })
      return out
    }
    let live = false
    const onFile = (abs: string, present: boolean): void => {
      let changed = false
      for (const [folder, index, name] of placesOf(abs)) {
        const byName = items.get(folder)!
        const holders = byName.get(name)
        // a name gaining or losing a path is a change too: the host may open another file for it
        // (the first path that has it), which the grants of downloads follow (host-grant-files.ts)
        if (present) {
          if (!holders) byName.set(name, new Set([index]))
          else if (!holders.has(index)) holders.add(index)
          else continue
          changed = true
        } else if (holders?.delete(index)) {
          if (holders.size === 0) byName.delete(name)
          changed = true
        }
      }
      // before the swap these fill the new maps unseen; after it the same maps are the live ones
      if (changed && live) {
        this.version++
        this.onChange()
      }
    }
    const watcher = new TreeWatcher(onFile, this.log, 'model directory', NEVER_ENTERED)
    for (const dir of new Set(folders.flatMap((f) => f.paths))) await watcher.add(dir)
    // the scan is complete: swap it in whole, then stop the old watchers
    const old = this.watcher
    this.watcher = watcher
    this.folders = new Map(folders.map((f) => [f.name, f]))
    this.items = items
    live = true
    this.version++
    this.onChange()
    this.refreshedAt = this.now()
    old?.close()
  }

  async close(): Promise<void> {
    this.key = ''
    await this.chain
    this.watcher?.close()
    this.watcher = null
  }
}
