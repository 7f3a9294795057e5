/**
 * Where the download queue keeps its jobs and the users' source keys: two narrow interfaces
 * (`DownloadJobs`, `SourceKeys`) with the verbs the queue and the routes use, and one
 * implementation of each on the current store (a `Collection`, so reads are memory and writes
 * go through to sqlite). Other backends implement the same two interfaces.
 *
 * Guarantees:
 * - a job is stored before its creation is answered (`create` is durable first), and every
 *   change of its state (claimed, finished, cancelled) is stored before it is acted upon
 *   further; progress (`bytes_done`) is bookkeeping, written at most every PROGRESS_WRITE_MS
 *   (a resume reads the partial file's length, never the stored number);
 * - `claim` moves one job from queued to running atomically in memory (one event loop), so a
 *   job is never run twice;
 * - a key is stored sealed (FieldCipher, context `download_key:<user>:<source>`), opened only
 *   when a transfer needs it, never listed or returned.
 */
import type { Collection } from '../store/collection.js'
import type { FieldCipher } from '../store/field-crypto.js'

export type SourceName = 'civitai' | 'huggingface'
export const SOURCES: readonly SourceName[] = ['civitai', 'huggingface']
export type JobStatus = 'queued' | 'running' | 'completed' | 'failed' | 'cancelled'

/** What the user asked for: the source's own fields (SPEC §9). */
export interface DownloadRequest {
  source: SourceName
  /** civitai */
  model_version_id?: number
  /** a model page without a version: its newest version */
  model_id?: number
  file_id?: number
  type?: string
  format?: string
  size?: string
  fp?: string
  /** huggingface */
  repo_id?: string
  filename?: string
  revision?: string
  subfolder?: string
}

export interface DownloadJobRecord {
  job_id: string
  user_id: string
  username: string
  source: SourceName
  request: DownloadRequest
  status: JobStatus
  folder_type: string
  /** the name it lands under (sanitised), known once the source was asked */
  filename: string
  bytes_done: number
  total_bytes: number
  /** what the source published (hex, lower case), '' when it publishes none */
  expected_sha256: string
  /** what we computed while streaming; '' until completed */
  sha256: string
  /** the source's validator of the bytes (ETag / X-Linked-Etag) when the partial was started */
  etag: string
  /** the absolute path of the partial file, '' when none exists */
  partial_path: string
  /** the absolute path it landed at (completed only) */
  final_path: string
  attempts: number
  created_at_iso: string
  started_at_iso: string
  finished_at_iso: string
  error: string
}

export interface DownloadJobs {
  create(job: DownloadJobRecord): Promise<void>
  get(jobId: string): DownloadJobRecord | undefined
  /** every job, newest first */
  list(): DownloadJobRecord[]
  /** queued → running, if it is still queued; the running record, or undefined */
  claim(jobId: string, at: string): Promise<DownloadJobRecord | undefined>
  /** a durable change (a state, a name, a partial path) */
  update(jobId: string, fields: Partial<DownloadJobRecord>): Promise<DownloadJobRecord | undefined>
  /** bytes so far: memory now, the store now and then */
  progress(jobId: string, bytesDone: number, totalBytes: number): void
  /** running → a final state, stored */
  finish(jobId: string, fields: Partial<DownloadJobRecord> & { status: 'completed' | 'failed' | 'cancelled' }): Promise<DownloadJobRecord | undefined>
  flush(): Promise<void>
}

export interface SourceKeys {
  /** the key in clear, for a transfer; undefined when none is stored or it does not open */
  open(userId: string, source: SourceName): string | undefined
  /** '' clears */
  set(userId: string, source: SourceName, key: string): Promise<void>
  /** the sources this user has a key for */
  sourcesWithKeys(userId: string): SourceName[]
}

const PROGRESS_WRITE_MS = 2000

export class CollectionDownloadJobs implements DownloadJobs {
  private readonly lastWrite = new Map<string, number>()
  /** progress newer than the stored record */
  private readonly live = new Map<string, { bytes_done: number; total_bytes: number }>()
  constructor(private readonly records: Collection<DownloadJobRecord>, private readonly now: () => number) {}

  create(job: DownloadJobRecord): Promise<void> {
    return this.records.put(job.job_id, job)
  }

  get(jobId: string): DownloadJobRecord | undefined {
    const job = this.records.get(jobId)
    const live = this.live.get(jobId)
    return job !== undefined && live !== undefined ? { ...job, ...live } : job
  }

  list(): DownloadJobRecord[] {
    return [...this.records.values()].map((job) => this.get(job.job_id) ?? job).sort((a, b) => (a.created_at_iso < b.created_at_iso ? 1 : a.created_at_iso > b.created_at_iso ? -1 : a.job_id < b.job_id ? 1 : -1))
  }

  async claim(jobId: string, at: string): Promise<DownloadJobRecord | undefined> {
    const job = this.records.get(jobId)
    if (job?.status !== 'queued') return undefined
    const running: DownloadJobRecord = { ...job, status: 'running', started_at_iso: job.started_at_iso || at, error: '' }
    await this.records.narrow(jobId, running)
    return running
  }

  async update(jobId: string, fields: Partial<DownloadJobRecord>): Promise<DownloadJobRecord | undefined> {
    const job = this.get(jobId)
    if (job === undefined) return undefined
    const next = { ...job, ...fields }
    if (fields.bytes_done !== undefined) this.live.delete(jobId)
    await this.records.narrow(jobId, next)
    return next
  }

  progress(jobId: string, bytesDone: number, totalBytes: number): void {
    const job = this.records.get(jobId)
    if (job === undefined) return
    this.live.set(jobId, { bytes_done: bytesDone, total_bytes: totalBytes })
    const now = this.now()
    if (now - (this.lastWrite.get(jobId) ?? 0) < PROGRESS_WRITE_MS) return
    this.lastWrite.set(jobId, now)
    this.records.touch(jobId, { ...job, bytes_done: bytesDone, total_bytes: totalBytes })
  }

  async finish(jobId: string, fields: Partial<DownloadJobRecord> & { status: 'completed' | 'failed' | 'cancelled' }): Promise<DownloadJobRecord | undefined> {
    const done = await this.update(jobId, fields)
    this.lastWrite.delete(jobId)
    this.live.delete(jobId)
    return done
  }

  flush(): Promise<void> {
    return this.records.flush()
  }
}

export interface KeyRecord {
  user_id: string
  source: SourceName
  sealed: string
}

export class CollectionSourceKeys implements SourceKeys {
  constructor(private readonly records: Collection<KeyRecord>, private readonly cipher: FieldCipher) {}

  private static id(userId: string, source: SourceName): string {
    return `${userId}:${source}`
  }

  open(userId: string, source: SourceName): string | undefined {
    const record = this.records.get(CollectionSourceKeys.id(userId, source))
    if (record === undefined) return undefined
    try {
      return this.cipher.decrypt(record.sealed, `download_key:${userId}:${source}`)
    } catch {
      return undefined
    }
  }

  async set(userId: string, source: SourceName, key: string): Promise<void> {
    const id = CollectionSourceKeys.id(userId, source)
    if (key === '') {
      if (this.records.get(id) !== undefined) await this.records.narrowRemove(id)
      return
    }
    await this.records.put(id, { user_id: userId, source, sealed: this.cipher.encrypt(key, `download_key:${userId}:${source}`) })
  }

  sourcesWithKeys(userId: string): SourceName[] {
    return SOURCES.filter((s) => this.records.get(CollectionSourceKeys.id(userId, s)) !== undefined)
  }

  /**
   * Removes every key whose account `exists` denies (asked once per account); how many. Every
   * removal is tried; rejects with the first refusal (a refused removal is gone from memory and
   * retried by the collection).
   */
  async removeUnless(exists: (userId: string) => Promise<boolean>): Promise<number> {
    const records = [...this.records.values()]
    const users = [...new Set(records.map((r) => r.user_id))]
    const answers = new Map(await Promise.all(users.map(async (u) => [u, await exists(u)] as const)))
    const gone = records.filter((r) => answers.get(r.user_id) === false)
    const removals = await Promise.allSettled(gone.map((r) => this.records.narrowRemove(CollectionSourceKeys.id(r.user_id, r.source))))
    const refused = removals.find((r) => r.status === 'rejected')
    if (refused !== undefined) throw refused.reason
    return gone.length
  }
}
