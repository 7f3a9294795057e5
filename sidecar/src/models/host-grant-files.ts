/**
 * A download's grant is of its file. `grantOnThisHost` (model-grants.ts) grants a name, and a name
 * can come to mean another file: an administrator removes the download and later puts another
 * model there under the same name, moves another one over it, or a file of that name appears in a
 * folder path the host looks in first. The user who downloaded the first file must not get the
 * second one.
 *
 * So a grant of this host records the file that landed (`file`: inode, size, modification time),
 * and it holds while the host would open that very file for the name (`ModelCache.pathOf`: the
 * first of the folder's paths that has it). It goes (memory first, as any revocation) when the name
 * names no file, or another file, or the same file changed. Checked:
 * - after every scan and every change of the model folders' items (a file removed or added, on any
 *   path of the folder), so at each start too: what changed while the sidecar was away is seen;
 * - on any change to a granted file itself: each one is watched (`fs.watch`, one inotify watch per
 *   granted file, of which there are as many as downloads), which sees a file moved over the name
 *   or written in place, which the folders' watch does not report;
 * - after each grant of this host is stored.
 * A grant stored before files were recorded (no `file`) is checked for the name alone: it goes
 * when the host has no file of that name.
 *
 * Checks run one at a time; asking while one runs starts one more after it. Between a change and
 * its check (a `stat` per grant) the old grant still holds: milliseconds. No check runs until the
 * host's folders are known in full (facts sent once every custom node loaded, scanned): a folder a
 * custom node adds would be missing before, and every grant in it would look gone.
 */
import { watch, type FSWatcher } from 'node:fs'
import { stat } from 'node:fs/promises'
import type { FastifyBaseLogger } from 'fastify'
import { sameFile, type FileIdentity, type ModelGrantRecord, type ModelGrants } from './model-grants.js'

/** The file at `path` now (symlinks followed, as the host opens it); null when there is no file. */
export async function fileIdentity(path: string): Promise<FileIdentity | null> {
  try {
    const s = await stat(path, { bigint: true })
    if (!s.isFile()) return null
    return { ino: String(s.ino), size: String(s.size), mtime_ns: String(s.mtimeNs) }
  } catch {
    return null
  }
}

export class HostGrantFiles {
  private readonly watchers = new Map<string, FSWatcher>()
  private running: Promise<void> | null = null
  private again: Promise<void> | null = null
  private closed = false
  private warned = false

  constructor(
    private readonly grants: Pick<ModelGrants, 'hostGrants' | 'revokeOnThisHost'>,
    /** the file the host opens for a folder's item; undefined when it has none */
    private readonly pathOf: (folder: string, item: string) => string | undefined,
    /** whether the folders are known in full (until then a check does nothing) */
    private readonly ready: () => boolean,
    private readonly log: Pick<FastifyBaseLogger, 'warn' | 'error'>,
    /** a grant that went: its file is gone or another */
    private readonly ended: (record: ModelGrantRecord, why: 'file_gone' | 'file_changed') => void,
  ) {}

  /** A check of every grant of this host, after any running now; resolves when it is done. */
  check(): Promise<void> {
    if (this.closed) return Promise.resolve()
    if (this.running === null) {
      this.running = this.run().finally(() => (this.running = null))
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
    if (!this.ready()) return
    const kept = new Set<string>()
    for (const record of this.grants.hostGrants()) {
      const path = this.pathOf(record.folder, record.item_name)
      // watched first, then read: a change after the read is heard, one before it is in the read
      if (path !== undefined && !this.watchers.has(path)) this.watch(path)
      const now = path === undefined ? null : await fileIdentity(path)
      if (this.closed) return
      const why = now === null ? 'file_gone' : record.file !== undefined && !sameFile(record.file, now) ? 'file_changed' : null
      if (why === null) {
        kept.add(path!)
        continue
      }
      try {
        if (await this.grants.revokeOnThisHost(record)) this.ended(record, why)
      } catch (err) {
        // memory let go at once; the store's retry is the collection's
        this.log.error({ err, folder: record.folder, item: record.item_name }, 'the store refused removing the grant of a downloaded model whose file went')
      }
    }
    for (const [path, watcher] of this.watchers) {
      if (kept.has(path)) continue
      watcher.close()
      this.watchers.delete(path)
    }
  }

  private watch(path: string): void {
    try {
      const watcher = watch(path, { persistent: false }, () => {
        // any change: this watch may be on a file no longer at the path; the check watches the path
        // again before it reads it
        watcher.close()
        if (this.watchers.get(path) === watcher) this.watchers.delete(path)
        void this.check()
      })
      watcher.on('error', () => {
        watcher.close()
        if (this.watchers.get(path) === watcher) this.watchers.delete(path)
        void this.check()
      })
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
