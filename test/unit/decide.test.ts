/**
 * The attack table of the decision path (DESIGN §6 "Attack tables", STYLE 7):
 * one row per bypass shape, named after its shape, run through the real
 * decider with real services (store, sessions, tokens, roles, IP lists).
 * Each row states the request as the plugin would describe it and the
 * decision it must get.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { SignJWT, base64url } from 'jose'
import { deriveKeys } from '../../sidecar/src/identity/secrets.js'
import type { Decision } from '../../sidecar/src/decide/protocol.js'
import type { UserRecord } from '../../sidecar/src/identity/users.js'
import {
  SECRET, addUser, answer, apiToken, assertDenied, assertPass, bearer, decide, describeRequest, fakeClock, hostRouteRequests,
  openSidecar, sessionJwt, stepAnswer, type DescOptions, type Sidecar, type Stepped,
} from './fixtures.js'

const API = { accept: 'application/json' }

function passedWithBody(d: Stepped): { body_text?: string } {
  assertPass(d)
  return d
}
async function bodyStep(sc: Sidecar, ctx: unknown, body: string): Promise<Stepped & { action: string }> {
  return stepAnswer(await sc.handlers.body({ type: 'body', id: 1, ctx }, Buffer.from(body, 'utf8'))) as Stepped & { action: string }
}
async function filterStep(sc: Sidecar, name: string, ctx: unknown, body: string): Promise<Stepped & { action: string }> {
  return stepAnswer(await sc.handlers.filter({ type: 'filter', id: 1, name, ctx, status: 200, content_type: 'application/json' }, Buffer.from(body, 'utf8'))) as Stepped & { action: string }
}
const NAVIGATE = { 'sec-fetch-mode': 'navigate', accept: 'text/html,application/xhtml+xml' }
const HTML_ACCEPT = { accept: 'text/html,application/xhtml+xml,*/*;q=0.8' }
const SAME_ORIGIN = { origin: 'http://comfy.test:8188' }
const REMOTE = '203.0.113.9'
const cookie = (t: string) => ({ cookie: `theme=dark; jwt_token=${t}` })

/** Groups with a custom role lacking every write permission. */
const VIEWER_GROUPS = {
  admin: { can_run: true, can_access_api: true, can_upload: true, can_modify_workflows: true, can_have_api_tokens: true, can_view_all_comfyui_items: true, can_download_models: true, mfa_required: false },
  user: { can_run: true, can_access_api: true, can_upload: true, can_modify_workflows: true, can_have_api_tokens: true, can_view_all_comfyui_items: true, can_download_models: false, mfa_required: false },
  guest: { can_run: false, can_access_api: true, can_upload: false, can_modify_workflows: false, can_have_api_tokens: false, can_view_all_comfyui_items: false, can_download_models: false, mfa_required: false },
  viewer: { can_run: false, can_access_api: true, can_upload: false, can_modify_workflows: false, can_have_api_tokens: false, can_view_all_comfyui_items: false, can_download_models: false, mfa_required: false },
  Admin: { can_run: true, can_access_api: true, can_upload: true, can_modify_workflows: true, can_have_api_tokens: true, can_view_all_comfyui_items: true, can_download_models: true, mfa_required: false },
}

interface World {
  sc: Sidecar
  admin: UserRecord
  alice: UserRecord
  bob: UserRecord
  viewer: UserRecord
  fakeAdmin: UserRecord
  adminJwt: string
  aliceJwt: string
  bobJwt: string
  viewerJwt: string
  fakeAdminJwt: string
  aliceToken: string
}

async function world(config: Record<string, unknown> = {}): Promise<World> {
  const sc = await openSidecar({ config })
  sc.services.roles.replace(structuredClone(VIEWER_GROUPS))
  const admin = await addUser(sc, 'admin', 'admin-passphrase-1', 'admin')
  const alice = await addUser(sc, 'alice', 'alice-passphrase-1')
  const bob = await addUser(sc, 'bob', 'bob-passphrase-1')
  const viewer = await addUser(sc, 'vera', 'vera-passphrase-1', 'viewer')
  const fakeAdmin = await addUser(sc, 'mallory', 'mallory-passphrase-1', 'Admin')
  return {
    sc, admin, alice, bob, viewer, fakeAdmin,
    adminJwt: await sessionJwt(sc, admin),
    aliceJwt: await sessionJwt(sc, alice),
    bobJwt: await sessionJwt(sc, bob),
    viewerJwt: await sessionJwt(sc, viewer),
    fakeAdminJwt: await sessionJwt(sc, fakeAdmin),
    aliceToken: await apiToken(sc, alice),
  }
}

const QUEUE: DescOptions = { method: 'GET', path: '/queue', pattern: '/queue', headers: API }
const at = (base: DescOptions, extra: Partial<DescOptions>): DescOptions => ({
  ...base,
  ...extra,
  headers: { ...(base.headers ?? {}), ...(extra.headers ?? {}) },
})

function location(d: Decision): string {
  const a = answer(d)
  assert.equal(a.status, 302, `expected a redirect, got ${a.status} ${a.body}`)
  return a.headers.location
}

// ------------------------------------------------------------------ anonymous

describe('anonymous requests on host routes', () => {
  let sc: Sidecar
  before(async () => {
    sc = await openSidecar()
  })
  after(() => sc.close())

  it('every host route in both twins → 401 AUTH_REQUIRED JSON for an API client', async () => {
    for (const r of hostRouteRequests()) {
      for (const peer of ['127.0.0.1', REMOTE]) {
        const d = await decide(sc, { method: r.method, path: r.path, pattern: r.pattern, match_info: r.match_info, headers: API, peer })
        assertDenied(d, 'AUTH_REQUIRED', `${r.method} ${r.path} from ${peer}`)
      }
    }
  })

  it('every host route without Accept at all (curl, scripts) → 401 AUTH_REQUIRED', async () => {
    for (const r of hostRouteRequests()) {
      const d = await decide(sc, { method: r.method, path: r.path, pattern: r.pattern, match_info: r.match_info, headers: {} })
      assertDenied(d, 'AUTH_REQUIRED', `${r.method} ${r.path}`)
    }
  })

  it('a browser navigation to an API route is never redirected (401 JSON)', async () => {
    for (const [path, pattern] of [['/prompt', '/prompt'], ['/api/queue', '/api/queue'], ['/internal/logs', '/internal/logs'], ['/view', '/view']]) {
      assertDenied(await decide(sc, { path, pattern, headers: NAVIGATE }), 'AUTH_REQUIRED', path)
    }
  })

  const pages: Array<[string, DescOptions]> = [
    ['GET / (sec-fetch-mode navigate)', { path: '/', pattern: '/', headers: NAVIGATE }],
    ['GET /api/ twin of the index', { path: '/api/', pattern: '/api/', headers: NAVIGATE }],
    ['HEAD / navigation', { method: 'HEAD', path: '/', pattern: '/', headers: NAVIGATE }],
    ['GET / with Accept text/html only (no fetch metadata)', { path: '/', pattern: '/', headers: HTML_ACCEPT }],
    ['a static frontend file', { path: '/assets/index-abc.js', pattern: '/', kind: 'static', headers: NAVIGATE }],
    ['an extension static file', { path: '/extensions/pkg/x.js', pattern: '/extensions/pkg', kind: 'static', headers: NAVIGATE }],
    ['an unmatched path (host 404)', { path: '/no/such/page', pattern: null, headers: NAVIGATE }],
  ]
  for (const [name, desc] of pages) {
    it(`page: ${name} → 302 /login?next=<path>`, async () => {
      assert.equal(location(await decide(sc, desc)), `/login?next=${encodeURIComponent(desc.path)}`)
    })
  }

  it('page: the original query is kept in next (same-origin path only)', async () => {
    const d = await decide(sc, { path: '/', pattern: '/', query: 'workflow=a&b=1', headers: NAVIGATE })
    assert.equal(location(d), `/login?next=${encodeURIComponent('/?workflow=a&b=1')}`)
  })

  it('page: Accept with both text/html and application/json is an API client → 401', async () => {
    assertDenied(await decide(sc, { path: '/', pattern: '/', headers: { accept: 'text/html, application/json' } }), 'AUTH_REQUIRED')
  })

  it('page: a POST navigation (form post to a page) is not redirected → 401', async () => {
    assertDenied(await decide(sc, { method: 'POST', path: '/', pattern: null, headers: NAVIGATE }), 'AUTH_REQUIRED')
  })

  it('page: an API client on a page route → 401 JSON, not a redirect', async () => {
    assertDenied(await decide(sc, { path: '/', pattern: '/', headers: API }), 'AUTH_REQUIRED')
  })

  it('WebSocket upgrade without a token → 401 (GET /ws and /api/ws, even with Accept text/html)', async () => {
    for (const path of ['/ws', '/api/ws']) {
      const d = await decide(sc, { path, pattern: path, query: 'clientId=abc', headers: { upgrade: 'websocket', accept: 'text/html' } })
      assertDenied(d, 'AUTH_REQUIRED', path)
    }
  })
})

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

// ---------------------------------------------------------------- credentials

function b64json(value: unknown): string {
  return base64url.encode(JSON.stringify(value))
}

describe('forged, stale and mixed credentials', () => {
  let w: World
  let keys: ReturnType<typeof deriveKeys>
  before(async () => {
    w = await world()
    keys = deriveKeys(Buffer.from(SECRET, 'utf8'))
  })
  after(() => w.sc.close())

  const claimsOf = (jwt: string) => JSON.parse(Buffer.from(jwt.split('.')[1], 'base64url').toString()) as Record<string, unknown>

  async function signed(claims: Record<string, unknown>, key: Uint8Array, alg = 'HS256'): Promise<string> {
    return new SignJWT(claims).setProtectedHeader({ alg, typ: 'JWT' }).sign(key)
  }

  it('sanity: a valid session JWT passes', async () => {
    assertPass(await decide(w.sc, at(QUEUE, { headers: bearer(w.aliceJwt) })))
  })

  const invalidRows: Array<[string, () => Promise<string> | string, string]> = [
    ['alg:none with empty signature', () => `${b64json({ alg: 'none', typ: 'JWT' })}.${w.aliceJwt.split('.')[1]}.`, 'TOKEN_INVALID'],
    ['alg:none keeping the original signature', () => `${b64json({ alg: 'none', typ: 'JWT' })}.${w.aliceJwt.split('.')[1]}.${w.aliceJwt.split('.')[2]}`, 'TOKEN_INVALID'],
    ['alg:NONE (case)', () => `${b64json({ alg: 'NONE' })}.${w.aliceJwt.split('.')[1]}.`, 'TOKEN_INVALID'],
    ['payload swapped to the admin (original signature)', () => {
      const [h, p, s] = w.aliceJwt.split('.')
      const claims = { ...JSON.parse(Buffer.from(p, 'base64url').toString()), sub: w.admin.user_id, username: 'admin' }
      return `${h}.${b64json(claims)}.${s}`
    }, 'TOKEN_INVALID'],
    ['HS256 signed with another key (valid jti)', () => signed(claimsOf(w.adminJwt), new TextEncoder().encode('another-key-another-key-another-key!!')), 'TOKEN_INVALID'],
    ['HS512 signed with the real key (algorithm confusion)', () => signed(claimsOf(w.adminJwt), keys.jwt, 'HS512'), 'TOKEN_INVALID'],
    ['signed with the master secret itself instead of the derived key', () => signed(claimsOf(w.adminJwt), new TextEncoder().encode(SECRET)), 'TOKEN_INVALID'],
    ['real key, typ not "session"', () => signed({ ...claimsOf(w.adminJwt), typ: 'mfa' }, keys.jwt), 'TOKEN_INVALID'],
    ['real key, no jti', () => {
      const { jti: _jti, ...rest } = claimsOf(w.adminJwt)
      return signed(rest, keys.jwt)
    }, 'TOKEN_INVALID'],
    ['real key, jti of no session record (signature alone never suffices)', () => signed({ ...claimsOf(w.adminJwt), jti: '00000000-0000-4000-8000-000000000000' }, keys.jwt), 'TOKEN_REVOKED'],
    ['real key, alice\'s jti with sub = admin', () => signed({ ...claimsOf(w.aliceJwt), sub: w.admin.user_id }, keys.jwt), 'TOKEN_REVOKED'],
    ['truncated JWT', () => w.aliceJwt.slice(0, -5), 'TOKEN_INVALID'],
    ['JWT with a trailing dot segment', () => `${w.aliceJwt}.x`, 'TOKEN_INVALID'],
    ['opaque garbage', () => 'not-a-token', 'TOKEN_INVALID'],
    ['API token shape too short', () => 'ast_short', 'TOKEN_INVALID'],
    ['API token of the right shape, unknown', () => `ast_${'A'.repeat(43)}`, 'TOKEN_INVALID'],
    ['API token with an appended character', () => `${w.aliceToken}x`, 'TOKEN_INVALID'],
    ['API token in upper case', () => w.aliceToken.toUpperCase(), 'TOKEN_INVALID'],
  ]
  for (const [name, make, code] of invalidRows) {
    for (const channel of ['bearer', 'cookie', 'query'] as const) {
      it(`${name} via ${channel} → 401 ${code}`, async () => {
        const token = await make()
        const desc = channel === 'bearer' ? at(QUEUE, { headers: bearer(token) })
          : channel === 'cookie' ? at(QUEUE, { headers: cookie(encodeURIComponent(token)) })
          : at(QUEUE, { query: `token=${encodeURIComponent(token)}` })
        assertDenied(await decide(w.sc, desc), code as 'TOKEN_INVALID', `${name} via ${channel}`)
      })
    }
  }

  it('malformed Authorization: Bearer headers → 401 TOKEN_INVALID (never anonymous)', async () => {
    for (const value of ['Bearer', 'Bearer ', 'Bearer a b', 'bearer\tx y', 'Bearer  ']) {
      assertDenied(await decide(w.sc, at(QUEUE, { headers: { authorization: value } })), 'TOKEN_INVALID', JSON.stringify(value))
    }
  })

  it('Authorization with another scheme (Basic) is ignored, the cookie is used', async () => {
    const d = assertPass(await decide(w.sc, at(QUEUE, { headers: { authorization: 'Basic YWxpY2U6eA==', ...cookie(w.aliceJwt) } })))
    assert.equal(d.set_headers?.['comfy-user'], w.alice.user_id)
  })

  it('bearer + forged cookie: the bearer wins', async () => {
    const d = assertPass(await decide(w.sc, at(QUEUE, { headers: { ...bearer(w.aliceJwt), ...cookie('forged.cookie.value') } })))
    assert.equal(d.set_headers?.['comfy-user'], w.alice.user_id)
  })

  it('bearer (user) + valid admin cookie: acts as the bearer, not the admin', async () => {
    const d = await decide(w.sc, { method: 'POST', path: '/free', pattern: '/free', headers: { ...bearer(w.aliceJwt), ...cookie(w.adminJwt), ...SAME_ORIGIN } })
    assertDenied(d, 'ADMIN_REQUIRED')
  })

  it('invalid bearer + valid admin cookie → 401, never falls back to the cookie', async () => {
    assertDenied(await decide(w.sc, at(QUEUE, { headers: { ...bearer('ast_nope'), ...cookie(w.adminJwt) } })), 'TOKEN_INVALID')
  })

  it('invalid bearer + valid query token → 401', async () => {
    assertDenied(await decide(w.sc, at(QUEUE, { headers: bearer('x.y.z'), query: `token=${w.aliceToken}` })), 'TOKEN_INVALID')
  })

  it('invalid cookie + valid query token → 401', async () => {
    assertDenied(await decide(w.sc, at(QUEUE, { headers: cookie('forged.cookie.value'), query: `token=${w.aliceToken}` })), 'TOKEN_INVALID')
  })

  it('invalid token=… + valid access_token=… → 401 (first query key decides)', async () => {
    assertDenied(await decide(w.sc, at(QUEUE, { query: `token=ast_bad&access_token=${w.aliceToken}` })), 'TOKEN_INVALID')
  })

  it('an invalid credential on a page navigation redirects to login (no JSON oracle, no host call)', async () => {
    const d = await decide(w.sc, { path: '/', pattern: '/', headers: { ...NAVIGATE, ...cookie('forged.cookie.value') } })
    assert.equal(location(d), '/login?next=%2F')
  })

  it('a valid API token passes on every channel; the bearer header never reaches the host', async () => {
    const viaBearer = assertPass(await decide(w.sc, at(QUEUE, { headers: bearer(w.aliceToken) })))
    assert.ok(viaBearer.strip_headers?.includes('authorization'))
    assertPass(await decide(w.sc, at(QUEUE, { headers: cookie(w.aliceToken) })))
    assertPass(await decide(w.sc, at(QUEUE, { query: `access_token=${w.aliceToken}` })))
  })
})

describe('credentials that stopped being valid', () => {
  let sc: Sidecar
  let alice: UserRecord
  before(async () => {
    sc = await openSidecar({ clock: fakeClock() })
    await addUser(sc, 'admin', 'admin-passphrase-1', 'admin')
    alice = await addUser(sc, 'alice', 'alice-passphrase-1')
  })
  after(() => sc.close())

  it('session revoked → 401 TOKEN_REVOKED on the next request', async () => {
    const { token, record } = await sc.services.sessions.issue(alice, false)
    assertPass(await decide(sc, at(QUEUE, { headers: bearer(token) })))
    await sc.services.sessions.revoke(record.jti)
    assertDenied(await decide(sc, at(QUEUE, { headers: bearer(token) })), 'TOKEN_REVOKED')
    assertDenied(await decide(sc, at(QUEUE, { headers: cookie(token) })), 'TOKEN_REVOKED')
  })

  it('user disabled → session and API token refused (TOKEN_REVOKED)', async () => {
    const carol = await addUser(sc, 'carol', 'carol-passphrase-1')
    const jwt = await sessionJwt(sc, carol)
    const token = await apiToken(sc, carol)
    assertPass(await decide(sc, at(QUEUE, { headers: bearer(jwt) })))
    await sc.services.users.update(carol.user_id, { disabled: true })
    assertDenied(await decide(sc, at(QUEUE, { headers: bearer(jwt) })), 'TOKEN_REVOKED')
    assertDenied(await decide(sc, at(QUEUE, { headers: bearer(token) })), 'TOKEN_REVOKED')
  })

  it('JWT and API token of a deleted user → 401 TOKEN_REVOKED, even if their records survive', async () => {
    const dave = await addUser(sc, 'dave', 'dave-passphrase-1')
    const jwt = await sessionJwt(sc, dave)
    const token = await apiToken(sc, dave)
    await sc.services.users.delete(dave.user_id)
    assertDenied(await decide(sc, at(QUEUE, { headers: bearer(jwt) })), 'TOKEN_REVOKED')
    assertDenied(await decide(sc, at(QUEUE, { headers: bearer(token) })), 'TOKEN_REVOKED')
  })

  it('a user re-created under the same name does not inherit the old JWT', async () => {
    const erin = await addUser(sc, 'erin', 'erin-passphrase-1')
    const jwt = await sessionJwt(sc, erin)
    await sc.services.users.delete(erin.user_id)
    await addUser(sc, 'erin', 'erin-passphrase-2')
    assertDenied(await decide(sc, at(QUEUE, { headers: bearer(jwt) })), 'TOKEN_REVOKED')
  })

  it('API token revoked by prefix → 401 TOKEN_REVOKED (its tombstone outlives the record)', async () => {
    const { token, record } = await sc.services.tokens.issue(alice.user_id, 'x', 24)
    assertPass(await decide(sc, at(QUEUE, { headers: bearer(token) })))
    await sc.services.tokens.revokeByPrefix(alice.user_id, record.hash.slice(0, 12))
    assertDenied(await decide(sc, at(QUEUE, { headers: bearer(token) })), 'TOKEN_REVOKED')
  })
})

describe('expiry through the injected clock', () => {
  it('a session JWT past access_token_expiration_hours → 401 TOKEN_EXPIRED', async () => {
    const sc = await openSidecar({ config: { session_idle_minutes: 0 } })
    try {
      const alice = await addUser(sc, 'alice', 'alice-passphrase-1')
      const jwt = await sessionJwt(sc, alice)
      sc.clock.advance(12 * 3600_000 - 1000)
      assertPass(await decide(sc, at(QUEUE, { headers: bearer(jwt) })))
      sc.clock.advance(2000)
      assertDenied(await decide(sc, at(QUEUE, { headers: bearer(jwt) })), 'TOKEN_EXPIRED')
    } finally {
      await sc.close()
    }
  })

  it('an idle session (> session_idle_minutes unused) → 401 TOKEN_EXPIRED, and stays dead', async () => {
    const sc = await openSidecar({ config: { session_idle_minutes: 60 } })
    try {
      const alice = await addUser(sc, 'alice', 'alice-passphrase-1')
      const jwt = await sessionJwt(sc, alice)
      for (let i = 0; i < 3; i++) {
        sc.clock.advance(59 * 60_000)
        assertPass(await decide(sc, at(QUEUE, { headers: bearer(jwt) })), `use ${i}`)
      }
      sc.clock.advance(61 * 60_000)
      assertDenied(await decide(sc, at(QUEUE, { headers: bearer(jwt) })), 'TOKEN_EXPIRED')
      sc.clock.advance(-61 * 60_000 + 1000)
      const again = answer(await decide(sc, at(QUEUE, { headers: bearer(jwt) })))
      assert.equal(again.status, 401, 'an idle-expired session is revoked, not revived by a clock step back')
    } finally {
      await sc.close()
    }
  })

  it('an API token past expire_hours → 401 TOKEN_EXPIRED', async () => {
    const sc = await openSidecar()
    try {
      const alice = await addUser(sc, 'alice', 'alice-passphrase-1')
      const token = await apiToken(sc, alice, 2)
      sc.clock.advance(2 * 3600_000 - 1)
      assertPass(await decide(sc, at(QUEUE, { headers: bearer(token) })))
      sc.clock.advance(1)
      assertDenied(await decide(sc, at(QUEUE, { headers: bearer(token) })), 'TOKEN_EXPIRED')
    } finally {
      await sc.close()
    }
  })

  it('a temporary IP ban ends at expires_at_iso', async () => {
    const sc = await openSidecar()
    try {
      const until = new Date(sc.clock() + 600_000).toISOString()
      sc.services.ipGate.update({ whitelist: [], blacklist: [{ ip: REMOTE, expires_at_iso: until }] })
      assertDenied(await decide(sc, at(QUEUE, { peer: REMOTE })), 'IP_DENIED')
      sc.clock.advance(600_000)
      assertDenied(await decide(sc, at(QUEUE, { peer: REMOTE })), 'AUTH_REQUIRED')
    } finally {
      await sc.close()
    }
  })
})

// ---------------------------------------------------------------------- CSRF

describe('CSRF on cookie-authenticated writes', () => {
  let w: World
  before(async () => {
    w = await world()
  })
  after(() => w.sc.close())

  const prompt = (headers: Record<string, string>, extra: Partial<DescOptions> = {}): DescOptions =>
    ({ method: 'POST', path: '/prompt', pattern: '/prompt', headers: { ...API, 'content-type': 'application/json', ...headers }, ...extra })

  const refused: Array<[string, Record<string, string>, Partial<DescOptions>?]> = [
    ['no Origin, no Sec-Fetch-Site', {}],
    ['Origin of another site', { origin: 'https://evil.example' }],
    ['Origin "null" (sandboxed frame)', { origin: 'null' }],
    ['Origin with another port', { origin: 'http://comfy.test:9999' }],
    ['Origin https while the request arrived over http', { origin: 'https://comfy.test:8188' }],
    ['Origin with a suffix host', { origin: 'http://comfy.test:8188.evil.example' }],
    ['Sec-Fetch-Site cross-site', { 'sec-fetch-site': 'cross-site' }],
    ['Sec-Fetch-Site same-site (a sibling subdomain)', { 'sec-fetch-site': 'same-site' }],
    ['Sec-Fetch-Site none', { 'sec-fetch-site': 'none' }],
    ['Sec-Fetch-Site cross-site with a matching Origin', { 'sec-fetch-site': 'cross-site', origin: 'http://comfy.test:8188' }],
    ['Referer same-origin but no Origin', { referer: 'http://comfy.test:8188/' }],
    ['X-Forwarded-Host naming the Origin\'s host, from an untrusted peer', { origin: 'http://evil.example', 'x-forwarded-host': 'evil.example' }],
  ]
  for (const [name, headers] of refused) {
    it(`cookie POST /prompt, ${name} → 403 CSRF_REJECTED`, async () => {
      assertDenied(await decide(w.sc, prompt({ ...cookie(w.aliceJwt), ...headers })), 'CSRF_REJECTED', name)
    })
  }

  for (const [method, path, pattern] of [['PUT', '/prompt', '/prompt'], ['POST', '/api/interrupt', '/api/interrupt'], ['DELETE', '/userdata/x', '/userdata/{file}'], ['POST', '/upload/image', '/upload/image'], ['PATCH', '/x', null]] as const) {
    it(`cookie ${method} ${path} cross-site → 403 CSRF_REJECTED`, async () => {
      const d = await decide(w.sc, { method, path, pattern, match_info: { file: 'x' }, headers: { ...cookie(w.aliceJwt), origin: 'https://evil.example' } })
      assertDenied(d, 'CSRF_REJECTED')
    })
  }

  it('cookie POST with Origin equal to the host passes', async () => {
    assertPass(await decide(w.sc, prompt({ ...cookie(w.aliceJwt), ...SAME_ORIGIN })))
  })

  it('cookie POST with Sec-Fetch-Site same-origin passes', async () => {
    assertPass(await decide(w.sc, prompt({ ...cookie(w.aliceJwt), 'sec-fetch-site': 'same-origin' })))
  })

  it('cookie POST over https with an https Origin passes', async () => {
    assertPass(await decide(w.sc, prompt({ ...cookie(w.aliceJwt), origin: 'https://comfy.test:8188' }, { scheme: 'https' })))
  })

  it('cookie GET without Origin passes (safe method)', async () => {
    assertPass(await decide(w.sc, at(QUEUE, { headers: cookie(w.aliceJwt) })))
  })

  it('bearer POST without Origin passes (exempt)', async () => {
    assertPass(await decide(w.sc, prompt({ ...bearer(w.aliceJwt) })))
    assertPass(await decide(w.sc, prompt({ ...bearer(w.aliceToken), origin: 'https://evil.example' })))
  })

  it('query-token POST without Origin passes (exempt) and drops the token', async () => {
    const d = assertPass(await decide(w.sc, prompt({}, { query: `token=${w.aliceToken}` })))
    assert.deepEqual(d.drop_query, ['token'])
  })

  it('the CSRF refusal comes before the permission check (no permission oracle cross-site)', async () => {
    assertDenied(await decide(w.sc, { method: 'POST', path: '/free', pattern: '/free', headers: { ...cookie(w.aliceJwt), origin: 'https://evil.example' } }), 'CSRF_REJECTED')
  })
})

// --------------------------------------------------------- forwarded headers

describe('forwarded headers and locality', () => {
  let sc: Sidecar
  const PROXY = '10.0.0.5'
  before(async () => {
    sc = await openSidecar({ config: { local_anonymous_role: 'user', trusted_proxies: [PROXY] } })
    await addUser(sc, 'admin', 'admin-passphrase-1', 'admin')
  })
  after(() => sc.close())

  it('loopback peer without a credential acts as local_anonymous_role', async () => {
    const d = assertPass(await decide(sc, QUEUE))
    assert.deepEqual(d.set_headers, { 'comfy-user': 'authsvc-anonymous' }, 'an anonymous principal acts in the anonymous userdata space')
  })

  it('IPv4-mapped loopback peer is local too', async () => {
    assertPass(await decide(sc, at(QUEUE, { peer: '::ffff:127.0.0.1' })))
    assertPass(await decide(sc, at(QUEUE, { peer: '::1' })))
  })

  const spoofs: Array<[string, Record<string, string>]> = [
    ['X-Forwarded-For: 127.0.0.1', { 'x-forwarded-for': '127.0.0.1' }],
    ['X-Forwarded-For: ::1', { 'x-forwarded-for': '::1' }],
    ['X-Real-IP: 127.0.0.1', { 'x-real-ip': '127.0.0.1' }],
    ['X-Forwarded-For list ending in loopback', { 'x-forwarded-for': `${REMOTE}, 127.0.0.1` }],
    ['Forwarded: for=127.0.0.1', { forwarded: 'for=127.0.0.1' }],
    ['Host: localhost', { host: 'localhost:8188' }],
  ]
  for (const [name, headers] of spoofs) {
    it(`untrusted remote peer with ${name} is still remote → 401`, async () => {
      assertDenied(await decide(sc, at(QUEUE, { peer: REMOTE, headers })), 'AUTH_REQUIRED', name)
    })
  }

  it('a trusted proxy\'s X-Forwarded-For is honoured (client 127.0.0.1 behind it is local)', async () => {
    assertPass(await decide(sc, at(QUEUE, { peer: PROXY, headers: { 'x-forwarded-for': '127.0.0.1' } })))
  })

  it('behind a trusted proxy, the right-most untrusted hop is the client (a client-sent loopback entry is ignored)', async () => {
    assertDenied(await decide(sc, at(QUEUE, { peer: PROXY, headers: { 'x-forwarded-for': `127.0.0.1, ${REMOTE}` } })), 'AUTH_REQUIRED')
  })

  it('a trusted proxy without X-Forwarded-For uses X-Real-IP', async () => {
    assertDenied(await decide(sc, at(QUEUE, { peer: PROXY, headers: { 'x-real-ip': REMOTE } })), 'AUTH_REQUIRED')
    assertPass(await decide(sc, at(QUEUE, { peer: PROXY, headers: { 'x-real-ip': '127.0.0.1' } })))
  })

  it('IP blacklist: an untrusted peer cannot dodge it with X-Forwarded-For; a trusted proxy\'s client is checked', async () => {
    sc.services.ipGate.update({ whitelist: [], blacklist: [{ ip: REMOTE, permanent: true }] })
    try {
      assertDenied(await decide(sc, at(QUEUE, { peer: REMOTE, headers: { 'x-forwarded-for': '198.51.100.7' } })), 'IP_DENIED')
      assertDenied(await decide(sc, at(QUEUE, { peer: `::ffff:${REMOTE}` })), 'IP_DENIED')
      assertDenied(await decide(sc, at(QUEUE, { peer: PROXY, headers: { 'x-forwarded-for': REMOTE } })), 'IP_DENIED')
      assertDenied(await decide(sc, at(QUEUE, { peer: PROXY, headers: { 'x-forwarded-for': '198.51.100.7' } })), 'AUTH_REQUIRED')
    } finally {
      sc.services.ipGate.update({ whitelist: [], blacklist: [] })
    }
  })

  it('X-Forwarded-Proto https counts only from a trusted proxy (CSRF origin check)', async () => {
    const admin = sc.services.users.byUsername('admin')!
    const jwt = await sessionJwt(sc, admin)
    const desc = (peer: string): DescOptions => ({
      method: 'POST', path: '/interrupt', pattern: '/interrupt', peer,
      headers: { ...cookie(jwt), origin: 'https://comfy.test:8188', 'x-forwarded-proto': 'https' },
    })
    assertDenied(await decide(sc, desc(REMOTE)), 'CSRF_REJECTED')
    assertPass(await decide(sc, desc(PROXY)))
  })
})

// -------------------------------------------------- comfy-user and query token

describe('headers and query the host must never see', () => {
  let w: World
  before(async () => {
    w = await world({ local_anonymous_role: 'user' })
  })
  after(() => w.sc.close())

  it('a spoofed comfy-user is replaced by the principal\'s user id', async () => {
    const d = assertPass(await decide(w.sc, { path: '/settings', pattern: '/settings', headers: { ...bearer(w.aliceJwt), 'comfy-user': w.admin.user_id } }))
    assert.deepEqual(d.set_headers, { 'comfy-user': w.alice.user_id })
  })

  it('every passing host route sets comfy-user for a user', async () => {
    for (const r of hostRouteRequests()) {
      if (r.pattern.includes('internal') || r.pattern.endsWith('/free')) continue
      // another user's history entry is answered {} without asking the host (isolation.test.ts)
      if (r.pattern.endsWith('/history/{prompt_id}')) continue
      // who has an account is answered by the gate itself (behaviours/userdata-read.ts)
      if (r.pattern.endsWith('/users')) continue
      const d = await decide(w.sc, { method: r.method, path: r.path, pattern: r.pattern, match_info: r.match_info, headers: { ...bearer(w.aliceToken), 'comfy-user': 'admin' } })
      const pass = assertPass(d, `${r.method} ${r.path}`)
      assert.equal(pass.set_headers?.['comfy-user'], w.alice.user_id, `${r.method} ${r.path}`)
    }
  })

  it('an anonymous local principal gets the client\'s comfy-user replaced by the anonymous space', async () => {
    const d = assertPass(await decide(w.sc, { path: '/userdata', pattern: '/userdata', query: 'dir=workflows', headers: { 'comfy-user': w.admin.user_id } }))
    assert.deepEqual(d.set_headers, { 'comfy-user': 'authsvc-anonymous' })
  })

  it('query token → drop_query lists every credential key present', async () => {
    const one = assertPass(await decide(w.sc, at(QUEUE, { query: `token=${w.aliceToken}&x=1` })))
    assert.deepEqual(one.drop_query, ['token'])
    const other = assertPass(await decide(w.sc, at(QUEUE, { query: `x=1&access_token=${w.aliceToken}` })))
    assert.deepEqual(other.drop_query, ['access_token'])
    const both = assertPass(await decide(w.sc, at(QUEUE, { query: `token=${w.aliceToken}&access_token=junk` })))
    assert.deepEqual(both.drop_query?.slice().sort(), ['access_token', 'token'])
  })

  it('an empty token= is no credential but is still dropped', async () => {
    const d = assertPass(await decide(w.sc, at(QUEUE, { query: 'token=' })))
    assert.deepEqual(d.drop_query, ['token'])
  })

  it('a JWT in ?token= on the WebSocket passes and is dropped', async () => {
    const d = assertPass(await decide(w.sc, { path: '/ws', pattern: '/ws', query: `clientId=q1&token=${w.aliceJwt}`, headers: { upgrade: 'websocket' } }))
    assert.deepEqual(d.drop_query, ['token'])
  })
})

describe('the login redirect never carries the query token', () => {
  let sc: Sidecar
  before(async () => {
    sc = await openSidecar()
  })
  after(() => sc.close())

  const rows: Array<[string, string, string]> = [
    ['token first', 'token=ast_secret_value&x=1', '/?x=1'],
    ['token last', 'x=1&token=eyJ.secret.jwt', '/?x=1'],
    ['access_token', 'access_token=ast_secret_value', '/'],
    ['both keys', 'token=a.b.c&access_token=ast_secret&y=2', '/?y=2'],
    ['repeated token', 'token=ast_one&token=ast_two&z=3', '/?z=3'],
  ]
  for (const [name, query, next] of rows) {
    it(`${name}: next=${next}`, async () => {
      const d = await decide(sc, { path: '/', pattern: '/', query, headers: NAVIGATE })
      const loc = location(d)
      assert.equal(loc, `/login?next=${encodeURIComponent(next)}`)
      assert.doesNotMatch(decodeURIComponent(loc), /secret|ast_|a\.b\.c|eyJ/)
    })
  }
})

// ------------------------------------------------------------- permissions

describe('permissions and admin routes', () => {
  let w: World
  before(async () => {
    w = await world({ admin_route_patterns: ['/manager/queue/start'] })
  })
  after(() => w.sc.close())

  const needsRun: Array<[string, string, string]> = [
    ['POST', '/prompt', '/prompt'], ['POST', '/api/prompt', '/api/prompt'], ['PUT', '/prompt', '/prompt'],
    ['POST', '/queue', '/queue'], ['POST', '/api/history', '/api/history'], ['POST', '/interrupt', '/interrupt'],
  ]
  for (const [method, path, pattern] of needsRun) {
    it(`a role without can_run → 403 PERMISSION_DENIED on ${method} ${path}`, async () => {
      assertDenied(await decide(w.sc, { method, path, pattern, headers: bearer(w.viewerJwt) }), 'PERMISSION_DENIED')
    })
  }

  for (const path of ['/upload/image', '/api/upload/mask']) {
    it(`a role without can_upload → 403 on POST ${path}`, async () => {
      assertDenied(await decide(w.sc, { method: 'POST', path, pattern: path, headers: bearer(w.viewerJwt) }), 'PERMISSION_DENIED')
    })
  }

  it('a role with can_access_api only still reads (GET /queue, /object_info, /api/history)', async () => {
    for (const [path, pattern] of [['/queue', '/queue'], ['/object_info', '/object_info'], ['/api/history', '/api/history']]) {
      assertPass(await decide(w.sc, { path, pattern, headers: bearer(w.viewerJwt) }), path)
    }
  })

  const adminOnly: Array<[string, string, string]> = [
    ['POST', '/free', '/free'], ['POST', '/api/free', '/api/free'], ['HEAD', '/internal/logs', '/internal/logs'],
    ['GET', '/internal/folder_paths', '/internal/folder_paths'], ['PATCH', '/internal/logs/subscribe', '/internal/logs/subscribe'],
    ['GET', '/api/internal/logs', '/api/internal/logs'], ['POST', '/manager/queue/start', '/manager/queue/start'],
    ['GET', '/api/manager/queue/start', '/api/manager/queue/start'],
  ]
  for (const [method, path, pattern] of adminOnly) {
    it(`admin-only ${method} ${path}: user → 403 ADMIN_REQUIRED, admin passes`, async () => {
      assertDenied(await decide(w.sc, { method, path, pattern, headers: bearer(w.aliceToken) }), 'ADMIN_REQUIRED')
      assertPass(await decide(w.sc, { method, path, pattern, headers: bearer(w.adminJwt) }))
    })
  }

  it('a role named "Admin" with every permission is not the admin role', async () => {
    assertDenied(await decide(w.sc, { method: 'POST', path: '/free', pattern: '/free', headers: bearer(w.fakeAdminJwt) }), 'ADMIN_REQUIRED')
  })

  it('a role missing from the groups file has no permission (deny, not default)', async () => {
    const ghost = await addUser(w.sc, 'ghost', 'ghost-passphrase-1', 'ghost-role')
    const jwt = await sessionJwt(w.sc, ghost)
    assertDenied(await decide(w.sc, at(QUEUE, { headers: bearer(jwt) })), 'PERMISSION_DENIED')
    assertPass(await decide(w.sc, { path: '/view', pattern: '/view', headers: bearer(jwt) }))
  })

  it('a role change applies to the very next request (no cached principal)', async () => {
    const fred = await addUser(w.sc, 'fred', 'fred-passphrase-1')
    const token = await apiToken(w.sc, fred)
    assertPass(await decide(w.sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: bearer(token) }))
    await w.sc.services.users.update(fred.user_id, { role: 'viewer' })
    assertDenied(await decide(w.sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: bearer(token) }), 'PERMISSION_DENIED')
  })
})

describe('anonymous roles and remote API auth', () => {
  it('local_anonymous_role applies to loopback, never to a remote client', async () => {
    const sc = await openSidecar({ config: { local_anonymous_role: 'guest' } })
    try {
      assertPass(await decide(sc, QUEUE))
      assertDenied(await decide(sc, { method: 'POST', path: '/prompt', pattern: '/prompt' }), 'PERMISSION_DENIED')
      assertDenied(await decide(sc, at(QUEUE, { peer: REMOTE })), 'AUTH_REQUIRED')
      assertDenied(await decide(sc, { method: 'POST', path: '/free', pattern: '/free' }), 'ADMIN_REQUIRED')
    } finally {
      await sc.close()
    }
  })

  it('local_anonymous_role "admin" is never granted', async () => {
    const sc = await openSidecar({ config: { local_anonymous_role: 'admin' } })
    try {
      assertDenied(await decide(sc, QUEUE), 'AUTH_REQUIRED')
      assertDenied(await decide(sc, { method: 'POST', path: '/free', pattern: '/free' }), 'AUTH_REQUIRED')
    } finally {
      await sc.close()
    }
  })

  it('local_anonymous_role naming an unknown role grants nothing', async () => {
    const sc = await openSidecar({ config: { local_anonymous_role: 'nope' } })
    try {
      assertDenied(await decide(sc, QUEUE), 'AUTH_REQUIRED')
    } finally {
      await sc.close()
    }
  })

  it('require_auth_for_remote_api=false treats remote clients like local ones', async () => {
    const sc = await openSidecar({ config: { local_anonymous_role: 'guest', require_auth_for_remote_api: false } })
    try {
      assertPass(await decide(sc, at(QUEUE, { peer: REMOTE })))
      assertDenied(await decide(sc, { method: 'POST', path: '/prompt', pattern: '/prompt', peer: REMOTE }), 'PERMISSION_DENIED')
    } finally {
      await sc.close()
    }
  })

  it('require_auth_for_remote_api=false without local_anonymous_role still needs a credential', async () => {
    const sc = await openSidecar({ config: { require_auth_for_remote_api: false } })
    try {
      assertDenied(await decide(sc, at(QUEUE, { peer: REMOTE })), 'AUTH_REQUIRED')
      assertDenied(await decide(sc, QUEUE), 'AUTH_REQUIRED')
    } finally {
      await sc.close()
    }
  })

  it('a present but invalid credential is refused even where anonymous access is allowed', async () => {
    const sc = await openSidecar({ config: { local_anonymous_role: 'user' } })
    try {
      assertDenied(await decide(sc, at(QUEUE, { headers: bearer('ast_bad') })), 'TOKEN_INVALID')
    } finally {
      await sc.close()
    }
  })

  it('guest sessions (allow_guest_jwt): pass as guest, refused once guest login is turned off', async () => {
    const sc = await openSidecar({ config: { allow_guest_jwt: true } })
    try {
      const jwt = await sessionJwt(sc, { user_id: 'guest', username: 'guest' })
      assertPass(await decide(sc, at(QUEUE, { headers: bearer(jwt) })))
      assertDenied(await decide(sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: bearer(jwt) }), 'PERMISSION_DENIED')
      await sc.services.settings.set('allow_guest_jwt', false)
      assertDenied(await decide(sc, at(QUEUE, { headers: bearer(jwt) })), 'TOKEN_REVOKED')
    } finally {
      await sc.close()
    }
  })
})

// ---------------------------------------------------------------- IP lists

describe('IP lists', () => {
  let w: World
  before(async () => {
    w = await world()
  })
  after(() => w.sc.close())

  it('blacklisted remote client → 403 IP_DENIED on host routes, even with an admin credential', async () => {
    w.sc.services.ipGate.update({ whitelist: [], blacklist: [{ ip: '203.0.113.0/24', permanent: true }] })
    try {
      assertDenied(await decide(w.sc, at(QUEUE, { peer: '203.0.113.77', headers: bearer(w.adminJwt) })), 'IP_DENIED')
      assertDenied(await decide(w.sc, { path: '/', pattern: '/', peer: '203.0.113.77', headers: NAVIGATE }), 'IP_DENIED')
      assertDenied(await decide(w.sc, at(QUEUE, { peer: '198.51.100.1' })), 'AUTH_REQUIRED')
    } finally {
      w.sc.services.ipGate.update({ whitelist: [], blacklist: [] })
    }
  })

  it('loopback is never denied, whatever the lists say (even 0.0.0.0/0 and ::/0 set behind validation)', async () => {
    w.sc.services.ipGate.update({ whitelist: ['198.51.100.0/24'], blacklist: [{ ip: '0.0.0.0/0', permanent: true }, { ip: '::/0', permanent: true }, { ip: '127.0.0.1', permanent: true }] })
    try {
      for (const peer of ['127.0.0.1', '127.9.9.9', '::1', '::ffff:127.0.0.1']) {
        assertPass(await decide(w.sc, at(QUEUE, { peer, headers: bearer(w.aliceJwt) })), peer)
      }
      assertDenied(await decide(w.sc, at(QUEUE, { peer: '198.51.100.9' })), 'IP_DENIED')
    } finally {
      w.sc.services.ipGate.update({ whitelist: [], blacklist: [] })
    }
  })

  it('a non-empty whitelist admits only matching clients (and loopback)', async () => {
    w.sc.services.ipGate.update({ whitelist: ['198.51.100.0/24', '2001:db8::/32'], blacklist: [] })
    try {
      assertDenied(await decide(w.sc, at(QUEUE, { peer: REMOTE, headers: bearer(w.adminJwt) })), 'IP_DENIED')
      assertDenied(await decide(w.sc, at(QUEUE, { peer: '2001:db9::1' })), 'IP_DENIED')
      assertPass(await decide(w.sc, at(QUEUE, { peer: '198.51.100.9', headers: bearer(w.aliceJwt) })))
      assertPass(await decide(w.sc, at(QUEUE, { peer: '2001:db8::7', headers: bearer(w.aliceJwt) })))
      assertPass(await decide(w.sc, at(QUEUE, { headers: bearer(w.aliceJwt) })))
    } finally {
      w.sc.services.ipGate.update({ whitelist: [], blacklist: [] })
    }
  })

  it('whitelist + blacklist: the blacklist still refuses a whitelisted address', async () => {
    w.sc.services.ipGate.update({ whitelist: ['198.51.100.0/24'], blacklist: [{ ip: '198.51.100.66', permanent: true }] })
    try {
      assertDenied(await decide(w.sc, at(QUEUE, { peer: '198.51.100.66', headers: bearer(w.aliceJwt) })), 'IP_DENIED')
    } finally {
      w.sc.services.ipGate.update({ whitelist: [], blacklist: [] })
    }
  })
})

// --------------------------------------------------------------- WebSocket

describe('WebSocket clientId binding', () => {
  let w: World
  before(async () => {
    w = await world()
  })
  after(() => w.sc.close())

  const ws = (query: string, headers: Record<string, string>, path = '/ws'): DescOptions => ({ path, pattern: path, query, headers: { upgrade: 'websocket', ...headers } })

  it('the first principal binds a clientId; another principal reusing it → 403 CLIENT_ID_TAKEN', async () => {
    assertPass(await decide(w.sc, ws('clientId=tab-1', bearer(w.aliceJwt))))
    assertPass(await decide(w.sc, ws('clientId=tab-1', bearer(w.aliceToken))), 'the same user with another credential')
    assertDenied(await decide(w.sc, ws('clientId=tab-1', bearer(w.bobJwt))), 'CLIENT_ID_TAKEN')
    assertDenied(await decide(w.sc, ws('clientId=tab-1', bearer(w.bobJwt), '/api/ws')), 'CLIENT_ID_TAKEN', '/api twin')
    assertDenied(await decide(w.sc, { method: 'HEAD', ...ws('clientId=tab-1', bearer(w.bobJwt)) }), 'CLIENT_ID_TAKEN', 'HEAD')
    assertDenied(await decide(w.sc, ws('x=1&clientId=tab-1', { ...bearer(w.adminJwt) })), 'CLIENT_ID_TAKEN', 'even an admin')
  })

  it('a repeated clientId parameter is judged on the first one (the one the host reads)', async () => {
    assertPass(await decide(w.sc, ws('clientId=tab-2', bearer(w.aliceJwt))))
    assertDenied(await decide(w.sc, ws('clientId=tab-2&clientId=bob-tab', bearer(w.bobJwt))), 'CLIENT_ID_TAKEN')
  })

  it('another principal cannot evict a binding by flooding new clientIds, then take it over', async () => {
    assertPass(await decide(w.sc, ws('clientId=victim-tab', bearer(w.aliceJwt))))
    const bobToken = await apiToken(w.sc, w.bob)
    for (let i = 0; i < 10_000; i++) await decide(w.sc, ws(`clientId=flood-${i}`, bearer(bobToken)))
    assertDenied(await decide(w.sc, ws('clientId=victim-tab', bearer(bobToken))), 'CLIENT_ID_TAKEN')
  })

  it('a prompt naming another principal\'s clientId is refused at the body step', async () => {
    assertPass(await decide(w.sc, ws('clientId=tab-3', bearer(w.aliceJwt))))
    const d = assertPass(await decide(w.sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: bearer(w.bobJwt) }))
    const ctx = JSON.parse(JSON.stringify(d.need_body!.ctx)) as unknown
    assertDenied(await bodyStep(w.sc, ctx, JSON.stringify({ prompt: {}, client_id: 'tab-3' })), 'CLIENT_ID_TAKEN')
  })

  it('a clientId first used by a prompt binds it for the WebSocket too', async () => {
    const d = assertPass(await decide(w.sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: bearer(w.bobJwt) }))
    assertPass(await bodyStep(w.sc, d.need_body!.ctx, JSON.stringify({ prompt: {}, client_id: 'bob-tab-9' })))
    assertDenied(await decide(w.sc, ws('clientId=bob-tab-9', bearer(w.aliceJwt))), 'CLIENT_ID_TAKEN')
  })
})

// ------------------------------------------------------- prompt stamping

describe('prompt body stamping (handlers.body)', () => {
  let w: World
  before(async () => {
    w = await world({ max_json_body_bytes: 65536 })
  })
  after(() => w.sc.close())

  async function stamp(jwt: string, body: string): Promise<Stepped> {
    const d = assertPass(await decide(w.sc, { method: 'POST', path: '/api/prompt', pattern: '/api/prompt', headers: bearer(jwt) }))
    assert.ok(d.need_body, 'the prompt route asks for the body')
    assert.equal(d.need_body.max_bytes, 65536)
    const ctx = JSON.parse(JSON.stringify(d.need_body.ctx)) as unknown // the plugin echoes it as JSON
    return bodyStep(w.sc, ctx, body)
  }

  it('spoofed authsvc_user / authsvc_user_id / authsvc_folder are replaced by the owner; other extra_data kept', async () => {
    const d = passedWithBody(await stamp(w.aliceJwt, JSON.stringify({
      prompt: { 1: { class_type: 'X' } },
      extra_data: { authsvc_user: 'admin', authsvc_user_id: w.admin.user_id, authsvc_folder: null, extra_pnginfo: { a: 1 } },
    })))
    const out = JSON.parse(d.body_text!) as { prompt: unknown; extra_data: Record<string, unknown> }
    assert.equal(out.extra_data.authsvc_user, 'alice')
    assert.equal(out.extra_data.authsvc_user_id, w.alice.user_id)
    assert.equal(out.extra_data.authsvc_folder, `u_${w.alice.user_id}`, 'the run-time guard keeps her prompt to her folder')
    assert.deepEqual(out.extra_data.extra_pnginfo, { a: 1 })
    assert.deepEqual(out.prompt, { 1: { class_type: 'X' } })
  })

  it('extra_data missing → an object holding only the owner', async () => {
    const out = JSON.parse(passedWithBody(await stamp(w.bobJwt, JSON.stringify({ prompt: {} }))).body_text!) as { extra_data: unknown }
    assert.deepEqual(out.extra_data, { authsvc_user: 'bob', authsvc_user_id: w.bob.user_id, authsvc_folder: `u_${w.bob.user_id}` })
  })

  it('an administrator\'s prompt is stamped with no folder (null), whatever the client sent', async () => {
    const out = JSON.parse(passedWithBody(await stamp(w.adminJwt, JSON.stringify({ prompt: {}, extra_data: { authsvc_folder: `u_${w.bob.user_id}` } }))).body_text!) as { extra_data: Record<string, unknown> }
    assert.equal(out.extra_data.authsvc_folder, null)
  })

  for (const [name, extra] of [['null', null], ['an array', ['authsvc_user']], ['a string', 'admin']] as const) {
    it(`extra_data ${name} → 400 VALIDATION_FAILED (the host would fail on it)`, async () => {
      assertDenied(await stamp(w.bobJwt, JSON.stringify({ prompt: {}, extra_data: extra })), 'VALIDATION_FAILED')
    })
  }

  it('a duplicated authsvc_user key in the raw JSON cannot survive', async () => {
    const raw = `{"prompt":{},"extra_data":{"authsvc_user":"admin","authsvc_user":"root"}}`
    const out = JSON.parse(passedWithBody(await stamp(w.bobJwt, raw)).body_text!) as { extra_data: Record<string, unknown> }
    assert.equal(out.extra_data.authsvc_user, 'bob')
    assert.doesNotMatch(passedWithBody(await stamp(w.bobJwt, raw)).body_text!, /root|"admin"/)
  })

  for (const [name, body] of [['invalid JSON', '{"prompt": '], ['empty body', ''], ['a JSON array', '[]'], ['JSON null', 'null'], ['a JSON string', '"x"'], ['a number', '1']]) {
    it(`${name} → 400 VALIDATION_FAILED`, async () => {
      assertDenied(await stamp(w.aliceJwt, body), 'VALIDATION_FAILED', name)
    })
  }

  it('a body message without a prompt ctx → 400, never a pass', async () => {
    for (const ctx of [null, {}, { kind: 'other' }, 'prompt']) {
      assertDenied(await bodyStep(w.sc, ctx, '{"prompt":{}}'), 'VALIDATION_FAILED', JSON.stringify(ctx))
    }
  })

  it('an anonymous local principal is stamped with its role and a null id', async () => {
    const sc = await openSidecar({ config: { local_anonymous_role: 'user' } })
    try {
      const d = assertPass(await decide(sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: { 'comfy-user': 'someone' } }))
      const out = JSON.parse(passedWithBody(await bodyStep(sc, d.need_body!.ctx, '{"prompt":{},"extra_data":{"authsvc_user_id":"x"}}')).body_text!) as { extra_data: Record<string, unknown> }
      const { authsvc_folder: folder, ...rest } = out.extra_data
      assert.deepEqual(rest, { authsvc_user: 'user', authsvc_user_id: null })
      assert.match(String(folder), /^o_[0-9a-f]{16}$/, 'an owner that is not a user has a folder of its own')
    } finally {
      await sc.close()
    }
  })
})

// ------------------------------------------------------------ system_stats

describe('system_stats filter', () => {
  let w: World
  const STATS = {
    system: { os: 'posix', comfyui_version: '0.3.64', argv: ['main.py', '--listen', '0.0.0.0', '--secret-flag'] },
    devices: [{ name: 'cpu', type: 'cpu' }],
  }
  before(async () => {
    w = await world()
  })
  after(() => w.sc.close())

  for (const path of ['/system_stats', '/api/system_stats']) {
    it(`${path}: non-admins get the answer without argv; admins unfiltered`, async () => {
      const user = assertPass(await decide(w.sc, { path, pattern: path, headers: bearer(w.aliceJwt) }))
      assert.equal(user.filter?.name, 'system_stats')
      const filtered = await filterStep(w.sc, user.filter!.name, user.filter!.ctx, JSON.stringify(STATS))
      assert.equal(filtered.action, 'replace')
      const out = JSON.parse((filtered as { body_text: string }).body_text) as typeof STATS
      assert.equal('argv' in out.system, false)
      assert.deepEqual(out.devices, STATS.devices)
      assert.equal(out.system.comfyui_version, '0.3.64')
      const admin = assertPass(await decide(w.sc, { path, pattern: path, headers: bearer(w.adminJwt) }))
      assert.equal(admin.filter, undefined)
    })
  }

  it('HEAD /system_stats is filtered like GET', async () => {
    const d = assertPass(await decide(w.sc, { method: 'HEAD', path: '/system_stats', pattern: '/system_stats', headers: bearer(w.viewerJwt) }))
    assert.equal(d.filter?.name, 'system_stats')
  })

  it('an anonymous local principal is filtered too', async () => {
    const sc = await openSidecar({ config: { local_anonymous_role: 'user' } })
    try {
      const d = assertPass(await decide(sc, { path: '/system_stats', pattern: '/system_stats' }))
      assert.equal(d.filter?.name, 'system_stats')
    } finally {
      await sc.close()
    }
  })

  it('a malformed host answer is never passed through unfiltered', async () => {
    const d = assertPass(await decide(w.sc, { path: '/system_stats', pattern: '/system_stats', headers: bearer(w.aliceJwt) }))
    const out = await filterStep(w.sc, 'system_stats', d.filter!.ctx, '{"system": {"argv": ["x"]')
    assert.equal(out.action, 'respond')
    assert.doesNotMatch(JSON.stringify(out), /argv/)
  })
})

// ------------------------------------------------------------ userdata writes

describe('userdata writes under workflows/', () => {
  let w: World
  before(async () => {
    w = await world()
  })
  after(() => w.sc.close())

  const write = (method: string, pattern: string, match_info: Record<string, string>, jwt: string): DescOptions => ({
    method, path: pattern.replace('{file}', encodeURIComponent(match_info.file)).replace('{dest}', encodeURIComponent(match_info.dest ?? '')),
    pattern, match_info, headers: bearer(jwt),
  })

  for (const [method, pattern] of [['POST', '/userdata/{file}'], ['DELETE', '/userdata/{file}'], ['POST', '/api/userdata/{file}']] as const) {
    it(`${method} ${pattern} workflows/a.json: without can_modify_workflows → 403; with it → pass`, async () => {
      assertDenied(await decide(w.sc, write(method, pattern, { file: 'workflows/a.json' }, w.viewerJwt)), 'PERMISSION_DENIED')
      assertDenied(await decide(w.sc, write(method, pattern, { file: '/workflows/a.json' }, w.viewerJwt)), 'PERMISSION_DENIED', 'leading slash')
      assertPass(await decide(w.sc, write(method, pattern, { file: 'workflows/a.json' }, w.aliceJwt)))
    })
  }

  it('other userdata files need only a principal', async () => {
    assertPass(await decide(w.sc, write('POST', '/userdata/{file}', { file: 'comfy.settings.json' }, w.viewerJwt)))
  })

  it('move of a workflow without can_modify_workflows → 403', async () => {
    assertDenied(await decide(w.sc, write('POST', '/userdata/{file}/move/{dest}', { file: 'workflows/a.json', dest: 'workflows/b.json' }, w.viewerJwt)), 'PERMISSION_DENIED')
  })

  const traversal: Array<[string, Record<string, string>]> = [
    ['./workflows/a.json', { file: './workflows/a.json' }],
    ['x/../workflows/a.json', { file: 'x/../workflows/a.json' }],
    ['.//workflows/a.json', { file: './/workflows/a.json' }],
    ['double-encoded workflows%2Fa.json (the host unquotes a file name holding "%" once more)', { file: 'workflows%2Fa.json' }],
  ]
  for (const [name, match_info] of traversal) {
    it(`traversal into workflows/ (${name}) without can_modify_workflows → 403`, async () => {
      assertDenied(await decide(w.sc, write('POST', '/userdata/{file}', match_info, w.viewerJwt)), 'PERMISSION_DENIED', name)
    })
  }

  it('move INTO workflows/ from another userdata file without can_modify_workflows → 403', async () => {
    assertDenied(await decide(w.sc, write('POST', '/userdata/{file}/move/{dest}', { file: 'notes.json', dest: 'workflows/x.json' }, w.viewerJwt)), 'PERMISSION_DENIED')
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
