/** The embedded backend keeps the SharedStore contract (issue 28), and takes over a file written through keyv. */
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { conformance } from '../helpers/store-conformance.js'
import { openSqliteSharedStore } from '../../sidecar/src/store/sqlite-store.js'
import { openSqliteStore } from '../../sidecar/src/store/kv.js'

const dir = mkdtempSync(join(tmpdir(), 'as-sqlite-store-'))

conformance({
  name: 'sqlite',
  shared: false,
  open: () => openSqliteSharedStore(join(dir, 'authsvc.sqlite')),
  teardown: async () => rmSync(dir, { recursive: true, force: true }),
})

describe('sqlite: a file written by the keyv store of earlier versions', () => {
  it('is taken over once: every record, same values, numbered; keyv keeps none', async () => {
    const d = mkdtempSync(join(tmpdir(), 'as-sqlite-migrate-'))
    try {
      const path = join(d, 'authsvc.sqlite')
      const old = await openSqliteStore(path)
      await old.set('user:u1', { username: 'alice', n: 1 })
      await old.set('session:s1', { user_id: 'u1' })
      await old.set('setting:ip_lists', { whitelist: [], blacklist: [] })
      await old.close()
      const store = await openSqliteSharedStore(path)
      assert.deepEqual(await store.get('user:u1'), { username: 'alice', n: 1 })
      assert.deepEqual((await store.entries('session')).map(([k]) => k), ['session:s1'])
      const seqs = [(await store.getVersioned('user:u1'))!.seq, (await store.getVersioned('session:s1'))!.seq]
      assert.ok(seqs.every((s) => s > 0))
      await store.set('user:u2', { username: 'bob' })
      assert.ok((await store.getVersioned('user:u2'))!.seq > Math.max(...seqs), 'new writes number after the copied ones')
      await store.close()
      // opened again: nothing is copied twice, nothing lost
      const again = await openSqliteSharedStore(path)
      assert.equal((await again.entries('user')).length, 2)
      await again.close()
      const keyvAfter = await openSqliteStore(path)
      assert.equal(await keyvAfter.get('user:u1'), undefined)
      await keyvAfter.close()
      assert.equal(statSync(path).mode & 0o777, 0o600)
    } finally {
      rmSync(d, { recursive: true, force: true })
    }
  })
})

describe('sqlite: a kind is read by a range of keys, in pages', () => {
  it('every record of a kind larger than a page, once each; neighbouring kinds (user_x, users, USER) are not in it', async () => {
    const d = mkdtempSync(join(tmpdir(), 'as-sqlite-pages-'))
    try {
      const store = await openSqliteSharedStore(join(d, 'authsvc.sqlite'))
      const writes = Array.from({ length: 4501 }, (_, i) => ({ key: `user:${String(i).padStart(5, '0')}`, value: { i } }))
      await store.commit([], [...writes, { key: 'user_x:a', value: 1 }, { key: 'users:a', value: 2 }, { key: 'USER:a', value: 3 }, { key: 'use:a', value: 4 }])
      const rows = await store.entriesVersioned<{ i: number }>('user')
      assert.equal(rows.length, 4501)
      assert.equal(new Set(rows.map(([k]) => k)).size, 4501)
      assert.deepEqual(rows.map(([, v]) => v.value.i).sort((a, b) => a - b), Array.from({ length: 4501 }, (_, i) => i))
      assert.deepEqual((await store.entries('user_x')).map(([k]) => k), ['user_x:a'])
      await store.close()
    } finally {
      rmSync(d, { recursive: true, force: true })
    }
  })
})
