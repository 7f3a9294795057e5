/**
 * New files in the host's output, input and temp folders find their owner: the
 * owner of the prompt whose run was in progress when the file was created.
 *
 * This covers every node that writes files, whatever it reports to the client
 * (the `executed` event names only what a node chooses to show). A file whose
 * creation time is later than the newest host event we know of waits for the
 * next event (the run's start may still be on its way from the plugin), at most
 * PENDING_MS; a file created outside any run keeps no owner (outputs and temp:
 * administrators only; inputs: shared). A run only claims files nobody owns; files of
 * an upload under way are left to the upload; a removed file's record is forgotten, so
 * a later file of the same name starts without owners.
 *
 * Files inside per-user folders (user-folders.ts) are their owner's by their path and are
 * not attributed.
 *
 * Watching: tree-watcher.ts (one inotify watch per directory; a new file costs one stat,
 * however many files the folder holds). Files there before the watch started are not
 * news: they keep whatever owners they have.
 */
import { stat } from 'node:fs/promises'
import { relative, sep } from 'node:path'
import type { FastifyBaseLogger } from 'fastify'
import { fileKey, folderOf, type FileType, type Ownership } from './ownership.js'
import { TreeWatcher } from './tree-watcher.js'
import { inUserFolder } from './user-folders.js'

const PENDING_MS = 2000

interface Pending {
  key: string
  ctimeMs: number
  since: number
}

export class HostFileWatcher {
  private watcher: TreeWatcher | null = null
  private dirs: Array<[FileType, string]> = []
  private pending: Pending[] = []
  private timer: NodeJS.Timeout | null = null

  constructor(
    private readonly ownership: Ownership,
    private readonly log: FastifyBaseLogger,
    private readonly now: () => number = Date.now,
  ) {}

  private watching: Promise<void> = Promise.resolve()

  /** Settles once the latest `watch` is watching (files made before that are not seen). */
  ready(): Promise<void> {
    return this.watching
  }

  /** (Re)starts watching the folders the host named; a no-op when they did not change. */
  watch(dirs: Partial<Record<FileType, string>>): Promise<void> {
    this.watching = this.watching.catch(() => {}).then(() => this.rewatch(dirs))
    return this.watching
  }

  private async rewatch(dirs: Partial<Record<FileType, string>>): Promise<void> {
    const next = (Object.entries(dirs) as Array<[FileType, string | undefined]>).filter((e): e is [FileType, string] => typeof e[1] === 'string' && e[1] !== '')
    if (JSON.stringify(next) === JSON.stringify(this.dirs)) return
    await this.close()
    this.dirs = next
    if (next.length === 0) return
    const watcher = new TreeWatcher((path, present, ctimeMs) => {
      const key = this.keyOf(path)
      if (key === null) return
      if (present) void this.appeared(key, path, ctimeMs)
      else this.ownership.forgetFile(key).catch((err: unknown) => this.log.error({ err, key }, 'could not forget a removed host file'))
    }, this.log, 'host folder')
    this.watcher = watcher
    // what a folder holds when its watch begins is not news: those files keep the owners they have
    for (const [, dir] of next) await watcher.add(dir, { quiet: true })
  }

  /** A new file; its ctime as the watcher just read it, or read here (a whole-folder read stats nothing). */
  private async appeared(key: string, path: string, ctimeMs?: number): Promise<void> {
    // an upload's file is its uploader's (the upload's own step says so), not the running prompt's
    if (this.ownership.uploadInFlight(folderOf(key))) return
    const since = this.now()
    if (ctimeMs === undefined) {
      try {
        const s = await stat(path)
        if (!s.isFile()) return
        ctimeMs = s.ctimeMs
      } catch {
        return // gone again before it was looked at
      }
    }
    this.attribute({ key, ctimeMs, since })
  }

  private keyOf(path: string): string | null {
    for (const [type, dir] of this.dirs) {
      const rel = relative(dir, path)
      if (rel === '' || rel.startsWith('..') || rel.startsWith(sep)) continue
      const key = fileKey(type, '', rel.split(sep).join('/'))
      // a file in a per-user folder is its owner's by its path (user-folders.ts): nothing to attribute
      return key === null || inUserFolder(key) ? null : key
    }
    return null
  }

  private attribute(file: Pending): void {
    if (file.ctimeMs > this.ownership.latestEventMs && this.now() - file.since < PENDING_MS) {
      this.pending.push(file)
      this.timer ??= setTimeout(() => this.retry(), 100)
      return
    }
    const promptId = this.ownership.promptRunningAt(file.ctimeMs)
    const owner = promptId === undefined ? undefined : this.ownership.ownerOfPrompt(promptId)
    if (owner === undefined) return
    this.ownership.claimFile(file.key, owner, promptId, new Date(this.now())).catch((err: unknown) => {
      this.log.error({ err, key: file.key }, 'could not store the owner of a host file')
    })
  }

  /** A host event arrived (or time passed): files that waited for it are attributed now. */
  retry(): void {
    if (this.timer !== null) clearTimeout(this.timer)
    this.timer = null
    const waiting = this.pending
    this.pending = []
    for (const file of waiting) this.attribute(file)
  }

  async close(): Promise<void> {
    if (this.timer !== null) clearTimeout(this.timer)
    this.timer = null
    this.watcher?.close()
    this.watcher = null
  }
}
