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
 * `custom_nodes` is not a model folder (it is the host's code, and ComfyUI's own
 * /experiment/models leaves it out): it is never watched or listed.
 */
import { readdir, stat } from 'node:fs/promises'
import { extname, join, relative, sep } from 'node:path'
import chokidar, { type FSWatcher } from 'chokidar'
import type { FastifyBaseLogger } from 'fastify'

export interface ModelFolder {
  name: string
  paths: string[]
  /** lower-case, with the dot; empty: every file */
  extensions: string[]
}

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

const hidden = (rel: string): boolean => rel.split('/').includes('.git')
const fits = (folder: ModelFolder, name: string): boolean => folder.extensions.length === 0 || folder.extensions.includes(extname(name).toLowerCase())

/** Every file under `dir`, relative with `/`, following symlinks (as os.walk(followlinks=True)), skipping `.git`. */
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
        if (e.name === '.git') continue
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
  for (const path of folder.paths) for (const rel of await walk(path)) if (fits(folder, rel)) names.add(rel)
  return [...names].sort()
}

export class ModelCache {
  private folders = new Map<string, ModelFolder>()
  private items: Items = new Map()
  private watcher: FSWatcher | null = null
  private key = ''
  /** rebuilds run one after the other: a scan is never cut short by the next one closing its watcher */
  private chain: Promise<void> = Promise.resolve()
  /** grows on every change of folders or items */
  version = 0
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
  async setFolders(folders: ModelFolder[]): Promise<void> {
    const key = JSON.stringify(folders)
    if (key === this.key) return this.chain
    this.key = key
    return this.rebuild(folders)
  }

  /** Scans everything again (POST /model-cache/refresh) and resolves when the new items are in place. */
  refresh(): Promise<void> {
    return this.chain.then(() => this.rebuild([...this.folders.values()]))
  }

  private rebuild(folders: ModelFolder[]): Promise<void> {
    const run = this.chain.then(() => this.scan(folders))
    // a failed scan is logged and leaves the previous items in force; the chain goes on
    this.chain = run.catch((err: unknown) => this.log.error({ err }, 'model folder scan failed'))
    return run
  }

  private async scan(folders: ModelFolder[]): Promise<void> {
    await this.closeWatcher()
    const byName = new Map(folders.map((f) => [f.name, f]))
    const items: Items = new Map(folders.map((f) => [f.name, new Map()]))
    const dirs = [...new Set(folders.flatMap((f) => f.paths))]
    // one place that knows where an event path belongs: (folder, path index, item)
    const placesOf = (abs: string): Array<[string, number, string]> => {
      const out: Array<[string, number, string]> = []
      for (const f of folders) {
        f.paths.forEach((dir, index) => {
          const rel = relative(dir, abs)
          if (rel === '' || rel.startsWith('..') || rel.startsWith(sep)) return
          const name = rel.split(sep).join('/')
          if (!hidden(name) && fits(f, name)) out.push([f.name, index, name])
        })
      }
      return out
    }
    const add = (target: Items, abs: string): boolean => {
      let changed = false
      for (const [folder, index, name] of placesOf(abs)) {
        const holders = target.get(folder)!.get(name) ?? new Set<number>()
        if (holders.size === 0) changed = true
        holders.add(index)
        target.get(folder)!.set(name, holders)
      }
      return changed
    }
    const remove = (target: Items, abs: string): boolean => {
      let changed = false
      for (const [folder, index, name] of placesOf(abs)) {
        const holders = target.get(folder)!.get(name)
        if (!holders) continue
        holders.delete(index)
        if (holders.size === 0) {
          target.get(folder)!.delete(name)
          changed = true
        }
      }
      return changed
    }
    // a removed directory takes every item under it (chokidar may report only the directory)
    const removeTree = (target: Items, absDir: string): boolean => {
      let changed = false
      for (const f of folders) {
        f.paths.forEach((dir, index) => {
          const rel = relative(dir, absDir)
          if (rel.startsWith('..') || rel.startsWith(sep)) return
          const prefix = rel === '' ? '' : `${rel.split(sep).join('/')}/`
          for (const [name, holders] of target.get(f.name)!) {
            if (!name.startsWith(prefix) || !holders.has(index)) continue
            holders.delete(index)
            if (holders.size === 0) {
              target.get(f.name)!.delete(name)
              changed = true
            }
          }
        })
      }
      return changed
    }

    let live = false
    const changed = (did: boolean) => {
      if (did && live) this.version++
    }
    if (dirs.length > 0) {
      const watcher = chokidar.watch(dirs, {
        ignoreInitial: false,
        followSymlinks: true,
        ignorePermissionErrors: true,
        ignored: (path: string) => path.split(sep).includes('.git'),
      })
      // before `ready` these fill the new maps unseen; after the swap the same maps are the live ones
      watcher.on('add', (abs) => changed(add(items, abs)))
      watcher.on('unlink', (abs) => changed(remove(items, abs)))
      watcher.on('unlinkDir', (abs) => changed(removeTree(items, abs)))
      watcher.on('error', (err) => this.log.warn({ err }, 'model folder watcher error'))
      this.watcher = watcher
      await new Promise<void>((resolve) => watcher.once('ready', () => resolve()))
    }
    // the scan is complete: swap it in whole
    this.folders = byName
    this.items = items
    live = true
    this.version++
    this.refreshedAt = this.now()
  }

  private async closeWatcher(): Promise<void> {
    const w = this.watcher
    this.watcher = null
    if (w) await w.close()
  }

  async close(): Promise<void> {
    this.key = ''
    await this.closeWatcher()
  }
}
