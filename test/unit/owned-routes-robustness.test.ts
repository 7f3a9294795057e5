/**
 * Robustness: every owned route fed bad input (wrong types, pollution, deep
 * nesting, huge bodies, odd queries and headers) answers a stable 4xx, never a
 * 500, and leaves the store unchanged.
 *
 * Part of the owned routes through Fastify inject (SPEC §5.2, §5.4); the shared
 * request helpers are owned-requests.ts.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import sqlite3 from 'sqlite3'
import { ERRORS } from '../../sidecar/src/kernel/errors.js'
import { HOST, addUser, apiToken, assertError, bootstrapAdmin, call, errorCode, openSidecar, type Sidecar } from './fixtures.js'

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
        db.all('SELECT key, value FROM authsvc_records ORDER BY key', (e: Error | null, rows: Array<{ key: string; value: string }>) => {
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
    assert.deepEqual([...kinds].sort(), ['mfa', 'session', 'session_index', 'setting', 'store_meta', 'throttle', 'token', 'token_index', 'user'], 'a new record kind: seed one in before()')
  })

  it('only an empty user patch and "sign out everywhere else" (which takes no input) are valid empty bodies', () => {
    assert.deepEqual(routes.filter((r) => r.emptyOk).map((r) => `${r.method} ${r.url}`).sort(), ['POST /api/authsvc/me/sessions/revoke-others', 'POST /authsvc/me/sessions/revoke-others', 'PUT /api/authsvc/api/users/bob', 'PUT /authsvc/api/users/bob'])
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
    for (const url of ['/authsvc/api/nope', '/api/authsvc/nope', '/authsvc/static/nope.js', '/authsvc/static/..%2F..%2Fpackage.json',
      // names every object has (review: 500 before the asset lookup asked for own keys only)
      '/authsvc/static/constructor', '/authsvc/static/__proto__', '/authsvc/static/toString', '/authsvc/static/hasOwnProperty']) {
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
