/**
 * The event stream: every security-relevant thing that happens is one typed record, emitted once
 * from the place it happens; whatever wants to know (the log today; the audit log and the
 * notifier of issue 24) listens here instead of being called from handlers.
 *
 * The kinds are declared by the features that emit them, by augmenting `EventMap`:
 *
 *     declare module './events.js' {
 *       interface EventMap { user_login: { username: string } }
 *     }
 *
 * Guarantees:
 * - `emit` never throws and never waits: listeners run synchronously, in the order they were
 *   added; a listener that throws (or whose promise rejects) is logged and the others still run;
 * - every record carries the kind, the time (the injected clock) and an outcome besides its own
 *   fields, and `actor`, `subject`, `ip` where they are known (EventCommon);
 * - a record holds no secret: emitters pass hash prefixes, never tokens (the log listener's
 *   redaction is the second line, not the first).
 */
import type { FastifyBaseLogger } from 'fastify'
import type { Clock } from './clock.js'

/** Each event kind → its own fields. Features add their kinds by declaration merging. */
export interface EventMap {
  /** the sidecar is ready to decide (a start, a restart, or a standby taking over) */
  server_started: { version: string; users: number }
}

export type EventKind = keyof EventMap & string

/** How it ended: done, tried and failed (a wrong password), or refused by a rule (a lockout, a denied prompt). */
export type EventOutcome = 'success' | 'failure' | 'refused'

/**
 * What every record may carry besides its own fields: `actor` who did it (a username; absent for
 * an anonymous client or the service itself), `subject` whom it concerns (a username), `ip` the
 * client's address, `outcome` (default `success`). The audit log indexes these four.
 */
export interface EventCommon {
  actor?: string
  subject?: string
  ip?: string
  outcome?: EventOutcome
  /** who acted when it was no user: `guest` (a guest session) or `anonymous:<role>` (never matched as a name) */
  principal?: string
  /** set by the audit log only: how many like it, from the same one, it left out before this one (audit/volume-gate.ts) */
  suppressed?: number
}

export type EventFields<K extends EventKind> = EventMap[K] & EventCommon
export type EventRecord<K extends EventKind = EventKind> = { kind: K; at: number; outcome: EventOutcome } & EventFields<K>
type Listener<K extends EventKind> = (record: EventRecord<K>) => void | Promise<void>

export class Events {
  private readonly byKind = new Map<string, Array<Listener<EventKind>>>()
  private readonly any: Array<Listener<EventKind>> = []

  constructor(private readonly clock: Clock, private readonly log: FastifyBaseLogger) {}

  on<K extends EventKind>(kind: K, listener: Listener<K>): void {
    const list = this.byKind.get(kind) ?? []
    list.push(listener as Listener<EventKind>)
    this.byKind.set(kind, list)
  }

  /** every kind, in emission order */
  onAny(listener: Listener<EventKind>): void {
    this.any.push(listener)
  }

  emit<K extends EventKind>(kind: K, fields: EventFields<K>): void {
    const record = { outcome: 'success', ...(fields as object), kind, at: this.clock() } as EventRecord<K>
    for (const listener of [...(this.byKind.get(kind) ?? []), ...this.any]) {
      try {
        const done = listener(record as EventRecord)
        if (done instanceof Promise) done.catch((err: unknown) => this.failed(kind, err))
      } catch (err) {
        this.failed(kind, err)
      }
    }
  }

  private failed(kind: string, err: unknown): void {
    this.log.error({ err, event: kind }, 'an event listener failed')
  }
}
