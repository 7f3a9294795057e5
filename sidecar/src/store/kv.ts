/**
 * The key-value store under every repository: keyv over @keyv/sqlite by default.
 *
 * Guarantees: the sqlite file runs in WAL mode (a write is one atomic upsert,
 * no fsync per write, readers never see half a record); the file and its WAL
 * are created 0600; keys are `<kind>:<id>`, so one table holds every record kind.
 */
import { chmodSync, existsSync } from 'node:fs'
import { join } from 'node:path'
import Keyv from 'keyv'
import KeyvSqlite from '@keyv/sqlite'
import type { Config } from '../kernel/config/schema.js'

export interface KeyValueStore {
  get<T>(key: string): Promise<T | undefined>
  set(key: string, value: unknown): Promise<void>
  delete(key: string): Promise<boolean>
  /** every entry whose key starts with `${kind}:` */
  entries<T>(kind: string): Promise<Array<[string, T]>>
  close(): Promise<void>
  /** the sqlite file's own statements (tables beside keyv's: the audit log); absent on other stores */
  sql?(statement: string, ...params: unknown[]): Promise<unknown[]>
}

export function sqlitePath(config: Config, dataDir: string): string {
  return config.store.sqlite_path || join(dataDir, 'authsvc.sqlite')
}

export async function openSqliteStore(path: string): Promise<KeyValueStore> {
  const existed = existsSync(path)
  const adapter = new KeyvSqlite({ uri: `sqlite://${path}`, busyTimeout: 5000, iterationLimit: 1000 } as ConstructorParameters<typeof KeyvSqlite>[0])
  await adapter.query('PRAGMA journal_mode=WAL')
  await adapter.query('PRAGMA synchronous=NORMAL')
  if (!existed) chmodSync(path, 0o600)
  const keyv = new Keyv({ store: adapter, namespace: undefined })
  keyv.on('error', () => {}) // errors surface on the awaited call instead
  return {
    async get<T>(key: string) {
      return (await keyv.get(key)) as T | undefined
    },
    async set(key, value) {
      const ok = await keyv.set(key, value)
      if (ok === false) throw new Error(`store write failed for ${key.split(':')[0]}`)
    },
    async delete(key) {
      return keyv.delete(key)
    },
    async entries<T>(kind: string) {
      const pattern = `${kind.replace(/[\\%_]/g, (c) => `\\${c}`)}:%`
      const rows = (await adapter.query(`SELECT key FROM keyv WHERE key LIKE ? ESCAPE '\\'`, pattern)) as Array<{ key: string }>
      const keys = rows.map((row) => row.key)
      const values = keys.length > 0 ? ((await keyv.getMany(keys)) as Array<T | undefined>) : []
      const out: Array<[string, T]> = []
      keys.forEach((key, i) => {
        const value = values[i]
        if (value !== undefined) out.push([key, value])
      })
      return out
    },
    async close() {
      await keyv.disconnect()
    },
    async sql(statement, ...params) {
      return (await adapter.query(statement, ...params)) as unknown[]
    },
  }
}
