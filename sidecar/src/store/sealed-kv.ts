/**
 * `encryption_level: all` (SPEC §10): every value is sealed with AES-256-GCM
 * before it reaches the store, bound to its key, so the store holds no
 * readable record and a value copied under another key does not open. The
 * feed's values are sealed too (they travel through the shared server) and
 * are opened here, for the replicas.
 */
import { openRecord, sealRecord, type FieldCipher } from './field-crypto.js'
import type { KeyValueStore } from './kv.js'
import type { Change, SharedStore } from './shared-store.js'

export function sealedStore(inner: KeyValueStore, cipher: FieldCipher): KeyValueStore {
  return {
    async get<T>(key: string) {
      const sealed = await inner.get<string>(key)
      return sealed === undefined ? undefined : openRecord<T>(cipher, sealed, key)
    },
    async set(key, value) {
      await inner.set(key, sealRecord(cipher, value, key))
    },
    delete: (key) => inner.delete(key),
    async entries<T>(kind: string) {
      const rows = await inner.entries<string>(kind)
      return rows.map(([key, sealed]): [string, T] => [key, openRecord<T>(cipher, sealed, key)])
    },
    close: () => inner.close(),
  }
}

export function sealedSharedStore(inner: SharedStore, cipher: FieldCipher): SharedStore {
  const seal = (key: string, value: unknown) => (value === undefined ? undefined : sealRecord(cipher, value, key))
  const open = <T>(key: string, sealed: unknown): T => openRecord<T>(cipher, sealed as string, key)
  const outer: SharedStore = {
    ...sealedStore(inner, cipher),
    backend: inner.backend,
    origin: inner.origin,
    get connected() {
      return inner.connected
    },
    onConnection: (listener) => inner.onConnection(listener),
    // audit rows are sealed by the audit log itself (audit-log.ts), kinds are key prefixes: both as they are
    audit: inner.audit,
    kinds: () => inner.kinds(),
    async getVersioned<T>(key: string) {
      const found = await inner.getVersioned<string>(key)
      return found === undefined ? undefined : { seq: found.seq, value: open<T>(key, found.value) }
    },
    async entriesVersioned<T>(kind: string) {
      return (await inner.entriesVersioned<string>(kind)).map(([key, v]): [string, { seq: number; value: T }] => [key, { seq: v.seq, value: open<T>(key, v.value) }])
    },
    async entriesPage<T>(kind: string, cursor: string | null, limit: number) {
      const page = await inner.entriesPage<string>(kind, cursor, limit)
      return { next: page.next, rows: page.rows.map(([key, v]): [string, { seq: number; value: T }] => [key, { seq: v.seq, value: open<T>(key, v.value) }]) }
    },
    commit: (checks, writes) => inner.commit(checks, writes.map((w) => ({ key: w.key, value: seal(w.key, w.value) }))),
    increment: (key, ttlMs, refresh) => inner.increment(key, ttlMs, refresh),
    readCounter: (key) => inner.readCounter(key),
    resetCounter: (key) => inner.resetCounter(key),
    claim: (key, ttlMs) => inner.claim(key, ttlMs),
    subscribe(listener) {
      return inner.subscribe((change) => {
        if (change.value === undefined) return listener(change)
        let value: unknown
        try {
          value = open(change.key, change.value)
        } catch {
          // a value that does not open travels as "fetch it": the reader's get reports the problem
          const { value: _sealed, ...rest } = change
          return listener(rest as Change)
        }
        listener({ ...change, value })
      })
    },
  }
  return outer
}
