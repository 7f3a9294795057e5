/**
 * The classifier behind the interface (classifier.ts): one worker thread (worker.ts) and a bounded
 * queue in front of it. Urgent work (a /view or a preview frame that waits) goes before background
 * work (new outputs, a scan); a path already queued or being classified is not queued twice.
 *
 * While the host runs a prompt (`hold(true)`, from its events) background work waits, so a
 * prompt's CPU is not shared with the classification of its own outputs; urgent work never waits,
 * and background work waiting longer than BACKGROUND_MAX_WAIT_MS runs anyway (a host that is never
 * idle still gets its outputs tagged).
 *
 * Guarantees: the sidecar's event loop never runs the model; a classification rejects (never
 * hangs) when its deadline passes, the queue is full (`queue_max`), the worker failed to start or
 * died (a new one starts for the next job), or the pool is closed.
 */
import type { Worker } from 'node:worker_threads'
import { startThread } from '../kernel/threads.js'
import type { FastifyBaseLogger } from 'fastify'
import { ClassifyError, type Classified, type Classifier, type ClassifyTarget } from './classifier.js'
import type { EngineName } from './engines.js'
import type { WorkerAnswer, WorkerJob } from './worker.js'

const startWorker = (engine: EngineName): Worker => startThread(import.meta.url, 'worker', { workerData: { engine } })

interface Waiter { resolve(c: Classified): void; reject(e: Error): void }

interface QueuedJob {
  id: number
  /** when it was queued (performance.now()) */
  at: number
  key: string | null
  target: ClassifyTarget
  urgent: boolean
  waiters: Set<Waiter>
}

/** How many jobs the worker holds at once (the rest wait here, where urgent ones can go first). */
const IN_WORKER = 2
/** The longest background work waits for the host to finish its prompts. */
export const BACKGROUND_MAX_WAIT_MS = 60_000

export class ClassifierPool implements Classifier {
  private worker: Worker | null = null
  private ready: Promise<void> | null = null
  private readonly queue: QueuedJob[] = []
  private readonly byKey = new Map<string, QueuedJob>()
  private readonly sent = new Map<number, QueuedJob>()
  private nextId = 1
  private closed = false
  private held = false
  private holdTimer: NodeJS.Timeout | null = null
  /** classifications answered (tests, the bench) */
  answered = 0

  constructor(
    private readonly engine: EngineName,
    private readonly queueMax: number,
    private readonly log?: Pick<FastifyBaseLogger, 'error' | 'info'>,
  ) {}

  /** Starts the worker and loads the model now (at start, so the first /view does not wait for it). */
  warm(): Promise<void> {
    return this.start()
  }

  private start(): Promise<void> {
    if (this.ready !== null) return this.ready
    const worker = startWorker(this.engine)
    this.worker = worker
    this.ready = new Promise<void>((resolve, reject) => {
      worker.on('message', (msg: WorkerAnswer) => {
        if ('ready' in msg) return resolve()
        if ('failed' in msg) {
          this.log?.error({ reason: msg.failed }, 'the NSFW classifier could not start')
          reject(new ClassifyError('failed', msg.failed))
          this.lost(new ClassifyError('failed', msg.failed))
          return
        }
        const job = this.sent.get(msg.id)
        if (job === undefined) return
        this.sent.delete(msg.id)
        if (job.key !== null && this.byKey.get(job.key) === job) this.byKey.delete(job.key)
        this.answered++
        for (const w of job.waiters) {
          if ('ok' in msg) w.resolve(msg.ok)
          else w.reject(new ClassifyError(msg.error.reason, msg.error.message))
        }
        this.pump()
      })
      worker.on('error', (err) => {
        this.log?.error({ err }, 'the NSFW classifier worker failed')
        reject(err)
        this.lost(new ClassifyError('failed', 'the classifier worker failed'))
      })
      worker.on('exit', () => {
        if (this.worker === worker) this.lost(new ClassifyError('failed', 'the classifier worker ended'))
      })
    })
    this.ready.catch(() => {})
    return this.ready
  }

  /** The worker is gone: what it held fails; the next job starts a new one. */
  private lost(error: ClassifyError): void {
    const worker = this.worker
    this.worker = null
    this.ready = null
    void worker?.terminate()
    for (const job of this.sent.values()) {
      if (job.key !== null) this.byKey.delete(job.key)
      for (const w of job.waiters) w.reject(error)
    }
    this.sent.clear()
    if (!this.closed && this.queue.length > 0) setTimeout(() => this.pump(), 1000).unref()
  }

  classify(target: ClassifyTarget, options: { deadlineMs?: number; urgent?: boolean } = {}): Promise<Classified> {
    if (this.closed) return Promise.reject(new ClassifyError('closed', 'the classifier is closed'))
    const urgent = options.urgent === true
    const key = 'path' in target ? target.path : null
    let job = key === null ? undefined : this.byKey.get(key)
    if (job === undefined) {
      if (this.queue.length >= this.queueMax && !urgent) return Promise.reject(new ClassifyError('queue_full', 'the classifier queue is full'))
      job = { id: this.nextId++, at: performance.now(), key, target, urgent, waiters: new Set() }
      if (key !== null) this.byKey.set(key, job)
      if (urgent) this.queue.splice(this.queue.findIndex((j) => !j.urgent) >>> 0, 0, job)
      else this.queue.push(job)
    } else if (urgent && !job.urgent && !this.sent.has(job.id)) {
      // already waiting as background work: it goes up with the urgent ones
      job.urgent = true
      this.queue.splice(this.queue.indexOf(job), 1)
      this.queue.splice(this.queue.findIndex((j) => !j.urgent) >>> 0, 0, job)
    }
    const queued = job
    const result = new Promise<Classified>((resolve, reject) => {
      const waiter: Waiter = { resolve, reject }
      queued.waiters.add(waiter)
      if (options.deadlineMs !== undefined) {
        const timer = setTimeout(() => {
          queued.waiters.delete(waiter)
          // nobody waits for it any more: it leaves the queue, or the worker stops it (between an
          // animation's frames: a long one must not keep everyone else's views waiting past their
          // deadlines); a new request for the file starts a job of its own
          if (queued.waiters.size === 0) {
            if (queued.key !== null && this.byKey.get(queued.key) === queued) this.byKey.delete(queued.key)
            if (!this.sent.has(queued.id)) {
              const at = this.queue.indexOf(queued)
              if (at >= 0) this.queue.splice(at, 1)
            } else {
              this.worker?.postMessage({ id: queued.id, cancel: true } satisfies WorkerJob)
            }
          }
          reject(new ClassifyError('timeout', `not classified within ${options.deadlineMs} ms`))
        }, options.deadlineMs)
        const clear = () => clearTimeout(timer)
        waiter.resolve = (c) => (clear(), resolve(c))
        waiter.reject = (e) => (clear(), reject(e))
      }
    })
    this.pump()
    return result
  }

  /** The host runs a prompt (true) or is idle again (false): background work waits meanwhile. */
  hold(on: boolean): void {
    this.held = on
    if (!on) this.pump()
  }

  /** The next job to send: the first one, or while held the first urgent one or background work waiting too long. */
  private next(): QueuedJob | undefined {
    if (!this.held) return this.queue.shift()
    const now = performance.now()
    const at = this.queue.findIndex((j) => j.urgent || now - j.at >= BACKGROUND_MAX_WAIT_MS)
    if (at >= 0) return this.queue.splice(at, 1)[0]
    // look again when the oldest background job has waited long enough
    const oldest = Math.min(...this.queue.map((j) => j.at))
    if (this.holdTimer === null && Number.isFinite(oldest)) {
      this.holdTimer = setTimeout(() => {
        this.holdTimer = null
        this.pump()
      }, Math.max(0, BACKGROUND_MAX_WAIT_MS - (now - oldest)) + 10)
      this.holdTimer.unref()
    }
    return undefined
  }

  /** Jobs waiting, and in the worker. */
  get pending(): number {
    return this.queue.length + this.sent.size
  }

  private pump(): void {
    if (this.closed || this.queue.length === 0 || this.sent.size >= IN_WORKER) return
    this.start().then(
      () => {
        while (this.worker !== null && this.sent.size < IN_WORKER && this.queue.length > 0) {
          const job = this.next()
          if (job === undefined) break
          if (job.waiters.size === 0) {
            if (job.key !== null) this.byKey.delete(job.key)
            continue
          }
          this.sent.set(job.id, job)
          const message: WorkerJob = 'path' in job.target ? { id: job.id, path: job.target.path } : { id: job.id, bytes: copyOf(job.target.bytes) }
          this.worker.postMessage(message, message.bytes ? [message.bytes] : [])
        }
      },
      (err: unknown) => {
        // the worker cannot start: everything waiting fails now (a later job tries again)
        const error = err instanceof ClassifyError ? err : new ClassifyError('failed', String(err))
        for (const job of this.queue.splice(0)) {
          if (job.key !== null) this.byKey.delete(job.key)
          for (const w of job.waiters) w.reject(error)
        }
      },
    )
  }

  async close(): Promise<void> {
    this.closed = true
    if (this.holdTimer !== null) clearTimeout(this.holdTimer)
    const error = new ClassifyError('closed', 'the classifier is closed')
    for (const job of [...this.queue.splice(0), ...this.sent.values()]) for (const w of job.waiters) w.reject(error)
    this.sent.clear()
    this.byKey.clear()
    const worker = this.worker
    this.worker = null
    await worker?.terminate()
  }
}

function copyOf(bytes: Uint8Array): ArrayBuffer {
  const owned = new Uint8Array(bytes.byteLength)
  owned.set(bytes)
  return owned.buffer
}
