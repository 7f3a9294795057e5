/**
 * The store copy's parts that the child-process suite (test/integration/store-copy.test.ts)
 * cannot reach: what a printed URL keeps (never a credential, wherever the URL carries one), and
 * a batch refused by a loaded or briefly lost target is written again, while any other error stops
 * the copy. Real sqlite stores on both sides.
 */
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { copyStore, redactUrl } from '../../sidecar/src/store/copy.js'
import { FieldCipher } from '../../sidecar/src/store/field-crypto.js'
import { nameKeyWith } from '../../sidecar/src/identity/users.js'
import { openSqliteSharedStore } from '../../sidecar/src/store/sqlite-store.js'
import { AuthsvcError } from '../../sidecar/src/kernel/errors.js'
import type { SharedStore } from '../../sidecar/src/store/shared-store.js'

describe('a target URL as the copy prints it', () => {
  const rows: Array<[string, string]> = [
    ['postgres://authsvc:s3cret@db.lan:5432/authsvc', 'postgres://db.lan:5432/authsvc'],
    ['postgresql://s3cret@db.lan/authsvc', 'postgresql://db.lan/authsvc'],
    ['postgres://db.lan/authsvc?password=s3cret&sslmode=require', 'postgres://db.lan/authsvc'],
    ['postgres://db.lan/authsvc?sslpassword=s3cret', 'postgres://db.lan/authsvc'],
    ['postgres://u:s3cret@db.lan/authsvc#s3cret', 'postgres://db.lan/authsvc'],
    ['redis://:s3cret@cache.lan:6379/0', 'redis://cache.lan:6379/0'],
    ['rediss://default:s3cret@cache.lan:6380/2?prefix=team:', 'rediss://cache.lan:6380/2?prefix=team%3A'],
    ['redis://cache.lan/0?prefix=a&password=s3cret', 'redis://cache.lan/0?prefix=a'],
    ['redis://u:s3cr%40t@cache.lan/0', 'redis://cache.lan/0'],
    ['postgres://u:s3cret@[::1/db', '(unparseable URL)'],
  ]
  for (const [url, printed] of rows) {
    it(`${printed}`, () => {
      const shown = redactUrl(url)
      assert.equal(shown, printed)
      assert.ok(!shown.includes('s3cr'), shown)
    })
  }
})

describe('copying through a target that refuses for a moment', () => {
  const options = { force: false, storeCheck: 'check-value', cipher: new FieldCipher(Buffer.alloc(32, 1)), nameKey: nameKeyWith(Buffer.alloc(32, 2)), encryptionAll: false }

  /** the target, its commit failing `failures` times with `error` before it works again */
  const flaky = (store: SharedStore, failures: number, error: () => Error) => {
    let left = failures
    let calls = 0
    const wrapped: SharedStore = Object.assign(Object.create(null), store, {
      backend: store.backend,
      origin: store.origin,
      connected: true,
      audit: store.audit,
      async commit(...args: Parameters<SharedStore['commit']>) {
        calls++
        if (left > 0) {
          left--
          throw error()
        }
        return store.commit(...args)
      },
    }) as SharedStore
    return { wrapped, calls: () => calls }
  }

  const withStores = async (work: (source: SharedStore, target: SharedStore) => Promise<void>) => {
    const dir = mkdtempSync(join(tmpdir(), 'as-copy-unit-'))
    const source = await openSqliteSharedStore(join(dir, 'source.sqlite'))
    const target = await openSqliteSharedStore(join(dir, 'target.sqlite'))
    try {
      for (let i = 0; i < 450; i++) await source.set(`session:s${i}`, { i })
      await source.set('user:u1', { user_id: 'u1', username: 'alice', role: 'admin', disabled: false })
      await work(source, target)
    } finally {
      await source.close()
      await target.close()
      rmSync(dir, { recursive: true, force: true })
    }
  }

  it('a batch refused with STORE_UNAVAILABLE is written again; every record arrives once', async () => {
    await withStores(async (source, target) => {
      const { wrapped, calls } = flaky(target, 2, () => new AuthsvcError('STORE_UNAVAILABLE'))
      const summary = await copyStore(source, wrapped, options)
      assert.equal(summary.copied.get('session'), 450)
      assert.equal(calls(), 2 + 4, 'two refusals, then 3 session batches and 1 user batch')
      assert.equal((await target.entries('session')).length, 450)
      assert.deepEqual(await target.get('user:u1'), { user_id: 'u1', username: 'alice', role: 'admin', disabled: false })
    })
  })

  it('three refusals of one batch, or any other error, stop the copy with that error', async () => {
    await withStores(async (source, target) => {
      const { wrapped } = flaky(target, 3, () => new AuthsvcError('STORE_UNAVAILABLE'))
      await assert.rejects(copyStore(source, wrapped, options), (err: unknown) => err instanceof AuthsvcError && err.code === 'STORE_UNAVAILABLE')
    })
    await withStores(async (source, target) => {
      const { wrapped, calls } = flaky(target, 1, () => new Error('SQLITE_FULL: database or disk is full'))
      await assert.rejects(copyStore(source, wrapped, options), /SQLITE_FULL/)
      assert.equal(calls(), 1, 'not tried again')
    })
  })
})
