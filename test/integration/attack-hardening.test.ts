/**
 * Attack rows of issue 9 (the holes found from outside), through the owned
 * routes with real services, the real sqlite file and an injected clock. Each
 * row is one request shape that did the wrong thing before its fix; the row's
 * name says the shape, the comment above each table names the hole.
 */
import assert from 'node:assert/strict'
import { mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { decodeJwt } from 'jose'
import { GUEST_LIMITS } from '../../sidecar/src/identity/guest-sessions.js'
import { createLogger } from '../../sidecar/src/kernel/log.js'
import type { KeyValueStore } from '../../sidecar/src/store/kv.js'
import { openSqliteSharedStore as openSqliteStore } from '../../sidecar/src/store/sqlite-store.js'
import { PASSWORD, bearer, openHarness, registerAndLogin, type Harness } from './harness.js'

const guestLogin = (h: Harness, peer: string, extra: Record<string, unknown> = {}) =>
  h.call('POST', '/login', { body: { guest_login: true, ...extra }, peer })

const asGuest = (h: Harness, token: string) => h.call('GET', '/authsvc/api/me', { headers: bearer(token) })

// Hole 2: guest logins were unbounded (300 logins from one address, 300 persisted sessions, all reloaded at start).
describe('hole 2: guest logins are throttled, bounded and short-lived', () => {
  const rows: Array<[string, (h: Harness) => Promise<void>]> = [
    ['300 guest logins from one address: 429 after the per-address budget, with Retry-After', async (h) => {
      const statuses: number[] = []
      let refused: Awaited<ReturnType<typeof guestLogin>> | undefined
      for (let i = 0; i < 300; i++) {
        const res = await guestLogin(h, '198.51.100.7')
        statuses.push(res.status)
        if (res.status !== 200) refused ??= res
      }
      assert.equal(statuses.filter((s) => s === 200).length, GUEST_LIMITS.loginsPerWindow)
      assert.equal(statuses.filter((s) => s === 429).length, 300 - GUEST_LIMITS.loginsPerWindow)
      assert.equal(refused?.body.code, 'TOO_MANY_ATTEMPTS')
      assert.equal(refused?.headers['retry-after'], '600')
      assert.equal(h.services.sessions.guestCount, GUEST_LIMITS.sessionsPerAddress)
      h.clock.advance(GUEST_LIMITS.windowMs)
      assert.equal((await guestLogin(h, '198.51.100.7')).status, 200, 'the window slides')
    }],
    ['IPv6 guest logins from fresh addresses of one /64 share one budget', async (h) => {
      const statuses: number[] = []
      for (let i = 1; i <= GUEST_LIMITS.loginsPerWindow + 1; i++) statuses.push((await guestLogin(h, `2001:db8:1:2::${i.toString(16)}`)).status)
      assert.deepEqual(statuses, [...Array<number>(GUEST_LIMITS.loginsPerWindow).fill(200), 429])
    }],
    ['guest logins from one address beyond its session bound evict its oldest session first', async (h) => {
      const tokens: string[] = []
      for (let i = 0; i < GUEST_LIMITS.sessionsPerAddress + 1; i++) tokens.push((await guestLogin(h, '198.51.100.8')).body.jwt_token)
      assert.equal((await asGuest(h, tokens[0])).body.code, 'TOKEN_REVOKED', 'the oldest is gone')
      for (const t of tokens.slice(1)) assert.equal((await asGuest(h, t)).status, 200)
      const other = await guestLogin(h, '198.51.100.9')
      assert.equal((await asGuest(h, other.body.jwt_token)).status, 200, 'another address keeps its own sessions')
      assert.equal((await asGuest(h, tokens[1])).status, 200)
    }],
    ['guest logins from many addresses never hold more than the total bound', async (h) => {
      const first = (await guestLogin(h, '203.0.113.1')).body.jwt_token
      for (let i = 0; i < GUEST_LIMITS.sessionsTotal + 5; i++) {
        const res = await guestLogin(h, `198.18.${Math.floor(i / 200)}.${(i % 200) + 1}`)
        assert.equal(res.status, 200)
      }
      assert.equal(h.services.sessions.guestCount, GUEST_LIMITS.sessionsTotal)
      assert.equal((await asGuest(h, first)).body.code, 'TOKEN_REVOKED', 'the oldest overall went first')
      await h.services.flush()
      const kv = await openSqliteStore(`${h.dir}/authsvc.sqlite`)
      const stored = (await kv.entries<{ user_id: string }>('session')).filter(([, s]) => s.user_id === 'guest')
      await kv.close()
      assert.equal(stored.length, GUEST_LIMITS.sessionsTotal, 'evicted sessions are gone from the store too')
    }],
    ['guest login with remember_me: still a short session cookie and a short JWT', async (h) => {
      const res = await guestLogin(h, '198.51.100.10', { remember_me: true })
      assert.equal(res.status, 200)
      assert.equal(res.body.remember_me, false)
      const claims = decodeJwt(res.body.jwt_token)
      assert.equal((claims.exp as number) - (claims.iat as number), GUEST_LIMITS.lifetimeHours * 3600)
      assert.doesNotMatch(String(res.headers['set-cookie']), /Max-Age/i)
      h.clock.advance(GUEST_LIMITS.lifetimeHours * 3600_000)
      assert.equal((await asGuest(h, res.body.jwt_token)).body.code, 'TOKEN_EXPIRED')
    }],
  ]
  for (const [name, row] of rows) {
    it(name, async () => {
      const h = await openHarness({ config: { allow_guest_jwt: true } })
      try {
        await row(h)
      } finally {
        await h.close()
      }
    })
  }

  it('a store holding thousands of guest sessions (written before the bound) is brought within it at start', async () => {
    const h = await openHarness({ config: { allow_guest_jwt: true } })
    const dir = h.dir
    const now = h.clock()
    const kv = await openSqliteStore(`${dir}/authsvc.sqlite`)
    for (let i = 0; i < 2000; i++) {
      const created = new Date(now - (2000 - i) * 1000).toISOString()
      await kv.set(`session:g-${i}`, { jti: `g-${i}`, user_id: 'guest', created_at_iso: created, last_used_at_iso: created, exp_at_iso: new Date(now + 3600_000).toISOString(), remember_me: false, revoked: false })
    }
    // written before the users' session indexes, too: the start builds them first
    await kv.delete('store_meta:session_index')
    await kv.close()
    await h.app.close()
    await h.services.close()
    const again = await openHarness({ config: { allow_guest_jwt: true }, dir, clock: h.clock })
    try {
      assert.equal(again.services.sessions.guestCount, GUEST_LIMITS.sessionsTotal)
      await again.services.flush()
      const check = await openSqliteStore(`${dir}/authsvc.sqlite`)
      const stored = (await check.entries<{ jti: string }>('session')).map(([, s]) => s.jti)
      await check.close()
      assert.equal(stored.length, GUEST_LIMITS.sessionsTotal)
      assert.ok(stored.includes('g-1999') && !stored.includes('g-0'), 'the newest are kept')
    } finally {
      await again.close()
    }
  })
})

// Hole 4: two parallel admin PUTs (demote admin1, disable admin2) both saw two admins and left none.
describe('hole 4: the last enabled admin survives parallel admin changes', () => {
  type Change = { method: 'PUT' | 'DELETE'; target: number; body?: Record<string, unknown> }
  const NEW_PASSWORD = 'parallel-reset-password-9'
  const rows: Array<[string, number, Change[]]> = [
    ['PUT demote admin1 (with a password reset) ∥ PUT disable admin2', 2, [
      { method: 'PUT', target: 1, body: { role: 'user', password: NEW_PASSWORD } },
      { method: 'PUT', target: 2, body: { disabled: true } },
    ]],
    ['PUT disable admin1 (with a password reset) ∥ PUT demote admin2 (with a password reset)', 2, [
      { method: 'PUT', target: 1, body: { disabled: true, password: NEW_PASSWORD } },
      { method: 'PUT', target: 2, body: { role: 'user', password: NEW_PASSWORD } },
    ]],
    ['PUT demote admin1 (with a password reset) ∥ DELETE admin2', 2, [
      { method: 'PUT', target: 1, body: { role: 'user', password: NEW_PASSWORD } },
      { method: 'DELETE', target: 2 },
    ]],
    ['DELETE admin2 ∥ PUT disable admin1 (with a password reset)', 2, [
      { method: 'DELETE', target: 2 },
      { method: 'PUT', target: 1, body: { disabled: true, password: NEW_PASSWORD } },
    ]],
    ['three admins, three parallel demotes with password resets', 3, [
      { method: 'PUT', target: 1, body: { role: 'user', password: NEW_PASSWORD } },
      { method: 'PUT', target: 2, body: { role: 'user', password: NEW_PASSWORD } },
      { method: 'PUT', target: 3, body: { role: 'user', password: NEW_PASSWORD } },
    ]],
  ]
  for (const [name, admins, changes] of rows) {
    it(name, async () => {
      const h = await openHarness()
      try {
        const root = await registerAndLogin(h, 'root-admin')
        const names = ['root-admin']
        for (let i = 2; i <= admins; i++) {
          await registerAndLogin(h, `admin${i}`, { admin: root, role: 'admin' })
          names.push(`admin${i}`)
        }
        // admin1's own session drives every request. A change that disables or demotes admin1
        // revokes that session, so a request authenticated after it ran would rightly get 401.
        // The hole is about changes that were both admitted: hold the admin-change queue shut
        // until every request has passed authentication (and its password hash) and queued, or
        // was answered without queueing (then the assertions below say so, rather than a hang).
        const driver = await h.services.sessions.issue(h.services.users.byUsername('root-admin')!, false)
        const users = h.services.users
        const enqueue = users.serialised.bind(users)
        let open!: () => void
        void enqueue(() => new Promise<void>((resolve) => { open = resolve }))
        let queued = 0
        let answered = 0
        const openOnceAllIn = () => { if (queued + answered === changes.length) open() }
        users.serialised = (change) => {
          const run = enqueue(change)
          queued++
          openOnceAllIn()
          return run
        }
        const results = await Promise.all(changes.map((c) =>
          h.call(c.method, `/authsvc/api/users/${names[c.target - 1]}`, { headers: bearer(driver.token), ...(c.body ? { body: c.body } : {}) })
            .finally(() => { answered++; openOnceAllIn() })))
        const ok = results.filter((r) => r.status === 200).length
        assert.equal(ok, changes.length - 1, JSON.stringify(results.map((r) => [r.status, r.body.code])))
        const refused = results.filter((r) => r.status !== 200)
        assert.deepEqual(refused.map((r) => [r.status, r.body.code]), [[409, 'CONFLICT']])
        assert.equal(h.services.users.enabledAdmins().length, 1, 'exactly one enabled admin is left')
      } finally {
        await h.close()
      }
    })
  }
})

// Hole 6: PUT groups / ip-lists replaced the whole map with no version check; admins overwrote each other.
describe('hole 6: whole-map admin settings are versioned (ETag / If-Match)', () => {
  const GROUPS = '/authsvc/api/groups'
  const LISTS = '/authsvc/api/ip-lists'
  const groupsWith = (body: any, role: string) => ({ groups: { ...body.groups, [role]: { can_access_api: true } } })
  const listsWith = (ip: string) => ({ whitelist: [], blacklist: [{ ip, permanent: true }] })

  const rows: Array<[string, (h: Harness, admin: Record<string, string>) => Promise<void>]> = [
    ['groups: B saves with the version it read after A saved → 412 PRECONDITION_FAILED, A\'s change kept', async (h, admin) => {
      const read = await h.call('GET', GROUPS, { headers: admin })
      const tag = String(read.headers.etag)
      assert.match(tag, /^"[A-Za-z0-9_-]{22}"$/)
      const a = await h.call('PUT', GROUPS, { headers: { ...admin, 'if-match': tag }, body: groupsWith(read.body, 'editors') })
      assert.equal(a.status, 200)
      assert.notEqual(a.headers.etag, tag)
      const b = await h.call('PUT', GROUPS, { headers: { ...admin, 'if-match': tag }, body: groupsWith(read.body, 'viewers') })
      assert.equal(b.status, 412)
      assert.equal(b.body.code, 'PRECONDITION_FAILED')
      assert.equal(b.headers.etag, a.headers.etag, 'the refusal names the current version')
      const now = await h.call('GET', GROUPS, { headers: admin })
      assert.ok('editors' in now.body.groups && !('viewers' in now.body.groups))
      assert.equal(now.headers.etag, a.headers.etag)
    }],
    ['ip-lists: B saves with the version it read after A saved → 412, A\'s blacklist kept and enforced', async (h, admin) => {
      const tag = String((await h.call('GET', LISTS, { headers: admin })).headers.etag)
      const a = await h.call('PUT', LISTS, { headers: { ...admin, 'if-match': tag }, body: listsWith('203.0.113.5') })
      assert.equal(a.status, 200)
      const b = await h.call('PUT', LISTS, { headers: { ...admin, 'if-match': tag }, body: listsWith('203.0.113.6') })
      assert.equal(b.status, 412)
      assert.equal(b.body.code, 'PRECONDITION_FAILED')
      assert.deepEqual((await h.call('GET', LISTS, { headers: admin })).body, listsWith('203.0.113.5'))
      assert.equal(h.services.ipGate.refuse('203.0.113.5'), 'IP_DENIED')
      assert.equal(h.services.ipGate.refuse('203.0.113.6'), null)
    }],
    ['ip-lists: two truly parallel PUTs with the same If-Match → one 200, one 412', async (h, admin) => {
      const tag = String((await h.call('GET', LISTS, { headers: admin })).headers.etag)
      const results = await Promise.all(['203.0.113.7', '203.0.113.8'].map((ip) => h.call('PUT', LISTS, { headers: { ...admin, 'if-match': tag }, body: listsWith(ip) })))
      assert.deepEqual(results.map((r) => r.status).sort(), [200, 412])
      const winner = results.find((r) => r.status === 200)!
      assert.deepEqual((await h.call('GET', LISTS, { headers: admin })).body, winner.body)
    }],
    ['groups: a weak If-Match of the current version never matches → 412', async (h, admin) => {
      const read = await h.call('GET', GROUPS, { headers: admin })
      const res = await h.call('PUT', GROUPS, { headers: { ...admin, 'if-match': `W/${String(read.headers.etag)}` }, body: read.body })
      assert.equal(res.status, 412)
    }],
    ['groups: an edit of the groups file on disk changes the version → 412 for the old one', async (h, admin) => {
      const read = await h.call('GET', GROUPS, { headers: admin })
      const { writeFileSync } = await import('node:fs')
      writeFileSync(`${h.dir}/authsvc_groups.json`, JSON.stringify(groupsWith(read.body, 'from-disk').groups))
      assert.equal(h.services.roles.reload(), true)
      const res = await h.call('PUT', GROUPS, { headers: { ...admin, 'if-match': String(read.headers.etag) }, body: read.body })
      assert.equal(res.status, 412)
    }],
    ['If-Match: * and no If-Match are accepted (decision: scripts of the replaced service send none)', async (h, admin) => {
      assert.equal((await h.call('PUT', LISTS, { headers: { ...admin, 'if-match': '*' }, body: listsWith('203.0.113.9') })).status, 200)
      assert.equal((await h.call('PUT', LISTS, { headers: admin, body: listsWith('203.0.113.10') })).status, 200)
      const read = await h.call('GET', GROUPS, { headers: admin })
      assert.equal((await h.call('PUT', GROUPS, { headers: admin, body: read.body })).status, 200)
    }],
  ]
  for (const [name, row] of rows) {
    it(name, async () => {
      const h = await openHarness()
      try {
        await row(h, bearer(await registerAndLogin(h, 'root-admin')))
      } finally {
        await h.close()
      }
    })
  }
})

// Hole 7: memory changed before the write was durable and write failures were swallowed, so a
// revocation whose write failed came back after a restart (and a grant held without being stored).
describe('hole 7: narrowing changes hold at once and are retried; widening ones apply once stored', () => {
  const INJECTED = 'SQLITE_IOERR: disk I/O error (injected by the test)'

  /** The real sqlite store, whose writes fail while `failing` is set. */
  function failingStore() {
    const control = {
      failing: false,
      wrap(kv: KeyValueStore): KeyValueStore {
        const refuse = () => {
          if (control.failing) throw new Error(INJECTED)
        }
        return {
          get: (key) => kv.get(key),
          entries: (kind) => kv.entries(kind),
          close: () => kv.close(),
          async set(key, value) {
            refuse()
            await kv.set(key, value)
          },
          async delete(key) {
            refuse()
            return kv.delete(key)
          },
        }
      },
    }
    return control
  }

  interface World {
    h: Harness
    store: ReturnType<typeof failingStore>
    logs: string[]
    admin: Record<string, string>
    restart(): Promise<Harness>
  }

  const me = (h: Harness, token: string) => h.call('GET', '/authsvc/api/me', { headers: bearer(token) })
  const expect503 = (w: World, res: { status: number; body: any; headers: Record<string, unknown> }, cause = INJECTED) => {
    assert.equal(res.status, 503, JSON.stringify(res.body))
    assert.equal(res.body.code, 'STORE_UNAVAILABLE')
    assert.equal(res.headers['retry-after'], '5')
    assert.doesNotMatch(JSON.stringify(res.body), /SQLITE|injected/, 'the cause stays in the log')
    const line = w.logs.find((l) => l.includes('"STORE_UNAVAILABLE"'))
    assert.ok(line?.includes(cause), `the cause is logged: ${line}`)
  }

  const rows: Array<[string, (w: World) => Promise<void>]> = [
    ['session revoke while the store fails: 503, revoked at once, still revoked after the store returns and a restart', async (w) => {
      const keep = await registerAndLogin(w.h, 'alice', { admin: w.admin.authorization.slice(7) })
      const gone = (await w.h.call('POST', '/login', { body: { username: 'alice', password: PASSWORD }, peer: '198.51.100.20' })).body.jwt_token
      const jti = String(decodeJwt(gone).jti)
      w.store.failing = true
      expect503(w, await w.h.call('POST', '/authsvc/me/sessions/revoke', { headers: bearer(keep), body: { jti } }))
      assert.equal((await me(w.h, gone)).body.code, 'TOKEN_REVOKED', 'in effect at once')
      w.store.failing = false
      const h = await w.restart()
      assert.equal((await me(h, gone)).body.code, 'TOKEN_REVOKED', 'still revoked after a restart')
      assert.equal((await me(h, keep)).status, 200)
    }],
    ['API token revoke while the store fails: 503, refused at once and after a restart', async (w) => {
      const jwt = await registerAndLogin(w.h, 'bob', { admin: w.admin.authorization.slice(7) })
      const made = await w.h.call('POST', '/authsvc/generate_token', { headers: bearer(jwt), body: { label: 'phone' } })
      assert.equal(made.status, 200)
      w.store.failing = true
      expect503(w, await w.h.call('DELETE', '/authsvc/api/tokens', { headers: bearer(jwt), body: { token_hash_prefix: made.body.token_hash_prefix } }))
      assert.equal((await me(w.h, made.body.token)).status, 401, 'in effect at once')
      w.store.failing = false
      const h = await w.restart()
      assert.equal((await me(h, made.body.token)).status, 401, 'still revoked after a restart')
    }],
    ['admin disables a user while the store fails: 503, refused at once and after a restart', async (w) => {
      const jwt = await registerAndLogin(w.h, 'carol', { admin: w.admin.authorization.slice(7) })
      w.store.failing = true
      expect503(w, await w.h.call('PUT', '/authsvc/api/users/carol', { headers: w.admin, body: { disabled: true } }))
      assert.equal((await me(w.h, jwt)).body.code, 'TOKEN_REVOKED')
      assert.equal(w.h.services.users.byUsername('carol')?.disabled, true)
      w.store.failing = false
      const h = await w.restart()
      assert.equal(h.services.users.byUsername('carol')?.disabled, true, 'still disabled after a restart')
      assert.equal((await me(h, jwt)).body.code, 'TOKEN_REVOKED')
    }],
    ['admin demotes an admin while the store fails: 503, demoted at once and after a restart', async (w) => {
      await registerAndLogin(w.h, 'dave', { admin: w.admin.authorization.slice(7), role: 'admin' })
      w.store.failing = true
      expect503(w, await w.h.call('PUT', '/authsvc/api/users/dave', { headers: w.admin, body: { role: 'user' } }))
      assert.equal(w.h.services.users.byUsername('dave')?.role, 'user')
      w.store.failing = false
      const h = await w.restart()
      assert.equal(h.services.users.byUsername('dave')?.role, 'user', 'still demoted after a restart')
    }],
    ['admin deletes a user while the store fails: 503, gone at once and after a restart', async (w) => {
      const jwt = await registerAndLogin(w.h, 'erin', { admin: w.admin.authorization.slice(7) })
      w.store.failing = true
      expect503(w, await w.h.call('DELETE', '/authsvc/api/users/erin', { headers: w.admin }))
      assert.equal((await me(w.h, jwt)).body.code, 'TOKEN_REVOKED')
      w.store.failing = false
      const h = await w.restart()
      assert.equal(h.services.users.byUsername('erin'), undefined, 'still deleted after a restart')
    }],
    ['the narrowing write is retried until stored (no second request needed)', async (w) => {
      const jwt = await registerAndLogin(w.h, 'fay', { admin: w.admin.authorization.slice(7) })
      w.store.failing = true
      expect503(w, await w.h.call('POST', '/logout', { headers: bearer(jwt) }))
      assert.equal((await me(w.h, jwt)).body.code, 'TOKEN_REVOKED')
      await w.h.services.flush()
      assert.equal((await me(w.h, jwt)).body.code, 'TOKEN_REVOKED', 'a failed retry changes nothing in memory')
      w.store.failing = false
      await w.h.services.flush()
      const kv = await openSqliteStore(`${w.h.dir}/authsvc.sqlite`)
      const stored = await kv.get<{ revoked: boolean }>(`session:${String(decodeJwt(jwt).jti)}`)
      await kv.close()
      assert.equal(stored?.revoked, true, 'stored by the retry, before any restart')
    }],
    ['admin promotes a user to admin while the store fails: 503, still a user (a role up applies only once stored)', async (w) => {
      const jwt = await registerAndLogin(w.h, 'gil', { admin: w.admin.authorization.slice(7) })
      w.store.failing = true
      expect503(w, await w.h.call('PUT', '/authsvc/api/users/gil', { headers: w.admin, body: { role: 'admin' } }))
      assert.equal(w.h.services.users.byUsername('gil')?.role, 'user')
      assert.equal((await w.h.call('GET', '/authsvc/api/users', { headers: bearer(jwt) })).body.code, 'ADMIN_REQUIRED')
    }],
    ['login while the store fails: 503, no cookie, no session', async (w) => {
      await registerAndLogin(w.h, 'hal', { admin: w.admin.authorization.slice(7) })
      const userId = w.h.services.users.byUsername('hal')!.user_id
      const before = (await w.h.services.sessions.activeForUser(userId)).length
      w.store.failing = true
      const res = await w.h.call('POST', '/login', { body: { username: 'hal', password: PASSWORD }, peer: '198.51.100.21' })
      expect503(w, res)
      assert.equal(res.headers['set-cookie'], undefined)
      assert.equal((await w.h.services.sessions.activeForUser(userId)).length, before)
    }],
    ['generate_token while the store fails: 503, no token exists', async (w) => {
      const jwt = await registerAndLogin(w.h, 'ida', { admin: w.admin.authorization.slice(7) })
      w.store.failing = true
      expect503(w, await w.h.call('POST', '/authsvc/generate_token', { headers: bearer(jwt), body: { label: 'x' } }))
      w.store.failing = false
      assert.deepEqual((await w.h.call('GET', '/authsvc/api/tokens', { headers: bearer(jwt) })).body.tokens, [])
    }],
    ['register while the store fails: 503, the user does not exist and the name is free again', async (w) => {
      w.store.failing = true
      expect503(w, await w.h.call('POST', '/register', { headers: w.admin, body: { username: 'jan', password: PASSWORD } }))
      assert.equal(w.h.services.users.byUsername('jan'), undefined)
      w.store.failing = false
      assert.equal((await w.h.call('POST', '/register', { headers: w.admin, body: { username: 'jan', password: PASSWORD } })).status, 201)
    }],
    ['PUT groups while the groups file cannot be written: 503, the old groups stay in force', async (w) => {
      const read = await w.h.call('GET', '/authsvc/api/groups', { headers: w.admin })
      // a directory where the file was: the rename of the new file fails, for root too
      const path = join(w.h.dir, 'authsvc_groups.json')
      rmSync(path)
      mkdirSync(path)
      const res = await w.h.call('PUT', '/authsvc/api/groups', { headers: w.admin, body: { groups: { ...read.body.groups, extra: {} } } })
      rmSync(path, { recursive: true })
      expect503(w, res, 'EISDIR')
      assert.equal(w.h.services.roles.has('extra'), false)
      assert.deepEqual(readdirSync(w.h.dir).filter((f) => f.endsWith('.tmp')), [], 'no temp file left behind')
      assert.deepEqual((await w.h.call('GET', '/authsvc/api/groups', { headers: w.admin })).body, read.body)
    }],
  ]

  for (const [name, row] of rows) {
    it(name, async () => {
      const dir = mkdtempSync(join(tmpdir(), 'as-hole7-'))
      const store = failingStore()
      const logs: string[] = []
      const log = createLogger({ level: 'info', destination: { write: (line: string) => void logs.push(line) } })
      let h = await openHarness({ dir, wrapStore: (kv) => store.wrap(kv), log })
      const w: World = {
        h, store, logs,
        admin: bearer(await registerAndLogin(h, 'root-admin')),
        async restart() {
          await h.close()
          h = await openHarness({ dir, wrapStore: (kv) => store.wrap(kv), log, clock: h.clock })
          w.h = h
          return h
        },
      }
      try {
        await row(w)
      } finally {
        store.failing = false
        await w.h.close()
        rmSync(dir, { recursive: true, force: true })
      }
    })
  }
})

// Hole 10: a revoked API token answered TOKEN_INVALID, so a phone could not tell "revoked" from "mistyped".
describe('hole 10: a revoked API token answers TOKEN_REVOKED until it would have expired', () => {
  interface World { h: Harness; jwt: string; token: string; prefix: string; restart(): Promise<Harness> }
  const me = (h: Harness, headers: Record<string, string>, query = '') => h.call('GET', `/authsvc/api/me${query}`, { headers })

  const rows: Array<[string, (w: World) => Promise<void>]> = [
    ['bearer token revoked by its owner (DELETE /authsvc/api/tokens) → TOKEN_REVOKED, on every channel', async (w) => {
      assert.equal((await w.h.call('DELETE', '/authsvc/api/tokens', { headers: bearer(w.jwt), body: { token_hash_prefix: w.prefix } })).status, 200)
      assert.equal((await me(w.h, bearer(w.token))).body.code, 'TOKEN_REVOKED')
      assert.equal((await me(w.h, {}, `?token=${w.token}`)).body.code, 'TOKEN_REVOKED')
      assert.equal((await me(w.h, {}, `?access_token=${w.token}`)).body.code, 'TOKEN_REVOKED')
    }],
    ['a mistyped token (one character changed) still answers TOKEN_INVALID', async (w) => {
      const last = w.token.at(-1) === 'A' ? 'B' : 'A'
      assert.equal((await me(w.h, bearer(w.token.slice(0, -1) + last))).body.code, 'TOKEN_INVALID')
    }],
    ['token revoked by an admin\'s password reset → TOKEN_REVOKED', async (w) => {
      const admin = bearer(await registerAndLogin(w.h, 'root-admin-2', { admin: w.jwt, role: 'admin' }))
      assert.equal((await w.h.call('PUT', '/authsvc/api/users/owner', { headers: admin, body: { password: 'a-brand-new-password-7' } })).status, 200)
      assert.equal((await me(w.h, bearer(w.token))).body.code, 'TOKEN_REVOKED')
    }],
    ['the tombstone survives a restart; a revoked token is gone from the list and cannot be revoked twice', async (w) => {
      await w.h.call('DELETE', '/authsvc/api/tokens', { headers: bearer(w.jwt), body: { token_hash_prefix: w.prefix } })
      const h = await w.restart()
      assert.equal((await me(h, bearer(w.token))).body.code, 'TOKEN_REVOKED')
      assert.deepEqual((await h.call('GET', '/authsvc/api/tokens', { headers: bearer(w.jwt) })).body.tokens, [])
      assert.equal((await h.call('DELETE', '/authsvc/api/tokens', { headers: bearer(w.jwt), body: { token_hash_prefix: w.prefix } })).body.code, 'NOT_FOUND')
    }],
    ['past the token\'s expiry the tombstone is dropped at start: the store forgets the hash', async (w) => {
      await w.h.call('DELETE', '/authsvc/api/tokens', { headers: bearer(w.jwt), body: { token_hash_prefix: w.prefix } })
      w.h.clock.advance(2 * 3600_000)
      const h = await w.restart()
      await h.services.flush()
      assert.equal((await me(h, bearer(w.token))).body.code, 'TOKEN_INVALID')
      const kv = await openSqliteStore(`${h.dir}/authsvc.sqlite`)
      const hashes = (await kv.entries<{ hash: string }>('token')).map(([, t]) => t.hash)
      await kv.close()
      assert.ok(!hashes.some((x) => x.startsWith(w.prefix)), 'the tombstone is gone')
    }],
  ]

  for (const [name, row] of rows) {
    it(name, async () => {
      const dir = mkdtempSync(join(tmpdir(), 'as-hole10-'))
      let h = await openHarness({ dir })
      try {
        const jwt = await registerAndLogin(h, 'owner')
        const made = await h.call('POST', '/authsvc/generate_token', { headers: bearer(jwt), body: { label: 'phone', expire_hours: 1 } })
        assert.equal(made.status, 200)
        assert.equal((await me(h, bearer(made.body.token))).status, 200)
        const w: World = {
          h, jwt, token: made.body.token, prefix: made.body.token_hash_prefix,
          async restart() {
            const clock = h.clock
            await h.close()
            h = await openHarness({ dir, clock })
            w.h = h
            return h
          },
        }
        await row(w)
      } finally {
        await h.close()
        rmSync(dir, { recursive: true, force: true })
      }
    })
  }
})
