/**
 * A download's grant is of its file. `grantOnThisHost` (model-grants.ts) grants a name, and a name
 * can come to mean another file: an administrator removes the download and later puts another
 * model there under the same name, moves another one over it, or a file of that name appears in a
 * folder path the host looks in first. The user who downloaded the first file must not get the
 * second one.
 *
 * So a grant of this host records the file that landed (`file`: inode, size, modification time; not
 * the device, whose number a remount or a container's restart may change), and it holds while the
 * host would open that very file for the name. Which file that is is asked of the file system the
 * way the host asks it: the name joined to each of the folder's paths in order, the first that is
 * a file (symlinks followed), so the host's own case and Unicode folding are the file system's here
 * too. The grant goes (memory first, as any revocation)
 * when the name names no file, or another file, or the same file changed. Checked:
 * - after every scan and every change of the model folders (a file removed, added, or a name
 *   gaining or losing a path: model-cache.ts), so at each start too;
 * - on any change to the granted file itself: each is watched (`fs.watch`, one inotify watch per
 *   granted file), which sees a file moved over the name or written in place, which the folders'
 *   watch does not report. A file is watched before its state is read, so a change after the read
 *   is heard;
 * - after each grant of this host is stored.
 * Judged only on the host's complete facts (every custom node loaded), scanned: a folder a custom
 * node adds is missing before, and every grant in it would look gone. A run stops when the facts
 * change under it. A grant whose folder the facts do not name, or whose file cannot be read for
 * another reason than its absence (a permission, an I/O error), is left as it is until a later
 * check, unless a later path has a file (the host, for which an unreadable path is no file, opens
 * that one). A grant stored before files were recorded (no `file`) is given the file the name names
 * at its first check.
 *
 * Checks run one at a time; asking while one runs starts one more after it. Between a change and
 * its check (a few `stat`s per grant) the old grant still holds: milliseconds.
 */
import { watch, type FSWatcher } from 'node:fs'
import { stat } from 'node:fs/promises'
import { join, posix } from 'node:path'
import type { FastifyBaseLogger } from 'fastify'
import { sameFile, type FileIdentity, type ModelGrantRecord, type ModelGrants } from './model-grants.js'

/** What a path names now: its file, none (`null`: missing, or not a file), or `'unknown'` (it could not be read). */
export async function fileIdentity(path: string): Promise<FileIdentity | null | 'unknown'> {
  try {
    const s = await stat(path, { bigint: true })
    if (!s.isFile()) return null
    return { ino: String(s.ino), size: String(s.size), mtime_ns: String(s.mtimeNs) }
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    return code === 'ENOENT' || code === 'ENOTDIR' || code === 'ENAMETOOLONG' ? null : 'unknown'
  }
}

/**
 * The file the host opens for `item` among `paths`: the first that is a file (a path that cannot be
 * read is no file to the host either, which goes on to the next); null when none is, `'unknown'`
 * when none is but one could not be read (it may be hers, unreadable for a moment). The name is
 * kept inside the folder as the host keeps it (`a/../../x` is `x`).
 */
async function resolveItem(paths: readonly string[], item: string, read: typeof fileIdentity): Promise<string | null | 'unknown'> {
  const name = posix.normalize(`/${item}`).slice(1)
  let unreadable = false
  for (const dir of paths) {
    const path = join(dir, ...name.split('/'))
    const found = await read(path)
    if (found === 'unknown') unreadable = true
    else if (found !== null) return path
  }
  return unreadable ? 'unknown' : null
}

export class HostGrantFiles {
  private readonly watchers = new Map<string, FSWatcher>()
  private running: Promise<void> | null = null
  private again: Promise<void> | null = null
  private closed = false
  private warned = false

  constructor(
    private readonly grants: Pick<ModelGrants, 'hostGrants' | 'revokeOnThisHost' | 'pinFileOnThisHost'>,
    /** a model folder's paths in the host's order, as its current facts name them; undefined for a folder they do not name */
    private readonly pathsOf: (folder: string) => readonly string[] | undefined,
    /** the generation of the host's facts while they are complete and scanned; null until then */
    private readonly ready: () => number | null,
    private readonly log: Pick<FastifyBaseLogger, 'warn' | 'error'>,
    /** a grant that went: its file is gone or another */
    private readonly ended: (record: ModelGrantRecord, why: 'file_gone' | 'file_changed') => void,
    /** how a path is read (a test puts a change between a watch and its read) */
    private readonly read: typeof fileIdentity = fileIdentity,
  ) {}

  /** A check of every grant of this host, after any running now; resolves when it is done. */
  check(): Promise<void> {
    if (this.closed) return Promise.resolve()
    if (this.running === null) {
      this.running = this.run()
        .catch((err: unknown) => this.log.error({ err }, 'checking the grants of downloaded models failed'))
        .finally(() => (this.running = null))
      return this.running
    }
    // one more after the running one, shared by everyone who asks meanwhile
    this.again ??= this.running.then(() => {
      this.again = null
      return this.check()
    })
    return this.again
  }

  private async run(): Promise<void> {
    const generation = this.ready()
    if (generation === null) return
    // the facts changed under the run (a ComfyUI restarting): the next complete ones check again
    const stale = () => this.closed || this.ready() !== generation
    const kept = new Set<string>()
    for (const record of this.grants.hostGrants()) {
      const paths = this.pathsOf(record.folder)
      if (paths === undefined) continue // a folder these facts do not name: nothing the host opens for it
      const path = await resolveItem(paths, record.item_name, this.read)
      if (stale()) return
      if (path === 'unknown') continue // not readable now: judged by a later check
      let now: FileIdentity | null | 'unknown' = null
      if (path !== null) {
        // watched before it is read: a change after the read is heard
        if (!this.watchers.has(path)) this.watch(path)
        kept.add(path)
        now = await this.read(path)
        if (stale()) return
        if (now === 'unknown') continue
      }
      if (now !== null && record.file === undefined) {
        // a grant from before files were recorded: from now on, of the file the name names now
        await this.grants.pinFileOnThisHost(record, now).catch((err: unknown) => this.log.warn({ err }, 'the store refused recording the file of a downloaded model\'s grant; tried again at the next check'))
        continue
      }
      const why = now === null ? 'file_gone' : !sameFile(record.file!, now) ? 'file_changed' : null
      if (why === null) continue
      const write = this.grants.revokeOnThisHost(record)
      // memory let go at once (revokeOnThisHost says whether it held it): told now, whatever the store says
      const held = await write.then((h) => h, (err: unknown) => {
        this.log.error({ err, folder: record.folder, item: record.item_name }, 'the store refused removing the grant of a downloaded model whose file went; retried')
        return true
      })
      if (held) this.ended(record, why)
    }
    for (const [path, watcher] of this.watchers) {
      if (kept.has(path)) continue
      watcher.close()
      this.watchers.delete(path)
    }
  }

  private watch(path: string): void {
    if (this.closed) return
    try {
      // any change (or the watch failing): this watch may be on a file no longer at the path; the
      // check watches the path again before it reads it
      const changed = () => {
        watcher.close()
        if (this.watchers.get(path) === watcher) this.watchers.delete(path)
        void this.check()
      }
      const watcher = watch(path, { persistent: false }, changed)
      watcher.on('error', changed)
      this.watchers.set(path, watcher)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return // gone: the read that follows says so
      // (the kernel's limit of watches): such a file is checked at each change of the folders only
      if (!this.warned) this.log.warn({ err, path }, 'cannot watch a downloaded model; a change to it is seen at the next change of its folder')
      this.warned = true
    }
  }

  close(): void {
    this.closed = true
    for (const watcher of this.watchers.values()) watcher.close()
    this.watchers.clear()
  }
}
