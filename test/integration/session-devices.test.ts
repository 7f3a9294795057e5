/**
 * Sessions people can recognise (issue 26): a session keeps the User-Agent and
 * address it was created from, and both lists (the caller's own, an admin's
 * view of a user) answer device, browser, system and address in words; one
 * session or all of a user's end by an admin, and a user signs out everywhere
 * else. Real services on a real sqlite file, through inject() as the plugin
 * forwards (x-authsvc-peer is the address the gate saw).
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { PASSWORD, bearer, openHarness, registerAndLogin, type Harness } from './harness.js'
import { USER_AGENT_MAX } from '../../sidecar/src/identity/session-device.js'

const IPHONE = 'Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1'
const FIREFOX = 'Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0'

async function withHarness(run: (h: Harness, admin: string, alice: string) => Promise<void>): Promise<void> {
  const h = await openHarness()
  try {
    const admin = await registerAndLogin(h, 'root')
    const alice = await registerAndLogin(h, 'alice', { admin })
    await run(h, admin, alice)
  } finally {
    await h.close()
  }
}

async function loginFrom(h: Harness, username: string, userAgent: string | undefined, peer: string): Promise<string> {
  const res = await h.call('POST', '/login', { body: { username, password: PASSWORD }, headers: userAgent === undefined ? {} : { 'user-agent': userAgent }, peer })
  assert.equal(res.status, 200, JSON.stringify(res.body))
  return res.body.jwt_token
}

const jtiOf = async (h: Harness, session: string): Promise<string> =>
  (await h.call('GET', '/authsvc/me/sessions', { headers: bearer(session) })).body.sessions.find((s: { is_current: boolean }) => s.is_current).jti

describe('a session\'s device, browser, system and address', () => {
  it('the caller\'s list and the admin\'s view both name each session\'s device and address', () =>
    withHarness(async (h, admin) => {
      const phone = await loginFrom(h, 'alice', IPHONE, '203.0.113.7')
      await loginFrom(h, 'alice', FIREFOX, '2001:db8::5')
      const own = await h.call('GET', '/authsvc/me/sessions', { headers: bearer(phone) })
      assert.equal(own.status, 200)
      const view = (s: Record<string, unknown>) => [s.device, s.browser, s.os, s.ip]
      const mine = own.body.sessions.filter((s: { ip: string | null }) => s.ip !== '127.0.0.1')
      assert.deepEqual(mine.map(view).sort(), [
        ['Desktop', 'Firefox 128', 'Linux', '2001:db8::5'],
        ['iPhone', 'Safari 17', 'iOS 17.0', '203.0.113.7'],
      ])
      assert.deepEqual(view(own.body.sessions.find((s: { is_current: boolean }) => s.is_current)), ['iPhone', 'Safari 17', 'iOS 17.0', '203.0.113.7'])
      const admins = await h.call('GET', '/authsvc/api/users/alice/sessions', { headers: bearer(admin) })
      assert.equal(admins.status, 200)
      assert.deepEqual(admins.body.sessions.filter((s: { ip: string | null }) => s.ip !== '127.0.0.1').map(view).sort(), mine.map(view).sort())
      for (const s of admins.body.sessions) {
        assert.deepEqual(Object.keys(s).sort(), ['browser', 'created_at_iso', 'device', 'exp_at_iso', 'ip', 'jti', 'last_used_at_iso', 'os', 'remember_me'])
      }
    }))

  it('a client that names nothing is an unknown device with no browser or system, its address still kept', () =>
    withHarness(async (h) => {
      const session = await loginFrom(h, 'alice', undefined, '198.51.100.4')
      const s = (await h.call('GET', '/authsvc/me/sessions', { headers: bearer(session) })).body.sessions.find((x: { is_current: boolean }) => x.is_current)
      assert.deepEqual([s.device, s.browser, s.os, s.ip], ['Unknown device', null, null, '198.51.100.4'])
    }))

  it('a record written before sessions kept their client answers unknown and null, not an error', () =>
    withHarness(async (h, admin) => {
      const user = h.services.users.byUsername('alice')!
      const { record } = await h.services.sessions.issue(user, false)
      const s = (await h.call('GET', '/authsvc/api/users/alice/sessions', { headers: bearer(admin) })).body.sessions.find((x: { jti: string }) => x.jti === record.jti)
      assert.deepEqual([s.device, s.browser, s.os, s.ip], ['Unknown device', null, null, null])
    }))

  // what a client may put in its User-Agent: it is shown on pages and lands in the store, never as sent when it is hostile
  const agents: Array<[string, string, (stored: string | undefined) => void]> = [
    ['a header split by CR LF', `${FIREFOX}\r\nSet-Cookie: x=1`, (stored) => assert.equal(stored, `${FIREFOX} Set-Cookie: x=1`)],
    ['control characters and DEL', `a\u0000b\u0007c\u007fd`, (stored) => assert.equal(stored, 'a b c d')],
    ['a 10 000-character agent', `${FIREFOX}${'x'.repeat(10_000)}`, (stored) => assert.equal(stored?.length, USER_AGENT_MAX)],
    ['only blanks', '   ', (stored) => assert.equal(stored, undefined)],
  ]
  for (const [name, agent, check] of agents) {
    it(`stores ${name} bounded and clean, and lists it without error`, () =>
      withHarness(async (h) => {
        const session = await loginFrom(h, 'alice', agent, '203.0.113.9')
        const jti = await jtiOf(h, session)
        check(h.services.sessions.get(jti)?.user_agent)
        const list = await h.call('GET', '/authsvc/me/sessions', { headers: bearer(session) })
        assert.equal(list.status, 200)
      }))
  }

  it('the stored record holds no token: only the agent and the address beside the times', () =>
    withHarness(async (h) => {
      const session = await loginFrom(h, 'alice', FIREFOX, '203.0.113.7')
      const record = h.services.sessions.get(await jtiOf(h, session))!
      assert.deepEqual(Object.keys(record).sort(), ['created_at_iso', 'exp_at_iso', 'ip', 'jti', 'last_used_at_iso', 'remember_me', 'revoked', 'user_agent', 'user_id'])
      assert.equal(JSON.stringify(record).includes(session), false)
    }))
})

describe('POST /authsvc/api/users/{username}/sessions/revoke', () => {
  it('ends one session by jti, then 404 for it again and for another user\'s; the event names the user', () =>
    withHarness(async (h, admin, alice) => {
      const events: Array<Record<string, unknown>> = []
      h.services.events.on('session_revoked', (r) => { events.push(r as unknown as Record<string, unknown>) })
      const second = await loginFrom(h, 'alice', IPHONE, '203.0.113.7')
      const jti = await jtiOf(h, second)
      const res = await h.call('POST', '/authsvc/api/users/alice/sessions/revoke', { body: { jti }, headers: bearer(admin) })
      assert.deepEqual(res.body, { status: 'ok', revoked: 1 })
      assert.equal((await h.call('GET', '/authsvc/api/me', { headers: bearer(second) })).body.code, 'TOKEN_REVOKED')
      assert.equal((await h.call('GET', '/authsvc/api/me', { headers: bearer(alice) })).status, 200, 'her other session stays')
      const again = await h.call('POST', '/api/authsvc/api/users/alice/sessions/revoke', { body: { jti }, headers: bearer(admin) })
      assert.equal(again.status, 404)
      assert.equal(again.body.code, 'NOT_FOUND')
      const rootJti = await jtiOf(h, admin)
      const foreign = await h.call('POST', '/authsvc/api/users/alice/sessions/revoke', { body: { jti: rootJti }, headers: bearer(admin) })
      assert.equal(foreign.body.code, 'NOT_FOUND', 'another user\'s session is not found under alice')
      assert.equal((await h.call('GET', '/authsvc/api/me', { headers: bearer(admin) })).status, 200)
      assert.deepEqual(events.map((e) => [e.kind, e.actor, e.subject, e.sessions]), [['session_revoked', 'root', 'alice', 1]])
    }))

  it('{"all":true} ends every session of the user and says how many, the admin\'s own untouched', () =>
    withHarness(async (h, admin, alice) => {
      const phone = await loginFrom(h, 'alice', IPHONE, '203.0.113.7')
      const res = await h.call('POST', '/authsvc/api/users/alice/sessions/revoke', { body: { all: true }, headers: bearer(admin) })
      assert.deepEqual(res.body, { status: 'ok', revoked: 2 })
      for (const session of [alice, phone]) assert.equal((await h.call('GET', '/authsvc/api/me', { headers: bearer(session) })).body.code, 'TOKEN_REVOKED')
      assert.equal((await h.call('GET', '/authsvc/api/me', { headers: bearer(admin) })).status, 200)
      assert.deepEqual((await h.call('GET', '/authsvc/api/users/alice/sessions', { headers: bearer(admin) })).body.sessions, [])
    }))

  const bodies: Array<[string, unknown]> = [
    ['no body', undefined],
    ['an empty object', {}],
    ['all false', { all: false }],
    ['both jti and all', { jti: 'x', all: true }],
    ['an empty jti', { jti: '' }],
    ['a 65-character jti', { jti: 'j'.repeat(65) }],
    ['a jti that is a number', { jti: 7 }],
    ['an unknown key', { jti: 'x', user: 'root' }],
  ]
  for (const [name, body] of bodies) {
    it(`refuses ${name}: 400 VALIDATION_FAILED, nothing revoked`, () =>
      withHarness(async (h, admin, alice) => {
        const res = await h.call('POST', '/authsvc/api/users/alice/sessions/revoke', { body, headers: bearer(admin) })
        assert.equal(res.status, 400, JSON.stringify(res.body))
        assert.equal(res.body.code, 'VALIDATION_FAILED')
        assert.equal((await h.call('GET', '/authsvc/api/me', { headers: bearer(alice) })).status, 200)
      }))
  }

  it('an unknown user is 404 NOT_FOUND; a user is 403 ADMIN_REQUIRED; no credential 401', () =>
    withHarness(async (h, admin, alice) => {
      const unknown = await h.call('POST', '/authsvc/api/users/nobody/sessions/revoke', { body: { all: true }, headers: bearer(admin) })
      assert.equal(unknown.status, 404)
      assert.equal(unknown.body.code, 'NOT_FOUND')
      const asAlice = await h.call('POST', '/authsvc/api/users/root/sessions/revoke', { body: { all: true }, headers: bearer(alice) })
      assert.equal(asAlice.status, 403)
      assert.equal(asAlice.body.code, 'ADMIN_REQUIRED')
      assert.equal((await h.call('POST', '/authsvc/api/users/root/sessions/revoke', { body: { all: true } })).status, 401)
      assert.equal((await h.call('GET', '/authsvc/api/me', { headers: bearer(admin) })).status, 200, 'nothing ended')
    }))
})

describe('POST /authsvc/me/sessions/revoke-others', () => {
  it('ends the caller\'s other sessions, keeps the one that asked and other users\' sessions', () =>
    withHarness(async (h, admin, alice) => {
      const events: Array<Record<string, unknown>> = []
      h.services.events.on('session_revoked', (r) => { events.push(r as unknown as Record<string, unknown>) })
      const phone = await loginFrom(h, 'alice', IPHONE, '203.0.113.7')
      const laptop = await loginFrom(h, 'alice', FIREFOX, '203.0.113.8')
      const res = await h.call('POST', '/authsvc/me/sessions/revoke-others', { body: {}, headers: bearer(laptop) })
      assert.deepEqual(res.body, { status: 'ok', revoked: 2 })
      for (const session of [alice, phone]) assert.equal((await h.call('GET', '/authsvc/api/me', { headers: bearer(session) })).body.code, 'TOKEN_REVOKED')
      const left = (await h.call('GET', '/authsvc/me/sessions', { headers: bearer(laptop) })).body.sessions
      assert.deepEqual(left.map((s: { is_current: boolean; browser: string }) => [s.is_current, s.browser]), [[true, 'Firefox 128']])
      assert.equal((await h.call('GET', '/authsvc/api/me', { headers: bearer(admin) })).status, 200, 'another user\'s session stays')
      assert.deepEqual(events.map((e) => [e.actor, e.subject, e.sessions]), [['alice', 'alice', 2]])
      const none = await h.call('POST', '/api/authsvc/me/sessions/revoke-others', { body: {}, headers: bearer(laptop) })
      assert.deepEqual(none.body, { status: 'ok', revoked: 0 }, 'nothing else left: 0')
    }))

  it('from an API token every session is another one; the token itself stays', () =>
    withHarness(async (h, _admin, alice) => {
      const minted = await h.call('POST', '/authsvc/generate_token', { body: { label: 'script' }, headers: bearer(alice) })
      assert.equal(minted.status, 200)
      const res = await h.call('POST', '/authsvc/me/sessions/revoke-others', { body: {}, headers: bearer(minted.body.token) })
      assert.deepEqual(res.body, { status: 'ok', revoked: 1 })
      assert.equal((await h.call('GET', '/authsvc/api/me', { headers: bearer(alice) })).body.code, 'TOKEN_REVOKED')
      assert.equal((await h.call('GET', '/authsvc/api/me', { headers: bearer(minted.body.token) })).status, 200)
    }))

  it('refuses a body with keys (400) and a caller without a credential (401)', () =>
    withHarness(async (h, _admin, alice) => {
      const keyed = await h.call('POST', '/authsvc/me/sessions/revoke-others', { body: { jti: 'x' }, headers: bearer(alice) })
      assert.equal(keyed.status, 400)
      assert.equal(keyed.body.code, 'VALIDATION_FAILED')
      assert.equal((await h.call('POST', '/authsvc/me/sessions/revoke-others', { body: {} })).status, 401)
    }))
})
