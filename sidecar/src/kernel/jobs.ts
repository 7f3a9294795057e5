/**
 * Background work, in one place: what runs besides requests (a periodic prune, a watcher, a
 * download queue) is a Job that a feature declares; the kernel starts every job once the store
 * is open and stops them all, last started first, when the sidecar stops.
 *
 * Guarantees:
 * - a job's `start` runs once, after the store is open; a job added after `start()` starts at once;
 * - `every` runs periodically, never overlapping itself: a run still going when the next is due
 *   skips that one; its timer never keeps the process alive;
 * - an error of a start, run or stop is logged with the job's name and stops nothing else;
 * - `stop()` clears every timer, waits for runs in progress, then awaits each job's `stop` in the
 *   reverse order of their starts; a second `stop()` is the same promise.
 * - Work that must survive a restart (a persisted queue) keeps its state in the feature's
 *   repository; its job's `start` resumes it. The kernel keeps no state of its own.
 */
import type { FastifyBaseLogger } from 'fastify'

export interface Job {
  /** names the job in logs */
  name: string
  start?(): void | Promise<void>
  stop?(): void | Promise<void>
  /** periodic work: `run` every `ms`, the first one `ms` after start */
  every?: { ms: number; run(): void | Promise<void> }
}

export class Jobs {
  private readonly jobs: Job[] = []
  private readonly started: Job[] = []
  private readonly timers: NodeJS.Timeout[] = []
  private readonly running = new Set<Promise<void>>()
  private state: 'idle' | 'started' | 'stopping' = 'idle'
  private stopped: Promise<void> | undefined

  constructor(private readonly log: FastifyBaseLogger) {}

  add(job: Job): void {
    if (this.state === 'stopping') throw new Error(`job ${job.name} added while the jobs stop`)
    this.jobs.push(job)
    if (this.state === 'started') void this.begin(job)
  }

  /** Starts every job added so far, in order. */
  async start(): Promise<void> {
    if (this.state !== 'idle') return
    this.state = 'started'
    for (const job of this.jobs) await this.begin(job)
  }

  stop(): Promise<void> {
    this.stopped ??= this.end()
    return this.stopped
  }

  private async begin(job: Job): Promise<void> {
    // a stop that came while the jobs were starting: this one never starts (nothing to stop later)
    if (this.state !== 'started') return
    this.started.push(job)
    try {
      await job.start?.()
    } catch (err) {
      this.log.error({ err, job: job.name }, 'a background job failed to start')
    }
    const every = job.every
    if (every === undefined || this.state !== 'started') return
    let busy = false
    const timer = setInterval(() => {
      if (busy) return
      busy = true
      const run = this.guard(job, 'run', () => every.run()).finally(() => {
        busy = false
        this.running.delete(run)
      })
      this.running.add(run)
    }, every.ms)
    timer.unref()
    this.timers.push(timer)
  }

  private async end(): Promise<void> {
    this.state = 'stopping'
    for (const timer of this.timers.splice(0)) clearInterval(timer)
    await Promise.all(this.running)
    for (const job of this.started.splice(0).reverse()) await this.guard(job, 'stop', () => job.stop?.())
  }

  private async guard(job: Job, step: string, fn: () => void | Promise<void>): Promise<void> {
    try {
      await fn()
    } catch (err) {
      this.log.error({ err, job: job.name, step }, `a background job's ${step} failed`)
    }
  }
}
