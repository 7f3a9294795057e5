/**
 * The notifications on their way to ntfy: a bounded queue in memory, one delivery at a time, in
 * the order the events happened.
 *
 * Guarantees:
 * - `offer` never waits and never throws: the event's emitter (a login, a request) goes on at once,
 *   whatever ntfy does; every request ends by `timeoutMs`, so a slow server holds the queue at most
 *   that long per attempt;
 * - bounded: at most `bound` notifications wait (plus the one being delivered); beyond that the
 *   oldest waiting one is dropped and counted (`dropped`), with one warning per run of drops;
 * - a server that is not there, times out or says "not now" (429, 502, 503, 504) is tried again,
 *   with a pause doubling from `retryBaseMs` to `retryMaxMs`, until it takes the notification: while
 *   the queue stays below its bound nothing is lost, however long ntfy is away;
 * - another 5xx may be this message's doing: `serverErrorAttempts` attempts, then it is given up
 *   and counted (`failed`); any other answer (400, 401, 403, 413...) is not tried again, counted as
 *   `failed`, and logged once per cause in a row;
 * - a delivery is at least once: a request that timed out may have reached ntfy and is sent again;
 * - `stop` aborts the request in flight and the pause, settles once the delivery loop has
 *   ended, logs how many were left undelivered, and takes nothing more;
 * - a log line never holds the token or a message's text: the ntfy status, its error and counts.
 */
import type { FastifyBaseLogger } from 'fastify'
import type { Clock } from '../kernel/clock.js'
import type { NtfyMessage } from './notification.js'
import { publishToNtfy, type PublishOutcome } from './ntfy-client.js'
import type { NtfyDestination } from './ntfy-settings.js'

export interface PublisherOptions {
  /** notifications that may wait; the oldest beyond it is dropped */
  bound: number
  /** one request's limit, its answer included */
  timeoutMs: number
  retryBaseMs: number
  retryMaxMs: number
  /** attempts for a message ntfy answers with a 5xx other than 502/503/504 */
  serverErrorAttempts: number
}

export const PUBLISHER_DEFAULTS: Readonly<PublisherOptions> = Object.freeze({
  bound: 1000,
  timeoutMs: 10_000,
  retryBaseMs: 1000,
  retryMaxMs: 60_000,
  serverErrorAttempts: 5,
})

export interface PublisherStatus {
  queued: number
  in_flight: number
  delivered: number
  dropped: number
  failed: number
  last_error: string | null
  last_delivered_at_iso: string | null
}

export class NtfyPublisher {
  private readonly options: PublisherOptions
  private readonly queue: NtfyMessage[] = []
  private current: NtfyMessage | null = null
  private readonly counts = { delivered: 0, dropped: 0, failed: 0 }
  private lastError: string | null = null
  private lastDeliveredAt: number | null = null
  private busy = false
  private pumping: Promise<void> = Promise.resolve()
  private stopped = false
  private readonly abort = new AbortController()
  /** ends the pause between attempts early (stop) */
  private wake: (() => void) | null = null
  /** since when ntfy has not been reached (null: it was, last time) */
  private outageSince: number | null = null
  private droppedAtOutage = 0
  private dropsLogged = false
  private lastRejection: string | null = null

  constructor(
    private readonly destination: () => NtfyDestination | null,
    private readonly log: FastifyBaseLogger,
    private readonly clock: Clock,
    options: Partial<PublisherOptions> = {},
  ) {
    this.options = { ...PUBLISHER_DEFAULTS, ...options }
  }

  /** Queues `message` for delivery; returns at once. */
  offer(message: NtfyMessage): void {
    if (this.stopped) return
    this.queue.push(message)
    if (this.queue.length > this.options.bound) {
      this.queue.shift()
      this.counts.dropped++
      if (!this.dropsLogged) {
        this.dropsLogged = true
        this.log.warn({ ntfy: { bound: this.options.bound, dropped: this.counts.dropped } }, 'ntfy: the queue is full; the oldest notifications are dropped until ntfy takes them again')
      }
    }
    this.kick()
  }

  status(): PublisherStatus {
    return {
      queued: this.queue.length,
      in_flight: this.current === null ? 0 : 1,
      ...this.counts,
      last_error: this.lastError,
      last_delivered_at_iso: this.lastDeliveredAt === null ? null : new Date(this.lastDeliveredAt).toISOString(),
    }
  }

  /** Stops delivering: the request in flight is aborted; what waits is not sent (and is logged as a count). */
  async stop(): Promise<void> {
    if (this.stopped) return this.pumping
    this.stopped = true
    const left = this.queue.length + (this.current === null ? 0 : 1)
    this.abort.abort()
    this.wake?.()
    await this.pumping
    this.queue.length = 0
    if (left > 0) this.log.info({ ntfy: { undelivered: left } }, 'ntfy: stopped with notifications undelivered')
  }

  private kick(): void {
    if (this.busy || this.stopped) return
    this.busy = true
    this.pumping = this.pump()
      .catch((err: unknown) => this.log.error({ err }, 'ntfy: the delivery loop failed'))
      .finally(() => {
        this.busy = false
        // an offer that came while the loop was ending found it busy
        if (this.queue.length > 0) this.kick()
      })
  }

  private async pump(): Promise<void> {
    while (!this.stopped) {
      const message = this.queue.shift()
      if (message === undefined) return
      this.current = message
      try {
        await this.deliver(message)
      } finally {
        this.current = null
      }
    }
  }

  private async deliver(message: NtfyMessage): Promise<void> {
    let serverErrors = 0
    for (let attempt = 1; !this.stopped; attempt++) {
      const to = this.destination()
      if (to === null) return this.turnedOff()
      const outcome = await publishToNtfy(to, message, { timeoutMs: this.options.timeoutMs, signal: this.abort.signal })
      if (outcome.kind === 'delivered') return this.delivered()
      if (this.stopped) return
      this.lastError = outcome.detail
      if (outcome.kind === 'rejected') return this.failed(outcome, 'ntfy refused a notification; it is not sent again')
      if (outcome.kind === 'server_error' && ++serverErrors >= this.options.serverErrorAttempts) {
        return this.failed(outcome, `ntfy failed on a notification ${serverErrors} times; it is given up`)
      }
      if (outcome.kind === 'unavailable') this.unavailable(outcome.detail)
      await this.pause(this.delayOf(outcome, attempt))
    }
  }

  private delayOf(outcome: PublishOutcome, attempt: number): number {
    const { retryBaseMs, retryMaxMs } = this.options
    if (outcome.kind === 'unavailable' && outcome.retryAfterMs !== null) return Math.min(retryMaxMs, Math.max(retryBaseMs, outcome.retryAfterMs))
    return Math.min(retryMaxMs, retryBaseMs * 2 ** Math.min(attempt - 1, 30))
  }

  private pause(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms)
      timer.unref()
      this.wake = done
      function done(): void {
        clearTimeout(timer)
        resolve()
      }
    }).finally(() => {
      this.wake = null
    })
  }

  private delivered(): void {
    this.counts.delivered++
    this.lastDeliveredAt = this.clock()
    this.lastRejection = null
    this.dropsLogged = false
    if (this.outageSince !== null) {
      const dropped = this.counts.dropped - this.droppedAtOutage
      this.log.info({ ntfy: { unreachable_ms: this.clock() - this.outageSince, dropped } }, 'ntfy: delivering again')
      this.outageSince = null
    }
  }

  private unavailable(detail: string): void {
    if (this.outageSince !== null) return
    this.outageSince = this.clock()
    this.droppedAtOutage = this.counts.dropped
    this.log.warn({ ntfy: { error: detail } }, 'ntfy: cannot deliver notifications; trying again with growing pauses')
  }

  private failed(outcome: Extract<PublishOutcome, { kind: 'rejected' | 'server_error' }>, line: string): void {
    this.counts.failed++
    this.outageSince = null // it answered
    if (this.lastRejection === outcome.detail) return
    this.lastRejection = outcome.detail
    this.log.warn({ ntfy: { status: outcome.status, error: outcome.detail } }, line)
  }

  /** Notifications were turned off (no topic) while some waited: they are not sent. */
  private turnedOff(): void {
    const discarded = this.queue.length + 1
    this.queue.length = 0
    this.log.info({ ntfy: { discarded } }, 'ntfy: notifications are off; the waiting ones are discarded')
  }
}
