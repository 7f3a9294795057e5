/**
 * The files under some roots, kept current by directory watchers: tells its owner every
 * file that appears or goes (absolute paths). Used for the host's model folders
 * (model-cache.ts) and for its output, input and temp folders (file-watcher.ts).
 *
 * One `fs.watch` (inotify) per directory, never per file. Only entries that appear, go or
 * are renamed matter (inotify's create, delete and move, which Node reports as `rename`
 * with the entry's name); a file being written (`change`) is nothing to look at. Events are
 * batched per directory for SETTLE_MS; a batch looks at the named entries alone (one stat
 * each), so a folder of 10,000 images costs the same per new image as an empty one; a batch
 * of more than NAMES_MAX names, or after a watcher error, re-reads the directory (one
 * readdir, no stat per entry). An event naming the directory itself (inotify reports its
 * own move or deletion under its own name) checks that it is still the same directory:
 * one that went is dropped, and a root that went is waited for again.
 *
 * Batches run one after another, never interleaved (nor with `add`). A directory that
 * cannot be read for another reason than being gone (too many open files, I/O, permission)
 * keeps what it was last seen to hold: nothing is reported gone that was not seen gone.
 *
 * Why not chokidar here: it stats every entry of a directory whenever anything in it
 * changes (and every file while it sets up). Measured on an output folder of 2,000 images:
 * about 150 ms of CPU per new image; of 10,000: about 280 ms per image, and 1 s to start.
 * A root that does not exist yet is waited for: a watcher on its nearest existing parent
 * enters it once it appears. A directory reached twice (a symlink loop, on one walk) is
 * entered once; `.git` is never entered, nor any other name the owner gives (`neverEnter`).
 */
import { watch, type FSWatcher } from 'node:fs'
import { opendir, stat } from 'node:fs/promises'
import { basename, dirname, join, relative, sep } from 'node:path'
import type { FastifyBaseLogger } from 'fastify'

/** Per watched directory: what it held at its last look, its identity and its watcher. */
interface DirState {
  files: Set<string>
  dirs: Set<string>
  id: string
  watcher: FSWatcher | null
}

export const SETTLE_MS = 50
/** More names than this in one batch of one directory: one readdir is cheaper than a stat each. */
const NAMES_MAX = 64
/** A batch of a directory to read whole (too many names, a watcher error). */
const WHOLE = Symbol('whole directory')
/** A batch of a directory whose own name came in an event: is it still there, and the same one? */
const SELF = Symbol('the directory itself')

type Mark = string | typeof WHOLE | typeof SELF

/** What `path` is (a symlink followed, as ComfyUI does), `gone` when it is not there, `unknown` when it could not be told. */
type Kind = { kind: 'file'; id: string; ctimeMs: number } | { kind: 'dir'; id: string } | { kind: 'gone' } | { kind: 'unknown' }

const GONE_CODES = new Set(['ENOENT', 'ENOTDIR', 'ELOOP'])

async function kindOf(path: string): Promise<Kind> {
  try {
    const s = await stat(path)
    if (s.isFile()) return { kind: 'file', id: `${s.dev}:${s.ino}`, ctimeMs: s.ctimeMs }
    if (s.isDirectory()) return { kind: 'dir', id: `${s.dev}:${s.ino}` }
    return { kind: 'gone' } // a socket, a device: not an item
  } catch (err) {
    return GONE_CODES.has((err as NodeJS.ErrnoException).code ?? '') ? { kind: 'gone' } : { kind: 'unknown' }
  }
}

export class TreeWatcher {
  private readonly dirs = new Map<string, DirState>()
  private readonly roots = new Set<string>()
  private readonly dirty = new Map<string, Set<Mark>>()
  /** watchers on the parents of roots that do not exist yet */
  private readonly waiting = new Set<FSWatcher>()
  private timer: NodeJS.Timeout | null = null
  /** every add and every batch, one after another */
  private chain: Promise<void> = Promise.resolve()
  private closed = false
  /** stats made so far (what a change costs, for tests and benches) */
  looks = 0

  /**
   * @param onFile every file that appears (`present`) or goes, by absolute path; with its ctime
   *   when it was just looked at alone (a whole-directory read stats nothing)
   * @param label what the roots are, for the log
   * @param neverEnter directory names never entered or watched, wherever they are
   */
  constructor(
    private readonly onFile: (abs: string, present: boolean, ctimeMs?: number) => void,
    private readonly log: Pick<FastifyBaseLogger, 'warn'>,
    private readonly label = 'directory',
    private readonly neverEnter: ReadonlySet<string> = new Set(['.git']),
  ) {}

  /**
   * Watches `root`; one that does not exist yet is waited for (a watcher on its nearest
   * existing parent). With `quiet`, the files it holds now are not reported (they are not
   * news); everything after is.
   */
  add(root: string, options: { quiet?: boolean } = {}): Promise<void> {
    return this.serially(() => this.addNow(root, options.quiet === true))
  }

  private kind(path: string): Promise<Kind> {
    this.looks++
    return kindOf(path)
  }

  private serially(step: () => Promise<void>): Promise<void> {
    const next = this.chain.then(step, step)
    this.chain = next.catch((err: unknown) => this.log.warn({ err }, `${this.label} watcher step failed`))
    return next
  }

  private async addNow(root: string, quiet: boolean): Promise<void> {
    if (this.closed) return
    this.roots.add(root)
    await this.enter(root, new Set(), quiet)
    if (this.dirs.has(root) || this.closed) return
    let parent = dirname(root)
    for (;;) {
      if ((await this.kind(parent)).kind === 'dir') break
      const up = dirname(parent)
      if (up === parent) return
      parent = up
    }
    if (this.closed) return
    // Only an entry of the name on the way to the root appearing there matters (or the parent
    // itself going, reported under its own name): the parent may be a busy folder (ComfyUI
    // names output/checkpoints and output/loras as model folders, which rarely exist), where
    // every image written must not cost a look at each root waited for.
    const next = relative(parent, root).split(sep)[0]
    const self = basename(parent)
    let waiting: FSWatcher
    try {
      waiting = watch(parent, { persistent: false }, (event, name) => {
        if (typeof name === 'string' && name !== '' && (event !== 'rename' || (name !== next && name !== self))) return
        if (!this.waiting.delete(waiting)) return
        waiting.close()
        void this.add(root)
      })
      // a dead wait: looked at again from scratch (the parent may have gone)
      waiting.on('error', () => {
        if (!this.waiting.delete(waiting)) return
        waiting.close()
        void this.add(root)
      })
      this.waiting.add(waiting)
    } catch (err) {
      this.log.warn({ err, dir: root }, `cannot wait for a ${this.label} to appear`)
      return
    }
    // made while the wait was being set up: no event will say so
    if ((await this.kind(root)).kind === 'dir' && this.waiting.delete(waiting)) {
      waiting.close()
      await this.enter(root, new Set(), false)
    }
  }

  /** Reads `dir` and everything under it; `quiet`: its files are not reported. */
  private async enter(dir: string, seen: Set<string>, quiet: boolean): Promise<void> {
    if (this.closed || this.dirs.has(dir)) return
    const found = await this.kind(dir)
    if (this.closed || this.dirs.has(dir) || found.kind !== 'dir' || seen.has(found.id)) return
    seen.add(found.id)
    const state: DirState = { files: new Set(), dirs: new Set(), id: found.id, watcher: null }
    this.dirs.set(dir, state)
    this.startWatching(dir, state)
    await this.read(dir, state, seen, quiet)
  }

  private startWatching(dir: string, state: DirState): void {
    const self = basename(dir)
    try {
      const watcher = watch(dir, { persistent: false }, (event, name) => {
        if (event !== 'rename') return
        if (typeof name !== 'string' || name === '') this.touch(dir, WHOLE)
        else {
          this.touch(dir, name)
          if (name === self) this.touch(dir, SELF) // the directory itself moved or went (or an entry of the same name)
        }
      })
      watcher.on('error', () => {
        // a dead watcher: a new one, and a whole read for what it may have missed
        watcher.close()
        if (state.watcher === watcher) state.watcher = null
        this.touch(dir, WHOLE)
      })
      state.watcher = watcher
    } catch (err) {
      this.log.warn({ err, dir }, `cannot watch a ${this.label}; changes in it are not seen`)
    }
  }

  /** The whole directory: one pass over its entries, a stat only for symlinks. */
  private async read(dir: string, state: DirState, seen: Set<string>, quiet = false): Promise<void> {
    const files = new Set<string>()
    const dirs = new Set<string>()
    try {
      // opendir hands entries over in small batches, one loop turn each: a folder of 50,000 images
      // never holds the event loop (readdir's one array of them stalled it for about 200 ms)
      for await (const e of await opendir(dir, { bufferSize: 256 })) {
        if (e.isFile()) files.add(e.name)
        else if (e.isDirectory()) dirs.add(e.name)
        else if (e.isSymbolicLink()) {
          const kind = await this.kind(join(dir, e.name))
          if (kind.kind === 'file') files.add(e.name)
          else if (kind.kind === 'dir') dirs.add(e.name)
          else if (kind.kind === 'unknown') {
            // not readable now: it stays what it was seen to be
            if (state.files.has(e.name)) files.add(e.name)
            else if (state.dirs.has(e.name)) dirs.add(e.name)
          }
        }
      }
    } catch (err) {
      if (GONE_CODES.has((err as NodeJS.ErrnoException).code ?? '')) {
        if (this.closed || this.dirs.get(dir) !== state) return
        this.drop(dir)
        if (this.roots.has(dir)) await this.addNow(dir, false) // a root that went is waited for again
        return
      }
      // not readable now (too many open files, I/O): it keeps what it was seen to hold
      this.log.warn({ err, dir }, `cannot read a ${this.label}; it keeps what it held`)
      return
    }
    for (const name of this.neverEnter) dirs.delete(name)
    if (this.closed) return
    for (const name of state.files) if (!files.has(name)) this.onFile(join(dir, name), false)
    if (!quiet) for (const name of files) if (!state.files.has(name)) this.onFile(join(dir, name), true)
    for (const name of state.dirs) if (!dirs.has(name)) this.drop(join(dir, name))
    const added = [...dirs].filter((name) => !state.dirs.has(name))
    state.files = files
    state.dirs = dirs
    for (const name of added) await this.enter(join(dir, name), seen, quiet)
  }

  /** One entry of the directory, as it is now. */
  private async look(dir: string, state: DirState, name: string): Promise<void> {
    let found: Kind = await this.kind(join(dir, name))
    if (found.kind === 'dir' && this.neverEnter.has(name)) found = { kind: 'gone' } // a file of that name is a file
    if (this.closed || found.kind === 'unknown' || this.dirs.get(dir) !== state) return
    const path = join(dir, name)
    if (found.kind !== 'file' && state.files.delete(name)) this.onFile(path, false)
    if (found.kind !== 'dir' && state.dirs.delete(name)) this.drop(path)
    if (found.kind === 'dir' && state.dirs.has(name) && this.dirs.get(path)?.id !== found.id) {
      this.drop(path) // another directory under the same name
      state.dirs.delete(name)
    }
    if (found.kind === 'file' && !state.files.has(name)) {
      state.files.add(name)
      this.onFile(path, true, found.ctimeMs)
    } else if (found.kind === 'dir' && !state.dirs.has(name)) {
      state.dirs.add(name)
      await this.enter(path, new Set(), false)
    }
  }

  /** Is the directory still there, and the same one? If not it is dropped; a root is waited for again. */
  private async checkSelf(dir: string, state: DirState): Promise<boolean> {
    const found = await this.kind(dir)
    if (this.closed || this.dirs.get(dir) !== state) return false
    if (found.kind === 'unknown' || (found.kind === 'dir' && found.id === state.id)) return true
    this.drop(dir)
    if (this.roots.has(dir)) await this.addNow(dir, false)
    return false
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

  private touch(dir: string, mark: Mark): void {
    if (this.closed) return
    let marks = this.dirty.get(dir)
    if (marks === undefined) this.dirty.set(dir, (marks = new Set()))
    if (typeof mark === 'string' && marks.size >= NAMES_MAX) marks.add(WHOLE)
    else marks.add(mark)
    this.timer ??= setTimeout(() => {
      this.timer = null
      void this.serially(() => this.settle())
    }, SETTLE_MS)
  }

  private async settle(): Promise<void> {
    const batch = [...this.dirty]
    this.dirty.clear()
    for (const [dir, marks] of batch) {
      const state = this.dirs.get(dir)
      if (!state || this.closed) continue
      if (marks.has(SELF) && !(await this.checkSelf(dir, state))) continue
      if (state.watcher === null) this.startWatching(dir, state)
      if (marks.has(WHOLE)) await this.read(dir, state, new Set())
      else for (const mark of marks) if (typeof mark === 'string') await this.look(dir, state, mark)
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
