/**
 * `encryption_level: all` (SPEC §10): every value is sealed with AES-256-GCM
 * before it reaches the store, bound to its key, so the sqlite file holds no
 * readable record and a value copied under another key does not open.
 */
import { openRecord, sealRecord, type FieldCipher } from './field-crypto.js'
import type { KeyValueStore } from './kv.js'

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
