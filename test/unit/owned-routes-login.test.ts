/**
 * Login, cookie and logout: JSON and form login, the JWT's claims, the
 * redirect after login (same-origin paths only), the cookie's attributes,
 * one answer for every failed login, and what logout revokes.
 *
 * Part of the owned routes through Fastify inject (SPEC §5.2, §5.4); the shared
 * request helpers are owned-requests.ts.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import type { LightMyRequestResponse } from 'fastify'
import { addUser, apiToken, assertDenied, assertError, bootstrapAdmin, call, decide, openSidecar, type Sidecar } from './fixtures.js'
import { FORM, form, json, login, me } from './owned-requests.js'

const NAVIGATE = { 'sec-fetch-mode': 'navigate', accept: 'text/html' }
const setCookie = (res: LightMyRequestResponse): string => {
  const raw = res.headers['set-cookie']
  return Array.isArray(raw) ? raw.join('\n') : String(raw ?? '')
}

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

  // login CSRF: a page elsewhere signs the visitor in as the page's account (then what they do is that account's)
  const FOREIGN: Array<[string, Record<string, string>]> = [
    ['Sec-Fetch-Site cross-site', { 'sec-fetch-site': 'cross-site' }],
    ['Sec-Fetch-Site same-site (another port of this host)', { 'sec-fetch-site': 'same-site', origin: 'http://127.0.0.1:9999' }],
    ['an Origin of another site, no Sec-Fetch-Site', { origin: 'https://evil.example' }],
    ['Origin null (a sandboxed frame)', { origin: 'null' }],
  ]
  for (const [label, headers] of FOREIGN) {
    it(`a login from another site's page is refused, no cookie: ${label}`, async () => {
      const res = await login(sc, 'alice', PASSWORD, { headers })
      assertError(res, 403, 'CSRF_REJECTED')
      assert.equal(res.headers['set-cookie'], undefined)
    })
  }

  it('a login from our own page, or from a script (no browser headers), signs in', async () => {
    for (const headers of [{ 'sec-fetch-site': 'same-origin', origin: 'http://127.0.0.1:8188' }, { origin: 'http://127.0.0.1:8188' }, {}] as Array<Record<string, string>>) {
      assert.equal((await login(sc, 'alice', PASSWORD, { headers })).statusCode, 200, JSON.stringify(headers))
    }
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
