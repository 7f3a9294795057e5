/**
 * A user's own sessions and API tokens: listing, revoking (never another
 * user's), the current token, and API tokens minted by password or session,
 * their limits, the stored hash only, and revocation by prefix.
 *
 * Part of the owned routes through Fastify inject (SPEC §5.2, §5.4); the shared
 * request helpers are owned-requests.ts.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import type { ApiTokenRecord } from '../../sidecar/src/identity/api-tokens.js'
import {
  addUser, apiToken, assertError, bootstrapAdmin, call, openSidecar, sessionJwt, type CallOptions, type Sidecar,
} from './fixtures.js'
import { FORM, form, json, me } from './owned-requests.js'

// ---------------------------------------------------------------- sessions

describe('sessions and current token', () => {
  let sc: Sidecar
  let alice: Awaited<ReturnType<typeof addUser>>
  let bob: Awaited<ReturnType<typeof addUser>>
  before(async () => {
    sc = await openSidecar({ config: { allow_guest_jwt: true } })
    await bootstrapAdmin(sc)
    alice = await addUser(sc, 'alice', 'alice-passphrase-1')
    bob = await addUser(sc, 'bob', 'bob-passphrase-1')
  })
  after(() => sc.close())

  it('lists the caller\'s own sessions with is_current', async () => {
    const one = await sc.services.sessions.issue(alice, false)
    const two = await sc.services.sessions.issue(alice, false)
    await sc.services.sessions.issue(bob, false)
    const res = await call(sc, { url: '/authsvc/me/sessions', bearer: one.token })
    const sessions = json(res).sessions as Array<Record<string, unknown>>
    const jtis = sessions.map((s) => s.jti)
    assert.ok(jtis.includes(one.record.jti) && jtis.includes(two.record.jti))
    assert.ok(sessions.every((s) => sc.services.sessions.get(String(s.jti))?.user_id === alice.user_id), 'only own sessions')
    assert.deepEqual(sessions.filter((s) => s.is_current).map((s) => s.jti), [one.record.jti])
    assert.deepEqual(Object.keys(sessions[0]).sort(), ['browser', 'created_at_iso', 'device', 'exp_at_iso', 'ip', 'is_current', 'jti', 'last_used_at_iso', 'os'])
  })

  it('revoking an own session kills it; revoking it again → 404', async () => {
    const one = await sc.services.sessions.issue(alice, false)
    const two = await sc.services.sessions.issue(alice, false)
    const res = await call(sc, { method: 'POST', url: '/authsvc/me/sessions/revoke', bearer: one.token, body: { jti: two.record.jti } })
    assert.deepEqual(json(res), { status: 'ok' })
    assertError(await me(sc, { bearer: two.token }), 401, 'TOKEN_REVOKED')
    assertError(await call(sc, { method: 'POST', url: '/authsvc/me/sessions/revoke', bearer: one.token, body: { jti: two.record.jti } }), 404, 'NOT_FOUND')
  })

  it('another user\'s jti → 404, and that session stays valid', async () => {
    const mine = await sc.services.sessions.issue(alice, false)
    const theirs = await sc.services.sessions.issue(bob, false)
    assertError(await call(sc, { method: 'POST', url: '/authsvc/me/sessions/revoke', bearer: mine.token, body: { jti: theirs.record.jti } }), 404, 'NOT_FOUND')
    assert.equal((await me(sc, { bearer: theirs.token })).statusCode, 200)
  })

  it('an unknown jti → 404', async () => {
    const mine = await sc.services.sessions.issue(alice, false)
    assertError(await call(sc, { method: 'POST', url: '/authsvc/me/sessions/revoke', bearer: mine.token, body: { jti: 'nope' } }), 404, 'NOT_FOUND')
  })

  it('current-token: 403 for a cookie session; the bearer or query token otherwise', async () => {
    const { token } = await sc.services.sessions.issue(alice, false)
    assertError(await call(sc, { url: '/authsvc/me/current-token', cookie: token }), 403, 'COOKIE_TOKEN_HIDDEN')
    assert.deepEqual(json(await call(sc, { url: '/authsvc/me/current-token', bearer: token })), { token })
    assert.deepEqual(json(await call(sc, { url: `/authsvc/me/current-token?token=${token}` })), { token })
    const api = await apiToken(sc, alice)
    assert.deepEqual(json(await call(sc, { url: `/api/authsvc/me/current-token?access_token=${api}` })), { token: api })
  })

  it('anonymous → 401 on the user routes', async () => {
    for (const url of ['/authsvc/me/sessions', '/authsvc/me/current-token', '/authsvc/api/tokens', '/authsvc/api/me']) {
      assertError(await call(sc, { url }), 401, 'AUTH_REQUIRED', url)
    }
  })

  it('a guest session can neither list nor revoke sessions (401: no user id), so never another guest\'s', async () => {
    const g1 = await sc.services.sessions.issue({ user_id: 'guest', username: 'guest' }, false)
    const g2 = await sc.services.sessions.issue({ user_id: 'guest', username: 'guest' }, false)
    // guests have no user id: the user routes refuse them outright, so no guest can list or end another's session
    assertError(await call(sc, { url: '/authsvc/me/sessions', bearer: g1.token }), 401, 'AUTH_REQUIRED')
    const revoke = await call(sc, { method: 'POST', url: '/authsvc/me/sessions/revoke', bearer: g1.token, body: { jti: g2.record.jti } })
    assertError(revoke, 401, 'AUTH_REQUIRED')
    assert.equal((await me(sc, { bearer: g2.token })).statusCode, 200, 'the other guest is still logged in')
  })
})

// -------------------------------------------------------------- API tokens

describe('API tokens', () => {
  let sc: Sidecar
  let alice: Awaited<ReturnType<typeof addUser>>
  const PASSWORD = 'alice-passphrase-1'
  before(async () => {
    sc = await openSidecar()
    await bootstrapAdmin(sc)
    alice = await addUser(sc, 'alice', PASSWORD)
    await addUser(sc, 'gus', 'gus-passphrase-1', 'guest')
  })
  after(() => sc.close())

  const create = (body: Record<string, unknown>, extra: Partial<CallOptions> = {}, url = '/authsvc/generate_token') =>
    call(sc, { method: 'POST', url, body, ...extra })

  it('username + password → 200 with the SPEC §5.2 shape; only the hash is stored', async () => {
    const res = await create({ username: 'alice', password: PASSWORD, label: 'laptop' })
    assert.equal(res.statusCode, 200, res.body)
    const body = json(res)
    assert.deepEqual(Object.keys(body).sort(), ['expires_in_hours', 'expires_iso', 'jwt_token', 'message', 'token', 'token_hash_prefix'])
    assert.equal(body.message, 'API token created.')
    assert.match(body.token, /^ast_[A-Za-z0-9_-]{43}$/)
    assert.equal(body.jwt_token, body.token)
    assert.equal(body.expires_in_hours, 720)
    assert.equal(body.expires_iso, new Date(sc.clock() + 720 * 3600_000).toISOString())
    const hash = createHash('sha256').update(body.token).digest('hex')
    assert.equal(body.token_hash_prefix, hash.slice(0, 12))
    const record = (await sc.services.kv.get<ApiTokenRecord>(`token:${hash}`))!
    assert.equal(record.user_id, alice.user_id)
    assert.ok(!JSON.stringify(record).includes(body.token))
    assert.equal(json(await me(sc, { bearer: body.token })).auth_type, 'api_token')
  })

  it('a session JWT creates a token; the legacy /generate_token alias and the form body work too', async () => {
    const jwt = await sessionJwt(sc, alice)
    const made = await create({ label: 'by-session' }, { bearer: jwt })
    assert.equal(made.statusCode, 200)
    assert.equal(made.headers['cache-control'], 'no-store', 'a new token is kept by no cache')
    assert.equal((await create({ username: 'alice', password: PASSWORD }, {}, '/generate_token')).statusCode, 200)
    const viaForm = await call(sc, { method: 'POST', url: '/authsvc/generate_token', headers: FORM, body: form({ username: 'alice', password: PASSWORD, expire_hours: '24' }) })
    assert.equal(viaForm.statusCode, 200, viaForm.body)
    assert.equal(json(viaForm).expires_in_hours, 24)
  })

  it('wrong password and unknown user → the same 401 INVALID_CREDENTIALS', async () => {
    const a = await create({ username: 'alice', password: 'wrong-passphrase-9' })
    const b = await create({ username: 'nobody-at-all', password: 'wrong-passphrase-9' })
    assertError(a, 401, 'INVALID_CREDENTIALS')
    assert.equal(a.body, b.body)
  })

  it('no credential → 401; an API token is not a way to mint more tokens', async () => {
    assertError(await create({}), 401, 'AUTH_REQUIRED')
    const token = await apiToken(sc, alice)
    assert.equal((await create({}, { bearer: token })).statusCode, 401)
    assertError(await create({}, { bearer: 'broken.jwt.value' }), 401, 'TOKEN_INVALID')
  })

  it('a role without can_have_api_tokens → 403 PERMISSION_DENIED', async () => {
    assertError(await create({ username: 'gus', password: 'gus-passphrase-1' }), 403, 'PERMISSION_DENIED')
  })

  it('expire_hours above max_token_expiration_hours, zero or negative → 400', async () => {
    for (const expire_hours of [8761, 0, -5]) {
      assertError(await create({ username: 'alice', password: PASSWORD, expire_hours }), 400, 'VALIDATION_FAILED', String(expire_hours))
    }
    assert.equal(json(await create({ username: 'alice', password: PASSWORD, expire_hours: 8760 })).expires_in_hours, 8760)
  })

  it('a label over 128 characters → 400', async () => {
    assertError(await create({ username: 'alice', password: PASSWORD, label: 'l'.repeat(129) }), 400, 'VALIDATION_FAILED')
  })

  it('list: own unexpired tokens only, never the token or the full hash', async () => {
    const sc2 = await openSidecar()
    try {
      const carol = await addUser(sc2, 'carol', 'carol-passphrase-1')
      const dave = await addUser(sc2, 'dave', 'dave-passphrase-1')
      const t1 = await sc2.services.tokens.issue(carol.user_id, 'one', 1)
      const t2 = await sc2.services.tokens.issue(carol.user_id, 'two', 48)
      await sc2.services.tokens.issue(dave.user_id, 'dave', 48)
      const jwt = await sessionJwt(sc2, carol)
      const list = json(await call(sc2, { url: '/authsvc/api/tokens', bearer: jwt })).tokens as Array<Record<string, unknown>>
      assert.deepEqual(list.map((t) => t.label).sort(), ['one', 'two'])
      assert.deepEqual(Object.keys(list[0]).sort(), ['created_at_iso', 'expires_iso', 'label', 'last_used_at_iso', 'token_hash_prefix'])
      const text = JSON.stringify(list)
      assert.ok(!text.includes(t1.token) && !text.includes(t1.record.hash) && !text.includes(t2.record.hash))
      sc2.clock.advance(3600_000)
      const later = json(await call(sc2, { url: '/authsvc/api/tokens', bearer: jwt })).tokens as Array<Record<string, unknown>>
      assert.deepEqual(later.map((t) => t.label), ['two'])
    } finally {
      await sc2.close()
    }
  })

  it('revoke by prefix: "..." suffix and case ignored; the token stops working; unknown → 404', async () => {
    const jwt = await sessionJwt(sc, alice)
    const created = json(await create({ username: 'alice', password: PASSWORD, label: 'to-revoke' }))
    const prefix = String(created.token_hash_prefix)
    assertError(await call(sc, { method: 'DELETE', url: '/authsvc/api/tokens', bearer: jwt, body: { token_hash_prefix: 'ffffffff00000000' } }), 404, 'NOT_FOUND')
    const res = await call(sc, { method: 'DELETE', url: '/authsvc/api/tokens', bearer: jwt, body: { token_hash_prefix: `${prefix.toUpperCase()}...` } })
    assert.deepEqual(json(res), { message: 'Token revoked.' })
    assert.equal((await me(sc, { bearer: created.token })).statusCode, 401)
    assertError(await call(sc, { method: 'DELETE', url: '/authsvc/api/tokens', bearer: jwt, body: { token_hash_prefix: prefix } }), 404, 'NOT_FOUND')
  })

  it('revoke by prefix: fewer than 8 hex chars or non-hex → 400', async () => {
    const jwt = await sessionJwt(sc, alice)
    for (const token_hash_prefix of ['abc', 'abcdef1', 'zzzzzzzz', '', '........', 'abcd efgh', '%']) {
      assertError(await call(sc, { method: 'DELETE', url: '/authsvc/api/tokens', bearer: jwt, body: { token_hash_prefix } }), 400, 'VALIDATION_FAILED', token_hash_prefix)
    }
  })

  it('revoke by prefix cannot reach another user\'s token → 404', async () => {
    const bob = await addUser(sc, 'bob', 'bob-passphrase-1')
    const bobs = await sc.services.tokens.issue(bob.user_id, 'bob', 24)
    const jwt = await sessionJwt(sc, alice)
    assertError(await call(sc, { method: 'DELETE', url: '/authsvc/api/tokens', bearer: jwt, body: { token_hash_prefix: bobs.record.hash.slice(0, 12) } }), 404, 'NOT_FOUND')
    assert.equal((await me(sc, { bearer: bobs.token })).statusCode, 200)
  })

  it('an ambiguous prefix → 409 CONFLICT; a longer one resolves it', async () => {
    // the harness, not the service, plants two records sharing an 8-char prefix (SHA-256 never would by chance)
    const sc2 = await openSidecar()
    const dir = sc2.dir
    try {
      const erin = await addUser(sc2, 'erin', 'erin-passphrase-1')
      const base = { user_id: erin.user_id, label: 'x', created_at_iso: new Date(sc2.clock()).toISOString(), expires_at_iso: new Date(sc2.clock() + 3600_000).toISOString(), last_used_at_iso: null }
      const h1 = `deadbeef${'1'.repeat(56)}`
      const h2 = `deadbeef${'2'.repeat(56)}`
      await sc2.services.kv.set(`token:${h1}`, { ...base, hash: h1 })
      await sc2.services.kv.set(`token:${h2}`, { ...base, hash: h2 })
      const exp = Date.parse(base.expires_at_iso)
      await sc2.services.kv.set(`token_index:${erin.user_id}`, { entries: [[h1, exp], [h2, exp]] })
      await sc2.close({ keepDir: true })
      const sc3 = await openSidecar({ dir })
      try {
        const jwt = await sessionJwt(sc3, sc3.services.users.byUsername('erin')!)
        assert.equal((json(await call(sc3, { url: '/authsvc/api/tokens', bearer: jwt })).tokens as unknown[]).length, 2)
        assertError(await call(sc3, { method: 'DELETE', url: '/authsvc/api/tokens', bearer: jwt, body: { token_hash_prefix: 'deadbeef' } }), 409, 'CONFLICT')
        assert.equal((await call(sc3, { method: 'DELETE', url: '/authsvc/api/tokens', bearer: jwt, body: { token_hash_prefix: 'deadbeef1...' } })).statusCode, 200)
        assert.equal((json(await call(sc3, { url: '/authsvc/api/tokens', bearer: jwt })).tokens as unknown[]).length, 1)
      } finally {
        await sc3.close()
      }
    } catch (err) {
      await sc2.close().catch(() => {})
      throw err
    }
  })
})
