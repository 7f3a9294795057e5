/**
 * Which way a request goes before any credential counts: OPTIONS answered
 * without a CORS grant, the service's own routes proxied while look-alike
 * paths get host policy, and odd but well-formed descriptions that never pass.
 *
 * Part of the decision path's attack table (DESIGN §6 "Attack tables", STYLE 7):
 * one row per bypass shape, through the real decider and real services; the
 * shared world is decide-world.ts.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { answer, assertDenied, bearer, decide, describeRequest, openSidecar, type Sidecar } from './fixtures.js'
import { API, QUEUE, at, world, type World } from './decide-world.js'

// -------------------------------------------------------------------- OPTIONS

describe('OPTIONS', () => {
  let w: World
  before(async () => {
    w = await world()
  })
  after(() => w.sc.close())

  for (const [path, pattern] of [['/prompt', '/prompt'], ['/api/prompt', '/api/prompt'], ['/internal/logs', '/internal/logs'], ['/authsvc/api/me', null], ['/x', null]] as const) {
    it(`OPTIONS ${path} → 204 with no CORS grant`, async () => {
      const d = await decide(w.sc, {
        method: 'OPTIONS', path, pattern,
        headers: { origin: 'https://evil.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization' },
      })
      const a = answer(d)
      assert.equal(a.status, 204)
      assert.equal(a.body, '')
      for (const name of Object.keys(a.headers)) assert.doesNotMatch(name, /^access-control-/, `CORS header ${name}`)
    })
  }

  it('OPTIONS from a blacklisted address → 403 IP_DENIED (SPEC §5.4: "on every route")', async () => {
    w.sc.services.ipGate.update({ whitelist: [], blacklist: [{ ip: '198.51.100.66', permanent: true }] })
    try {
      assertDenied(await decide(w.sc, { method: 'OPTIONS', path: '/prompt', peer: '198.51.100.66' }), 'IP_DENIED')
    } finally {
      w.sc.services.ipGate.update({ whitelist: [], blacklist: [] })
    }
  })
})

// -------------------------------------------------------------- owned routes

describe('owned routes are proxied; look-alike paths are not', () => {
  let w: World
  before(async () => {
    w = await world()
  })
  after(() => w.sc.close())

  const owned: Array<[string, string]> = [
    ['GET', '/login'], ['HEAD', '/login'], ['POST', '/login'], ['GET', '/register'], ['POST', '/register'],
    ['GET', '/logout'], ['POST', '/logout'], ['POST', '/generate_token'], ['POST', '/authsvc/generate_token'],
    ['GET', '/authsvc/api/me'], ['GET', '/api/authsvc/api/me'], ['GET', '/authsvc/static/authsvc.css'],
    ['GET', '/api/authsvc/static/authsvc.js'], ['GET', '/authsvc/api/m%65'], ['DELETE', '/authsvc/api/tokens'],
    ['PUT', '/authsvc/api/users/alice'], ['GET', '/authsvc/health'],
  ]
  for (const [method, path] of owned) {
    it(`${method} ${path} → proxy (anonymous, and with a broken credential)`, async () => {
      assert.deepEqual(await decide(w.sc, { method, path, pattern: null, headers: API }), { action: 'proxy' })
      assert.deepEqual(await decide(w.sc, { method, path, pattern: null, headers: { ...API, ...bearer('garbage.jwt.here') } }), { action: 'proxy' })
    })
  }

  const lookAlikes = ['/AUTHSVC/api/me', '/Authsvc/api/me', '/login/', '/LOGIN', '//login', '/api/login', '/authsvcx/api/me', '/x/authsvc/api/me']
  for (const path of lookAlikes) {
    it(`look-alike ${path} is not proxied: host policy applies (anonymous → 401)`, async () => {
      const d = await decide(w.sc, { path, pattern: null, headers: API })
      assert.notEqual(d.action, 'proxy')
      assertDenied(d, 'AUTH_REQUIRED', path)
    })
  }

  // issue 21: the service's own path space is decided on its prefix, not on a route matching
  const unmatchedUnderPrefix = [
    '/authsvc%2Fapi/me', '/api/authsvc%2Fapi/me', '//authsvc/api/me', '/authsvc/api/me/', '/authsvc/./api/me',
    '/authsvc/x/../api/me', '/authsvc/api/me;x', '/authsvc/api/me%00', '/authsvc', '/authsvc/', '/api/authsvc',
  ]
  for (const path of unmatchedUnderPrefix) {
    it(`${path} is under the service's prefix but no owned route: 404 NOT_FOUND from the gate for a principal (401 without one), never proxied or passed`, async () => {
      assertDenied(await decide(w.sc, { path, pattern: null, headers: { ...API, ...bearer(w.adminJwt) } }), 'NOT_FOUND', path)
      assertDenied(await decide(w.sc, { path, pattern: null, headers: API }), 'AUTH_REQUIRED', path)
    })
  }

  it('an owned path with a method the sidecar does not serve is a host request (DELETE /login → host policy)', async () => {
    assertDenied(await decide(w.sc, { method: 'DELETE', path: '/login', pattern: null, headers: API }), 'AUTH_REQUIRED')
  })

  it('a blacklisted client is refused before owned routes too', async () => {
    w.sc.services.ipGate.update({ whitelist: [], blacklist: [{ ip: '198.51.100.0/24', permanent: true }] })
    try {
      assertDenied(await decide(w.sc, { method: 'POST', path: '/login', pattern: null, peer: '198.51.100.20' }), 'IP_DENIED')
    } finally {
      w.sc.services.ipGate.update({ whitelist: [], blacklist: [] })
    }
  })
})

// ------------------------------------------------------------ odd descriptions

describe('odd but well-formed descriptions never pass', () => {
  let sc: Sidecar
  before(async () => {
    sc = await openSidecar()
  })
  after(() => sc.close())

  it('unknown methods and lower-case methods on host routes need a principal', async () => {
    for (const method of ['get', 'PROPFIND', 'TRACE', 'CONNECT', '']) {
      const d = await decide(sc, { method, path: '/prompt', pattern: '/prompt', headers: API })
      assertDenied(d, 'AUTH_REQUIRED', method)
    }
  })

  it('an empty peer is not local', async () => {
    const sc2 = await openSidecar({ config: { local_anonymous_role: 'user' } })
    try {
      assertDenied(await decide(sc2, at(QUEUE, { peer: '' })), 'AUTH_REQUIRED')
      assertDenied(await decide(sc2, at(QUEUE, { peer: 'localhost' })), 'AUTH_REQUIRED')
    } finally {
      await sc2.close()
    }
  })

  it('the description id is not part of the decision (answers are matched by the server)', async () => {
    const d = await sc.handlers.decide({ ...describeRequest(QUEUE), id: 424242 })
    assertDenied(d, 'AUTH_REQUIRED')
  })
})
