/**
 * A user's sessions or API tokens, found without holding every record (issue 28: a store of a
 * million sessions and tokens). Those kinds are held lazily (store/collection.ts `lazy`), so
 * "this user's sessions" cannot be a filter over memory, and the store cannot be queried by a
 * field (values may be sealed). Each user has one index record per kind
 * (`session_index:<user_id>`, `token_index:<user_id>`): the ids with their expiry.
 *
 * - A new record and its index entry are stored in one transaction, checked against the index's
 *   version (a login on another instance at the same moment makes one of the two read again):
 *   a record is never stored without being findable.
 * - Entries past their expiry leave the index at its next write, and their records are deleted
 *   in the same transaction (they can never validate again), so the index is also the sweep.
 * - Writes of one user's index are serialised in this process; across instances the version
 *   check orders them.
 */
import { AuthsvcError } from '../kernel/errors.js'
import type { Clock } from '../kernel/clock.js'
import { storeUnavailable, type Collection } from '../store/collection.js'
import type { KeyValueStore } from '../store/kv.js'
import type { Check, Write } from '../store/shared-store.js'

/** [record id, expiry in ms] */
export type IndexEntry = [string, number]

interface IndexRecord {
  entries: IndexEntry[]
}

const ATTEMPTS = 20

export class OwnerIndex<T> {
  private readonly chains = new Map<string, Promise<unknown>>()

  constructor(
    /** `session_index` or `token_index` */
    private readonly kind: string,
    /** the records named; the index is kept in their store */
    private readonly records: Collection<T>,
    /** the kind of the records named (`session`, `token`): expired ones are deleted with the index write */
    private readonly recordKind: string,
    private readonly clock: Clock,
  ) {}

  private get kv(): KeyValueStore {
    return this.records.store
  }

  private key(userId: string): string {
    return `${this.kind}:${userId}`
  }

  /** The user's index as stored, with its version (null: absent, or a store without versions). */
  private async readVersioned(userId: string): Promise<{ seq: number | null; entries: IndexEntry[] }> {
    const shared = this.records.shared
    try {
      if (shared !== null) {
        const found = await shared.getVersioned<IndexRecord>(this.key(userId))
        return { seq: found?.seq ?? null, entries: validEntries(found?.value) }
      }
      return { seq: null, entries: validEntries(await this.kv.get<IndexRecord>(this.key(userId))) }
    } catch (err) {
      throw storeUnavailable(this.kind, err)
    }
  }

  /** The ids the user's index names (expired ones included until the next write drops them). */
  async ids(userId: string): Promise<IndexEntry[]> {
    return (await this.readVersioned(userId)).entries
  }

  /** One change of the user's index at a time in this process. */
  private serialised<R>(userId: string, work: () => Promise<R>): Promise<R> {
    const previous = this.chains.get(userId) ?? Promise.resolve()
    const run = previous.then(work, work)
    const tail = run.catch(() => {})
    this.chains.set(userId, tail)
    void tail.then(() => {
      if (this.chains.get(userId) === tail) this.chains.delete(userId)
    })
    return run
  }

  /**
   * Rewrites the user's index as `change` says, over the version read (read again on a lost
   * race), dropping expired entries and deleting their records; `extra` is stored with it in
   * the same transaction (the new record). Resolves with the ids dropped as expired.
   */
  private async rewrite(userId: string, change: (live: IndexEntry[]) => IndexEntry[], extra?: { id: string; record: T }): Promise<string[]> {
    return this.serialised(userId, async () => {
      for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
        const { seq, entries } = await this.readVersioned(userId)
        const now = this.clock()
        const expired = entries.filter(([, exp]) => exp <= now).map(([id]) => id)
        const next = change(entries.filter(([, exp]) => exp > now))
        const writes: Write[] = [
          { key: this.key(userId), value: next.length === 0 ? undefined : { entries: next } },
          ...expired.map((id) => ({ key: `${this.recordKind}:${id}`, value: undefined })),
        ]
        const checks: Check[] = this.records.shared === null ? [] : [{ key: this.key(userId), seq }]
        let ok: boolean
        if (extra !== undefined) ok = await this.records.commit(extra.id, extra.record, checks, writes)
        else {
          try {
            ok = await this.records.writeAll(checks, writes)
          } catch (err) {
            throw storeUnavailable(this.kind, err)
          }
        }
        if (ok) return expired
      }
      throw new AuthsvcError('STORE_UNAVAILABLE', `The ${this.kind} of one user changed too often at once; try again`, { 'Retry-After': '1' })
    })
  }

  /** Stores `record` under `id`, named by the user's index, in one transaction: durable first. */
  async addWith(userId: string, id: string, expMs: number, record: T): Promise<void> {
    await this.rewrite(userId, (live) => [...live.filter(([e]) => e !== id), [id, expMs]], { id, record })
  }

  /** Every record the user's index names that is still stored and still `userId`'s (`ownerOf`). */
  async recordsOf(userId: string, ownerOf: (record: T) => string): Promise<T[]> {
    const entries = await this.ids(userId)
    const found = await Promise.all(entries.map(([id]) => this.records.fetch(id)))
    return found.filter((r): r is Awaited<T> => r !== undefined && ownerOf(r) === userId)
  }

  /** Adds entries of records already stored (building the index of a store written before it). */
  async merge(userId: string, add: IndexEntry[]): Promise<void> {
    await this.rewrite(userId, (live) => {
      const have = new Set(live.map(([id]) => id))
      return [...live, ...add.filter(([id]) => !have.has(id))]
    })
  }

  /** Removes `ids` from the user's index (their records are the caller's). */
  async remove(userId: string, ids: string[]): Promise<void> {
    const gone = new Set(ids)
    await this.rewrite(userId, (live) => live.filter(([e]) => !gone.has(e)))
  }

  /** Drops expired entries and their records; resolves with how many went. */
  async sweep(userId: string): Promise<number> {
    const { entries } = await this.readVersioned(userId)
    const now = this.clock()
    if (!entries.some(([, exp]) => exp <= now)) return 0
    return (await this.rewrite(userId, (live) => live)).length
  }
}

function validEntries(value: IndexRecord | undefined): IndexEntry[] {
  if (value === undefined || !Array.isArray(value.entries)) return []
  return value.entries.filter((e): e is IndexEntry => Array.isArray(e) && typeof e[0] === 'string' && typeof e[1] === 'number')
}

/**
 * A store written before the indexes (every session and token was held, and found by a
 * filter over memory): each user's index is built once from the whole kind, then a marker
 * record says it is done. Later starts read nothing of the kind. Instances starting together
 * may both build: entries are merged over the index's version, so that is only extra work.
 */
export async function buildIndexesOnce<T>(
  kv: KeyValueStore,
  index: OwnerIndex<T>,
  recordKind: string,
  entryOf: (record: T) => { userId: string; entry: IndexEntry } | null,
): Promise<number> {
  const marker = `store_meta:${recordKind}_index`
  if ((await kv.get(marker)) !== undefined) return 0
  const byUser = new Map<string, IndexEntry[]>()
  for (const [, record] of await kv.entries<T>(recordKind)) {
    const found = entryOf(record)
    if (found === null) continue
    const list = byUser.get(found.userId) ?? []
    list.push(found.entry)
    byUser.set(found.userId, list)
  }
  for (const [userId, entries] of byUser) await index.merge(userId, entries)
  await kv.set(marker, { built_at_ms: Date.now() })
  return byUser.size
}
