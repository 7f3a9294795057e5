/**
 * Attack rows of issue 9 (the holes found from outside), through the owned
 * routes with real services, the real sqlite file and an injected clock. Each
 * row is one request shape that did the wrong thing before its fix; the row's
 * name says the shape, the comment above each table names the hole.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { decodeJwt } from 'jose'
import { openSqliteStore } from '../../sidecar/src/store/kv.js'
import { GUEST_LIMITS } from '../../sidecar/src/identity/guest-sessions.js'
import { bearer, openHarness, registerAndLogin, type Harness } from './harness.js'

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
        // admin1's own session drives every request; a row never deletes admin1, so the bearer
        // is still valid when each request is authenticated, whichever change runs first
        const driver = await h.services.sessions.issue(h.services.users.byUsername('root-admin')!, false)
        const results = await Promise.all(changes.map((c) =>
          h.call(c.method, `/authsvc/api/users/${names[c.target - 1]}`, { headers: bearer(driver.token), ...(c.body ? { body: c.body } : {}) })))
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
