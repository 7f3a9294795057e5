/**
 * The files under some roots, kept current by directory watchers: tells its owner every
 * file that appears or goes (absolute paths). Used for the host's model folders
 * (model-cache.ts) and for its output, input and temp folders (file-watcher.ts).
 *
 * One `fs.watch` (inotify) per directory, never per file. Only entries that appear, go or
 * are renamed matter (inotify's create, delete and move: `rename`); a file being written
 * (`change`) is nothing to re-read. Events are batched per directory for SETTLE_MS; a batch
 * of named entries looks at those entries alone (one stat each), so a folder of 10,000
 * images costs the same per new image as an empty one; a batch without names, or with
 * more than NAMES_MAX, re-reads that directory (one readdir, no stat per entry).
 *
 * Why not chokidar here: it stats every entry of a directory whenever anything in it
 * changes (and every file while it sets up). Measured on an output folder of 2,000 images:
 * about 150 ms of CPU per new image; of 10,000: about 240 ms per image, and 1 s to start.
 * A root that does not exist yet is waited for: a watcher on its nearest existing parent
 * enters it once it appears. Symlinked directories are followed once (a loop ends there);
 * `.git` is never entered.
 */
import { watch, type FSWatcher } from 'node:fs'
import { readdir, stat } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import type { FastifyBaseLogger } from 'fastify'

/** Per watched directory: what it held at its last look, and its watcher. */
interface DirState {
  files: Set<string>
  dirs: Set<string>
  watcher: FSWatcher | null
}

export const SETTLE_MS = 50
/** More names than this in one batch of one directory: one readdir is cheaper than a stat each. */
const NAMES_MAX = 64
/** A batch of a directory whose events named no entry (or too many): read it whole. */
const WHOLE = Symbol('whole directory')

type Kind = 'file' | 'dir' | null

/** What `path` is, following a symlink as ComfyUI does (a dangling link is nothing). */
async function kindOf(path: string): Promise<Kind> {
  try {
    const s = await stat(path)
    return s.isFile() ? 'file' : s.isDirectory() ? 'dir' : null
  } catch {
    return null
  }
}

export class TreeWatcher {
  private readonly dirs = new Map<string, DirState>()
  private readonly dirty = new Map<string, Set<string | typeof WHOLE>>()
  /** watchers on the parents of roots that do not exist yet */
  private readonly waiting = new Set<FSWatcher>()
  private timer: NodeJS.Timeout | null = null
  private closed = false

  /**
   * @param onFile every file that appears (`present`) or goes, by absolute path; the files a
   *   root holds when it is added are reported too, before `add` settles
   * @param label what the roots are, for the log
   */
  constructor(
    private readonly onFile: (abs: string, present: boolean) => void,
    private readonly log: Pick<FastifyBaseLogger, 'warn'>,
    private readonly label = 'directory',
  ) {}

  /** Watches `root`; one that does not exist yet is waited for (a watcher on its nearest existing parent). */
  async add(root: string): Promise<void> {
    await this.enter(root, new Set())
    if (this.dirs.has(root) || this.closed) return
    let parent = dirname(root)
    for (;;) {
      if ((await kindOf(parent)) === 'dir') break
      const up = dirname(parent)
      if (up === parent) return
      parent = up
    }
    try {
      const waiting = watch(parent, { persistent: false }, () => {
        waiting.close()
        this.waiting.delete(waiting)
        void this.add(root)
      })
      this.waiting.add(waiting)
    } catch (err) {
      this.log.warn({ err, dir: root }, `cannot wait for a ${this.label} to appear`)
    }
  }

  /** Reads `dir` and everything under it. */
  private async enter(dir: string, seen: Set<string>): Promise<void> {
    if (this.closed || this.dirs.has(dir)) return
    let id: string
    try {
      const s = await stat(dir)
      if (!s.isDirectory()) return
      id = `${s.dev}:${s.ino}`
    } catch {
      return
    }
    if (seen.has(id)) return
    seen.add(id)
    const state: DirState = { files: new Set(), dirs: new Set(), watcher: null }
    this.dirs.set(dir, state)
    try {
      state.watcher = watch(dir, { persistent: false }, (event, name) => {
        if (event === 'rename') this.touch(dir, typeof name === 'string' && name !== '' ? name : WHOLE)
      })
      state.watcher.on('error', () => this.touch(dir, WHOLE))
    } catch (err) {
      this.log.warn({ err, dir }, `cannot watch a ${this.label}; changes in it are not seen`)
    }
    await this.read(dir, state, seen)
  }

  /** The whole directory: one readdir, a stat only for symlinks. */
  private async read(dir: string, state: DirState, seen: Set<string>): Promise<void> {
    const files = new Set<string>()
    const dirs = new Set<string>()
    try {
      for (const e of await readdir(dir, { withFileTypes: true })) {
        if (e.isFile()) files.add(e.name)
        else if (e.isDirectory()) dirs.add(e.name)
        else if (e.isSymbolicLink()) {
          const kind = await kindOf(join(dir, e.name))
          if (kind === 'file') files.add(e.name)
          else if (kind === 'dir') dirs.add(e.name)
        }
      }
    } catch {
      // gone or unreadable: it holds nothing now
    }
    dirs.delete('.git')
    if (this.closed) return
    for (const name of state.files) if (!files.has(name)) this.onFile(join(dir, name), false)
    for (const name of files) if (!state.files.has(name)) this.onFile(join(dir, name), true)
    for (const name of state.dirs) if (!dirs.has(name)) this.drop(join(dir, name))
    const added = [...dirs].filter((name) => !state.dirs.has(name))
    state.files = files
    state.dirs = dirs
    for (const name of added) await this.enter(join(dir, name), seen)
  }

  /** One entry of the directory, as it is now. */
  private async look(dir: string, state: DirState, name: string): Promise<void> {
    const kind = name === '.git' ? null : await kindOf(join(dir, name))
    if (this.closed) return
    const path = join(dir, name)
    if (kind !== 'file' && state.files.delete(name)) this.onFile(path, false)
    if (kind !== 'dir' && state.dirs.delete(name)) this.drop(path)
    if (kind === 'file' && !state.files.has(name)) {
      state.files.add(name)
      this.onFile(path, true)
    } else if (kind === 'dir' && !state.dirs.has(name)) {
      state.dirs.add(name)
      await this.enter(path, new Set())
    }
  }

  /** A directory that went: its files go, its watchers close. */
  private drop(dir: string): void {
    const state = this.dirs.get(dir)
    if (!state) return
    this.dirs.delete(dir)
    state.watcher?.close()
    for (const name of state.files) this.onFile(join(dir, name), false)
    for (const name of state.dirs) this.drop(join(dir, name))
  }

  private touch(dir: string, name: string | typeof WHOLE): void {
    if (this.closed) return
    let names = this.dirty.get(dir)
    if (names === undefined) this.dirty.set(dir, (names = new Set()))
    if (!names.has(WHOLE)) names.add(names.size >= NAMES_MAX ? WHOLE : name)
    this.timer ??= setTimeout(() => void this.settle(), SETTLE_MS)
  }

  private async settle(): Promise<void> {
    this.timer = null
    const batch = [...this.dirty]
    this.dirty.clear()
    for (const [dir, names] of batch) {
      const state = this.dirs.get(dir)
      if (!state) continue
      if (names.has(WHOLE)) await this.read(dir, state, new Set())
      else for (const name of names) await this.look(dir, state, name as string)
    }
  }

  close(): void {
    this.closed = true
    if (this.timer !== null) clearTimeout(this.timer)
    for (const state of this.dirs.values()) state.watcher?.close()
    this.dirs.clear()
    for (const w of this.waiting) w.close()
    this.waiting.clear()
  }
}
