/**
 * A record kind held in memory and written through to the store.
 *
 * Guarantees: reads never touch the store (the decision path does no I/O);
 * a write updates memory at once (so revocation is immediate) and is
 * persisted in order per key (a later write of the same record can never be
 * overtaken by an earlier one); the returned promise settles once it is durable.
 */
import type { KeyValueStore } from './kv.js'

export class Collection<T> {
  private readonly records = new Map<string, T>()
  private readonly chains = new Map<string, Promise<void>>()

  private constructor(
    private readonly kv: KeyValueStore,
    private readonly kind: string,
  ) {}

  static async load<T>(kv: KeyValueStore, kind: string): Promise<Collection<T>> {
    const collection = new Collection<T>(kv, kind)
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

  put(id: string, record: T): Promise<void> {
    this.records.set(id, record)
    return this.persist(id, () => this.kv.set(`${this.kind}:${id}`, record))
  }

  remove(id: string): Promise<void> {
    this.records.delete(id)
    return this.persist(id, async () => {
      await this.kv.delete(`${this.kind}:${id}`)
    })
  }

  private persist(id: string, write: () => Promise<void>): Promise<void> {
    const previous = this.chains.get(id) ?? Promise.resolve()
    const next = previous.then(write, write)
    this.chains.set(id, next)
    void next.finally(() => {
      if (this.chains.get(id) === next) this.chains.delete(id)
    }).catch(() => {})
    return next
  }

  /** Settles when every write started so far is durable. */
  async flush(): Promise<void> {
    await Promise.allSettled([...this.chains.values()])
  }
}
