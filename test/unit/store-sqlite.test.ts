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
