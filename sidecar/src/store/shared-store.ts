/**
 * The store every instance shares (issue 28): records with atomic verbs and a
 * change feed, on sqlite (one instance), PostgreSQL or Redis (several).
 *
 * Records are keyed `<kind>:<id>`, like the key-value store they replace, and
 * every write (`set`, `delete`, a `commit`) takes the next number of one
 * store-wide sequence, so a change can be ordered against any other. Every
 * write announces itself on the feed, to every instance (the writer
 * included), with its value when it is small enough to travel.
 *
 * The atomic verbs are what callers need to stay correct with several writers:
 * - `commit`: writes several records only if every record checked still has
 *   the sequence number the caller read (or is still absent): compare-and-set
 *   over several keys, in one transaction;
 * - `increment`: a counter with an expiry (throttling);
 * - `claim`: true for exactly one caller per key until it expires (a TOTP step).
 *
 * Counters and claims are not records: they are not listed, copied or announced.
 */
import type { AuditRepository } from './audit-repository.js'
import type { KeyValueStore } from './kv.js'

export type BackendName = 'sqlite' | 'postgres' | 'redis'

/** One write, as the feed announces it. */
export interface Change {
  key: string
  /** the store-wide sequence number of this write */
  seq: number
  /** false: the key was deleted */
  exists: boolean
  /** the value written (sealed where the store seals) when it travelled with the change; fetch it otherwise */
  value?: unknown
  /** the instance that wrote it (SharedStore.origin) */
  origin: string
}

export interface Versioned<T> {
  value: T
  seq: number
}

/** `seq: null`: the key must not exist. */
export interface Check {
  key: string
  seq: number | null
}

/** `value: undefined` deletes the key. */
export interface Write {
  key: string
  value: unknown
}

export interface SharedStore extends KeyValueStore {
  readonly backend: BackendName
  /** this instance's name on the feed */
  readonly origin: string
  getVersioned<T>(key: string): Promise<Versioned<T> | undefined>
  entriesVersioned<T>(kind: string): Promise<Array<[string, Versioned<T>]>>
  /**
   * One page of a kind, for reading a large kind without holding it whole (`store copy`): up to
   * about `limit` records after `cursor` (null: from the start), and the cursor of the next page
   * (null: that was the last). A record written meanwhile may be in a page or not; on Redis a
   * record may come twice (HSCAN), so a reader must be idempotent.
   */
  entriesPage<T>(kind: string, cursor: string | null, limit: number): Promise<{ rows: Array<[string, Versioned<T>]>; next: string | null }>
  /** Applies every write, in one transaction, only if every check holds; resolves false (nothing written) otherwise. */
  commit(checks: Check[], writes: Write[]): Promise<boolean>
  /**
   * Adds one to a counter and resolves with its new count. A missing or expired
   * counter starts at 1 and expires `ttlMs` later; with `refresh`, every
   * increment pushes the expiry to `ttlMs` from now.
   */
  increment(key: string, ttlMs: number, refresh?: boolean): Promise<number>
  /** The counter's count (0 when missing or expired). */
  readCounter(key: string): Promise<number>
  resetCounter(key: string): Promise<void>
  /** True for exactly one caller until `ttlMs` after the first claim. */
  claim(key: string, ttlMs: number): Promise<boolean>
  /**
   * Every write of every instance, in sequence order per key; returns the unsubscribe.
   *
   * After the feed of a shared backend reconnects, what was announced while it
   * was down cannot be replayed: the feed then announces one change
   * `{ key: '*', seq: <the store's current sequence number>, exists: true, origin: '' }`
   * (no value), and a replica reloads everything it keeps. Whether it comes just
   * before or just after `onConnection(true)` differs by backend; nothing depends on it.
   */
  subscribe(listener: (change: Change) => void): () => void
  /** Whether the feed is connected now, and every change of that (shared stores only lose it). */
  readonly connected: boolean
  onConnection(listener: (connected: boolean) => void): () => void
  /** Every kind that holds a record now (`user`, `session`, …), sorted: what `authsvc store copy` lists and copies. */
  kinds(): Promise<string[]>
  /**
   * The append-only audit log every instance of this store shares (store/audit-repository.ts):
   * a table of the sqlite file or of PostgreSQL, a stream of Redis. Its rows are not records:
   * not numbered by the store's sequence, not announced, not listed by `kinds`.
   */
  readonly audit: AuditRepository
}

/** Values larger than this travel without their value (PostgreSQL's NOTIFY takes 8000 bytes). */
export const FEED_VALUE_LIMIT = 6000

export function kindOf(key: string): string {
  const colon = key.indexOf(':')
  return colon === -1 ? key : key.slice(0, colon)
}

/** A listener set: the feed and connection listeners of every backend. */
export class Listeners<T> {
  private readonly set = new Set<(value: T) => void>()
  add(listener: (value: T) => void): () => void {
    this.set.add(listener)
    return () => this.set.delete(listener)
  }
  emit(value: T): void {
    for (const listener of this.set) {
      try {
        listener(value)
      } catch {
        // one listener's failure is its own; the others still hear the change
      }
    }
  }
}
