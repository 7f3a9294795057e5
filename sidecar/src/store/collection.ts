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
 * overtaken by an earlier one, in the store or in memory). A failed `put`,
 * `remove`, `narrow` or `narrowRemove` rejects with 503 `STORE_UNAVAILABLE`
 * carrying the store's error as its cause; the caller answers with it.
 */
import type { FastifyBaseLogger } from 'fastify'
import { AuthsvcError } from '../kernel/errors.js'
import type { KeyValueStore } from './kv.js'

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
  private seq = 0
  private retryTimer: NodeJS.Timeout | undefined
  private retryDelayMs: number

  private constructor(
    private readonly kv: KeyValueStore,
    private readonly kind: string,
    private readonly options: CollectionOptions,
  ) {
    this.retryDelayMs = options.retryBaseMs ?? RETRY_BASE_MS
  }

  static async load<T>(kv: KeyValueStore, kind: string, options: CollectionOptions = {}): Promise<Collection<T>> {
    const collection = new Collection<T>(kv, kind, options)
    for (const [key, value] of await kv.entries<T>(kind)) {
      collection.records.set(key.slice(kind.length + 1), value)
    }
    return collection
  }

  get(id: string): T | undefined {
    return this.records.get(id)
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
    this.enqueue(id, version, record).catch((err: unknown) => {
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
    this.memoryVersion.set(id, version)
    if (value === undefined) this.records.delete(id)
    else this.records.set(id, value)
    if (notify) this.options.onChange?.()
  }

  /** Writes `value` after every earlier write of `id`; rejects with 503 when the store refuses it. */
  private enqueue(id: string, version: number, value: T | undefined): Promise<void> {
    const write = async (): Promise<void> => {
      // a newer version already stored: this older one must not overwrite it
      if ((this.storedVersion.get(id) ?? 0) > version) return
      try {
        if (value === undefined) await this.kv.delete(`${this.kind}:${id}`)
        else await this.kv.set(`${this.kind}:${id}`, value)
      } catch (err) {
        throw storeUnavailable(this.kind, err)
      }
      this.storedVersion.set(id, version)
      const pending = this.unsaved.get(id)
      if (pending !== undefined && pending.version <= version) this.unsaved.delete(id)
    }
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
