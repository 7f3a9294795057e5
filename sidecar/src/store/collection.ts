/**
 * A record kind held in memory and written through to the store.
 *
 * Reads never touch the store (the decision path does no I/O). Writes come in
 * three kinds, chosen by the caller for what the change does to access:
 *
 * - `put` / `remove` (durable first): memory changes only once the write is
 *   stored. Anything that widens access (a new session or token, a role up, a
 *   new password) uses these, so a failed write grants nothing, now or after a
 *   restart.
 * - `narrow` / `narrowRemove` (memory first): memory changes at once and stays
 *   changed; the write is retried in the background until it is stored, so a
 *   revocation, a disable or a delete holds at once and still holds after a
 *   restart once the store is back.
 * - `touch`: bookkeeping (`last_used`): memory at once, one write, a failure
 *   is logged and the next touch writes again.
 *
 * Every write of a key is applied in order (a later write can never be
 * overtaken by an earlier one, in the store or in memory).
 *
 * On a shared store (store/shared-store.ts) memory is a replica: it follows
 * the feed, so another instance's write shows here once the feed delivers it
 * (ordered by the store's sequence numbers; a change arriving while a write of
 * the same key is in flight here is read again from the store once that write
 * settles; `*`, sent after the feed reconnects, reloads the whole kind). A failed `put`,
 * `remove`, `narrow` or `narrowRemove` rejects with 503 `STORE_UNAVAILABLE`
 * carrying the store's error as its cause; the caller answers with it.
 */
import type { FastifyBaseLogger } from 'fastify'
import { AuthsvcError } from '../kernel/errors.js'
import type { KeyValueStore } from './kv.js'
import type { Change, Check, SharedStore, Write } from './shared-store.js'

function isShared(kv: KeyValueStore): kv is SharedStore {
  return typeof (kv as Partial<SharedStore>).subscribe === 'function' && typeof (kv as Partial<SharedStore>).entriesVersioned === 'function'
}

/** What a key should hold in the store; `undefined` means deleted. */
interface Unsaved<T> {
  version: number
  value: T | undefined
}

export interface CollectionOptions {
  log?: Pick<FastifyBaseLogger, 'warn' | 'error'>
  /** first delay before a failed narrowing write is tried again (doubles up to `retryMaxMs`) */
  retryBaseMs?: number
  retryMaxMs?: number
  /** called the moment memory shows a change (not for `touch`): decisions read memory (kernel/access-epoch.ts) */
  onChange?: () => void
  /**
   * Hold at most `max` records, read from the store on first use (`fetch`), instead of the
   * whole kind from the start: for kinds that grow with use (sessions, API tokens), so a
   * store of a million of them neither slows the start nor fills memory. The least
   * recently used record goes first; a record with a write in flight or unsaved never goes.
   * `values()` and `size` then cover the held records only: callers find a user's records
   * through an index record of their own.
   */
  lazy?: { max: number }
}

const RETRY_BASE_MS = 1000
const RETRY_MAX_MS = 30_000

export function storeUnavailable(kind: string, cause: unknown): AuthsvcError {
  return new AuthsvcError('STORE_UNAVAILABLE', `The store refused a write of ${kind} records; try again shortly`, { 'Retry-After': '5' }, cause)
}

export class Collection<T> {
  private readonly records = new Map<string, T>()
  private readonly chains = new Map<string, Promise<void>>()
  /** per key: the version shown in memory, and the newest version known stored (only while writes are in flight) */
  private readonly memoryVersion = new Map<string, number>()
  private readonly storedVersion = new Map<string, number>()
  private readonly unsaved = new Map<string, Unsaved<T>>()
  /** per key, on a shared store: the store's sequence number of the newest change memory reflects */
  private readonly storeSeq = new Map<string, number>()
  private seq = 0
  /** told of every change memory shows that came from the feed (another instance's write) */
  private readonly remoteObservers: Array<(id: string, before: T | undefined, after: T | undefined) => void> = []
  private retryTimer: NodeJS.Timeout | undefined
  private retryDelayMs: number
  /** lazy kinds: reads of the store in flight, and whether a change of the key was heard meanwhile */
  private readonly fetching = new Map<string, { promise: Promise<T | undefined>; changed: boolean }>()

  private constructor(
    private readonly kv: KeyValueStore,
    private readonly kind: string,
    private readonly options: CollectionOptions,
  ) {
    this.retryDelayMs = options.retryBaseMs ?? RETRY_BASE_MS
  }

  static async load<T>(kv: KeyValueStore, kind: string, options: CollectionOptions = {}): Promise<Collection<T>> {
    const collection = new Collection<T>(kv, kind, options)
    if (options.lazy !== undefined) {
      if (isShared(kv)) kv.subscribe((change) => collection.heard(change))
      return collection
    }
    if (isShared(kv)) {
      // subscribed before the load: a change made meanwhile is either in the load or heard after it
      const unsubscribe = kv.subscribe((change) => collection.heard(change))
      let rows: Array<[string, { value: T; seq: number }]>
      try {
        rows = await kv.entriesVersioned<T>(kind)
      } catch (err) {
        // a load that failed leaves nothing listening (its caller may try again)
        unsubscribe()
        throw err
      }
      for (const [key, { value, seq }] of rows) {
        const id = key.slice(kind.length + 1)
        if ((collection.storeSeq.get(id) ?? 0) >= seq) continue
        collection.records.set(id, value)
        collection.storeSeq.set(id, seq)
      }
      return collection
    }
    for (const [key, value] of await kv.entries<T>(kind)) {
      collection.records.set(key.slice(kind.length + 1), value)
    }
    return collection
  }

  /** A change from the feed (own writes too: they only advance the sequence mark). */
  private heard(change: Change): void {
    const shared = this.kv as SharedStore
    if (change.key === '*') {
      void this.resync()
      return
    }
    if (!change.key.startsWith(`${this.kind}:`)) return
    const id = change.key.slice(this.kind.length + 1)
    if (this.lazy && !this.records.has(id) && !this.chains.has(id) && !this.unsaved.has(id)) {
      // not held here: the next use reads the store; a read in flight reads again
      const reading = this.fetching.get(id)
      if (reading !== undefined) reading.changed = true
      return
    }
    if ((this.storeSeq.get(id) ?? 0) >= change.seq) return
    if (change.origin === shared.origin) {
      // a deleted key keeps no mark (the feed is in order: nothing older follows a deletion)
      if (change.exists) this.storeSeq.set(id, change.seq)
      else this.storeSeq.delete(id)
      return
    }
    const inFlight = this.chains.get(id)
    if (inFlight !== undefined || this.unsaved.has(id) || (change.exists && change.value === undefined)) {
      // our own write of this key is in flight (or the value did not travel): the store says what won
      void (inFlight ?? Promise.resolve()).catch(() => {}).then(() => this.refetch(shared, id, change.seq))
      return
    }
    if (change.exists) this.storeSeq.set(id, change.seq)
    else this.storeSeq.delete(id)
    this.remoteChange(id, change.exists ? (change.value as T) : undefined)
    this.options.onChange?.()
  }

  private async refetch(shared: SharedStore, id: string, seq: number): Promise<void> {
    if (this.chains.has(id) || this.unsaved.has(id)) return // a later write of ours decides; its own change follows
    let found: Awaited<ReturnType<SharedStore['getVersioned']>>
    try {
      found = await shared.getVersioned<T>(`${this.kind}:${id}`)
    } catch (err) {
      this.options.log?.warn({ err, kind: this.kind }, 'a change from another instance could not be read; the next change or reconnect reloads it')
      return
    }
    const newest = Math.max(seq, found?.seq ?? 0)
    if ((this.storeSeq.get(id) ?? 0) >= newest || this.chains.has(id)) return
    this.storeSeq.set(id, newest)
    this.remoteChange(id, found?.value as T | undefined)
    this.options.onChange?.()
  }

  /**
   * After the feed reconnects: changes may have been missed, so the store's whole kind is
   * read again. One reload at a time: a call while one runs gets that one's result.
   * Resolves false when the store could not be read (store/health.ts tries again).
   */
  resync(): Promise<boolean> {
    const shared = this.shared
    if (shared === null) return Promise.resolve(true)
    if (this.reloading !== null) return this.reloading
    const run = this.reload(shared).finally(() => {
      this.reloading = null
    })
    this.reloading = run
    return run
  }

  private reloading: Promise<boolean> | null = null
  /** while a reload reads the store: the ids memory learnt something of meanwhile */
  private learning: Set<string> | null = null

  private async reload(shared: SharedStore): Promise<boolean> {
    if (this.lazy) {
      // changes may have been missed: nothing held is trusted; each record is read again at its next use
      for (const id of [...this.records.keys()]) {
        if (this.chains.has(id) || this.unsaved.has(id)) continue
        this.records.delete(id)
        this.storeSeq.delete(id)
      }
      for (const reading of this.fetching.values()) reading.changed = true
      this.options.onChange?.()
      return true
    }
    let rows: Array<[string, { value: T; seq: number }]>
    // what memory learns while the read runs (a change heard, a record fetched, a write of ours
    // stored) is newer than the read may be: a record the read lacks but learnt meanwhile stays
    const learnt = new Set<string>()
    this.learning = learnt
    try {
      rows = await shared.entriesVersioned<T>(this.kind)
    } catch (err) {
      this.options.log?.warn({ err, kind: this.kind }, 'reloading after the feed reconnected failed; tried again while the feed is up')
      return false
    } finally {
      this.learning = null
    }
    const busy = (id: string) => this.chains.has(id) || this.unsaved.has(id)
    const present = new Set<string>()
    for (const [key, { value, seq }] of rows) {
      const id = key.slice(this.kind.length + 1)
      present.add(id)
      // what memory learnt meanwhile is newer than the read (a deletion heard leaves no mark to compare)
      if (busy(id) || learnt.has(id) || (this.storeSeq.get(id) ?? 0) >= seq) continue
      this.storeSeq.set(id, seq)
      this.remoteChange(id, value)
    }
    for (const id of [...this.records.keys()]) {
      if (!present.has(id) && !busy(id) && !learnt.has(id)) {
        this.storeSeq.delete(id)
        this.remoteChange(id, undefined)
      }
    }
    this.options.onChange?.()
    return true
  }

  get(id: string): T | undefined {
    const record = this.records.get(id)
    if (record !== undefined && this.lazy) {
      // most recently used last: eviction takes from the front
      this.records.delete(id)
      this.records.set(id, record)
    }
    return record
  }

  private get lazy(): boolean {
    return this.options.lazy !== undefined
  }

  /** Lazy kinds: drops the least recently used records beyond the bound (never one with a write pending). */
  private evict(): void {
    const max = this.options.lazy?.max
    if (max === undefined || this.records.size <= max) return
    let excess = this.records.size - max
    for (const id of this.records.keys()) {
      if (excess <= 0) break
      if (this.chains.has(id) || this.unsaved.has(id)) continue
      this.records.delete(id)
      this.storeSeq.delete(id)
      excess--
    }
  }

  /**
   * The record, read from the shared store when this replica does not hold it yet:
   * another instance wrote it and the feed has not delivered the change here (a
   * session made on A, used on B a millisecond later). Several instances only;
   * otherwise memory already holds everything. A newer change heard meanwhile wins.
   * Rejects with 503 when the store cannot be read.
   */
  async fetch(id: string): Promise<T | undefined> {
    if (this.lazy) return this.get(id) ?? this.fetchLazy(id)
    const held = this.records.get(id)
    const shared = this.multiInstance
    if (held !== undefined || shared === null) return held
    let found: Awaited<ReturnType<SharedStore['getVersioned']>>
    try {
      found = await shared.getVersioned<T>(`${this.kind}:${id}`)
    } catch (err) {
      throw storeUnavailable(this.kind, err)
    }
    if (found === undefined || this.records.has(id) || this.chains.has(id) || (this.storeSeq.get(id) ?? 0) >= found.seq) return this.records.get(id)
    this.storeSeq.set(id, found.seq)
    this.remoteChange(id, found.value as T)
    return this.records.get(id)
  }

  /**
   * Lazy kinds: the record as the store holds it, then held. One read per key at a time; a
   * change heard while it runs (the feed's value may be newer than what the read returns)
   * reads again, so what is held is never older than the newest change heard.
   */
  private fetchLazy(id: string): Promise<T | undefined> {
    const running = this.fetching.get(id)
    if (running !== undefined) return running.promise
    const entry: { promise: Promise<T | undefined>; changed: boolean } = { promise: Promise.resolve(undefined), changed: false }
    entry.promise = (async () => {
      try {
        for (;;) {
          entry.changed = false
          let found: { value: T; seq: number } | undefined
          try {
            const shared = this.shared
            if (shared !== null) found = await shared.getVersioned<T>(`${this.kind}:${id}`)
            else {
              const value = await this.kv.get<T>(`${this.kind}:${id}`)
              found = value === undefined ? undefined : { value, seq: 0 }
            }
          } catch (err) {
            throw storeUnavailable(this.kind, err)
          }
          // a write of ours began meanwhile: it decides what memory shows
          if (this.records.has(id) || this.chains.has(id) || this.unsaved.has(id)) return this.records.get(id)
          if (entry.changed) continue
          if (found === undefined) return undefined
          this.records.set(id, found.value)
          if (found.seq > 0) this.storeSeq.set(id, found.seq)
          this.evict()
          return found.value
        }
      } finally {
        this.fetching.delete(id)
      }
    })()
    this.fetching.set(id, entry)
    return entry.promise
  }

  /** `observer` hears every change another instance made, once memory shows it (indexes follow it). */
  observeRemote(observer: (id: string, before: T | undefined, after: T | undefined) => void): void {
    this.remoteObservers.push(observer)
  }

  private remoteChange(id: string, after: T | undefined): void {
    this.learning?.add(id)
    const before = this.records.get(id)
    if (after === undefined) this.records.delete(id)
    else this.records.set(id, after)
    for (const observer of this.remoteObservers) observer(id, before, after)
  }

  values(): IterableIterator<T> {
    return this.records.values()
  }

  get size(): number {
    return this.records.size
  }

  /** Changes not yet stored (narrowing writes waiting for their retry). */
  get unsavedCount(): number {
    return this.unsaved.size
  }

  /** Durable first: memory shows `record` only once it is stored. */
  put(id: string, record: T): Promise<void> {
    return this.durable(id, record)
  }

  /** Durable first: the record stays in memory until its deletion is stored. */
  remove(id: string): Promise<void> {
    return this.durable(id, undefined)
  }

  /** Memory first, retried until stored; rejects (503) when the first write fails. */
  narrow(id: string, record: T): Promise<void> {
    return this.memoryFirst(id, record)
  }

  /** Memory first, retried until stored; rejects (503) when the first write fails. */
  narrowRemove(id: string): Promise<void> {
    return this.memoryFirst(id, undefined)
  }

  /** Bookkeeping: memory at once, one write; a failure is logged, never retried or thrown. */
  touch(id: string, record: T): void {
    const version = ++this.seq
    this.show(id, version, record, false)
    const shared = this.multiInstance
    const write =
      shared === null
        ? this.enqueue(id, version, record)
        : // On a shared store a last-used time is written only over the version this instance last
          // saw: another instance's revocation meanwhile must not be undone by a stale copy. A lost
          // race drops the write (the feed brings the newer record); a record the store does not
          // have is never recreated by bookkeeping.
          this.chain(id, async () => {
            const seq = this.storeSeq.get(id)
            if (seq === undefined) return
            try {
              await shared.commit([{ key: `${this.kind}:${id}`, seq }], [{ key: `${this.kind}:${id}`, value: record }])
            } catch (err) {
              throw storeUnavailable(this.kind, err)
            }
          })
    write.catch((err: unknown) => {
      this.options.log?.warn({ err, kind: this.kind }, 'store write of a last-used time failed; the next use writes it again')
    })
  }

  /**
   * Tries every unsaved narrowing change once more (in order with the other
   * writes of its key); resolves with how many are still unsaved.
   */
  async retryUnsaved(): Promise<number> {
    const attempts = [...this.unsaved.keys()].map((id) => {
      const pending = this.unsaved.get(id)
      if (pending === undefined) return Promise.resolve()
      return this.enqueue(id, pending.version, pending.value)
    })
    const results = await Promise.allSettled(attempts)
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected')
    if (failed) this.options.log?.error({ err: failed.reason, kind: this.kind, unsaved: this.unsaved.size }, 'store still refuses writes; narrowing changes hold in memory and are retried')
    return this.unsaved.size
  }

  /** Settles when every write started so far has settled, after one more try of unsaved changes. */
  async flush(): Promise<void> {
    if (this.unsaved.size > 0) await this.retryUnsaved()
    await Promise.allSettled([...this.chains.values()])
  }

  private async durable(id: string, value: T | undefined): Promise<void> {
    const version = ++this.seq
    await this.enqueue(id, version, value)
    this.show(id, version, value)
  }

  private async memoryFirst(id: string, value: T | undefined): Promise<void> {
    const version = ++this.seq
    this.show(id, version, value)
    try {
      await this.enqueue(id, version, value)
    } catch (err) {
      if ((this.storedVersion.get(id) ?? 0) < version && (this.unsaved.get(id)?.version ?? 0) < version) {
        this.unsaved.set(id, { version, value })
        this.scheduleRetry()
      }
      throw err
    }
  }

  /** Memory shows the newest change applied so far; an older one settling late changes nothing. */
  private show(id: string, version: number, value: T | undefined, notify = true): void {
    if ((this.memoryVersion.get(id) ?? 0) > version) return
    this.learning?.add(id)
    this.memoryVersion.set(id, version)
    if (value === undefined) this.records.delete(id)
    else {
      if (this.lazy) this.records.delete(id) // newest last
      this.records.set(id, value)
      this.evict()
    }
    if (notify) this.options.onChange?.()
  }

  /** Writes `value` after every earlier write of `id`; rejects with 503 when the store refuses it. */
  private enqueue(id: string, version: number, value: T | undefined): Promise<void> {
    return this.chain(id, async () => {
      // a newer version already stored: this older one must not overwrite it
      if ((this.storedVersion.get(id) ?? 0) > version) return
      try {
        if (value === undefined) await this.kv.delete(`${this.kind}:${id}`)
        else await this.kv.set(`${this.kind}:${id}`, value)
      } catch (err) {
        throw storeUnavailable(this.kind, err)
      }
      this.stored(id, version)
    })
  }

  private stored(id: string, version: number): void {
    this.storedVersion.set(id, version)
    const pending = this.unsaved.get(id)
    if (pending !== undefined && pending.version <= version) this.unsaved.delete(id)
  }

  /** The store this collection writes to. */
  get store(): KeyValueStore {
    return this.kv
  }

  /**
   * `writes` to this collection's store (other kinds' keys too), in one transaction only if every
   * check holds where the store has `commit`; elsewhere (one process) one after the other,
   * unchecked. Whether they were written. Memory is not touched: callers show what they stored.
   */
  async writeAll(checks: Check[], writes: Write[]): Promise<boolean> {
    const shared = this.shared
    if (shared !== null) return shared.commit(checks, writes)
    for (const w of writes) await (w.value === undefined ? this.kv.delete(w.key) : this.kv.set(w.key, w.value))
    return true
  }

  /** The store under this collection when it has the atomic verbs and the feed (sqlite too). */
  get shared(): SharedStore | null {
    return isShared(this.kv) ? this.kv : null
  }

  /**
   * The store when other instances may write it too (postgres, redis): writes of a whole record
   * then go over the version this instance read. On sqlite (one process) the in-process order of
   * writes is already the store's, and narrowing writes keep their memory-first rule.
   */
  get multiInstance(): SharedStore | null {
    const shared = this.shared
    return shared !== null && shared.backend !== 'sqlite' ? shared : null
  }

  /**
   * Durable first, and conditional: stores `value` under `id` together with
   * `writes`, in one transaction, only if every check holds (store/shared-store.ts
   * `commit`); memory shows it once stored. Resolves false when a check fails
   * (nothing written). On a store without `commit` the writes run in order, unchecked.
   */
  async commit(id: string, value: T | undefined, checks: Check[], writes: Write[]): Promise<boolean> {
    const version = ++this.seq
    let ok = false
    await this.chain(id, async () => {
      try {
        ok = await this.writeAll(checks, [...writes, { key: `${this.kind}:${id}`, value }])
      } catch (err) {
        throw storeUnavailable(this.kind, err)
      }
      if (ok) this.stored(id, version)
    })
    if (ok) this.show(id, version, value)
    return ok
  }

  /** Runs `write` after every earlier write of `id`. */
  private chain(id: string, write: () => Promise<void>): Promise<void> {
    const previous = this.chains.get(id) ?? Promise.resolve()
    const next = previous.then(write, write)
    this.chains.set(id, next)
    void next
      .finally(() => {
        if (this.chains.get(id) !== next) return
        this.chains.delete(id)
        // nothing in flight for the key: its version marks have done their job
        if (!this.unsaved.has(id)) {
          this.storedVersion.delete(id)
          this.memoryVersion.delete(id)
        }
      })
      .catch(() => {}) // the rejection is the caller's, through `next`
    return next
  }

  private scheduleRetry(): void {
    if (this.retryTimer !== undefined) return
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined
      void this.retryUnsaved().then((left) => {
        const max = this.options.retryMaxMs ?? RETRY_MAX_MS
        this.retryDelayMs = left > 0 ? Math.min(this.retryDelayMs * 2, max) : (this.options.retryBaseMs ?? RETRY_BASE_MS)
        if (left > 0) this.scheduleRetry()
      })
    }, this.retryDelayMs)
    this.retryTimer.unref()
  }
}
