/**
 * Requests without a credential: every host route refuses them (401 JSON for
 * API clients, a login redirect for page navigations, never carrying the query
 * token), and the anonymous roles (local_anonymous_role,
 * require_auth_for_remote_api, guest sessions) grant only what they name.
 *
 * Part of the decision path's attack table (DESIGN §6 "Attack tables", STYLE 7):
 * one row per bypass shape, through the real decider and real services; the
 * shared world is decide-world.ts.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import {
  assertDenied, assertPass, bearer, decide, hostRouteRequests, openSidecar, sessionJwt, type DescOptions, type Sidecar,
} from './fixtures.js'
import { API, HTML_ACCEPT, NAVIGATE, QUEUE, REMOTE, at, location } from './decide-world.js'

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

describe('a grant by address (local_anonymous_role) is not carried to other sites\' pages', () => {
  let sc: Sidecar
  before(async () => {
    sc = await openSidecar({ config: { local_anonymous_role: 'user' } })
  })
  after(() => sc.close())
  const PROMPT = { method: 'POST', path: '/prompt', pattern: '/prompt' }
  const WS = { path: '/ws', pattern: '/ws', headers: { upgrade: 'websocket' } }

  // a browser on the local machine, on a page of another site: its unsafe requests and socket upgrades
  const crossSite: Array<[string, DescOptions]> = [
    ['a form post, Sec-Fetch-Site cross-site', at(PROMPT, { headers: { 'sec-fetch-site': 'cross-site', origin: 'https://evil.example', 'content-type': 'text/plain' } })],
    ['Sec-Fetch-Site same-site (a sibling subdomain)', at(PROMPT, { headers: { 'sec-fetch-site': 'same-site', origin: 'http://other.127.0.0.1:8188' } })],
    ['an Origin of another site, no Sec-Fetch-Site (an older browser)', at(PROMPT, { headers: { origin: 'https://evil.example' } })],
    ['Origin null (a sandboxed frame, a data: page)', at(PROMPT, { headers: { origin: 'null' } })],
    ['Sec-Fetch-Site cross-site with our Origin', at(PROMPT, { headers: { 'sec-fetch-site': 'cross-site', origin: 'http://127.0.0.1:8188' } })],
    ['a WebSocket upgrade from another site', at(WS, { headers: { upgrade: 'websocket', origin: 'https://evil.example' } })],
    ['a DELETE from another site', { method: 'DELETE', path: '/userdata/x.json', pattern: '/userdata/{file}', match_info: { file: 'x.json' }, headers: { 'sec-fetch-site': 'cross-site' } }],
  ]
  for (const [label, o] of crossSite) {
    it(`${label} → 403 CSRF_REJECTED`, async () => {
      assertDenied(await decide(sc, o), 'CSRF_REJECTED', label)
    })
  }

  it('a script (no browser signal) and the local browser\'s own page keep the grant', async () => {
    assertPass(await decide(sc, PROMPT), 'a script')
    assertPass(await decide(sc, at(PROMPT, { headers: { 'sec-fetch-site': 'same-origin', origin: 'http://127.0.0.1:8188' } })), 'our own page')
    assertPass(await decide(sc, at(PROMPT, { headers: { origin: 'http://127.0.0.1:8188' } })), 'our own page, an older browser')
    assertPass(await decide(sc, at(WS, { headers: { upgrade: 'websocket', origin: 'http://127.0.0.1:8188' } })), 'our own page\'s socket')
    assertPass(await decide(sc, at(QUEUE, { headers: { 'sec-fetch-site': 'cross-site' } })), 'a cross-site read is the browser\'s to refuse (no CORS grant), as for a cookie')
  })

  // DNS rebinding: a name of the attacker's pointed at a local address; the page then reads what it asks
  const rebound: Array<[string, string | undefined]> = [
    ['a name of another site', 'rebind.evil.example:8188'],
    ['a name embedding a loopback address', '127.0.0.1.nip.io:8188'],
    ['localhost with a trailing dot (a DNS name)', 'localhost.:8188'],
    ['a localhost prefix', 'localhost.evil.example:8188'],
    ['a hex spelling of 127.0.0.1', '0x7f.0.0.1:8188'],
    ['no Host at all', undefined],
    ['a Host with junk after the port', '127.0.0.1:8188@evil.example'],
  ]
  for (const [label, host] of rebound) {
    it(`Host ${label}: no anonymous grant, for reads and writes alike (401)`, async () => {
      for (const o of [QUEUE, PROMPT]) {
        const headers = { host: host as string } // undefined: the header is absent
        assertDenied(await decide(sc, at(o, { headers })), 'AUTH_REQUIRED', `${o.path} with Host ${host}`)
      }
    })
  }

  it('behind a proxy that names the upstream itself, the name the browser used (X-Forwarded-Host) must pass too', async () => {
    for (const forwarded of ['rebind.evil.example:8188', '127.0.0.1:8188, rebind.evil.example']) {
      assertDenied(await decide(sc, at(QUEUE, { headers: { host: '127.0.0.1:8188', 'x-forwarded-host': forwarded } })), 'AUTH_REQUIRED', forwarded)
    }
    assertPass(await decide(sc, at(QUEUE, { headers: { host: '127.0.0.1:8188', 'x-forwarded-host': 'localhost:8443' } })))
  })

  it('names no DNS answer can move keep the grant: IPv4 and IPv6 literals, localhost, *.localhost, any case, with or without a port', async () => {
    for (const host of ['127.0.0.1:8188', '127.0.0.1', '[::1]:8188', '[::1]', 'localhost:8188', 'LocalHost:8188', 'comfy.localhost:8188', '192.168.1.5:8188']) {
      assertPass(await decide(sc, at(QUEUE, { headers: { host } })), host)
    }
  })

  it('with require_auth_for_remote_api false (every client anonymous, by the operator\'s choice) the Host is not what grants access', async () => {
    const open = await openSidecar({ config: { local_anonymous_role: 'user', require_auth_for_remote_api: false } })
    try {
      assertPass(await decide(open, at(QUEUE, { peer: REMOTE, headers: { host: 'comfy.example.com' } })))
      assertDenied(await decide(open, at(PROMPT, { peer: REMOTE, headers: { host: 'comfy.example.com', 'sec-fetch-site': 'cross-site' } })), 'CSRF_REJECTED')
    } finally {
      await open.close()
    }
  })
})
