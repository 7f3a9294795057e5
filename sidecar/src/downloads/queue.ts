/**
 * The download queue: jobs from the store, run within the concurrency limits, each transfer in
 * its own worker thread (transfer-worker.ts), placed atomically, then handed to the models
 * feature (cache refresh, grant) and announced (`download_completed` / `download_failed`).
 *
 * Guarantees:
 * - at most `max_active_total` transfers run, and at most `max_active_per_source` of one
 *   source; the next job started is the oldest queued one whose source has room, so a source
 *   with full slots (slow, stalled) never holds back the other's jobs;
 * - a job survives a restart: a job found `running` at start is queued again and resumes from
 *   its partial file (worker: Range + If-Range) or starts again when the source serves other
 *   bytes; a stop (sidecar shutdown) aborts transfers but keeps their partial files and state;
 * - a retryable failure (network, stall, 429, 5xx) is tried again after retry_base × 2^n
 *   (at most 5 min), at most `max_retries` times; then, or on any other failure, the job fails
 *   and its partial file is removed;
 * - the file appears in the folder only complete, with the SHA-256 the source published (when
 *   it published one), by `link` (which never replaces an existing file) then unlink of the
 *   partial, or a rename after a check when the file system has no hard links;
 * - the partial file is in the folder's staging directory (DOWNLOAD_STAGING_DIR, same file
 *   system, never watched: a watched file's every write wakes the decision loop), which goes
 *   again when its last partial file does;
 * - a cancel of a queued job ends it; of a running one aborts the transfer, waits for the
 *   worker to end, and removes the partial file; a finished job cannot be cancelled (409).
 */
import { randomUUID } from 'node:crypto'
import { existsSync } from 'node:fs'
import { link, mkdir, rename, rmdir, stat, unlink } from 'node:fs/promises'
import { basename, dirname, extname, join, relative, resolve, sep } from 'node:path'
import type { Worker } from 'node:worker_threads'
import { ADMIN_ROLE } from '../identity/principal.js'
import type { FastifyBaseLogger } from 'fastify'
import { AuthsvcError } from '../kernel/errors.js'
import { startThread } from '../kernel/threads.js'
import type { Config } from '../kernel/config/schema.js'
import { DOWNLOAD_STAGING_DIR, modelFoldersOf, type ModelFolder } from '../models/model-cache.js'
import type { Services } from '../services.js'
import { SourceError, type HopPolicy } from './hops.js'
import { resolveRequest, type Resolved } from './sources.js'
import type { DownloadJobRecord, DownloadJobs, DownloadRequest, JobStatus, SourceKeys, SourceName } from './store.js'
import type { TransferOrder, TransferReport } from './transfer-worker.js'
import './events.js'

const startWorker = (): Worker => startThread(import.meta.url, 'transfer-worker')

type Tagged = TransferReport & { id: number }

/** Transfers running in this process (every queue's): the decision loop's busy poll stays off while any does. */
let transfersInFlight = 0
export const transfersRunning = (): boolean => transfersInFlight > 0

/**
 * Transfer threads, kept between transfers (starting one costs tens of milliseconds, from the
 * TypeScript sources much more); one transfer per thread at a time; an idle thread does not keep
 * the process alive; a thread that dies is replaced on the next transfer.
 */
class TransferThreads {
  private readonly idle: Worker[] = []
  private readonly all = new Set<Worker>()
  private nextId = 1

  run(order: TransferOrder, onReport: (report: TransferReport) => void, signal: AbortSignal): Promise<TransferReport & { type: 'done' | 'error' }> {
    const worker = this.idle.pop() ?? this.spawn()
    worker.ref()
    const id = this.nextId++
    transfersInFlight++
    return new Promise((resolve) => {
      let settled = false
      const finish = (report: TransferReport & { type: 'done' | 'error' }, reusable: boolean) => {
        if (settled) return
        settled = true
        transfersInFlight--
        worker.off('message', onMessage)
        worker.off('exit', onExit)
        signal.removeEventListener('abort', onAbort)
        if (reusable) {
          worker.unref()
          this.idle.push(worker)
        }
        resolve(report)
      }
      const onMessage = (report: Tagged) => {
        if (report.id !== id) return
        if (report.type === 'done' || report.type === 'error') finish(report, true)
        else onReport(report)
      }
      const onExit = () => finish({ type: 'error', message: 'The transfer thread ended without an answer', retryable: true, restart: false }, false)
      const onAbort = () => worker.postMessage({ type: 'abort', id })
      worker.on('message', onMessage)
      worker.once('exit', onExit)
      signal.addEventListener('abort', onAbort, { once: true })
      try {
        worker.postMessage({ type: 'start', id, order })
      } catch (err) {
        // an order that cannot be sent (never plain data) ends here, the count of transfers with it
        finish({ type: 'error', message: `The transfer could not start (${(err as Error).message})`, retryable: false, restart: false }, true)
        return
      }
      if (signal.aborted) onAbort()
    })
  }

  private spawn(): Worker {
    const worker = startWorker()
    this.all.add(worker)
    worker.on('error', () => {}) // 'exit' follows and fails the transfer it ran
    worker.once('exit', () => {
      this.all.delete(worker)
      const at = this.idle.indexOf(worker)
      if (at >= 0) this.idle.splice(at, 1)
    })
    return worker
  }

  async close(): Promise<void> {
    await Promise.all([...this.all].map((w) => w.terminate()))
  }
}

export const PARTIAL_SUFFIX = '.authsvc-partial'
const MAX_BACKOFF_MS = 5 * 60_000
const WAITING_FOR_HOST = 'Waiting for ComfyUI to say which model folders it has'

/** What the queue hands on when a file landed (the models feature: refresh the cache, grant it). */
export interface Landing {
  /**
   * Just before the file takes its name (a failure fails the job: nothing is placed); what it gives
   * is called if the file then does not take the name (another took it meanwhile).
   */
  placing?(job: DownloadJobRecord, folder: string, item: string): Promise<(() => Promise<void>) | void>
  /** the file is at `path` */
  landed(job: DownloadJobRecord, folder: string, item: string, path: string): Promise<void>
}

interface Running {
  aborter: AbortController
  cancelled: boolean
  /** settles when the job's run is over */
  done: Promise<void>
  speed: { at: number; bytes: number; bps: number }
}

export interface JobView extends DownloadJobRecord {
  speed_bps: number
}

type QueueServices = Pick<Services, 'config' | 'host' | 'clock' | 'events'> & Partial<Pick<Services, 'users' | 'roles'>>

export class DownloadQueue {
  private readonly running = new Map<string, Running>()
  private readonly threads = new TransferThreads()
  private stopping = false
  /** changes of any job (the page polls; tests wait on this) */
  onChange: (job: DownloadJobRecord) => void = () => {}

  constructor(
    private readonly services: QueueServices,
    private readonly jobs: DownloadJobs,
    private readonly keys: SourceKeys,
    private readonly landing: Landing,
    private readonly log: FastifyBaseLogger,
  ) {}

  private get cfg(): Config['model_download'] {
    return this.services.config.model_download
  }

  private now(): string {
    return new Date(this.services.clock()).toISOString()
  }

  baseOf(source: SourceName): string {
    return source === 'civitai' ? this.cfg.civitai_base_url : this.cfg.huggingface_base_url
  }

  /** Jobs found running at start are queued again (they resume from their partial files). */
  async start(): Promise<void> {
    for (const job of this.jobs.list()) if (job.status === 'running') await this.jobs.update(job.job_id, { status: 'queued' })
    this.pump()
  }

  /** Aborts every transfer, keeping its partial file and its state (a restart resumes it). */
  async stop(): Promise<void> {
    this.stopping = true
    for (const run of this.running.values()) run.aborter.abort()
    await Promise.allSettled([...this.running.values()].map((r) => r.done))
    await this.threads.close()
    await this.jobs.flush()
  }

  /** The host's facts came (a hello or its startup facts): jobs waiting for its folders start. */
  hostKnown(): void {
    this.pump()
  }

  /** A word on a queued job (why it waits); a store that refuses the write loses only the word. */
  private note(jobId: string, error: string): void {
    this.jobs.update(jobId, { error }).then(
      (job) => job && this.onChange(job),
      (err: unknown) => this.log.warn({ err, job_id: jobId }, 'a download job\'s note was not stored'),
    )
  }

  folders(): ModelFolder[] {
    return modelFoldersOf(this.services.host.facts).filter((f) => f.paths.length > 0)
  }

  async enqueue(owner: { userId: string; username: string }, request: DownloadRequest, folderType: string): Promise<DownloadJobRecord> {
    if (!this.folders().some((f) => f.name === folderType)) throw new AuthsvcError('VALIDATION_FAILED', `Unknown model folder: ${folderType}`)
    const job: DownloadJobRecord = {
      job_id: randomUUID(),
      user_id: owner.userId,
      username: owner.username,
      source: request.source,
      request,
      status: 'queued',
      folder_type: folderType,
      filename: request.source === 'huggingface' ? (request.filename ?? '').split('/').pop() ?? '' : '',
      bytes_done: 0,
      total_bytes: 0,
      expected_sha256: '',
      sha256: '',
      etag: '',
      partial_path: '',
      final_path: '',
      attempts: 0,
      created_at_iso: this.now(),
      started_at_iso: '',
      finished_at_iso: '',
      error: '',
    }
    await this.jobs.create(job)
    this.onChange(job)
    this.pump()
    return job
  }

  view(job: DownloadJobRecord): JobView {
    return { ...job, speed_bps: this.running.get(job.job_id)?.speed.bps ?? 0 }
  }

  stats(jobs: DownloadJobRecord[]): Record<JobStatus, number> {
    const out: Record<JobStatus, number> = { queued: 0, running: 0, completed: 0, failed: 0, cancelled: 0 }
    for (const j of jobs) out[j.status]++
    return out
  }

  async cancel(jobId: string): Promise<DownloadJobRecord> {
    const job = this.jobs.get(jobId)
    if (job === undefined) throw new AuthsvcError('NOT_FOUND', 'No such download job')
    if (job.status === 'queued' && !this.running.has(jobId)) {
      const done = await this.jobs.finish(jobId, { status: 'cancelled', finished_at_iso: this.now(), error: 'Cancelled' })
      if (job.partial_path !== '') await removeQuietly(job.partial_path)
      if (done) this.onChange(done)
      return done ?? job
    }
    const run = this.running.get(jobId)
    if (run === undefined) throw new AuthsvcError('CONFLICT', `The job has ${job.status}; only a queued or running job can be cancelled`)
    run.cancelled = true
    run.aborter.abort()
    await run.done
    return this.jobs.get(jobId) ?? job
  }

  /** Starts queued jobs while there is room: the oldest first whose source has a free slot. */
  private pump(): void {
    if (this.stopping) return
    const queued = this.jobs.list().filter((j) => j.status === 'queued' && !this.running.has(j.job_id)).reverse()
    // A sidecar (re)started before the plugin's hello knows no model folder yet, and a ComfyUI
    // starting says only the folders and paths known at the plugin's import until every custom
    // node has loaded (`all_nodes_loaded`): a job run then could fail as "folder gone", or miss a
    // model of the same name in a path a later node adds and shadow it. Jobs wait, saying so,
    // until the host's facts are complete.
    if (this.services.host.facts?.all_nodes_loaded !== true) {
      for (const job of queued) if (job.error !== WAITING_FOR_HOST) this.note(job.job_id, WAITING_FOR_HOST)
      return
    }
    for (const job of queued) {
      if (this.running.size >= this.cfg.max_active_total) return
      const ofSource = [...this.running.keys()].filter((id) => this.jobs.get(id)?.source === job.source).length
      if (ofSource >= this.cfg.max_active_per_source) continue
      this.launch(job.job_id)
    }
  }

  private launch(jobId: string): void {
    const run: Running = { aborter: new AbortController(), cancelled: false, done: Promise.resolve(), speed: { at: Date.now(), bytes: 0, bps: 0 } }
    this.running.set(jobId, run)
    run.done = this.runJob(jobId, run)
      .catch((err: unknown) => this.log.error({ err, job_id: jobId }, 'a download job ended with an unexpected error'))
      .finally(() => {
        this.running.delete(jobId)
        this.pump()
      })
  }

  private async runJob(jobId: string, run: Running): Promise<void> {
    const claimed = await this.jobs.claim(jobId, this.now())
    if (claimed === undefined) return
    this.onChange(claimed)
    let job = claimed
    for (;;) {
      try {
        await this.attempt(job, run)
        return
      } catch (err) {
        if (run.cancelled) return this.endCancelled(jobId)
        if (this.stopping) return // kept as running: the next start resumes it
        const known = err instanceof SourceError
        // the job's error is shown to its owner: a file system's message names server paths, so
        // an unexpected error is told by its code, and logged whole for the administrator
        const code = (err as { code?: unknown }).code
        if (!known) this.log.error({ err, job_id: jobId }, 'a download failed unexpectedly')
        const message = known ? err.message : `The download failed (${typeof code === 'string' && /^[A-Z0-9_]{2,40}$/.test(code) ? code : 'an unexpected error; the administrator\'s log has it'})`
        const retryable = known ? err.retryable : false
        const current = this.jobs.get(jobId) ?? job
        if (!retryable || current.attempts >= this.cfg.max_retries) return this.fail(current, message)
        const delay = Math.min(MAX_BACKOFF_MS, this.cfg.retry_base_seconds * 1000 * 2 ** current.attempts)
        job = (await this.jobs.update(jobId, { attempts: current.attempts + 1, error: `${message}; trying again in ${Math.round(delay / 1000)} s` })) ?? current
        this.onChange(job)
        this.log.warn({ job_id: jobId, source: job.source, attempt: job.attempts, delay_ms: delay, reason: message }, 'a download is tried again')
        const waited = await sleep(delay, run.aborter.signal)
        if (!waited) {
          if (run.cancelled) return this.endCancelled(jobId)
          return
        }
      }
    }
  }

  private async attempt(start: DownloadJobRecord, run: Running): Promise<void> {
    // a job outlives its request: an account disabled or deleted since never downloads with its key
    const owner = this.services.users?.byId(start.user_id)
    if (this.services.users !== undefined && (owner === undefined || owner.disabled)) {
      throw new SourceError('The account that asked for this download is disabled or deleted', false)
    }
    // nor with a role that may no longer download (changed since the job was queued)
    const roles = this.services.roles
    if (owner !== undefined && roles !== undefined && owner.role !== ADMIN_ROLE && roles.permissions(owner.role).can_download_models !== true) {
      throw new SourceError('The account that asked for this download may no longer download models', false)
    }
    const key = this.keys.open(start.user_id, start.source)
    const policy: HopPolicy = { base: this.baseOf(start.source), allowPrivate: this.cfg.allow_private_hosts, ...(key ? { authorization: `Bearer ${key}` } : {}) }
    const resolved: Resolved = await resolveRequest(start.request, policy, run.aborter.signal, this.cfg.stall_timeout_seconds * 1000)
    if (resolved.filename === '') throw new SourceError('The source names no usable file name', false)
    const folder = this.folders().find((f) => f.name === start.folder_type)
    if (folder === undefined) throw new SourceError(`The model folder ${start.folder_type} is gone`, false)
    if (folder.extensions.length > 0 && !folder.extensions.includes(extname(resolved.filename).toLowerCase())) {
      throw new SourceError(`ComfyUI does not list ${extname(resolved.filename) || 'files without an extension'} files in ${folder.name} (it lists ${folder.extensions.join(' ')})`, false)
    }
    const dir = resolve(folder.paths[0])
    const finalPath = join(dir, resolved.filename)
    if (relative(dir, finalPath).startsWith('..') || !finalPath.startsWith(dir + sep)) throw new SourceError('The file name leaves the model folder', false)
    // ComfyUI loads a name from the first of the folder's paths that has it: a download into the
    // first path would shadow a model of that name in any later one (models/clip behind
    // text_encoders, extra_model_paths) for every user
    if (folder.paths.some((p) => existsSync(join(resolve(p), resolved.filename)))) {
      throw new SourceError(`${folder.name} already has a file named ${resolved.filename}; it is never overwritten or shadowed`, false)
    }
    await mkdir(dir, { recursive: true })
    // (a job from before the staging directory resumes from where its partial file is)
    const partialPath = start.partial_path !== '' && start.filename === resolved.filename ? start.partial_path : join(dir, DOWNLOAD_STAGING_DIR, `${resolved.filename}.${start.job_id.slice(0, 8)}${PARTIAL_SUFFIX}`)
    // the source now names another file: the old partial is of no use (and would keep its staging directory)
    if (start.partial_path !== '' && start.partial_path !== partialPath) await removeQuietly(start.partial_path)
    let resumeFrom = 0
    if (start.partial_path === partialPath && start.etag !== '') {
      resumeFrom = await stat(partialPath).then((s) => s.size, () => 0)
    }
    let job = (await this.jobs.update(start.job_id, { filename: resolved.filename, partial_path: partialPath, expected_sha256: resolved.sha256 || start.expected_sha256 })) ?? start
    this.onChange(job)
    const order: TransferOrder = {
      source: job.source, url: resolved.url, policy, partialPath, resumeFrom, validator: resumeFrom > 0 ? job.etag : '', knownTotal: resumeFrom > 0 ? job.total_bytes : 0,
      stallMs: this.cfg.stall_timeout_seconds * 1000,
    }
    const result = await this.runWorker(job.job_id, order, run)
    job = this.jobs.get(job.job_id) ?? job
    const expected = job.expected_sha256
    if (expected !== '' && expected !== result.sha256) {
      await removeQuietly(partialPath)
      await this.jobs.update(job.job_id, { partial_path: '', etag: '' })
      throw new SourceError(`The file's SHA-256 is ${result.sha256}, not the ${expected} the source published; it was removed`, false)
    }
    if (resolved.sizeKB !== undefined && Math.abs(result.bytes - resolved.sizeKB * 1024) > 1024) {
      await removeQuietly(partialPath)
      throw new SourceError(`The source announced about ${Math.round(resolved.sizeKB)} KB but sent ${result.bytes} bytes; the file was removed`, false)
    }
    if (run.cancelled) throw new SourceError('cancelled', false)
    const undo = await this.landing.placing?.(job, folder.name, resolved.filename)
    try {
      await place(partialPath, finalPath, folder.name, resolved.filename)
    } catch (err) {
      if (undo) await undo().catch((e: unknown) => this.log.error({ err: e, job_id: job.job_id }, 'grants taken back for a file that did not land could not be put back'))
      throw err
    }
    // usable by the requester before the job says it is done; never granted to an account deleted
    // while the file was placed (its grants went with it; a grant now would outlive it)
    try {
      if (this.services.users === undefined || this.services.users.byId(job.user_id) !== undefined) await this.landing.landed(job, folder.name, resolved.filename, finalPath)
    } catch (err) {
      this.log.error({ err, job_id: job.job_id }, 'a downloaded model could not be granted to its requester')
    }
    const done = await this.jobs.finish(job.job_id, {
      status: 'completed', sha256: result.sha256, bytes_done: result.bytes, total_bytes: result.bytes, partial_path: '', final_path: finalPath, finished_at_iso: this.now(), error: '',
    })
    if (done) this.onChange(done)
    this.services.events.emit('download_completed', {
      actor: job.username, subject: job.username, job_id: job.job_id, source: job.source, folder: folder.name, filename: resolved.filename, bytes: result.bytes, sha256: result.sha256,
    })
  }

  private async runWorker(jobId: string, order: TransferOrder, run: Running): Promise<{ sha256: string; bytes: number }> {
    const end = await this.threads.run(order, (report) => {
      switch (report.type) {
        case 'started': {
          run.speed = { at: Date.now(), bytes: report.resumed ? order.resumeFrom : 0, bps: 0 }
          const fields: Partial<DownloadJobRecord> = { etag: report.validator, total_bytes: report.total, bytes_done: report.resumed ? order.resumeFrom : 0 }
          const job = this.jobs.get(jobId)
          if (report.linkedSha256 !== '' && job?.expected_sha256 === '') fields.expected_sha256 = report.linkedSha256
          void this.jobs.update(jobId, fields).then((j) => j && this.onChange(j), () => {})
          break
        }
        case 'progress': {
          const now = Date.now()
          const dt = now - run.speed.at
          if (dt >= 500) {
            const bps = ((report.bytes - run.speed.bytes) * 1000) / dt
            run.speed = { at: now, bytes: report.bytes, bps: run.speed.bps === 0 ? bps : run.speed.bps * 0.6 + bps * 0.4 }
          }
          const job = this.jobs.get(jobId)
          this.jobs.progress(jobId, report.bytes, job?.total_bytes ?? 0)
          if (job) this.onChange({ ...job, bytes_done: report.bytes })
          break
        }
      }
    }, run.aborter.signal)
    if (end.type === 'done') return { sha256: end.sha256, bytes: end.bytes }
    // a source now serving other bytes: the partial is dropped, the next try starts at 0
    if (end.restart) await this.jobs.update(jobId, { etag: '', bytes_done: 0 })
    throw new SourceError(end.message, end.retryable)
  }

  private async endCancelled(jobId: string): Promise<void> {
    const job = this.jobs.get(jobId)
    if (job?.partial_path) await removeQuietly(job.partial_path)
    const done = await this.jobs.finish(jobId, { status: 'cancelled', partial_path: '', finished_at_iso: this.now(), error: 'Cancelled' })
    if (done) this.onChange(done)
  }

  private async fail(job: DownloadJobRecord, message: string): Promise<void> {
    if (job.partial_path !== '') await removeQuietly(job.partial_path)
    const done = await this.jobs.finish(job.job_id, { status: 'failed', partial_path: '', etag: '', finished_at_iso: this.now(), error: message })
    if (done) this.onChange(done)
    this.log.warn({ job_id: job.job_id, source: job.source, reason: message }, 'a download failed')
    this.services.events.emit('download_failed', {
      actor: job.username, subject: job.username, outcome: 'failure', job_id: job.job_id, source: job.source, folder: job.folder_type, filename: job.filename, error: message,
    })
  }
}

/** Removes a partial file, and its staging directory when that is now empty. */
async function removeQuietly(path: string): Promise<void> {
  await unlink(path).catch(() => {})
  await dropStagingDir(path)
}

/** The staging directory of `partialPath` goes once it holds nothing (another job's file keeps it: ENOTEMPTY). */
async function dropStagingDir(partialPath: string): Promise<void> {
  const dir = dirname(partialPath)
  if (basename(dir) === DOWNLOAD_STAGING_DIR) await rmdir(dir).catch(() => {})
}

/** The partial file becomes the model without ever replacing one: link (fails when the name exists), then unlink. */
async function place(partialPath: string, finalPath: string, folder: string, name: string): Promise<void> {
  try {
    await link(partialPath, finalPath)
    await unlink(partialPath)
    await dropStagingDir(partialPath)
    return
  } catch (err) {
    const code = (err as { code?: string }).code
    if (code === 'EEXIST') {
      await removeQuietly(partialPath)
      throw new SourceError(`${folder} got a file named ${name} meanwhile; it is never overwritten, the download was removed`, false)
    }
    if (code !== 'EPERM' && code !== 'ENOTSUP' && code !== 'EXDEV' && code !== 'EMLINK') throw err
  }
  // no hard links on this file system: a check, then a rename (a tiny window, named in docs/decisions.md)
  if (existsSync(finalPath)) {
    await removeQuietly(partialPath)
    throw new SourceError(`${folder} got a file named ${name} meanwhile; it is never overwritten, the download was removed`, false)
  }
  await rename(partialPath, finalPath)
  await dropStagingDir(partialPath)
}

/** Waits `ms`, or less when `signal` aborts; whether it waited the whole time. */
function sleep(ms: number, signal: AbortSignal): Promise<boolean> {
  return new Promise((resolveSleep) => {
    if (signal.aborted) return resolveSleep(false)
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort)
      resolveSleep(true)
    }, ms)
    const onAbort = () => {
      clearTimeout(timer)
      resolveSleep(false)
    }
    signal.addEventListener('abort', onAbort, { once: true })
  })
}
