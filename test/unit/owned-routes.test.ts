/**
 * Owned routes through Fastify inject (SPEC §5.2, §5.4): registration,
 * login, cookies, logout, sessions, API tokens, the /api/authsvc twin, the
 * admin API, and a robustness table that feeds every owned route bad input
 * and checks for a stable 4xx, never a 500, and an unchanged store.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { LightMyRequestResponse } from 'fastify'
import sqlite3 from 'sqlite3'
import { ERRORS } from '../../sidecar/src/errors.js'
import type { ApiTokenRecord } from '../../sidecar/src/identity/api-tokens.js'
import {
  HOST, addUser, apiToken, assertDenied, assertError, assertPass, bootstrapAdmin, call, decide, errorCode, openSidecar,
  sessionJwt, type CallOptions, type Sidecar,
} from './fixtures.js'

const FORM = { 'content-type': 'application/x-www-form-urlencoded' }
const NAVIGATE = { 'sec-fetch-mode': 'navigate', accept: 'text/html' }
const json = (res: LightMyRequestResponse) => JSON.parse(res.body) as Record<string, any>
const setCookie = (res: LightMyRequestResponse): string => {
  const raw = res.headers['set-cookie']
  return Array.isArray(raw) ? raw.join('\n') : String(raw ?? '')
}
const form = (fields: Record<string, string>) => new URLSearchParams(fields).toString()

async function login(sc: Sidecar, username: string, password: string, extra: Partial<CallOptions> = {}): Promise<LightMyRequestResponse> {
  return call(sc, { method: 'POST', url: '/login', body: { username, password }, ...extra })
}

async function me(sc: Sidecar, o: Partial<CallOptions>): Promise<LightMyRequestResponse> {
  return call(sc, { url: '/authsvc/api/me', ...o })
}

// ------------------------------------------------------------- registration

describe('registration', () => {
  it('the first user registers publicly and is admin (a role in the body is ignored)', async () => {
    const sc = await openSidecar()
    try {
      const res = await call(sc, { method: 'POST', url: '/register', body: { username: 'first', password: 'first-passphrase-1', role: 'guest' } })
      assert.equal(res.statusCode, 201)
      assert.deepEqual(json(res), { message: 'User registered', username: 'first', role: 'admin' })
      assert.equal(sc.services.users.byUsername('first')?.role, 'admin')
    } finally {
      await sc.close()
    }
  })

  it('the first user can register with a form body', async () => {
    const sc = await openSidecar()
    try {
      const res = await call(sc, { method: 'POST', url: '/register', headers: FORM, body: form({ username: 'formuser', password: 'form-passphrase-1' }) })
      assert.equal(res.statusCode, 201, res.body)
    } finally {
      await sc.close()
    }
  })

  it('two concurrent first registrations make exactly one admin', async () => {
    const sc = await openSidecar()
    try {
      const results = await Promise.all([
        call(sc, { method: 'POST', url: '/register', body: { username: 'racer-one', password: 'racer-passphrase-1' } }),
        call(sc, { method: 'POST', url: '/register', body: { username: 'racer-two', password: 'racer-passphrase-2' } }),
        call(sc, { method: 'POST', url: '/register', body: { username: 'racer-three', password: 'racer-passphrase-3' } }),
      ])
      assert.deepEqual(results.map((r) => r.statusCode).sort(), [201, 403, 403])
      assert.equal(sc.services.users.enabledAdmins().length, 1)
    } finally {
      await sc.close()
    }
  })

  describe('after the first user', () => {
    let sc: Sidecar
    let adminJwt: string
    let userJwt: string
    before(async () => {
      sc = await openSidecar()
      adminJwt = (await bootstrapAdmin(sc)).jwt
      userJwt = await sessionJwt(sc, await addUser(sc, 'plainuser', 'plain-passphrase-1'))
    })
    after(() => sc.close())

    it('anonymous registration → 403 REGISTRATION_CLOSED (even with valid fields or role admin)', async () => {
      for (const body of [{ username: 'eve', password: 'eve-passphrase-1' }, { username: 'eve', password: 'eve-passphrase-1', role: 'admin' }, { username: '!', password: 'x' }]) {
        assertError(await call(sc, { method: 'POST', url: '/register', body }), 403, 'REGISTRATION_CLOSED')
      }
      assert.equal(sc.services.users.byUsername('eve'), undefined)
    })

    it('a non-admin user cannot register others → 403 REGISTRATION_CLOSED', async () => {
      assertError(await call(sc, { method: 'POST', url: '/register', bearer: userJwt, body: { username: 'eve', password: 'eve-passphrase-1' } }), 403, 'REGISTRATION_CLOSED')
    })

    it('an admin registers users: role user by default, a known role when given, an unknown role refused', async () => {
      const a = await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: 'newbie', password: 'newbie-passphrase-1' } })
      assert.equal(a.statusCode, 201)
      assert.equal(json(a).role, 'user')
      const b = await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: 'guesty', password: 'guesty-passphrase-1', role: 'guest' } })
      assert.equal(json(b).role, 'guest')
      assertError(await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: 'nobody1', password: 'nobody-passphrase-1', role: 'root' } }), 400, 'VALIDATION_FAILED')
    })

    it('an admin cookie registration must be same-origin (CSRF), and passes when it is', async () => {
      assertError(await call(sc, { method: 'POST', url: '/register', cookie: adminJwt, body: { username: 'csrf-victim', password: 'csrf-passphrase-1' } }), 403, 'CSRF_REJECTED')
      assertError(await call(sc, { method: 'POST', url: '/register', cookie: adminJwt, headers: { origin: 'https://evil.example' }, body: { username: 'csrf-victim', password: 'csrf-passphrase-1' } }), 403, 'CSRF_REJECTED')
      assert.equal(sc.services.users.byUsername('csrf-victim'), undefined)
      const ok = await call(sc, { method: 'POST', url: '/register', cookie: adminJwt, sameOrigin: true, body: { username: 'csrf-ok', password: 'csrf-passphrase-1' } })
      assert.equal(ok.statusCode, 201)
    })

    const badUsernames = ['ab', 'a'.repeat(65), '.hidden', '-dash', 'has space', 'ünïcode', 'a/b', 'a\\b', '', 'semi;colon', 'new\nline', 'guest', 'Guest', 'default', 'DEFAULTS']
    for (const username of badUsernames) {
      it(`username ${JSON.stringify(username)} → 400 VALIDATION_FAILED`, async () => {
        assertError(await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username, password: 'valid-passphrase-1' } }), 400, 'VALIDATION_FAILED')
      })
    }

    for (const username of ['abc', 'a'.repeat(64), '_under', '0digit', 'dots.and-dashes_', 'admin']) {
      it(`username ${JSON.stringify(username.length > 20 ? `${username.slice(0, 8)}…(${username.length})` : username)} is accepted`, async () => {
        const res = await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username, password: 'valid-passphrase-1' } })
        assert.equal(res.statusCode, 201, res.body)
      })
    }

    it('usernames are unique case-insensitively → 409 CONFLICT', async () => {
      await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: 'Casey', password: 'casey-passphrase-1' } })
      assertError(await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: 'casey', password: 'casey-passphrase-2' } }), 409, 'CONFLICT')
      assertError(await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: 'ROOT-ADMIN', password: 'casey-passphrase-2' } }), 409, 'CONFLICT')
    })

    const badPasswords: Array<[string, string]> = [
      ['7 characters', 'abcdefg'],
      ['empty', ''],
      ['1025 characters', 'x'.repeat(1025)],
      ['a common password', 'password123'],
      ['a common password in other case', 'PassWord123'],
      ['another common one', 'qwertyuiop'],
    ]
    for (const [name, password] of badPasswords) {
      it(`password ${name} → 400 VALIDATION_FAILED`, async () => {
        assertError(await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: `pw-${name.length}-${password.length}`, password } }), 400, 'VALIDATION_FAILED')
      })
    }

    for (const [name, password] of [['8 characters', 'k9#Lm2@x'], ['1024 characters', 'Zq'.repeat(512)], ['only spaces', '         ']] as const) {
      it(`password of ${name} is accepted`, async () => {
        const res = await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: `pwok-${password.length}`, password } })
        assert.equal(res.statusCode, 201, res.body)
      })
    }

    it('passwords are compared exactly: a trailing or leading space is a different password', async () => {
      await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: 'spacey', password: 'trailing-space-pass ' } })
      assertError(await login(sc, 'spacey', 'trailing-space-pass'), 401, 'INVALID_CREDENTIALS')
      assertError(await login(sc, 'spacey', ' trailing-space-pass '), 401, 'INVALID_CREDENTIALS')
      assert.equal((await login(sc, 'spacey', 'trailing-space-pass ')).statusCode, 200)
      await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: 'plainpw', password: 'no-space-password' } })
      assertError(await login(sc, 'plainpw', 'no-space-password '), 401, 'INVALID_CREDENTIALS')
      assertError(await login(sc, 'plainpw', 'NO-SPACE-PASSWORD'), 401, 'INVALID_CREDENTIALS')
    })

    it('a long password is never truncated (the 1024th character counts)', async () => {
      const long = 'Lp'.repeat(511) + 'ab'
      await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: 'longpw', password: long } })
      assertError(await login(sc, 'longpw', `${long.slice(0, 1023)}x`), 401, 'INVALID_CREDENTIALS')
      assertError(await login(sc, 'longpw', long.slice(0, 72)), 401, 'INVALID_CREDENTIALS')
      assert.equal((await login(sc, 'longpw', long)).statusCode, 200)
    })

    it('a form-body password keeps its exact bytes (+, %20, trailing space)', async () => {
      const password = 'a+b c%20d '
      const reg = await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, headers: FORM, body: form({ username: 'formpw', password }) })
      assert.equal(reg.statusCode, 201, reg.body)
      assert.equal((await login(sc, 'formpw', password)).statusCode, 200)
    })
  })
})

// ------------------------------------------------------------------- login

describe('login, cookie and logout', () => {
  let sc: Sidecar
  const PASSWORD = 'alice-passphrase-1'
  before(async () => {
    sc = await openSidecar({ config: { trusted_proxies: ['10.0.0.5'] } })
    await bootstrapAdmin(sc)
    await addUser(sc, 'alice', PASSWORD)
  })
  after(() => sc.close())

  it('JSON login → 200 with jwt_token, redirect_url, remember_me and a session cookie', async () => {
    const res = await login(sc, 'alice', PASSWORD)
    assert.equal(res.statusCode, 200)
    const body = json(res)
    assert.deepEqual(Object.keys(body).sort(), ['jwt_token', 'message', 'redirect_url', 'remember_me'])
    assert.equal(body.message, 'Login successful')
    assert.equal(body.redirect_url, '/')
    assert.equal(body.remember_me, false)
    assert.match(body.jwt_token, /^[\w-]+\.[\w-]+\.[\w-]+$/)
    assert.ok(setCookie(res).startsWith(`jwt_token=${body.jwt_token};`))
    const who = json(await me(sc, { bearer: body.jwt_token }))
    assert.equal(who.username, 'alice')
    assert.equal(who.auth_type, 'session')
  })

  it('the JWT carries the SPEC §3 claims', async () => {
    const token = json(await login(sc, 'alice', PASSWORD)).jwt_token as string
    const header = JSON.parse(Buffer.from(token.split('.')[0], 'base64url').toString())
    const claims = JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString())
    assert.equal(header.alg, 'HS256')
    assert.deepEqual(Object.keys(claims).sort(), ['exp', 'iat', 'jti', 'sub', 'typ', 'username'])
    assert.equal(claims.typ, 'session')
    assert.equal(claims.sub, sc.services.users.byUsername('alice')!.user_id)
    assert.equal(claims.exp - claims.iat, 12 * 3600)
  })

  it('form login works; a browser navigation gets 302 to redirect_url', async () => {
    const api = await call(sc, { method: 'POST', url: '/login', headers: FORM, body: form({ username: 'alice', password: PASSWORD }) })
    assert.equal(api.statusCode, 200)
    const nav = await call(sc, { method: 'POST', url: '/login', headers: { ...FORM, ...NAVIGATE }, body: form({ username: 'alice', password: PASSWORD, next: '/queue?x=1' }) })
    assert.equal(nav.statusCode, 302)
    assert.equal(nav.headers.location, '/queue?x=1')
    assert.match(setCookie(nav), /^jwt_token=/)
  })

  for (const [next, expected] of [['/history?max=5', '/history?max=5'], ['//evil.example/x', '/'], ['https://evil.example', '/'], ['/\\evil.example', '/'], ['javascript:alert(1)', '/'], ['/%0d%0aSet-Cookie:x=y', '/%0d%0aSet-Cookie:x=y']] as const) {
    it(`next=${JSON.stringify(next)} → redirect_url ${JSON.stringify(expected)}`, async () => {
      const res = await call(sc, { method: 'POST', url: `/login?next=${encodeURIComponent(next)}`, body: { username: 'alice', password: PASSWORD } })
      assert.equal(json(res).redirect_url, expected)
    })
  }

  it('cookie: HttpOnly, SameSite=Lax, Path=/, no Max-Age and no Secure by default', async () => {
    const c = setCookie(await login(sc, 'alice', PASSWORD))
    assert.match(c, /; HttpOnly/)
    assert.match(c, /; SameSite=Lax/)
    assert.match(c, /; Path=\//)
    assert.doesNotMatch(c, /Max-Age|Expires/i)
    assert.doesNotMatch(c, /Secure/)
  })

  it('cookie: Max-Age = the JWT lifetime only with remember_me (JSON true or form "on")', async () => {
    const a = await call(sc, { method: 'POST', url: '/login', body: { username: 'alice', password: PASSWORD, remember_me: true } })
    assert.match(setCookie(a), /; Max-Age=43200(;|$)/)
    assert.equal(json(a).remember_me, true)
    const b = await call(sc, { method: 'POST', url: '/login', headers: FORM, body: form({ username: 'alice', password: PASSWORD, remember_me: 'on' }) })
    assert.match(setCookie(b), /; Max-Age=43200(;|$)/)
    const c = await call(sc, { method: 'POST', url: '/login', body: { username: 'alice', password: PASSWORD, remember_me: false } })
    assert.doesNotMatch(setCookie(c), /Max-Age/)
  })

  it('cookie: Secure only when the plugin says the scheme is https (or a trusted proxy does)', async () => {
    assert.match(setCookie(await login(sc, 'alice', PASSWORD, { scheme: 'https' })), /; Secure/)
    assert.doesNotMatch(setCookie(await login(sc, 'alice', PASSWORD, { scheme: 'http' })), /Secure/)
    assert.doesNotMatch(setCookie(await login(sc, 'alice', PASSWORD, { headers: { 'x-forwarded-proto': 'https' } })), /Secure/, 'untrusted X-Forwarded-Proto')
    assert.match(setCookie(await login(sc, 'alice', PASSWORD, { peer: '10.0.0.5', headers: { 'x-forwarded-proto': 'https' } })), /; Secure/)
  })

  it('is-https reflects the same facts', async () => {
    assert.deepEqual(json(await call(sc, { url: '/authsvc/api/is-https' })), { is_https: false })
    assert.deepEqual(json(await call(sc, { url: '/authsvc/api/is-https', scheme: 'https' })), { is_https: true })
    assert.deepEqual(json(await call(sc, { url: '/api/authsvc/api/is-https', headers: { 'x-forwarded-proto': 'https' } })), { is_https: false })
  })

  it('unknown user, wrong password and disabled user answer the same status and body', async () => {
    const disabled = await addUser(sc, 'disabled-dan', 'dan-passphrase-1')
    await sc.services.users.update(disabled.user_id, { disabled: true })
    const answers = await Promise.all([
      login(sc, 'no-such-user', PASSWORD),
      login(sc, 'alice', 'wrong-passphrase-1'),
      login(sc, 'disabled-dan', 'dan-passphrase-1'),
      login(sc, 'no-such-user', 'x'),
    ])
    for (const res of answers) assertError(res, 401, 'INVALID_CREDENTIALS')
    assert.equal(new Set(answers.map((r) => r.body)).size, 1, 'identical bodies')
    for (const res of answers) assert.equal(res.headers['set-cookie'], undefined)
  })

  it('missing username or password → 400 VALIDATION_FAILED, no cookie', async () => {
    for (const body of [{}, { username: 'alice' }, { password: PASSWORD }]) {
      const res = await call(sc, { method: 'POST', url: '/login', body })
      assertError(res, 400, 'VALIDATION_FAILED')
      assert.equal(res.headers['set-cookie'], undefined)
    }
  })

  it('a cross-site login (Sec-Fetch-Site cross-site) is refused', async () => {
    assertError(await login(sc, 'alice', PASSWORD, { headers: { 'sec-fetch-site': 'cross-site' } }), 403, 'CSRF_REJECTED')
  })

  it('logout revokes the session (bearer) and clears the cookie', async () => {
    const token = json(await login(sc, 'alice', PASSWORD)).jwt_token as string
    const out = await call(sc, { method: 'POST', url: '/logout', bearer: token })
    assert.equal(out.statusCode, 200)
    assert.deepEqual(json(out), { message: 'Logged out' })
    assert.match(setCookie(out), /^jwt_token=;.*(Max-Age=0|Expires=Thu, 01 Jan 1970)/)
    assertError(await me(sc, { bearer: token }), 401, 'TOKEN_REVOKED')
    assertDenied(await decide(sc, { path: '/queue', pattern: '/queue', headers: { authorization: `Bearer ${token}` } }), 'TOKEN_REVOKED')
  })

  it('logout by cookie: GET navigation from this site → 302 /login and the session is revoked', async () => {
    const token = json(await login(sc, 'alice', PASSWORD)).jwt_token as string
    const out = await call(sc, { method: 'GET', url: '/logout', cookie: token, headers: { ...NAVIGATE, 'sec-fetch-site': 'same-origin' } })
    assert.equal(out.statusCode, 302)
    assert.equal(out.headers.location, '/login')
    assertError(await me(sc, { cookie: token }), 401, 'TOKEN_REVOKED')
  })

  it('logout without a credential is harmless (200, cookie cleared)', async () => {
    const out = await call(sc, { method: 'POST', url: '/logout' })
    assert.equal(out.statusCode, 200)
  })

  it('logout with an API token does not revoke the token', async () => {
    const alice = sc.services.users.byUsername('alice')!
    const token = await apiToken(sc, alice)
    assert.equal((await call(sc, { method: 'POST', url: '/logout', bearer: token })).statusCode, 200)
    assert.equal((await me(sc, { bearer: token })).statusCode, 200)
  })
})

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
    assert.deepEqual(Object.keys(sessions[0]).sort(), ['created_at_iso', 'exp_at_iso', 'is_current', 'jti', 'last_used_at_iso'])
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
    assert.equal((await create({ label: 'by-session' }, { bearer: jwt })).statusCode, 200)
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

// -------------------------------------------------------- /api/authsvc twin

describe('/api/authsvc/... behaves exactly as /authsvc/...', () => {
  let sc: Sidecar
  let adminJwt: string
  let aliceJwt: string
  let aliceToken: string
  before(async () => {
    sc = await openSidecar()
    adminJwt = (await bootstrapAdmin(sc)).jwt
    const alice = await addUser(sc, 'alice', 'alice-passphrase-1')
    aliceJwt = await sessionJwt(sc, alice)
    aliceToken = await apiToken(sc, alice)
  })
  after(() => sc.close())

  const normalise = (res: LightMyRequestResponse) => ({
    status: res.statusCode,
    type: String(res.headers['content-type']),
    body: res.body.replace(/ast_[\w-]{43}/g, 'TOKEN').replace(/"token_hash_prefix":"[0-9a-f]+"/g, '"token_hash_prefix":"P"').replace(/"expires_iso":"[^"]+"/g, '"expires_iso":"T"'),
  })

  const rows: Array<[string, Partial<CallOptions> & { path: string }]> = [
    ['me anonymous', { path: '/api/me' }],
    ['me as alice', { path: '/api/me', bearer: 'ALICE' }],
    ['me with a broken token', { path: '/api/me', bearer: 'ast_broken' }],
    ['me via the query token', { path: '/api/me?token=ALICE_TOKEN' }],
    ['tokens list', { path: '/api/tokens', bearer: 'ALICE' }],
    ['sessions anonymous', { path: '/me/sessions' }],
    ['current-token by cookie', { path: '/me/current-token', cookie: 'ALICE' }],
    ['users as alice', { path: '/api/users', bearer: 'ALICE' }],
    ['users as admin', { path: '/api/users', bearer: 'ADMIN' }],
    ['groups as admin', { path: '/api/groups', bearer: 'ADMIN' }],
    ['ip-lists as alice', { path: '/api/ip-lists', bearer: 'ALICE' }],
    ['guest-jwt as alice', { path: '/api/settings/guest-jwt', bearer: 'ALICE' }],
    ['PUT guest-jwt as alice', { path: '/api/settings/guest-jwt', method: 'PUT', bearer: 'ALICE', body: { allow_guest_jwt: true } }],
    ['PUT groups by cookie cross-site', { path: '/api/groups', method: 'PUT', cookie: 'ADMIN', headers: { origin: 'https://evil.example' }, body: { groups: {} } }],
    ['generate_token wrong password', { path: '/generate_token', method: 'POST', body: { username: 'alice', password: 'wrong-pass-word' } }],
    ['generate_token missing credential', { path: '/generate_token', method: 'POST', body: {} }],
    ['unknown route', { path: '/api/nope' }],
    ['static asset', { path: '/static/authsvc.css' }],
    ['unknown static asset', { path: '/static/../../package.json' }],
    ['health', { path: '/health' }],
  ]
  for (const [name, row] of rows) {
    it(name, async () => {
      const sub = (v?: string) => (v === 'ALICE' ? aliceJwt : v === 'ADMIN' ? adminJwt : v)
      const make = (prefix: string): CallOptions => ({
        ...row, url: prefix + row.path.replace('ALICE_TOKEN', aliceToken), bearer: sub(row.bearer), cookie: sub(row.cookie),
      })
      const plain = await call(sc, make('/authsvc'))
      const twin = await call(sc, make('/api/authsvc'))
      assert.deepEqual(normalise(twin), normalise(plain))
      assert.ok(plain.statusCode < 500, plain.body)
    })
  }
})

// -------------------------------------------------------------- admin: users

describe('admin: users', () => {
  let sc: Sidecar
  let adminJwt: string
  let admin: Awaited<ReturnType<typeof addUser>>
  before(async () => {
    sc = await openSidecar()
    const boot = await bootstrapAdmin(sc)
    adminJwt = boot.jwt
    admin = boot.user
  })
  after(() => sc.close())

  const put = (target: string, body: unknown, bearer = adminJwt) => call(sc, { method: 'PUT', url: `/authsvc/api/users/${target}`, bearer, body })
  const del = (target: string, bearer = adminJwt) => call(sc, { method: 'DELETE', url: `/authsvc/api/users/${target}`, bearer })

  it('GET users: the public fields only (never password_hash)', async () => {
    await addUser(sc, 'listed', 'listed-passphrase-1')
    const res = await call(sc, { url: '/authsvc/api/users', bearer: adminJwt })
    const users = json(res).users as Array<Record<string, unknown>>
    assert.ok(users.length >= 2)
    for (const u of users) assert.deepEqual(Object.keys(u).sort(), ['created_at_iso', 'disabled', 'mfa_enabled', 'role', 'sfw_check', 'user_id', 'username'])
    assert.doesNotMatch(res.body, /argon2|password/)
  })

  it('non-admins → 403 ADMIN_REQUIRED, anonymous → 401 on every admin route', async () => {
    const jwt = await sessionJwt(sc, await addUser(sc, 'nonadmin', 'nonadmin-passphrase-1'))
    const routes: Array<[string, string, unknown?]> = [
      ['GET', '/authsvc/api/users'], ['PUT', '/authsvc/api/users/nonadmin', { role: 'admin' }], ['DELETE', '/authsvc/api/users/root-admin'],
      ['GET', '/authsvc/api/groups'], ['PUT', '/authsvc/api/groups', { groups: { admin: {} } }], ['GET', '/authsvc/api/ip-lists'],
      ['PUT', '/authsvc/api/ip-lists', { whitelist: [], blacklist: [] }], ['PUT', '/authsvc/api/settings/guest-jwt', { allow_guest_jwt: true }],
    ]
    for (const [method, url, body] of routes) {
      assertError(await call(sc, { method, url, bearer: jwt, body }), 403, 'ADMIN_REQUIRED', `${method} ${url}`)
      assertError(await call(sc, { method, url, body }), 401, 'AUTH_REQUIRED', `${method} ${url} anonymous`)
    }
    assert.equal(sc.services.users.byUsername('nonadmin')?.role, 'user')
  })

  it('a non-admin sending a malformed body to an admin route still gets 403 ADMIN_REQUIRED', async () => {
    const jwt = await sessionJwt(sc, await addUser(sc, 'schema-prober', 'prober-passphrase-1'))
    assertError(await put('root-admin', { role: {} }, jwt), 403, 'ADMIN_REQUIRED')
    assertError(await call(sc, { method: 'PUT', url: '/authsvc/api/users/root-admin', body: { role: {} } }), 401, 'AUTH_REQUIRED')
  })

  it('role change revokes the user\'s sessions at once; the new role applies', async () => {
    const u = await addUser(sc, 'promo', 'promo-passphrase-1')
    const jwt = await sessionJwt(sc, u)
    const token = await apiToken(sc, u)
    const res = await put('promo', { role: 'guest' })
    assert.equal(res.statusCode, 200)
    assert.equal(json(res).user.role, 'guest')
    assertError(await me(sc, { bearer: jwt }), 401, 'TOKEN_REVOKED')
    assertDenied(await decide(sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: { authorization: `Bearer ${token}` } }), 'PERMISSION_DENIED')
  })

  it('password reset revokes sessions and API tokens; the old password stops working', async () => {
    const u = await addUser(sc, 'resetme', 'resetme-passphrase-1')
    const jwt = await sessionJwt(sc, u)
    const token = await apiToken(sc, u)
    assert.equal((await put('resetme', { password: 'brand-new-passphrase' })).statusCode, 200)
    assertError(await me(sc, { bearer: jwt }), 401, 'TOKEN_REVOKED')
    assert.equal((await me(sc, { bearer: token })).statusCode, 401)
    assertError(await login(sc, 'resetme', 'resetme-passphrase-1'), 401, 'INVALID_CREDENTIALS')
    assert.equal((await login(sc, 'resetme', 'brand-new-passphrase')).statusCode, 200)
  })

  it('a reset to a weak password → 400 and nothing changes', async () => {
    const u = await addUser(sc, 'weakreset', 'weakreset-passphrase-1')
    const jwt = await sessionJwt(sc, u)
    assertError(await put('weakreset', { password: 'short' }), 400, 'VALIDATION_FAILED')
    assertError(await put('weakreset', { password: 'password1' }), 400, 'VALIDATION_FAILED')
    assert.equal((await me(sc, { bearer: jwt })).statusCode, 200)
    assert.equal((await login(sc, 'weakreset', 'weakreset-passphrase-1')).statusCode, 200)
  })

  it('disable revokes sessions and tokens, login then fails like a wrong password; re-enable allows login', async () => {
    const u = await addUser(sc, 'disableme', 'disableme-passphrase-1')
    const jwt = await sessionJwt(sc, u)
    assert.equal((await put(u.user_id, { disabled: true })).statusCode, 200, 'target by user id')
    assertError(await me(sc, { bearer: jwt }), 401, 'TOKEN_REVOKED')
    assertError(await login(sc, 'disableme', 'disableme-passphrase-1'), 401, 'INVALID_CREDENTIALS')
    assert.equal((await put('disableme', { disabled: false })).statusCode, 200)
    assert.equal((await login(sc, 'disableme', 'disableme-passphrase-1')).statusCode, 200)
  })

  it('sfw_check and mfa_reset change only those fields and keep sessions', async () => {
    const u = await addUser(sc, 'sfw', 'sfw-passphrase-1')
    await sc.services.users.update(u.user_id, { mfa_enabled: true })
    const jwt = await sessionJwt(sc, u)
    const res = await put('sfw', { sfw_check: false, mfa_reset: true })
    assert.equal(json(res).user.sfw_check, false)
    assert.equal(json(res).user.mfa_enabled, false)
    assert.equal((await me(sc, { bearer: jwt })).statusCode, 200)
  })

  it('unknown user → 404; unknown role → 400', async () => {
    assertError(await put('ghost-user', { sfw_check: false }), 404, 'NOT_FOUND')
    assertError(await del('ghost-user'), 404, 'NOT_FOUND')
    assertError(await put('sfw', { role: 'superuser' }), 400, 'VALIDATION_FAILED')
  })

  it('the last enabled admin cannot be demoted, disabled or deleted → 409, even by itself', async () => {
    assert.equal(sc.services.users.enabledAdmins().length, 1)
    assertError(await put('root-admin', { role: 'user' }), 409, 'CONFLICT')
    assertError(await put('root-admin', { disabled: true }), 409, 'CONFLICT')
    assertError(await del('root-admin'), 409, 'CONFLICT')
    assertError(await put(admin.user_id, { role: 'guest', sfw_check: false }), 409, 'CONFLICT')
    const after = sc.services.users.byUsername('root-admin')!
    assert.equal(after.role, 'admin')
    assert.equal(after.disabled, false)
    assert.equal(after.sfw_check, true, 'a refused patch changes nothing')
  })

  it('with a second admin, one may go; then the other is the last', async () => {
    const second = await addUser(sc, 'second-admin', 'second-passphrase-1', 'admin')
    assert.equal((await put('second-admin', { role: 'user' })).statusCode, 200)
    assertError(await put('root-admin', { role: 'user' }), 409, 'CONFLICT')
    await put('second-admin', { role: 'admin' })
    const disabledAdmin = await addUser(sc, 'off-admin', 'off-passphrase-1', 'admin')
    await sc.services.users.update(disabledAdmin.user_id, { disabled: true })
    assert.equal((await del(second.user_id)).statusCode, 200)
    assertError(await del('root-admin'), 409, 'CONFLICT', 'a disabled admin does not count')
  })

  it('delete removes the user, its sessions and tokens; the name can be registered again', async () => {
    const u = await addUser(sc, 'deleteme', 'deleteme-passphrase-1')
    const jwt = await sessionJwt(sc, u)
    const token = await apiToken(sc, u)
    const res = await del('deleteme')
    assert.equal(res.statusCode, 200)
    assertError(await me(sc, { bearer: jwt }), 401, 'TOKEN_REVOKED')
    assert.equal((await me(sc, { bearer: token })).statusCode, 401)
    assert.equal(sc.services.sessions.activeForUser(u.user_id).length, 0)
    assert.equal(sc.services.tokens.activeForUser(u.user_id).length, 0)
    assert.ok(!(json(await call(sc, { url: '/authsvc/api/users', bearer: adminJwt })).users as Array<{ username: string }>).some((x) => x.username === 'deleteme'))
    assert.equal((await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: 'deleteme', password: 'deleteme-passphrase-2' } })).statusCode, 201)
  })
})

// ---------------------------------------------------- admin: groups, lists, guest

describe('admin: groups, IP lists, guest login', () => {
  let sc: Sidecar
  let adminJwt: string
  before(async () => {
    sc = await openSidecar()
    adminJwt = (await bootstrapAdmin(sc)).jwt
  })
  after(() => sc.close())

  const groupsFile = () => JSON.parse(readFileSync(join(sc.dir, 'authsvc_groups.json'), 'utf8')) as Record<string, unknown>

  it('GET groups: the seeded defaults', async () => {
    const groups = json(await call(sc, { url: '/authsvc/api/groups', bearer: adminJwt })).groups
    assert.deepEqual(Object.keys(groups).sort(), ['admin', 'guest', 'user'])
    assert.equal(groups.user.can_run, true)
    assert.equal(groups.user.can_download_models, false)
    assert.equal(groups.guest.can_run, false)
    assert.equal(groups.guest.can_access_api, true)
  })

  it('PUT groups replaces the map, on disk too, and applies to the next decision', async () => {
    const current = json(await call(sc, { url: '/authsvc/api/groups', bearer: adminJwt })).groups
    const next = { ...current, artist: { can_run: true, can_access_api: true } }
    const res = await call(sc, { method: 'PUT', url: '/authsvc/api/groups', bearer: adminJwt, body: { groups: next } })
    assert.equal(res.statusCode, 200, res.body)
    assert.deepEqual(groupsFile(), next)
    const artist = await addUser(sc, 'artist1', 'artist-passphrase-1', 'artist')
    const jwt = await sessionJwt(sc, artist)
    assertPass(await decide(sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: { authorization: `Bearer ${jwt}` } }))
    assertDenied(await decide(sc, { method: 'POST', path: '/upload/image', pattern: '/upload/image', headers: { authorization: `Bearer ${jwt}` } }), 'PERMISSION_DENIED')
  })

  const refused: Array<[string, unknown]> = [
    ['an unknown key', { can_fly: true }],
    ['a non-boolean value', { can_run: 'yes' }],
    ['a null value', { can_run: null }],
    ['a role that is not an object', 'all'],
  ]
  for (const [name, role] of refused) {
    it(`PUT groups with ${name} → 400, nothing changes`, async () => {
      const before = JSON.stringify(groupsFile())
      const current = json(await call(sc, { url: '/authsvc/api/groups', bearer: adminJwt })).groups
      const res = await call(sc, { method: 'PUT', url: '/authsvc/api/groups', bearer: adminJwt, body: { groups: { ...current, broken: role } } })
      assertError(res, 400, 'VALIDATION_FAILED')
      assert.equal(JSON.stringify(groupsFile()), before)
      assert.equal(sc.services.roles.has('broken'), false)
    })
  }

  it('PUT groups without the admin role → 400 (the admin role cannot be removed)', async () => {
    const res = await call(sc, { method: 'PUT', url: '/authsvc/api/groups', bearer: adminJwt, body: { groups: { user: { can_run: true } } } })
    assertError(res, 400, 'VALIDATION_FAILED')
    assert.ok(sc.services.roles.has('admin'))
  })

  it('PUT groups with invalid role names → 400', async () => {
    for (const name of ['bad role', '.dot', 'x'.repeat(65), '']) {
      const res = await call(sc, { method: 'PUT', url: '/authsvc/api/groups', bearer: adminJwt, body: { groups: { admin: {}, [name]: {} } } })
      assertError(res, 400, 'VALIDATION_FAILED', JSON.stringify(name))
    }
  })

  it('an admin role written with every key false still passes everything', async () => {
    const current = json(await call(sc, { url: '/authsvc/api/groups', bearer: adminJwt })).groups
    const res = await call(sc, { method: 'PUT', url: '/authsvc/api/groups', bearer: adminJwt, body: { groups: { ...current, admin: { can_run: false, can_access_api: false } } } })
    assert.equal(res.statusCode, 200)
    assertPass(await decide(sc, { method: 'POST', path: '/free', pattern: '/free', headers: { authorization: `Bearer ${adminJwt}` } }))
    assertPass(await decide(sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: { authorization: `Bearer ${adminJwt}` } }))
  })

  it('GET ip-lists: empty by default', async () => {
    assert.deepEqual(json(await call(sc, { url: '/authsvc/api/ip-lists', bearer: adminJwt })), { whitelist: [], blacklist: [] })
  })

  const badLists: Array<[string, unknown]> = [
    ['blacklisting 127.0.0.1', { whitelist: [], blacklist: [{ ip: '127.0.0.1', permanent: true }] }],
    ['blacklisting 127.0.0.0/8', { whitelist: [], blacklist: [{ ip: '127.0.0.0/8', permanent: true }] }],
    ['blacklisting 127.5.5.5', { whitelist: [], blacklist: [{ ip: '127.5.5.5' }] }],
    ['blacklisting ::1', { whitelist: [], blacklist: [{ ip: '::1', permanent: true }] }],
    ['blacklisting ::ffff:127.0.0.1', { whitelist: [], blacklist: [{ ip: '::ffff:127.0.0.1', permanent: true }] }],
    ['an invalid blacklist address', { whitelist: [], blacklist: [{ ip: 'not-an-ip' }] }],
    ['an invalid whitelist CIDR', { whitelist: ['10.0.0.0/40'], blacklist: [] }],
    ['a bad expiry date', { whitelist: [], blacklist: [{ ip: '10.1.1.1', expires_at_iso: 'tomorrow' }] }],
    ['a missing list', { whitelist: [] }],
  ]
  for (const [name, body] of badLists) {
    it(`PUT ip-lists ${name} → 400 and the lists are unchanged`, async () => {
      const before = json(await call(sc, { url: '/authsvc/api/ip-lists', bearer: adminJwt }))
      const res = await call(sc, { method: 'PUT', url: '/authsvc/api/ip-lists', bearer: adminJwt, body })
      assertError(res, 400, 'VALIDATION_FAILED')
      assert.deepEqual(json(await call(sc, { url: '/authsvc/api/ip-lists', bearer: adminJwt })), before)
    })
  }

  it('PUT ip-lists: an unknown key in an entry is refused (400 VALIDATION_FAILED), nothing stored', async () => {
    const before = json(await call(sc, { url: '/authsvc/api/ip-lists', bearer: adminJwt }))
    const res = await call(sc, { method: 'PUT', url: '/authsvc/api/ip-lists', bearer: adminJwt, body: { whitelist: [], blacklist: [{ ip: '10.1.1.1', permanent: true, reason: 'x' }] } })
    assertError(res, 400, 'VALIDATION_FAILED')
    assert.deepEqual(json(await call(sc, { url: '/authsvc/api/ip-lists', bearer: adminJwt })), before)
  })

  it('PUT ip-lists applies at once and persists; loopback still gets in', async () => {
    const lists = { whitelist: ['198.51.100.0/24'], blacklist: [{ ip: '198.51.100.66', permanent: true }] }
    const res = await call(sc, { method: 'PUT', url: '/authsvc/api/ip-lists', bearer: adminJwt, body: lists })
    assert.equal(res.statusCode, 200, res.body)
    assert.deepEqual(json(await call(sc, { url: '/authsvc/api/ip-lists', bearer: adminJwt })), lists)
    assertDenied(await decide(sc, { path: '/queue', pattern: '/queue', peer: '198.51.100.66' }), 'IP_DENIED')
    assertDenied(await decide(sc, { path: '/queue', pattern: '/queue', peer: '203.0.113.1' }), 'IP_DENIED')
    assertDenied(await decide(sc, { path: '/queue', pattern: '/queue', peer: '198.51.100.7' }), 'AUTH_REQUIRED')
    assertPass(await decide(sc, { path: '/queue', pattern: '/queue', headers: { authorization: `Bearer ${adminJwt}` } }))
    assert.equal((await call(sc, { method: 'PUT', url: '/authsvc/api/ip-lists', bearer: adminJwt, body: { whitelist: [], blacklist: [] } })).statusCode, 200)
  })

  it('guest login: 403 while disabled; an admin enables it; the guest session acts as the guest role', async () => {
    assertError(await call(sc, { method: 'POST', url: '/login', body: { guest_login: true } }), 403, 'GUEST_DISABLED')
    assert.deepEqual(json(await call(sc, { url: '/authsvc/api/settings/guest-jwt', bearer: adminJwt })), { allow_guest_jwt: false })
    assertError(await call(sc, { url: '/authsvc/api/settings/guest-jwt' }), 401, 'AUTH_REQUIRED')
    const put = await call(sc, { method: 'PUT', url: '/authsvc/api/settings/guest-jwt', bearer: adminJwt, body: { allow_guest_jwt: true } })
    assert.deepEqual(json(put), { allow_guest_jwt: true })
    const res = await call(sc, { method: 'POST', url: '/login', headers: FORM, body: form({ guest_login: 'true' }) })
    assert.equal(res.statusCode, 200, res.body)
    const jwt = json(res).jwt_token as string
    const who = json(await me(sc, { bearer: jwt }))
    assert.equal(who.role, 'guest')
    assert.equal(who.is_admin, false)
    assert.equal(who.permissions.can_run, false)
    assert.equal(json(await call(sc, { url: '/authsvc/api/settings/guest-jwt', bearer: jwt })).allow_guest_jwt, true)
    assertError(await call(sc, { method: 'POST', url: '/authsvc/generate_token', bearer: jwt, body: {} }), 401, 'AUTH_REQUIRED')
    await call(sc, { method: 'PUT', url: '/authsvc/api/settings/guest-jwt', bearer: adminJwt, body: { allow_guest_jwt: false } })
    assertError(await me(sc, { bearer: jwt }), 401, 'TOKEN_REVOKED')
  })
})

// ------------------------------------------------------------ robustness

interface OwnedRoute {
  method: string
  url: string
  hasBody: boolean
  /** the route accepts `{}` (an empty patch), so a body that reduces to `{}` may pass */
  emptyOk?: boolean
}

const TWO_MB = 2 * 1024 * 1024
const FIELDS = ['username', 'password', 'role', 'remember_me', 'guest_login', 'next', 'label', 'expire_hours', 'mfa_temp_token', 'code', 'backup_code', 'token_hash_prefix', 'jti', 'allow_guest_jwt', 'groups', 'whitelist', 'blacklist', 'sfw_check', 'disabled', 'mfa_reset']
const everyField = (value: unknown) => Object.fromEntries(FIELDS.map((f) => [f, value]))
const deep = (n: number) => '['.repeat(n) + ']'.repeat(n)

/** name, content-type, payload, must the answer be 4xx (for routes with a body schema) */
const BAD_BODIES: Array<[string, string, string | Buffer, boolean]> = [
  ['every field a number', 'application/json', JSON.stringify(everyField(42)), true],
  ['every field zero', 'application/json', JSON.stringify(everyField(0)), true],
  ['every field true', 'application/json', JSON.stringify(everyField(true)), true],
  ['every field false', 'application/json', JSON.stringify(everyField(false)), true],
  ['every field null', 'application/json', JSON.stringify(everyField(null)), true],
  ['every field an object', 'application/json', JSON.stringify(everyField({ $gt: '' })), true],
  ['every field a nested array', 'application/json', JSON.stringify(everyField([[1], [2]])), true],
  ['body is an array', 'application/json', '[]', true],
  ['body is a string', 'application/json', '"admin"', true],
  ['body is a number', 'application/json', '42', true],
  ['body is null', 'application/json', 'null', true],
  ['missing fields', 'application/json', '{}', false],
  ['invalid JSON', 'application/json', '{"username": ', true],
  ['single-quoted JSON', 'application/json', "{'username': 'x'}", true],
  ['empty JSON body', 'application/json', '', true],
  ['NUL bytes', 'application/json', '\u0000\u0000', true],
  ['__proto__ pollution', 'application/json', '{"__proto__": {"isAdmin": true, "role": "admin"}, "username": "x"}', true],
  ['constructor.prototype pollution', 'application/json', '{"constructor": {"prototype": {"isAdmin": true}}}', true],
  ['deeply nested JSON', 'application/json', deep(5000), true],
  ['a 2 MB JSON body', 'application/json', JSON.stringify({ username: 'u'.repeat(TWO_MB), password: 'p' }), true],
  ['a 2 MB form body', 'application/x-www-form-urlencoded', `username=${'u'.repeat(TWO_MB)}&password=p`, true],
  ['an unsupported media type', 'application/xml', '<username>x</username>', true],
  ['a text/plain body', 'text/plain', 'username=x', true],
  ['form fields as arrays', 'application/x-www-form-urlencoded', 'username=a&username=b&password[]=x&groups[admin]=1', true],
  ['invalid UTF-8', 'application/json', Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d]), true],
]

describe('robustness: every owned route fed bad input', () => {
  let sc: Sidecar
  const routes: OwnedRoute[] = []
  let adminToken: string

  /** Every row of the store, whatever its record kind, read from the file as another process would. */
  function storeRows(): Promise<Array<{ key: string; value: string }>> {
    return new Promise((resolve, reject) => {
      const db = new sqlite3.Database(join(sc.dir, 'authsvc.sqlite'), sqlite3.OPEN_READONLY, (err) => {
        if (err) return reject(err)
        db.all('SELECT key, value FROM keyv ORDER BY key', (e: Error | null, rows: Array<{ key: string; value: string }>) => {
          db.close()
          if (e) reject(e)
          else resolve(rows)
        })
      })
    })
  }

  async function snapshot(): Promise<string> {
    await sc.services.flush() // throttle writes are awaited by the routes themselves
    return JSON.stringify({ rows: await storeRows(), groups: sc.services.roles.snapshot(), file: readFileSync(join(sc.dir, 'authsvc_groups.json'), 'utf8') })
  }

  before(async () => {
    sc = await openSidecar({
      onRoute: (r) => {
        const methods = Array.isArray(r.method) ? r.method : [r.method]
        for (const method of methods) {
          if (method === 'HEAD') continue
          const url = r.url.replace(':target_user', 'bob').replace(':name', 'authsvc.css')
          routes.push({ method, url, hasBody: r.schema?.body !== undefined })
        }
      },
    })
    const boot = await bootstrapAdmin(sc)
    await addUser(sc, 'bob', 'bob-passphrase-1')
    adminToken = await apiToken(sc, boot.user)
    await sc.services.sessions.issue(boot.user, false)
    await call(sc, { url: '/authsvc/api/me', bearer: adminToken }) // settles the token's last_used write
    // one record of every other kind, so a change to any of them shows in the snapshot
    await sc.services.settings.set('allow_guest_jwt', false)
    await sc.services.mfa.beginSetup(boot.user.user_id, boot.user.username)
    assert.equal((await call(sc, { method: 'POST', url: '/login', body: { username: 'bob', password: 'not-bobs-passphrase' } })).statusCode, 401)
    for (const route of routes.filter((r) => r.hasBody)) {
      const res = await call(sc, { method: route.method, url: route.url, bearer: adminToken, body: {} })
      route.emptyOk = res.statusCode < 400
    }
  })
  after(() => sc.close())

  it('the snapshot holds a record of every kind the store keeps', async () => {
    await snapshot()
    const kinds = new Set((await storeRows()).map((r) => r.key.slice(0, r.key.indexOf(':'))))
    assert.deepEqual([...kinds].sort(), ['mfa', 'session', 'setting', 'throttle', 'token', 'user'], 'a new record kind: seed one in before()')
  })

  it('only an empty user patch is a valid empty body', () => {
    assert.deepEqual(routes.filter((r) => r.emptyOk).map((r) => `${r.method} ${r.url}`).sort(), ['PUT /api/authsvc/api/users/bob', 'PUT /authsvc/api/users/bob'])
  })

  it('wrong scalar types are refused, never coerced', async () => {
    const before = await snapshot()
    const rows: string[] = []
    const cases: Array<[string, string, unknown]> = [
      ['PUT', '/authsvc/api/settings/guest-jwt', { allow_guest_jwt: null }],
      ['PUT', '/authsvc/api/settings/guest-jwt', { allow_guest_jwt: 0 }],
      ['PUT', '/authsvc/api/users/bob', { disabled: 0 }],
      ['PUT', '/authsvc/api/users/bob', { sfw_check: 'false' }],
      ['POST', '/login', { username: ['bob'], password: ['bob-passphrase-1'] }],
      ['POST', '/authsvc/generate_token', { username: ['bob'], password: 'bob-passphrase-1', expire_hours: '1' }],
    ]
    for (const [method, url, body] of cases) {
      const res = await call(sc, { method, url, bearer: url.includes('/api/') ? adminToken : undefined, body })
      if (res.statusCode !== 400) rows.push(`${method} ${url} ${JSON.stringify(body)} → ${res.statusCode}`)
    }
    assert.deepEqual(rows, [])
    assert.equal(await snapshot(), before)
  })

  it('the owned route list is complete enough to be meaningful', () => {
    const keys = routes.map((r) => `${r.method} ${r.url}`)
    for (const must of ['POST /register', 'POST /login', 'POST /logout', 'POST /generate_token', 'POST /authsvc/generate_token', 'DELETE /authsvc/api/tokens', 'PUT /api/authsvc/api/users/bob', 'PUT /authsvc/api/groups', 'PUT /authsvc/api/ip-lists', 'POST /authsvc/me/sessions/revoke']) {
      assert.ok(keys.includes(must), must)
    }
  })

  for (const [name, type, payload, must4xx] of BAD_BODIES) {
    it(`${name}: never 5xx, always a catalogue error, store unchanged`, async () => {
      const before = await snapshot()
      const rows: string[] = []
      for (const route of routes) {
        if (route.method === 'GET') continue
        for (const auth of ['admin', 'anonymous'] as const) {
          const res = await sc.app.inject({
            method: route.method as 'POST',
            url: route.url.replace('/users/bob', route.method === 'DELETE' ? '/users/nobody-here' : '/users/bob'),
            headers: { host: HOST, 'x-authsvc-peer': '127.0.0.1', 'content-type': type, accept: 'application/json', ...(auth === 'admin' ? { authorization: `Bearer ${adminToken}` } : {}) },
            payload,
          })
          const label = `${auth} ${route.method} ${route.url} → ${res.statusCode} ${res.body.slice(0, 120)}`
          if (res.statusCode >= 500) rows.push(`5xx: ${label}`)
          if (res.statusCode >= 400) {
            const code = errorCode(res)
            if (!code || !(code in ERRORS)) rows.push(`not a catalogue error: ${label}`)
            else if (JSON.parse(res.body).statusCode !== res.statusCode) rows.push(`statusCode mismatch: ${label}`)
          }
          if (must4xx && route.hasBody && !(route.emptyOk && auth === 'admin') && (res.statusCode < 400 || res.statusCode >= 500)) rows.push(`expected 4xx: ${label}`)
          assert.doesNotMatch(res.body, /\bat [\w.<>]+ \(|node_modules|\/sidecar\/src\//, `stack trace leaked: ${label}`)
        }
      }
      assert.deepEqual(rows, [])
      assert.equal(await snapshot(), before, 'store changed')
    })
  }

  it('GET routes with odd queries and headers: never 5xx, store unchanged', async () => {
    const before = await snapshot()
    const rows: string[] = []
    const odd: Array<[string, Record<string, string>]> = [
      ['?token=&access_token=', {}],
      ['?token=a.b.c', {}],
      [`?token=${'x'.repeat(8000)}`, {}],
      ['?next=%E0%A4%A', {}],
      ['', { cookie: 'jwt_token=%E0%A4%A; jwt_token=x' }],
      ['', { cookie: `jwt_token="${'a.'.repeat(2000)}"` }],
      ['', { authorization: `Bearer ${'a'.repeat(10_000)}` }],
      ['', { authorization: 'Bearer \u00ff\u00fe' }],
      ['', { 'x-authsvc-peer': 'not-an-ip' }],
      ['', { 'x-authsvc-peer': '' }],
      ['', { 'x-forwarded-for': 'garbage, ,,' }],
      ['', { accept: 'text/html', 'sec-fetch-mode': 'navigate' }],
    ]
    for (const route of routes.filter((r) => r.method === 'GET')) {
      for (const [query, headers] of odd) {
        const res = await sc.app.inject({ method: 'GET', url: route.url + query, headers: { host: HOST, 'x-authsvc-peer': '127.0.0.1', ...headers } })
        if (res.statusCode >= 500) rows.push(`${route.url}${query.slice(0, 30)} ${JSON.stringify(headers).slice(0, 60)} → ${res.statusCode} ${res.body.slice(0, 100)}`)
      }
    }
    assert.deepEqual(rows, [])
    assert.equal(await snapshot(), before)
  })

  it('unknown owned-looking routes → 404 NOT_FOUND JSON', async () => {
    for (const url of ['/authsvc/api/nope', '/api/authsvc/nope', '/authsvc/static/nope.js', '/authsvc/static/..%2F..%2Fpackage.json']) {
      const res = await call(sc, { url, bearer: adminToken })
      assertError(res, 404, 'NOT_FOUND', url)
    }
  })

  it('every answer carries X-Authsvc-Version', async () => {
    for (const url of ['/authsvc/api/me', '/authsvc/health', '/nope', '/login']) {
      assert.equal((await call(sc, { url })).headers['x-authsvc-version'], '0.1.0', url)
    }
  })
})
