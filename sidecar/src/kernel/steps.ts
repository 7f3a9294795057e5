/**
 * Where the state of a behaviour's later steps (body, form, filter) waits for them: here, in
 * the sidecar, under an opaque random id. The plugin carries only `{step: id}` as the step's
 * `ctx` and sends it back with the step's message; nothing of the state travels, so nothing
 * of it is parsed or cast when it comes back (docs/decisions.md, "Step state in the sidecar").
 *
 * Guarantees:
 * - an id is 122 random bits (randomUUID): a step names only the state its decision opened;
 * - a one-shot step is taken by its message (`done`): it runs once;
 * - a shared step (the filter of a read the plugin may keep and reuse with the same ctx) is
 *   not taken by its message; equal states of one behaviour share one id while it lives, and
 *   each decision that hands it out again renews it, so a polled read holds one entry;
 * - every entry expires `ttlMs` after it was opened (or last handed out), and at most `max`
 *   are held: opening one more first drops the expired ones, then the oldest;
 * - one owner holds at most `perOwner` entries: opening one more drops that owner's own oldest,
 *   so nobody can push other users' waiting steps out (a flood of bodiless POST /prompt);
 * - an unknown, expired or dropped id is refused by its step as an outage (503), and so is one
 *   after a restart of the sidecar (the plugin drops its kept decisions on a new connection).
 */
import { randomUUID } from 'node:crypto'
import type { Clock } from './clock.js'

/** What a decision carries as a step's ctx: all the plugin ever sees of its state. */
export interface StepToken {
  readonly step: string
}

export interface StepLimits {
  /** entries held at most; the oldest goes first */
  max: number
  /**
   * how long a step waits for its message: a body or form step waits for the client's whole
   * upload (the plugin reads it before it asks), a filter step for the host's handler, a kept
   * read's filter for as long as the plugin reuses the decision (at most 5 s) plus the handler
   */
  ttlMs: number
  /** entries one owner holds at most; that owner's oldest goes first (default 256) */
  perOwner?: number
}

export const STEP_LIMITS: StepLimits = { max: 10_000, ttlMs: 30 * 60_000, perOwner: 256 }

interface Held<T> {
  value: T
  expires: number
  owner: string
  /** set for a shared entry: its key in `shared` */
  key?: string
}

/** The step id a ctx names, or null when the ctx is not a step token (the plugin sends back what it got). */
export function stepIdOf(ctx: unknown): string | null {
  if (typeof ctx !== 'object' || ctx === null || !('step' in ctx)) return null
  return typeof ctx.step === 'string' ? ctx.step : null
}

export class StepStore<T> {
  /** in the order they expire (every entry lives ttlMs from its last opening) */
  private readonly held = new Map<string, Held<T>>()
  private readonly shared = new Map<string, string>()
  /** each owner's ids, oldest first */
  private readonly byOwner = new Map<string, Set<string>>()

  /** one owner's bound (StepLimits.perOwner, default 256) */
  private readonly perOwner: number

  constructor(
    private readonly clock: Clock,
    readonly limits: StepLimits = STEP_LIMITS,
  ) {
    this.perOwner = limits.perOwner ?? 256
  }

  get size(): number {
    return this.held.size
  }

  /** A one-shot step of `owner`: its message takes it (`done`). */
  open(value: T, owner: string): StepToken {
    const id = randomUUID()
    this.hold(id, { value, expires: this.clock() + this.limits.ttlMs, owner })
    return { step: id }
  }

  /**
   * A shared step: every decision with the same `key` (the behaviour and its whole state) gets the
   * same id while it lives, renewed by each; `done` leaves it.
   */
  share(key: string, make: () => T, owner: string): StepToken {
    const now = this.clock()
    const known = this.shared.get(key)
    const entry = known === undefined ? undefined : this.held.get(known)
    if (known !== undefined && entry !== undefined && entry.expires > now) {
      this.held.delete(known) // to the end: the order stays the order of expiry
      entry.expires = now + this.limits.ttlMs
      this.held.set(known, entry)
      const mine = this.byOwner.get(entry.owner)
      mine?.delete(known)
      mine?.add(known)
      return { step: known }
    }
    const id = randomUUID()
    this.hold(id, { value: make(), expires: now + this.limits.ttlMs, key, owner })
    this.shared.set(key, id)
    return { step: id }
  }

  /** The state of a live step; undefined when unknown or expired. */
  get(id: string): T | undefined {
    const entry = this.held.get(id)
    if (entry === undefined) return undefined
    if (entry.expires <= this.clock()) {
      this.drop(id, entry)
      return undefined
    }
    return entry.value
  }

  /** Its step has run: a one-shot step is gone, a shared one stays for the next reuse. */
  done(id: string): void {
    const entry = this.held.get(id)
    if (entry !== undefined && entry.key === undefined) this.drop(id, entry)
  }

  private hold(id: string, entry: Held<T>): void {
    const now = this.clock()
    // the expired ones are at the front
    for (const [oldId, old] of this.held) {
      if (old.expires > now && this.held.size < this.limits.max) break
      this.drop(oldId, old)
    }
    const mine = this.byOwner.get(entry.owner) ?? new Set<string>()
    for (const oldId of mine) {
      if (mine.size < this.perOwner) break
      const old = this.held.get(oldId)
      if (old === undefined) mine.delete(oldId)
      else this.drop(oldId, old)
    }
    this.held.set(id, entry)
    mine.add(id)
    this.byOwner.set(entry.owner, mine)
  }

  private drop(id: string, entry: Held<T>): void {
    this.held.delete(id)
    if (entry.key !== undefined && this.shared.get(entry.key) === id) this.shared.delete(entry.key)
    const mine = this.byOwner.get(entry.owner)
    mine?.delete(id)
    if (mine?.size === 0) this.byOwner.delete(entry.owner)
  }
}
