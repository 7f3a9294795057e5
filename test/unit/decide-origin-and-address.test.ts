/**
 * Where a request comes from: CSRF on cookie-authenticated writes (Origin,
 * Sec-Fetch-Site), forwarded headers and locality (only a trusted proxy's
 * X-Forwarded-* count), and the IP white- and blacklists.
 *
 * Part of the decision path's attack table (DESIGN §6 "Attack tables", STYLE 7):
 * one row per bypass shape, through the real decider and real services; the
 * shared world is decide-world.ts.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { addUser, assertDenied, assertPass, bearer, decide, openSidecar, sessionJwt, type DescOptions, type Sidecar } from './fixtures.js'
import { API, NAVIGATE, QUEUE, REMOTE, SAME_ORIGIN, at, cookie, world, type World } from './decide-world.js'

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
    ['Origin with another port', { origin: 'http://127.0.0.1:9999' }],
    ['Origin https while the request arrived over http', { origin: 'https://127.0.0.1:8188' }],
    ['Origin with a suffix host', { origin: 'http://127.0.0.1:8188.evil.example' }],
    ['Sec-Fetch-Site cross-site', { 'sec-fetch-site': 'cross-site' }],
    ['Sec-Fetch-Site same-site (a sibling subdomain)', { 'sec-fetch-site': 'same-site' }],
    ['Sec-Fetch-Site none', { 'sec-fetch-site': 'none' }],
    ['Sec-Fetch-Site cross-site with a matching Origin', { 'sec-fetch-site': 'cross-site', origin: 'http://127.0.0.1:8188' }],
    ['Referer same-origin but no Origin', { referer: 'http://127.0.0.1:8188/' }],
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
    assertPass(await decide(w.sc, prompt({ ...cookie(w.aliceJwt), origin: 'https://127.0.0.1:8188' }, { scheme: 'https' })))
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
      headers: { ...cookie(jwt), origin: 'https://127.0.0.1:8188', 'x-forwarded-proto': 'https' },
    })
    assertDenied(await decide(sc, desc(REMOTE)), 'CSRF_REJECTED')
    assertPass(await decide(sc, desc(PROXY)))
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
