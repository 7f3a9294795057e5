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
 * - a prompt record lives as long as the host knows the prompt (queued, running or in
 *   its history, as the plugin reports it: `hostPrompts`), so the records are bounded by
 *   the host's own memory (ComfyUI keeps 10,000 history entries), whatever the uptime;
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

/** The folder part of a file key (`input/sub/x.png` → `input/sub`). */
export const folderOf = (key: string): string => key.slice(0, key.lastIndexOf('/'))

/** A run of one prompt on the host, by the host's clock (unix ms). */
interface RunWindow {
  promptId: string
  start: number
  end: number | null
}

/** How far a file's ctime may lag the wall clock (Linux stamps files from the coarse tick clock). */
const CTIME_SLACK_MS = 20

/** How many finished runs are kept for attributing files that are reported late. */
const WINDOWS_KEPT = 512

/**
 * A recorded prompt the host does not know is forgotten once it is older than this: the
 * host refused it, or forgot it while nobody reported (a sidecar or host restart). Younger
 * ones may be on their way into the queue (the owner is stored before the host sees them).
 */
export const UNKNOWN_PROMPT_GRACE_MS = 60_000
/** Such a sweep over every record runs at most this often. */
const SWEEP_EVERY_MS = 10_000

/** What the host knows of prompts, as the plugin reads it from the host's own queue and history. */
export interface HostPromptsReport {
  /** running now, and waiting in the queue */
  running: string[]
  pending: string[]
  /** every id the host knows (queue and history) when `full`; else those it learnt since the last report */
  added: string[]
  /** ids the host forgot since the last report (history deleted or evicted, queue item deleted) */
  gone: string[]
  full: boolean
  /** the plugin's number of the report; a hello's full report restarts the count */
  seq: number
}

export class Ownership {
  private readonly promptsByOwner = new Map<string, Set<string>>()
  private readonly windows: RunWindow[] = []
  /** files: grows whenever a file gains an owner or goes (filesVersion) */
  private version = 0
  /** prompts: grows whenever a prompt is recorded (promptsVersion) */
  private promptsSeq = 0
  /** prompt ids taken by a submission whose record is being stored */
  private readonly reserved = new Map<string, string>()
  /** folders with an upload under way, until when */
  private readonly uploads = new Map<string, number>()
  /** the latest host time an event told us about: files newer than it wait for the next event */
  latestEventMs = 0
  /** the host's own view of prompts (hostPrompts): running, pending, and every id it knows */
  private hostRunning: ReadonlySet<string> = new Set()
  private hostPending: ReadonlySet<string> = new Set()
  private readonly hostKnown = new Set<string>()
  private lastReportSeq = 0
  private lastSweepMs = -Infinity
  /** client ids of recorded prompts, with how many records use each */
  private readonly clientIdUses = new Map<string, number>()
  /** Called when a prompt's record is forgotten; `clientIdInUse`: another known prompt still names its client id. */
  onPromptForgotten: (record: PromptRecord, clientIdInUse: boolean) => void = () => {}
  /**
   * Called the moment whose prompts or files are whose changes (after the change is visible):
   * filter memos name these versions, and decisions that carry a memo may be kept by the plugin.
   */
  onChange: () => void = () => {}

  constructor(
    private readonly prompts: Collection<PromptRecord>,
    private readonly files: Collection<FileRecord>,
    private readonly clock: () => number = Date.now,
  ) {
    for (const p of prompts.values()) this.index(p)
  }

  private index(p: PromptRecord): void {
    let ids = this.promptsByOwner.get(p.owner)
    if (!ids) this.promptsByOwner.set(p.owner, (ids = new Set()))
    if (!ids.has(p.prompt_id)) this.clientIdUses.set(p.client_id, (this.clientIdUses.get(p.client_id) ?? 0) + 1)
    ids.add(p.prompt_id)
    this.promptsSeq++
    this.onChange()
  }

  /**
   * Moves whenever any owner's set of prompt ids changes, or the host's queue does (filters of
   * /queue, /history and /prompt name it in their memo).
   */
  get promptsVersion(): number {
    return this.promptsSeq
  }

  /** How many records are kept (bounded by what the host knows: hostPrompts). */
  get promptCount(): number {
    return this.prompts.size
  }

  /**
   * What the host knows now (the plugin reads it at every change of the host's queue, and after
   * every POST /queue and /history): the queue replaces the last one; ids the host forgot lose
   * their records at once; records the host never took, or forgot while nobody reported, go once
   * they are older than UNKNOWN_PROMPT_GRACE_MS (checked at most every SWEEP_EVERY_MS).
   */
  hostPrompts(report: HostPromptsReport): void {
    // a report made before the hello's full one (sent late, after a reconnect) says nothing new
    if (!report.full && report.seq <= this.lastReportSeq) return
    this.lastReportSeq = report.seq
    this.hostRunning = new Set(report.running)
    this.hostPending = new Set(report.pending)
    if (report.full) this.hostKnown.clear()
    for (const id of report.added) this.hostKnown.add(id)
    for (const id of [...report.running, ...report.pending]) this.hostKnown.add(id)
    for (const id of report.gone) {
      if (this.hostPending.has(id) || this.hostRunning.has(id)) continue
      this.hostKnown.delete(id)
      this.forgetPrompt(id)
    }
    const now = this.clock()
    if (report.full || now - this.lastSweepMs >= SWEEP_EVERY_MS) {
      this.lastSweepMs = now
      for (const record of [...this.prompts.values()]) {
        if (this.hostKnown.has(record.prompt_id)) continue
        if (now - Date.parse(record.created_at_iso) < UNKNOWN_PROMPT_GRACE_MS) continue
        this.forgetPrompt(record.prompt_id)
      }
    }
    this.promptsSeq++
    this.onChange()
  }

  /** Whether the host knows this prompt id (queued, running or in its history), as last reported. */
  hostKnows(promptId: string): boolean {
    return this.hostKnown.has(promptId)
  }

  /** The owner's prompts waiting in the host's queue (not the running one). */
  pendingIdsOf(owner: string): string[] {
    return [...this.promptIdsOf(owner)].filter((id) => this.hostPending.has(id))
  }

  /** The owner's prompts the host knows and has finished (its history, as far as the reports tell). */
  finishedIdsOf(owner: string): string[] {
    return [...this.promptIdsOf(owner)].filter((id) => this.hostKnown.has(id) && !this.hostPending.has(id) && !this.hostRunning.has(id))
  }

  /** The owner's prompts the host has not finished: queued and running (what `queue_remaining` counts). */
  remainingOf(owner: string): number {
    let n = 0
    for (const id of this.promptIdsOf(owner)) if (this.hostPending.has(id) || this.hostRunning.has(id)) n++
    return n
  }

  /** `remainingOf` for every owner with at least one prompt queued or running. */
  remainingByOwner(): Record<string, number> {
    const counts: Record<string, number> = {}
    for (const id of [...this.hostRunning, ...this.hostPending]) {
      const owner = this.prompts.get(id)?.owner
      if (owner !== undefined) counts[owner] = (counts[owner] ?? 0) + 1
    }
    return counts
  }

  /** The prompt's record goes, from memory at once and from the store (retried until stored). */
  private forgetPrompt(promptId: string): void {
    const record = this.prompts.get(promptId)
    if (record === undefined || this.reserved.has(promptId)) return
    const ids = this.promptsByOwner.get(record.owner)
    ids?.delete(promptId)
    if (ids?.size === 0) this.promptsByOwner.delete(record.owner)
    const uses = (this.clientIdUses.get(record.client_id) ?? 1) - 1
    if (uses > 0) this.clientIdUses.set(record.client_id, uses)
    else this.clientIdUses.delete(record.client_id)
    this.prompts.narrowRemove(promptId).catch(() => {}) // narrowRemove retries until stored; memory already changed
    this.onPromptForgotten(record, uses > 0)
  }

  prompt(promptId: string): PromptRecord | undefined {
    return this.prompts.get(promptId)
  }

  ownerOfPrompt(promptId: string): string | undefined {
    return this.prompts.get(promptId)?.owner ?? this.reserved.get(promptId)
  }

  /**
   * Takes a prompt id for `owner` at once (false when somebody else has it), so that two
   * submissions of one id cannot both pass the check while the first one's record is stored.
   */
  reservePrompt(promptId: string, owner: string): boolean {
    const current = this.ownerOfPrompt(promptId)
    if (current !== undefined && current !== owner) return false
    this.reserved.set(promptId, owner)
    return true
  }

  promptIdsOf(owner: string): ReadonlySet<string> {
    return this.promptsByOwner.get(owner) ?? new Set()
  }

  async recordPrompt(record: PromptRecord): Promise<void> {
    try {
      await this.prompts.put(record.prompt_id, record)
      this.index(record)
    } finally {
      this.reserved.delete(record.prompt_id)
    }
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
      // The kernel stamps files from a coarse clock (a scheduler tick behind the wall clock), so a
      // file written just after a run started can carry a ctime a few ms before that start: it
      // belongs to this run when no earlier run was still going at that time.
      const previous = this.windows[i - 1]
      if (ctimeMs >= w.start - CTIME_SLACK_MS && ctimeMs < w.start && (previous === undefined || (previous.end !== null && previous.end < ctimeMs))) return w.promptId
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
    const stored = this.files.narrow(key, {
      key,
      owners: [...(current?.owners ?? []), owner],
      ...(promptId ?? current?.prompt_id ? { prompt_id: promptId ?? current?.prompt_id } : {}),
      at_iso: current?.at_iso ?? now.toISOString(),
    })
    this.onChange()
    return stored
  }

  /**
   * Gives a file nobody owns yet to `owner` (a run wrote it). A file that has an owner keeps it:
   * a run never adds itself to a file someone else made (a cached node re-reporting another
   * user's output, a file that appeared during someone else's run).
   */
  claimFile(key: string, owner: string, promptId: string | undefined, now: Date): Promise<void> {
    if (this.files.get(key) !== undefined) return Promise.resolve()
    return this.addFileOwner(key, owner, promptId, now)
  }

  /** The file is gone from disk: a new file of the same name later is a new file, with its own owner. */
  forgetFile(key: string): Promise<void> {
    if (this.files.get(key) === undefined) return Promise.resolve()
    this.version++
    const removed = this.files.narrowRemove(key)
    this.onChange()
    return removed
  }

  /** An upload into this folder (`input/sub`) is under way: the watcher leaves its new files to the upload's own step. */
  uploadStarting(folderKey: string, forMs: number): void {
    const until = this.clock() + forMs
    this.uploads.set(folderKey, Math.max(until, this.uploads.get(folderKey) ?? 0))
  }

  uploadDone(folderKey: string): void {
    this.uploads.delete(folderKey)
  }

  uploadInFlight(folderKey: string): boolean {
    const until = this.uploads.get(folderKey)
    if (until === undefined) return false
    if (until > this.clock()) return true
    this.uploads.delete(folderKey)
    return false
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

  /** A per-user folder's files changed (an upload into it): per-user lists that show them change. */
  folderChanged(): void {
    this.version++
    this.onChange()
  }

  /** Changes whenever a file gains an owner, or a per-user folder changes (part of the cache key of per-user lists). */
  get filesVersion(): number {
    return this.version
  }
}

/**
 * The key of a host file as `<type>/<subfolder>/<name>` with `/` separators and
 * no `.` or `..` segments, or null when the path would leave its folder.
 */
export function fileKey(type: FileType, subfolder: string, name: string): string | null {
  const parts = normalSegments(`${subfolder}/${name}`, /[\\/]+/)
  if (parts === null || parts.length === 0) return null
  return `${type}/${parts.join('/')}`
}

/** The segments of a relative path with `.` and empty ones dropped and `..` applied; null when `..` would climb out. */
export function normalSegments(path: string, separators: RegExp): string[] | null {
  const parts: string[] = []
  for (const segment of path.split(separators)) {
    if (segment === '' || segment === '.') continue
    if (segment === '..') {
      if (parts.length === 0) return null
      parts.pop()
      continue
    }
    parts.push(segment)
  }
  return parts
}
