/**
 * The routes the account page and the admin panel added (issue 13), through
 * `inject()` with real services: `POST /authsvc/api/me/password` and the admin
 * view of a user's sessions, API tokens and last-seen times. Who may call
 * them, what each answer holds (never a raw token), what each revokes.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { PASSWORD, bearer, openHarness, registerAndLogin, type Harness } from './harness.js'

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

const token = async (h: Harness, session: string, label: string): Promise<{ token: string; prefix: string }> => {
  const res = await h.call('POST', '/authsvc/generate_token', { body: { label }, headers: bearer(session) })
  assert.equal(res.status, 200, JSON.stringify(res.body))
  return { token: res.body.token, prefix: res.body.token_hash_prefix }
}

describe('POST /authsvc/api/me/password', () => {
  it('changes the password, revokes the other sessions only, keeps API tokens', () =>
    withHarness(async (h, _admin, alice) => {
      const other = (await h.call('POST', '/login', { body: { username: 'alice', password: PASSWORD } })).body.jwt_token
      const api = await token(h, alice, 'phone')
      const res = await h.call('POST', '/api/authsvc/api/me/password', { body: { current_password: PASSWORD, new_password: 'a-brand-new-password' }, headers: bearer(alice) })
      assert.deepEqual(res.body, { message: 'Password changed', sessions_revoked: 1 })
      assert.equal((await h.call('GET', '/authsvc/api/me', { headers: bearer(alice) })).status, 200, 'the session that changed it stays')
      const revoked = await h.call('GET', '/authsvc/api/me', { headers: bearer(other) })
      assert.equal(revoked.body.code, 'TOKEN_REVOKED')
      assert.equal((await h.call('GET', '/authsvc/api/me', { headers: bearer(api.token) })).status, 200, 'API tokens stay')
      assert.equal((await h.call('POST', '/login', { body: { username: 'alice', password: PASSWORD } })).status, 401)
      assert.equal((await h.call('POST', '/login', { body: { username: 'alice', password: 'a-brand-new-password' } })).status, 200)
    }))

  const refusals: Array<[string, (h: Harness, alice: string) => Promise<{ status: number; body: any }>, number, string]> = [
    ['a wrong current password', (h, alice) => h.call('POST', '/authsvc/api/me/password', { body: { current_password: 'not-it-at-all', new_password: 'a-brand-new-password' }, headers: bearer(alice) }), 401, 'INVALID_CREDENTIALS'],
    ['a common new password', (h, alice) => h.call('POST', '/authsvc/api/me/password', { body: { current_password: PASSWORD, new_password: 'password123' }, headers: bearer(alice) }), 400, 'VALIDATION_FAILED'],
    ['the same password again', (h, alice) => h.call('POST', '/authsvc/api/me/password', { body: { current_password: PASSWORD, new_password: PASSWORD }, headers: bearer(alice) }), 400, 'VALIDATION_FAILED'],
    ['an unknown key', (h, alice) => h.call('POST', '/authsvc/api/me/password', { body: { current_password: PASSWORD, new_password: 'a-brand-new-password', username: 'root' }, headers: bearer(alice) }), 400, 'VALIDATION_FAILED'],
    ['no credential', (h) => h.call('POST', '/authsvc/api/me/password', { body: { current_password: PASSWORD, new_password: 'a-brand-new-password' } }), 401, 'AUTH_REQUIRED'],
    ['an API token instead of a session', async (h, alice) => h.call('POST', '/authsvc/api/me/password', { body: { current_password: PASSWORD, new_password: 'a-brand-new-password' }, headers: bearer((await token(h, alice, 'x')).token) }), 403, 'PERMISSION_DENIED'],
  ]
  for (const [name, send, status, code] of refusals) {
    it(`refuses ${name}: ${status} ${code}`, () =>
      withHarness(async (h, _admin, alice) => {
        const res = await send(h, alice)
        assert.equal(res.status, status, JSON.stringify(res.body))
        assert.equal(res.body.code, code)
        assert.equal((await h.call('POST', '/login', { body: { username: 'alice', password: PASSWORD } })).status, 200, 'the password is unchanged')
      }))
  }

  it('wrong current passwords count against the lockout like logins', () =>
    withHarness(async (h, _admin, alice) => {
      const statuses: number[] = []
      for (let i = 0; i < 7; i++) {
        statuses.push((await h.call('POST', '/authsvc/api/me/password', { body: { current_password: `wrong-${i}-password`, new_password: 'a-brand-new-password' }, headers: bearer(alice) })).status)
      }
      assert.deepEqual(statuses, [401, 401, 401, 401, 401, 429, 429])
    }))
})

describe('admin: a user\'s sessions, API tokens and last seen', () => {
  it('lists and revokes one session, then all, of the named user only', () =>
    withHarness(async (h, admin, alice) => {
      const second = (await h.call('POST', '/login', { body: { username: 'alice', password: PASSWORD } })).body.jwt_token
      const list = await h.call('GET', '/authsvc/api/users/alice/sessions', { headers: bearer(admin) })
      assert.equal(list.status, 200)
      assert.equal(list.body.username, 'alice')
      assert.equal(list.body.sessions.length, 2)
      assert.deepEqual(Object.keys(list.body.sessions[0]).sort(), ['browser', 'created_at_iso', 'device', 'exp_at_iso', 'ip', 'jti', 'last_used_at_iso', 'os', 'remember_me'])
      const rootJti = (await h.call('GET', '/authsvc/me/sessions', { headers: bearer(admin) })).body.sessions[0].jti
      assert.equal((await h.call('DELETE', `/authsvc/api/users/alice/sessions/${rootJti}`, { headers: bearer(admin) })).status, 404, 'another user\'s session is not found under alice')
      const [one] = list.body.sessions
      assert.deepEqual((await h.call('DELETE', `/api/authsvc/api/users/alice/sessions/${one.jti}`, { headers: bearer(admin) })).body, { status: 'ok' })
      assert.equal((await h.call('DELETE', `/authsvc/api/users/alice/sessions/${one.jti}`, { headers: bearer(admin) })).status, 404, 'already revoked')
      const all = await h.call('DELETE', '/authsvc/api/users/alice/sessions', { headers: bearer(admin) })
      assert.deepEqual(all.body, { status: 'ok', revoked: 1 })
      for (const session of [alice, second]) assert.equal((await h.call('GET', '/authsvc/api/me', { headers: bearer(session) })).body.code, 'TOKEN_REVOKED')
      assert.equal((await h.call('GET', '/authsvc/api/me', { headers: bearer(admin) })).status, 200, 'the admin\'s own session is untouched')
    }))

  it('lists tokens by hash prefix (never the token) and revokes one', () =>
    withHarness(async (h, admin, alice) => {
      const phone = await token(h, alice, 'phone')
      const list = await h.call('GET', '/authsvc/api/users/alice/tokens', { headers: bearer(admin) })
      assert.equal(list.body.tokens.length, 1)
      assert.equal(list.body.tokens[0].token_hash_prefix, phone.prefix)
      assert.equal(list.body.tokens[0].label, 'phone')
      assert.equal(JSON.stringify(list.body).includes(phone.token), false, 'no raw token in the answer')
      assert.equal((await h.call('DELETE', '/authsvc/api/users/root/tokens', { body: { token_hash_prefix: phone.prefix }, headers: bearer(admin) })).status, 404, 'only the named user\'s tokens')
      assert.equal((await h.call('DELETE', '/authsvc/api/users/alice/tokens', { body: { token_hash_prefix: 'xyz' }, headers: bearer(admin) })).body.code, 'VALIDATION_FAILED')
      const revoked = await h.call('DELETE', '/authsvc/api/users/alice/tokens', { body: { token_hash_prefix: `${phone.prefix}...` }, headers: bearer(admin) })
      assert.deepEqual(revoked.body, { message: 'Token revoked.' })
      assert.equal((await h.call('GET', '/authsvc/api/me', { headers: bearer(phone.token) })).status, 401)
    }))

  it('last seen: the newest use of a live session or token, null for none', () =>
    withHarness(async (h, admin) => {
      await registerAndLogin(h, 'carol', { admin })
      await h.call('DELETE', '/authsvc/api/users/carol/sessions', { headers: bearer(admin) })
      const seen = await h.call('GET', '/authsvc/api/admin/last-seen', { headers: bearer(admin) })
      assert.equal(seen.status, 200)
      assert.equal(seen.body.last_seen.carol, null)
      assert.match(seen.body.last_seen.alice, /^\d{4}-\d\d-\d\dT/)
    }))

  const adminOnly: Array<[string, string, unknown?]> = [
    ['GET', '/authsvc/api/users/alice/sessions'],
    ['DELETE', '/authsvc/api/users/alice/sessions'],
    ['DELETE', '/authsvc/api/users/alice/sessions/x'],
    ['GET', '/authsvc/api/users/alice/tokens'],
    ['DELETE', '/authsvc/api/users/alice/tokens', { token_hash_prefix: 'abcdef12' }],
    ['GET', '/authsvc/api/admin/last-seen'],
  ]
  for (const [method, url, body] of adminOnly) {
    it(`${method} ${url}: 403 ADMIN_REQUIRED for a user, 401 without a credential, 404 for an unknown user`, () =>
      withHarness(async (h, admin, alice) => {
        const asAlice = await h.call(method, url, { body, headers: bearer(alice) })
        assert.equal(asAlice.status, 403)
        assert.equal(asAlice.body.code, 'ADMIN_REQUIRED')
        assert.equal((await h.call(method, url, { body })).status, 401)
        if (url.includes('/users/alice/')) assert.equal((await h.call(method, url.replace('/alice/', '/nobody/'), { body, headers: bearer(admin) })).body.code, 'NOT_FOUND')
      }))
  }
})
