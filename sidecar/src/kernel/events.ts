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
 * - every record carries the kind and the time (the injected clock) besides its own fields;
 * - a record holds no secret: emitters pass hash prefixes, never tokens (the log listener's
 *   redaction is the second line, not the first).
 */
import type { FastifyBaseLogger } from 'fastify'
import type { Clock } from './clock.js'

/** Each event kind → its own fields. Features add their kinds by declaration merging. */
// eslint-disable-next-line @typescript-eslint/no-empty-interface
export interface EventMap {}

export type EventKind = keyof EventMap & string
export type EventRecord<K extends EventKind = EventKind> = { kind: K; at: number } & EventMap[K]
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

  emit<K extends EventKind>(kind: K, fields: EventMap[K]): void {
    const record = { ...(fields as object), kind, at: this.clock() } as EventRecord<K>
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
