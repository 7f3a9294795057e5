/**
 * Whether decisions may still be taken from the replica while several instances share a
 * store (issue 28 item 5).
 *
 * Guarantees:
 * - while the shared store's feed is connected, nothing is refused here;
 * - when it is lost, decisions go on from the replica for at most `graceMs` (STORE_GRACE_MS,
 *   3 s; it covers a server restart or a failover), then every decision is refused with 503
 *   `STORE_UNAVAILABLE` until the store is back (`refusing`), and the change is announced
 *   (`onChange`: the access epoch moves, so the plugin drops its kept decisions and the open
 *   WebSockets are checked and closed);
 * - when the feed is back, every replica is read again from the store (what other instances
 *   wrote meanwhile was never announced here) and only then do decisions resume; a reload
 *   that fails is tried again while the feed stays connected;
 * - one log line when the store is lost, one when decisions stop, one when it is back,
 *   never one per request. Writes need no help from here: a write that cannot reach the
 *   store already answers 503 and changes nothing (collection.ts).
 */
import type { FastifyBaseLogger } from 'fastify'
import type { SharedStore } from './shared-store.js'

/** How long decisions go on from the replica after the shared store was lost. */
export const STORE_GRACE_MS = 3000
const RESYNC_RETRY_MS = 100

/** A replica that can be read again from the store (collection.ts). */
export interface Resyncable {
  resync(): Promise<boolean>
}

export interface StoreHealthView {
  /** true: every decision answers 503 STORE_UNAVAILABLE */
  readonly refusing: boolean
}

/** The embedded store is this process's own file: there is nothing to lose. */
export const ALWAYS_UP: StoreHealthView = { refusing: false }

export class StoreHealth implements StoreHealthView {
  private lostAt: number | null = null
  private down = false
  private resyncing = false
  private graceTimer: NodeJS.Timeout | null = null
  private stopFollowing: () => void = () => {}

  constructor(
    private readonly store: SharedStore,
    private readonly replicas: Resyncable[],
    private readonly log: FastifyBaseLogger,
    private readonly onChange: () => void,
    private readonly graceMs = STORE_GRACE_MS,
    private readonly now: () => number = Date.now,
  ) {}

  start(): void {
    this.stopFollowing = this.store.onConnection((connected) => (connected ? this.back() : this.lost()))
    if (!this.store.connected) this.lost()
  }

  stop(): void {
    this.stopFollowing()
    if (this.graceTimer !== null) clearTimeout(this.graceTimer)
    this.graceTimer = null
  }

  get refusing(): boolean {
    if (this.down) return true
    // the timer may run late on a busy loop: the bound is kept by the clock, not by the timer
    if (this.lostAt !== null && this.now() - this.lostAt >= this.graceMs) {
      this.refuse()
      return true
    }
    return false
  }

  private lost(): void {
    if (this.lostAt !== null) return
    this.lostAt = this.now()
    this.log.error({ grace_ms: this.graceMs }, `shared store unreachable: decisions go on from this instance's copy for ${this.graceMs} ms, then every request answers 503 until it is back`)
    this.graceTimer = setTimeout(() => this.refuse(), this.graceMs)
    this.graceTimer.unref()
  }

  private refuse(): void {
    if (this.graceTimer !== null) clearTimeout(this.graceTimer)
    this.graceTimer = null
    if (this.down || this.lostAt === null) return
    this.down = true
    this.log.error('shared store still unreachable: every request answers 503 STORE_UNAVAILABLE until it is back')
    this.onChange()
  }

  private back(): void {
    if (this.lostAt === null || this.resyncing) return
    this.resyncing = true
    void this.resync()
  }

  /** Reads every replica again; decisions resume only when all of them are current. */
  private async resync(): Promise<void> {
    for (;;) {
      const results = await Promise.all(this.replicas.map((r) => r.resync()))
      if (results.every(Boolean)) break
      if (!this.store.connected) {
        this.resyncing = false // lost again: the next connection starts over
        return
      }
      await new Promise((resolve) => setTimeout(resolve, RESYNC_RETRY_MS))
    }
    this.resyncing = false
    if (!this.store.connected) return
    const outage = this.now() - (this.lostAt ?? this.now())
    if (this.graceTimer !== null) clearTimeout(this.graceTimer)
    this.graceTimer = null
    const wasDown = this.down
    this.lostAt = null
    this.down = false
    this.log.info({ outage_ms: outage }, 'shared store back: every replica read again, decisions resume')
    if (wasDown) this.onChange()
  }
}
