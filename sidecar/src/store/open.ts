/**
 * Opens the configured store (SPEC §10, issue 28): sqlite in the data dir by
 * default, or the PostgreSQL or Redis server several instances share.
 *
 * The master secret never goes to the store. The first instance writes a check
 * value derived from it (HKDF, so the value tells nothing of the secret); an
 * instance whose secret derives another value refuses to start, since every
 * session, token and sealed field it read would be someone else's.
 */
import type { FastifyBaseLogger } from 'fastify'
import type { Config } from '../kernel/config/schema.js'
import { openSqliteSharedStore } from './sqlite-store.js'
import type { SharedStore } from './shared-store.js'
import { sqlitePath } from './kv.js'

export const SECRET_CHECK_KEY = 'meta:secret_check'

export class SecretMismatchError extends Error {}
/** A store setting that cannot work (a backend without its URL): one line, no start. */
export class StoreConfigError extends Error {}

export async function openSharedStore(config: Config, dataDir: string, log: FastifyBaseLogger, clock: () => number): Promise<SharedStore> {
  switch (config.store.backend) {
    case 'sqlite':
      return openSqliteSharedStore(sqlitePath(config, dataDir), clock)
    // imported only when configured: the clients cost most of a second to load
    case 'postgres': {
      if (config.store.postgres_url === '') throw new StoreConfigError('store.backend is postgres: set store.postgres_url (postgres://user:password@host:5432/db)')
      const { openPostgresSharedStore } = await import('./postgres-store.js')
      return openPostgresSharedStore(config.store.postgres_url, { log })
    }
    case 'redis': {
      if (config.store.redis_url === '') throw new StoreConfigError('store.backend is redis: set store.redis_url (redis://:password@host:6379/0)')
      const { openRedisSharedStore } = await import('./redis-store.js')
      return openRedisSharedStore(config.store.redis_url, { log })
    }
  }
}

/** Writes the check value if the store has none; throws SecretMismatchError if it holds another. */
export async function checkSecret(store: SharedStore, check: string, backend: string): Promise<void> {
  for (let attempt = 0; attempt < 3; attempt++) {
    const found = await store.getVersioned<{ value: string }>(SECRET_CHECK_KEY)
    if (found !== undefined) {
      if (found.value.value === check) return
      throw new SecretMismatchError(
        `AUTHSVC_SECRET differs from the one this ${backend} store was set up with: start every instance that shares the store with the same AUTHSVC_SECRET`,
      )
    }
    if (await store.commit([{ key: SECRET_CHECK_KEY, seq: null }], [{ key: SECRET_CHECK_KEY, value: { value: check } }])) return
  }
  throw new Error('could not write the store’s secret check value')
}
