/**
 * Who owns what on the host: prompts, and the files they wrote or their owners uploaded.
 *
 * Guarantees:
 * - a prompt's owner is stored before the host sees the prompt (the body step
 *   awaits `recordPrompt`), so ownership survives a restart of either process;
 * - a file belongs to the owner of the prompt whose run was in progress when the
 *   file was created (its ctime falls in that run's window: runs never overlap on
 *   the host), or to the owner who uploaded it. That holds for every node that
 *   writes files, whatever it reports, because it rests on when the file appeared,
 *   not on a table of node types;
 * - owners are sets: an upload the host deduplicates into an existing file adds
 *   the uploader, it never takes the file from its first owner;
 * - reads never touch the store.
 */
import type { Collection } from '../store/collection.js'

export interface PromptRecord {
  prompt_id: string
  owner: string
  user_id: string | null
  username: string
  client_id: string
  created_at_iso: string
}

export interface FileRecord {
  /** `<type>/<subfolder>/<name>` (see fileKey) */
  key: string
  owners: string[]
  prompt_id?: string
  at_iso: string
}

export type FileType = 'output' | 'input' | 'temp'

/** A run of one prompt on the host, by the host's clock (unix ms). */
interface RunWindow {
  promptId: string
  start: number
  end: number | null
}

/** How many finished runs are kept for attributing files that are reported late. */
const WINDOWS_KEPT = 512

export class Ownership {
  private readonly promptsByOwner = new Map<string, Set<string>>()
  private readonly windows: RunWindow[] = []
  private version = 0
  /** the latest host time an event told us about: files newer than it wait for the next event */
  latestEventMs = 0

  constructor(
    private readonly prompts: Collection<PromptRecord>,
    private readonly files: Collection<FileRecord>,
  ) {
    for (const p of prompts.values()) this.index(p)
  }

  private index(p: PromptRecord): void {
    let ids = this.promptsByOwner.get(p.owner)
    if (!ids) this.promptsByOwner.set(p.owner, (ids = new Set()))
    ids.add(p.prompt_id)
  }

  prompt(promptId: string): PromptRecord | undefined {
    return this.prompts.get(promptId)
  }

  ownerOfPrompt(promptId: string): string | undefined {
    return this.prompts.get(promptId)?.owner
  }

  promptIdsOf(owner: string): ReadonlySet<string> {
    return this.promptsByOwner.get(owner) ?? new Set()
  }

  async recordPrompt(record: PromptRecord): Promise<void> {
    await this.prompts.put(record.prompt_id, record)
    this.index(record)
  }

  /** The prompt running now on the host, as far as its events tell. */
  get running(): string | null {
    const last = this.windows[this.windows.length - 1]
    return last && last.end === null ? last.promptId : null
  }

  runStarted(promptId: string, atMs: number): void {
    const last = this.windows[this.windows.length - 1]
    if (last && last.end === null) last.end = atMs // the host runs one prompt at a time
    if (last?.promptId === promptId && last.start === atMs) return
    this.windows.push({ promptId, start: atMs, end: null })
    if (this.windows.length > WINDOWS_KEPT) this.windows.splice(0, this.windows.length - WINDOWS_KEPT)
    this.seen(atMs)
  }

  runEnded(promptId: string, atMs: number): void {
    for (let i = this.windows.length - 1; i >= 0; i--) {
      const w = this.windows[i]
      if (w.promptId === promptId && w.end === null) {
        w.end = atMs
        break
      }
    }
    this.seen(atMs)
  }

  seen(atMs: number): void {
    if (atMs > this.latestEventMs) this.latestEventMs = atMs
  }

  /** The prompt whose run covers `ctimeMs`; `undefined` when no known run does. */
  promptRunningAt(ctimeMs: number): string | undefined {
    for (let i = this.windows.length - 1; i >= 0; i--) {
      const w = this.windows[i]
      if (ctimeMs >= w.start && (w.end === null || ctimeMs <= w.end)) return w.promptId
      if (w.end !== null && w.end < ctimeMs) return undefined
    }
    return undefined
  }

  file(key: string): FileRecord | undefined {
    return this.files.get(key)
  }

  /**
   * Adds `owner` to the file's owners; a file keeps every owner it had. Memory first (read
   * and changed in one step, so owners added at once never overwrite each other), then
   * stored and retried until stored: a client asks for its output the moment the host
   * reports it, before a store write could finish.
   */
  addFileOwner(key: string, owner: string, promptId: string | undefined, now: Date): Promise<void> {
    const current = this.files.get(key)
    if (current?.owners.includes(owner)) return Promise.resolve()
    this.version++
    return this.files.narrow(key, {
      key,
      owners: [...(current?.owners ?? []), owner],
      ...(promptId ?? current?.prompt_id ? { prompt_id: promptId ?? current?.prompt_id } : {}),
      at_iso: current?.at_iso ?? now.toISOString(),
    })
  }

  /** Keys of the files of one type (`input`) that `owner` owns, and of those that somebody owns. */
  filesOfType(type: FileType, owner: string): { own: Set<string>; owned: Set<string> } {
    const prefix = `${type}/`
    const own = new Set<string>()
    const owned = new Set<string>()
    for (const record of this.files.values()) {
      if (!record.key.startsWith(prefix)) continue
      owned.add(record.key)
      if (record.owners.includes(owner)) own.add(record.key)
    }
    return { own, owned }
  }

  /** Changes whenever a file gains an owner (part of the cache key of per-user lists). */
  get filesVersion(): number {
    return this.version
  }
}

/**
 * The key of a host file as `<type>/<subfolder>/<name>` with `/` separators and
 * no `.` or `..` segments, or null when the path would leave its folder.
 */
export function fileKey(type: FileType, subfolder: string, name: string): string | null {
  const parts: string[] = []
  for (const segment of `${subfolder}/${name}`.split(/[\\/]+/)) {
    if (segment === '' || segment === '.') continue
    if (segment === '..') {
      if (parts.length === 0) return null
      parts.pop()
      continue
    }
    parts.push(segment)
  }
  if (parts.length === 0) return null
  return `${type}/${parts.join('/')}`
}
