/**
 * A replica that has not heard another instance's write (feed delay, a feed connection down while
 * commands work) never undoes it (issue 28; review finding): two store clients on one sqlite file
 * whose feeds never cross stand for two instances of a shared backend, so B is as stale as it
 * can be.
 */
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Collection } from '../../sidecar/src/store/collection.js'
import { openSqliteSharedStore } from '../../sidecar/src/store/sqlite-store.js'
import type { SharedStore } from '../../sidecar/src/store/shared-store.js'
import { UserRepository, type UserRecord } from '../../sidecar/src/identity/users.js'

const dir = mkdtempSync(join(tmpdir(), 'as-stale-'))
after(() => rmSync(dir, { recursive: true, force: true }))

/** a client of the file that takes the several-instances paths (it says it is a shared server's) */
async function instance(name: string): Promise<SharedStore> {
  const store = await openSqliteSharedStore(join(dir, `${name}.sqlite`))
  return Object.assign(Object.create(null), store, { backend: 'redis' as const, origin: store.origin, connected: true }) as SharedStore
}

describe('a stale replica never undoes another instance’s write', () => {
  it('a last-used time from B does not bring back a session A revoked', async () => {
    const a = await instance('sessions')
    const b = await instance('sessions')
    await a.set('session:s1', { jti: 's1', revoked: false, last_used: 1 })
    const onA = await Collection.load<{ jti: string; revoked: boolean; last_used: number }>(a, 'session')
    const onB = await Collection.load<{ jti: string; revoked: boolean; last_used: number }>(b, 'session')
    await onA.narrow('s1', { jti: 's1', revoked: true, last_used: 1 })
    onB.touch('s1', { jti: 's1', revoked: false, last_used: 2 })
    await onB.flush()
    assert.equal((await a.get<{ revoked: boolean }>('session:s1'))?.revoked, true)
    await a.close()
    await b.close()
  })

  it('a password change on B does not re-enable a user A disabled, nor make a demoted admin an admin again', async () => {
    const a = await instance('users')
    const b = await instance('users')
    const base: UserRecord = { user_id: 'u1', username: 'alice', role: 'admin', password_hash: 'h0', mfa_enabled: false, sfw_check: true, created_at_iso: '2026-01-01T00:00:00Z', disabled: false }
    const root: UserRecord = { ...base, user_id: 'u0', username: 'root' }
    const usersA = new UserRepository(await Collection.load<UserRecord>(a, 'user'))
    await usersA.create(root, new Date())
    const created = await usersA.create({ username: 'alice', role: 'admin', password_hash: 'h0' }, new Date())
    const usersB = new UserRepository(await Collection.load<UserRecord>(b, 'user'))
    await usersA.update(created.user_id, { disabled: true, role: 'user' })
    const after = await usersB.update(created.user_id, { password_hash: 'h1' })
    assert.deepEqual([after.disabled, after.role, after.password_hash], [true, 'user', 'h1'])
    const stored = await a.get<UserRecord>(`user:${created.user_id}`)
    assert.deepEqual([stored?.disabled, stored?.role], [true, 'user'])
    assert.deepEqual((await a.get<{ ids: string[] }>('meta:admins'))?.ids.length, 1)
    await a.close()
    await b.close()
  })
})
