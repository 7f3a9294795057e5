/**
 * The identity feature's events (identity/events.ts) through the real app: each thing happens
 * once, as one typed record with who, whom and from where, and no record holds a secret (the
 * password, the session JWT or the API token appear nowhere; a token only as its hash prefix).
 */
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import type { EventRecord } from '../../sidecar/src/kernel/events.js'
import { addUser, call, openSidecar, type Sidecar } from './fixtures.js'
import { json, login } from './owned-requests.js'
import { totpAt } from '../integration/totp-reference.js'

describe('identity events through the real app', async () => {
  const sc: Sidecar = await openSidecar()
  after(() => sc.close())
  const records: EventRecord[] = []
  sc.services.events.onAny((r) => void records.push(r))
  const since = () => records.splice(0).map(({ kind, at: _at, ...fields }) => ({ kind, ...fields }))
  const PASSWORD = 'correct-horse-battery'
  await addUser(sc, 'root', PASSWORD, 'admin')
  await addUser(sc, 'alice', PASSWORD)

  it('a wrong code while turning MFA off is mfa_code_refused, not a failed sign-in', async () => {
    const user = await addUser(sc, 'carol', PASSWORD)
    const jwt = json(await login(sc, 'carol', PASSWORD)).jwt_token as string
    const setup = json(await call(sc, { method: 'POST', url: '/authsvc/api/mfa/setup', bearer: jwt, body: {} }))
    const code = (at: number) => totpAt(setup.secret as string, at)
    assert.equal((await call(sc, { method: 'POST', url: '/authsvc/api/mfa/verify-setup', bearer: jwt, body: { code: code(sc.clock()) } })).statusCode, 200)
    since()
    const wrong = code(sc.clock()) === '000000' ? '111111' : '000000'
    assert.equal((await call(sc, { method: 'POST', url: '/authsvc/api/mfa/disable', bearer: jwt, body: { code: wrong } })).statusCode, 401)
    assert.deepEqual(since(), [{ kind: 'mfa_code_refused', actor: 'carol', subject: 'carol', ip: '127.0.0.1', outcome: 'failure' }])
    assert.ok(user)
  })

  it('a failed and a good sign-in, a token, its revocation, a role change, a reset and disable, a deletion: one record each, in order, no secret', async () => {
    const peer = '10.1.2.3'
    const aliceId = sc.services.users.find('alice').user_id
    assert.equal((await login(sc, 'alice', 'wrong-password-here', { peer })).statusCode, 401)
    const good = await login(sc, 'alice', PASSWORD, { peer })
    assert.equal(good.statusCode, 200)
    const jwt = json(good).jwt_token as string
    const made = await call(sc, { method: 'POST', url: '/authsvc/generate_token', peer, body: { username: 'alice', password: PASSWORD, label: 'phone', expire_hours: 1 } })
    assert.equal(made.statusCode, 200, made.body)
    const token = json(made).token as string
    const rootJwt = json(await login(sc, 'root', PASSWORD, { peer })).jwt_token as string
    const listed = json(await call(sc, { url: '/authsvc/api/tokens', bearer: jwt })).tokens as Array<{ token_hash_prefix: string }>
    const prefix = listed[0].token_hash_prefix.replace(/\.+$/, '')
    assert.equal((await call(sc, { method: 'DELETE', url: '/authsvc/api/users/alice/tokens', bearer: rootJwt, body: { token_hash_prefix: prefix } })).statusCode, 200)
    assert.equal((await call(sc, { method: 'PUT', url: '/authsvc/api/users/alice', bearer: rootJwt, body: { role: 'guest' } })).statusCode, 200)
    assert.equal((await call(sc, { method: 'PUT', url: '/authsvc/api/users/alice', bearer: rootJwt, body: { password: 'a-brand-new-passphrase', disabled: true } })).statusCode, 200)
    assert.equal((await call(sc, { method: 'DELETE', url: '/authsvc/api/users/alice', bearer: rootJwt })).statusCode, 200)
    const seen = since()
    assert.deepEqual(seen, [
      { kind: 'login_failure', subject: 'alice', ip: peer, outcome: 'failure', attempt: 'password' },
      { kind: 'user_login', actor: 'alice', subject: 'alice', ip: peer, mfa: false, outcome: 'success' },
      { kind: 'api_token_created', actor: 'alice', subject: 'alice', ip: peer, token_hash_prefix: prefix.slice(0, 8), outcome: 'success' },
      { kind: 'user_login', actor: 'root', subject: 'root', ip: peer, mfa: false, outcome: 'success' },
      { kind: 'api_token_revoked', actor: 'root', subject: 'alice', ip: '127.0.0.1', token_hash_prefix: prefix.slice(0, 8), outcome: 'success' },
      { kind: 'user_role_changed', actor: 'root', subject: 'alice', ip: '127.0.0.1', role: 'guest', outcome: 'success' },
      { kind: 'user_updated', actor: 'root', subject: 'alice', ip: '127.0.0.1', changes: ['password', 'disabled'], outcome: 'success' },
      { kind: 'user_deleted', actor: 'root', subject: 'alice', ip: '127.0.0.1', user_id: aliceId, outcome: 'success' },
    ])
    const text = JSON.stringify(seen)
    for (const secret of [PASSWORD, 'wrong-password-here', 'a-brand-new-passphrase', jwt, rootJwt, token]) assert.ok(!text.includes(secret), 'no secret in any record')
  })
})
