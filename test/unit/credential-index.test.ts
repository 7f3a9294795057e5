/**
 * Sessions and API tokens at scale (issue 28): their records are held lazily (a bounded
 * number, read from the store on first use) and a user's records are found through an index
 * record of their own (identity/owner-index.ts). Against the real sqlite file, and a store
 * whose reads and feed the test drives where an interleaving must be chosen.
 */
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Collection } from '../../sidecar/src/store/collection.js'
import { openSqliteSharedStore } from '../../sidecar/src/store/sqlite-store.js'
import type { Change, SharedStore } from '../../sidecar/src/store/shared-store.js'
import { OwnerIndex, buildIndexesOnce } from '../../sidecar/src/identity/owner-index.js'
import { SessionService, type SessionRecord } from '../../sidecar/src/identity/sessions.js'
import { ApiTokenService, type ApiTokenRecord } from '../../sidecar/src/identity/api-tokens.js'

type Rec = { v: number; revoked?: boolean }

async function withStore(run: (store: SharedStore, path: string) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'as-credindex-'))
  const path = join(dir, 'authsvc.sqlite')
  const store = await openSqliteSharedStore(path)
  try {
    await run(store, path)
  } finally {
    await store.close()
    rmSync(dir, { recursive: true, force: true })
  }
}

describe('Collection, lazy: a bounded number of records held, the rest read on use', () => {
  it('holds nothing at start; a fetch reads the store and holds the record; get then answers without the store', async () => {
    await withStore(async (store) => {
      for (let i = 0; i < 5; i++) await store.set(`session:s${i}`, { v: i })
      const c = await Collection.load<Rec>(store, 'session', { lazy: { max: 10 } })
      assert.equal(c.size, 0)
      assert.equal(c.get('s3'), undefined)
      assert.deepEqual(await c.fetch('s3'), { v: 3 })
      assert.deepEqual(c.get('s3'), { v: 3 })
      assert.equal(await c.fetch('missing'), undefined)
      assert.equal(c.size, 1)
    })
  })

  it('keeps at most `max`, dropping the least recently used first', async () => {
    await withStore(async (store) => {
      for (let i = 0; i < 6; i++) await store.set(`session:s${i}`, { v: i })
      const c = await Collection.load<Rec>(store, 'session', { lazy: { max: 3 } })
      await c.fetch('s0')
      await c.fetch('s1')
      await c.fetch('s2')
      c.get('s0') // used again: s1 is now the least recently used
      await c.fetch('s3')
      assert.equal(c.size, 3)
      assert.deepEqual([c.get('s0')?.v, c.get('s1')?.v, c.get('s2')?.v, c.get('s3')?.v], [0, undefined, 2, 3])
      // a dropped record is read again on its next use, unchanged
      assert.deepEqual(await c.fetch('s1'), { v: 1 })
    })
  })

  it('a narrowing write that the store refused is never dropped from memory (the revocation holds)', async () => {
    await withStore(async (store) => {
      for (let i = 0; i < 4; i++) await store.set(`session:s${i}`, { v: i })
      // a store that refuses every write from now on, reads still work
      const refusing: SharedStore = { ...store, commit: async () => { throw new Error('SQLITE_FULL') }, set: async () => { throw new Error('SQLITE_FULL') } }
      const c = await Collection.load<Rec>(refusing, 'session', { lazy: { max: 2 }, retryBaseMs: 60_000 })
      await c.fetch('s0')
      await assert.rejects(c.narrow('s0', { v: 0, revoked: true }), /refused a write/)
      await c.fetch('s1')
      await c.fetch('s2')
      await c.fetch('s3')
      assert.deepEqual(c.get('s0'), { v: 0, revoked: true }, 'the unsaved revocation is still what memory shows')
      assert.equal(c.unsavedCount, 1)
    })
  })

  it('a change heard while a read is in flight reads again: what is held is never older than the feed', async () => {
    let release: () => void = () => {}
    const values = new Map<string, { value: Rec; seq: number }>([['session:s1', { value: { v: 1 }, seq: 1 }]])
    const listeners: Array<(c: Change) => void> = []
    let reads = 0
    const fake = {
      backend: 'postgres', origin: 'here', connected: true,
      subscribe: (l: (c: Change) => void) => { listeners.push(l); return () => {} },
      onConnection: () => () => {},
      entriesVersioned: async () => [],
      getVersioned: async (key: string) => {
        reads++
        const snapshot = values.get(key)
        if (reads === 1) await new Promise<void>((r) => (release = r))
        return snapshot
      },
    } as unknown as SharedStore
    const c = await Collection.load<Rec>(fake, 'session', { lazy: { max: 10 } })
    const reading = c.fetch('s1')
    await new Promise<void>((r) => setImmediate(r))
    // another instance revokes it while the first read is on its way back with the old value
    values.set('session:s1', { value: { v: 1, revoked: true }, seq: 2 })
    for (const l of listeners) l({ key: 'session:s1', seq: 2, exists: true, value: { v: 1, revoked: true }, origin: 'there' })
    release()
    assert.deepEqual(await reading, { v: 1, revoked: true })
    assert.equal(reads, 2)
  })

  it('after the feed reconnects nothing held is trusted: records are read again at their next use', async () => {
    await withStore(async (store) => {
      await store.set('session:s1', { v: 1 })
      const c = await Collection.load<Rec>(store, 'session', { lazy: { max: 10 } })
      await c.fetch('s1')
      assert.equal(await c.resync(), true)
      assert.equal(c.get('s1'), undefined)
      assert.deepEqual(await c.fetch('s1'), { v: 1 })
    })
  })
})

describe('OwnerIndex: a user\'s records found without holding them', () => {
  const clockAt = (t: { now: number }) => () => t.now

  it('20 parallel logins of one user: 20 sessions, all in the index (one write at a time, over the version read)', async () => {
    await withStore(async (store) => {
      const t = { now: Date.parse('2026-11-26T12:00:00Z') }
      const records = await Collection.load<SessionRecord>(store, 'session', { lazy: { max: 5 } })
      const sessions = new SessionService(records, new TextEncoder().encode('k'.repeat(32)), clockAt(t), { lifetimeHours: 1, idleMinutes: 0 })
      await sessions.open()
      await Promise.all(Array.from({ length: 20 }, () => sessions.issue({ user_id: 'u1', username: 'alice' }, false)))
      const index = await store.get<{ entries: Array<[string, number]> }>('session_index:u1')
      assert.equal(index?.entries.length, 20)
      assert.equal((await sessions.activeForUser('u1')).length, 20, 'listed through the index though only 5 are held')
      assert.equal(await sessions.revokeAllForUser('u1'), 20)
      assert.equal((await sessions.activeForUser('u1')).length, 0)
      for (const [jti] of index!.entries) assert.equal((await store.get<SessionRecord>(`session:${jti}`))?.revoked, true, 'every revocation stored')
    })
  })

  it('expired entries leave the index at its next write, and their records are deleted with it', async () => {
    await withStore(async (store) => {
      const t = { now: Date.parse('2026-11-26T12:00:00Z') }
      const records = await Collection.load<SessionRecord>(store, 'session', { lazy: { max: 100 } })
      const sessions = new SessionService(records, new TextEncoder().encode('k'.repeat(32)), clockAt(t), { lifetimeHours: 1, idleMinutes: 0 })
      const old = await sessions.issue({ user_id: 'u1', username: 'alice' }, false)
      t.now += 2 * 3600_000
      const fresh = await sessions.issue({ user_id: 'u1', username: 'alice' }, false)
      assert.equal(await store.get(`session:${old.record.jti}`), undefined, 'the expired record is gone from the store')
      assert.deepEqual((await store.get<{ entries: Array<[string, number]> }>('session_index:u1'))?.entries.map(([j]) => j), [fresh.record.jti])
    })
  })

  it('the sweep drops a user\'s expired records though the user never logs in again', async () => {
    await withStore(async (store) => {
      const t = { now: Date.parse('2026-11-26T12:00:00Z') }
      const records = await Collection.load<ApiTokenRecord>(store, 'token', { lazy: { max: 100 } })
      const tokens = new ApiTokenService(records, clockAt(t))
      const a = await tokens.issue('u1', 'one', 1)
      const b = await tokens.issue('u1', 'two', 48)
      await tokens.revokeByPrefix('u1', a.record.hash.slice(0, 12))
      assert.equal(await tokens.prune(['u1']), 0, 'nothing expired yet: the tombstone stays')
      t.now += 2 * 3600_000
      assert.equal(await tokens.prune(['u1', 'nobody']), 1)
      assert.equal(await store.get(`token:${a.record.hash}`), undefined)
      assert.ok(await store.get(`token:${b.record.hash}`))
      assert.deepEqual((await tokens.activeForUser('u1')).map((r) => r.label), ['two'])
    })
  })

  it('a store written before the indexes: they are built once at start, from every record', async () => {
    await withStore(async (store) => {
      const exp = new Date(Date.now() + 3600_000).toISOString()
      for (let i = 0; i < 30; i++) {
        await store.set(`session:s${i}`, { jti: `s${i}`, user_id: `u${i % 3}`, created_at_iso: exp, last_used_at_iso: exp, exp_at_iso: exp, remember_me: false, revoked: false })
      }
      const records = await Collection.load<SessionRecord>(store, 'session', { lazy: { max: 5 } })
      const index = new OwnerIndex('session_index', records, 'session', Date.now)
      const entryOf = (s: SessionRecord) => ({ userId: s.user_id, entry: [s.jti, Date.parse(s.exp_at_iso)] as [string, number] })
      assert.equal(await buildIndexesOnce(store, index, 'session', entryOf), 3)
      assert.deepEqual((await index.ids('u1')).map(([j]) => j).sort(), ['s1', 's10', 's13', 's16', 's19', 's22', 's25', 's28', 's4', 's7'])
      assert.equal(await buildIndexesOnce(store, index, 'session', entryOf), 0, 'the marker says it is done')
    })
  })
})
