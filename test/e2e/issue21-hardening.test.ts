/**
 * Issue 21, item 6: the hardening found in the same review, end to end through the stand-in
 * (the real plugin, the real sidecar, its sqlite file, real sockets). Each table is one hole;
 * each row one request shape, with the exact status and code it must get, and a check that
 * nothing happened (no host handler ran, the session still works, the admin can still log in).
 *
 * Requests go through node:http: fetch adds Sec-Fetch-* headers of its own, cannot send
 * PROPFIND or a raw `%ff`, and these rows need exact bytes.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { request, type IncomingHttpHeaders, type OutgoingHttpHeaders } from 'node:http'
import { AIOHTTP_VERSIONS, destroyStack, startStack, type Stack } from '../helpers/stack.js'
import { PASSWORD, register, tinyGraph } from '../helpers/client.js'

interface Answer {
  status: number
  headers: IncomingHttpHeaders
  text: string
  body: any
}

function send(stack: Stack, method: string, path: string, headers: OutgoingHttpHeaders = {}, body?: unknown): Promise<Answer> {
  const { hostname, port } = new URL(stack.url)
  const payload = body === undefined ? undefined : JSON.stringify(body)
  const base: OutgoingHttpHeaders = { Accept: 'application/json', ...(payload === undefined ? {} : { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(payload) }) }
  return new Promise((resolve, reject) => {
    const req = request({ host: hostname, port, method, path, headers: { ...base, ...headers } }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => (text += chunk))
      res.on('end', () => {
        let parsed: any
        try {
          parsed = JSON.parse(text)
        } catch {
          parsed = undefined
        }
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text, body: parsed })
      })
    })
    req.on('error', reject)
    req.end(payload)
  })
}

const loginAs = async (stack: Stack, username: string, headers: OutgoingHttpHeaders = {}) => {
  const res = await send(stack, 'POST', '/login', headers, { username, password: PASSWORD })
  assert.equal(res.status, 200, `login ${username}: ${res.text}`)
  return { jwt: res.body.jwt_token as string, cookie: String(res.headers['set-cookie']).split(';')[0], setCookie: String(res.headers['set-cookie']) }
}

/** A private network the stack treats as local; loopback (the real peer, a trusted proxy here) is left out. */
const LOCAL_NET = '10.77.0.0/16'
const LAN_CLIENT = '10.77.0.5'
const REMOTE = '203.0.113.9'

const aiohttp = AIOHTTP_VERSIONS[0]

describe(`behind a trusted proxy (aiohttp ${aiohttp})`, () => {
  let stack: Stack
  let root: { jwt: string }
  before(async () => {
    // loopback is the trusted proxy; anonymous clients of the LAN act as `user` (can_run)
    stack = await startStack({ aiohttp, config: { trusted_proxies: ['127.0.0.1/32'], local_network_cidrs: [LOCAL_NET], local_anonymous_role: 'user' } })
    assert.equal((await register(stack, 'root')).status, 201)
    root = await loginAs(stack, 'root', { 'X-Forwarded-For': '198.51.100.250' })
  })
  after(async () => {
    await destroyStack(stack)
  })

  // Hole 1: a proxy that sets X-Real-IP and passes the client's X-Forwarded-For on let the
  // client's spoof win (anonymous /prompt served with local_anonymous_role).
  it('forwarded addresses: a client\'s own claim never makes it local, whichever header the proxy owns', async () => {
    const rows: Array<[string, OutgoingHttpHeaders]> = [
      ['X-Real-IP proxy, client\'s X-Forwarded-For passed on', { 'X-Real-IP': REMOTE, 'X-Forwarded-For': LAN_CLIENT }],
      ['X-Real-IP proxy, client\'s X-Forwarded-For naming the proxy itself', { 'X-Real-IP': REMOTE, 'X-Forwarded-For': '127.0.0.1' }],
      ['X-Real-IP proxy, client\'s two X-Forwarded-For lines', { 'X-Real-IP': REMOTE, 'X-Forwarded-For': [LAN_CLIENT, LAN_CLIENT] }],
      ['appending proxy, client\'s entry left of the appended one', { 'X-Forwarded-For': `${LAN_CLIENT}, ${REMOTE}` }],
      ['appending proxy, client\'s X-Real-IP passed on', { 'X-Real-IP': LAN_CLIENT, 'X-Forwarded-For': REMOTE }],
      ['appending proxy, client\'s X-Real-IP and X-Forwarded-For passed on', { 'X-Real-IP': LAN_CLIENT, 'X-Forwarded-For': `${LAN_CLIENT}, ${REMOTE}` }],
      ['appending proxy, client\'s X-Real-IP naming the proxy', { 'X-Real-IP': '127.0.0.1', 'X-Forwarded-For': REMOTE }],
    ]
    const wrong: string[] = []
    for (const [label, headers] of rows) {
      await stack.resetCounter()
      const res = await send(stack, 'POST', '/prompt', headers, { prompt: tinyGraph('spoof') })
      const reached = (await stack.counter()).total
      if (res.status !== 401 || res.body?.code !== 'AUTH_REQUIRED' || reached !== 0) wrong.push(`${label}: ${res.status} ${res.text.slice(0, 80)}, host handlers run: ${reached}`)
    }
    assert.deepEqual(wrong, [])
  })

  it('forwarded addresses, the controls: what each proxy style itself says does count', async () => {
    const rows: Array<[string, OutgoingHttpHeaders]> = [
      ['X-Real-IP proxy, no X-Forwarded-For', { 'X-Real-IP': LAN_CLIENT }],
      ['appending proxy, no X-Real-IP', { 'X-Forwarded-For': LAN_CLIENT }],
      ['appending proxy behind another of ours', { 'X-Forwarded-For': `${LAN_CLIENT}, 127.0.0.1` }],
      ['a proxy that sets both (they agree)', { 'X-Real-IP': LAN_CLIENT, 'X-Forwarded-For': `${REMOTE}, ${LAN_CLIENT}` }],
    ]
    for (const [label, headers] of rows) {
      await stack.resetCounter()
      const res = await send(stack, 'POST', '/prompt', headers, { prompt: tinyGraph('honest') })
      assert.equal(res.status, 200, `${label}: ${res.text}`)
      assert.deepEqual((await stack.counter()).by_route, { 'POST /prompt': 1 }, label)
    }
  })

  it('forwarded addresses: a blacklisted client cannot hide behind a claim the proxy passed on', async () => {
    const put = await send(stack, 'PUT', '/authsvc/api/ip-lists', { Authorization: `Bearer ${root.jwt}` }, { whitelist: [], blacklist: [{ ip: REMOTE, permanent: true }] })
    assert.equal(put.status, 200, put.text)
    try {
      const rows: Array<[string, OutgoingHttpHeaders]> = [
        ['X-Real-IP proxy, client\'s X-Forwarded-For', { 'X-Real-IP': REMOTE, 'X-Forwarded-For': '198.51.100.7' }],
        ['appending proxy, client\'s X-Real-IP', { 'X-Real-IP': '198.51.100.7', 'X-Forwarded-For': REMOTE }],
      ]
      for (const [label, headers] of rows) {
        await stack.resetCounter()
        const res = await send(stack, 'GET', '/queue', { ...headers, Authorization: `Bearer ${root.jwt}` })
        assert.equal(res.status, 403, `${label}: ${res.text}`)
        assert.equal(res.body.code, 'IP_DENIED', label)
        assert.equal((await stack.counter()).total, 0, label)
      }
    } finally {
      assert.equal((await send(stack, 'PUT', '/authsvc/api/ip-lists', { Authorization: `Bearer ${root.jwt}`, 'X-Forwarded-For': '198.51.100.250' }, { whitelist: [], blacklist: [] })).status, 200)
    }
  })

  // Hole 2: `X-Forwarded-Proto: https, http` (a client's https before the proxy's http) made is-https true.
  it('X-Forwarded-Proto: only the value the trusted proxy set or appended counts', async () => {
    const rows: Array<[string, string, boolean]> = [
      ['client https, proxy appended http', 'https, http', false],
      ['client https, proxy appended http, no space', 'https,http', false],
      ['client https twice, proxy appended http', 'https, https, http', false],
      ['the proxy\'s own https', 'https', true],
      ['client http, proxy appended https', 'http, https', true],
      ['the proxy\'s own http', 'http', false],
    ]
    for (const [label, proto, expected] of rows) {
      const res = await send(stack, 'GET', '/authsvc/api/is-https', { 'X-Forwarded-Proto': proto })
      assert.equal(res.status, 200, label)
      assert.deepEqual(res.body, { is_https: expected }, label)
    }
    // the session cookie follows the same fact
    const spoofed = await loginAs(stack, 'root', { 'X-Forwarded-For': '198.51.100.250', 'X-Forwarded-Proto': 'https, http' })
    assert.doesNotMatch(spoofed.setCookie, /;\s*Secure/i, 'the client\'s https does not make the cookie Secure')
    const honest = await loginAs(stack, 'root', { 'X-Forwarded-For': '198.51.100.250', 'X-Forwarded-Proto': 'https' })
    assert.match(honest.setCookie, /;\s*Secure/i)
  })

  // Hole 4: 11 anonymous POST /register after registration closed locked the admin out of
  // password login for 10 minutes from that address. Each row runs from its own address.
  it('anonymous requests that are not failed logins never cost the admin their login', async () => {
    const N = 25
    const rows: Array<[string, string, () => Promise<Answer>, number, string]> = []
    const add = (label: string, status: number, code: string, call: (from: OutgoingHttpHeaders) => Promise<Answer>) => {
      const address = `198.51.100.${rows.length + 10}`
      rows.push([label, address, () => call({ 'X-Forwarded-For': address }), status, code])
    }
    add('POST /register after registration closed', 403, 'REGISTRATION_CLOSED', (h) => send(stack, 'POST', '/register', h, { username: 'mallory', password: PASSWORD }))
    add('POST /register with a taken name, closed', 403, 'REGISTRATION_CLOSED', (h) => send(stack, 'POST', '/register', h, { username: 'root', password: 'x' }))
    add('POST /register with a broken body', 400, 'VALIDATION_FAILED', (h) => send(stack, 'POST', '/register', h, { username: 1 }))
    add('POST /login as a guest while guest login is off', 403, 'GUEST_DISABLED', (h) => send(stack, 'POST', '/login', h, { guest_login: true }))
    add('POST /login without a password', 400, 'VALIDATION_FAILED', (h) => send(stack, 'POST', '/login', h, { username: 'root' }))
    add('POST /authsvc/api/mfa/verify with an unknown temp token', 401, 'MFA_TOKEN_INVALID', (h) => send(stack, 'POST', '/authsvc/api/mfa/verify', h, { mfa_temp_token: 'nope', code: '123456' }))
    add('GET /queue with a forged bearer', 401, 'TOKEN_INVALID', (h) => send(stack, 'GET', '/queue', { ...h, Authorization: 'Bearer ast_forged' }))
    add('GET /authsvc/api/me with a forged bearer', 401, 'TOKEN_INVALID', (h) => send(stack, 'GET', '/authsvc/api/me', { ...h, Authorization: 'Bearer a.b.c' }))
    add('POST /api/authsvc/recovery/reset-mfa without recovery mode', 403, 'RECOVERY_DISABLED', (h) => send(stack, 'POST', '/api/authsvc/recovery/reset-mfa', h))
    add('GET /authsvc/api/users anonymous', 401, 'AUTH_REQUIRED', (h) => send(stack, 'GET', '/authsvc/api/users', h))
    const wrong: string[] = []
    for (const [label, address, call, status, code] of rows) {
      for (let i = 0; i < N; i++) {
        const res = await call()
        if (res.status !== status || res.body?.code !== code) {
          wrong.push(`${label} #${i + 1}: ${res.status} ${res.text.slice(0, 80)}`)
          break
        }
      }
      const login = await send(stack, 'POST', '/login', { 'X-Forwarded-For': address }, { username: 'root', password: PASSWORD })
      if (login.status !== 200) wrong.push(`${label} ×${N}, then the admin's login from ${address}: ${login.status} ${login.text.slice(0, 80)}`)
    }
    assert.deepEqual(wrong, [])
  })

  it('the control: ten failed logins from one address do lock it (429 with Retry-After)', async () => {
    const from = { 'X-Forwarded-For': '198.51.100.200' }
    for (let i = 0; i < 10; i++) {
      const res = await send(stack, 'POST', '/login', from, { username: `nobody${i}`, password: 'not-the-password' })
      assert.equal(res.body.code, 'INVALID_CREDENTIALS')
    }
    const locked = await send(stack, 'POST', '/login', from, { username: 'root', password: PASSWORD })
    assert.equal(locked.status, 429)
    assert.equal(locked.body.code, 'TOO_MANY_ATTEMPTS')
    assert.equal(locked.headers['retry-after'], '600')
  })
})

describe(`the service's own paths and pages (aiohttp ${aiohttp})`, () => {
  let stack: Stack
  let admin: { jwt: string; cookie: string }
  const meStatus = async (cookie: string) => (await send(stack, 'GET', '/authsvc/api/me', { Cookie: cookie })).status
  before(async () => {
    stack = await startStack({ aiohttp })
    assert.equal((await register(stack, 'admin')).status, 201)
    admin = await loginAs(stack, 'admin')
  })
  after(async () => {
    await destroyStack(stack)
  })

  // Hole 6: under /authsvc/, what no owned route matched went to the host (text 404/405, and
  // the host's 500 for a 5,000-character parameter).
  const LONG = 'a'.repeat(5000)
  const PATH_ROWS: Array<[string, string, number, string]> = [
    ['GET', '/authsvc/%ff', 400, 'VALIDATION_FAILED'],
    ['GET', '/authsvc/api/users/%ff', 400, 'VALIDATION_FAILED'],
    ['PUT', '/authsvc/api/users/%ff', 400, 'VALIDATION_FAILED'],
    ['GET', '/authsvc/%', 400, 'VALIDATION_FAILED'],
    ['GET', '/authsvc/api/users/%e2%82', 400, 'VALIDATION_FAILED'],
    ['GET', '/api/authsvc/%ff', 400, 'VALIDATION_FAILED'],
    ['GET', `/authsvc/${LONG}`, 404, 'NOT_FOUND'],
    ['PUT', `/authsvc/api/users/${LONG}`, 404, 'NOT_FOUND'],
    ['DELETE', `/api/authsvc/api/users/${LONG}`, 404, 'NOT_FOUND'],
    ['GET', `/authsvc/api/model-cache/folders/${LONG}/items`, 404, 'NOT_FOUND'],
    ['PROPFIND', '/authsvc/api/me', 405, 'METHOD_NOT_ALLOWED'],
    ['PATCH', '/authsvc/api/me', 405, 'METHOD_NOT_ALLOWED'],
    ['DELETE', '/authsvc/health', 405, 'METHOD_NOT_ALLOWED'],
    ['MKCOL', '/authsvc/api/me', 405, 'METHOD_NOT_ALLOWED'],
    ['PURGE', '/api/authsvc/api/tokens', 405, 'METHOD_NOT_ALLOWED'],
    ['PATCH', '/api/authsvc/api/me', 405, 'METHOD_NOT_ALLOWED'],
    ['PROPFIND', '/authsvc/nowhere', 404, 'NOT_FOUND'],
    ['GET', '/authsvc', 404, 'NOT_FOUND'],
    ['GET', '/authsvc/', 404, 'NOT_FOUND'],
    ['GET', '/api/authsvc', 404, 'NOT_FOUND'],
    ['GET', '/api/authsvc/', 404, 'NOT_FOUND'],
    ['POST', '/authsvc', 404, 'NOT_FOUND'],
    ['GET', '/authsvc/api/nope', 404, 'NOT_FOUND'],
    ['GET', '/authsvc/api/me/', 404, 'NOT_FOUND'],
    ['GET', '//authsvc/api/me', 404, 'NOT_FOUND'],
    ['GET', '/authsvc//api/me', 404, 'NOT_FOUND'],
    ['GET', '//api//authsvc/api/nope', 404, 'NOT_FOUND'],
    ['GET', '/%61uthsvc/api/nope', 404, 'NOT_FOUND'],
    ['GET', '/authsvc%2Fapi/me', 404, 'NOT_FOUND'],
    ['GET', '/authsvc/api/me;x', 404, 'NOT_FOUND'],
    ['GET', '/authsvc/api/me%00', 404, 'NOT_FOUND'],
  ]
  for (const [who, headers] of [['anonymous', () => ({})], ['the admin', () => ({ Authorization: `Bearer ${admin.jwt}` })]] as const) {
    it(`every path under the service's prefixes gets the service's JSON error (anonymous: 401), never the host (${who})`, async () => {
      await stack.resetCounter()
      const wrong: string[] = []
      for (const [method, path, expectedStatus, expectedCode] of PATH_ROWS) {
        // an anonymous probe learns nothing of the service's paths: the credential's 401 first
        const [status, code] = who === 'anonymous' ? [401, 'AUTH_REQUIRED'] : [expectedStatus, expectedCode]
        const res = await send(stack, method, path, headers())
        const label = `${method} ${path.slice(0, 60)}${path.length > 60 ? '…' : ''}`
        if (res.status !== status || res.body?.code !== code || res.body?.statusCode !== status || typeof res.body?.error !== 'string') {
          wrong.push(`${label}: ${res.status} ${res.text.slice(0, 80)}`)
        } else if (!String(res.headers['content-type']).startsWith('application/json')) {
          wrong.push(`${label}: content-type ${res.headers['content-type']}`)
        } else if (status === 405 && !/^GET\b|POST/.test(String(res.headers.allow))) {
          wrong.push(`${label}: Allow ${res.headers.allow}`)
        }
      }
      assert.deepEqual(wrong, [])
      assert.equal((await stack.counter()).total, 0, 'no host handler ran')
    })
  }

  it('the controls: owned routes under the prefixes still answer, a long query included', async () => {
    const auth = { Authorization: `Bearer ${admin.jwt}` }
    for (const path of ['/authsvc/api/me', '/api/authsvc/api/me', '/authsvc/api/m%65', `/authsvc/api/me?x=${LONG}`]) {
      const res = await send(stack, 'GET', path, auth)
      assert.equal(res.status, 200, `${path.slice(0, 60)}: ${res.text}`)
      assert.equal(res.body.username, 'admin')
    }
    const allow = await send(stack, 'PATCH', '/authsvc/api/me', auth)
    assert.equal(allow.headers.allow, 'GET, HEAD')
    assert.equal((await send(stack, 'HEAD', '/authsvc/api/me', auth)).status, 200)
  })

  // Hole 5: a cross-site GET /logout (a link or an <img> on another site) ended the session.
  it('GET /logout with the session cookie ends it only for a navigation that started on this site', async () => {
    const NAV = { Accept: 'text/html', 'Sec-Fetch-Mode': 'navigate' }
    const kept: Array<[string, string, OutgoingHttpHeaders, number, string | null]> = [
      ['GET', 'Sec-Fetch-Site: cross-site (a link on another site)', { ...NAV, 'Sec-Fetch-Site': 'cross-site' }, 403, 'CSRF_REJECTED'],
      ['GET', 'Sec-Fetch-Site: cross-site, an <img>', { Accept: 'image/*', 'Sec-Fetch-Mode': 'no-cors', 'Sec-Fetch-Site': 'cross-site' }, 403, 'CSRF_REJECTED'],
      ['GET', 'Sec-Fetch-Site: same-site (a sibling origin)', { ...NAV, 'Sec-Fetch-Site': 'same-site' }, 403, 'CSRF_REJECTED'],
      ['GET', 'Sec-Fetch-Site: cross-site beside our own Origin', { ...NAV, 'Sec-Fetch-Site': 'cross-site', Origin: stack.url }, 403, 'CSRF_REJECTED'],
      ['GET', 'no Sec-Fetch-Site, an API client', {}, 403, 'CSRF_REJECTED'],
      ['HEAD', 'HEAD, same-origin', { 'Sec-Fetch-Site': 'same-origin' }, 403, null],
      ['GET', 'no Sec-Fetch-Site, a navigation: the page with the POST button', NAV, 200, null],
      ['GET', 'Sec-Fetch-Site of an unknown value, a navigation', { ...NAV, 'Sec-Fetch-Site': 'elsewhere' }, 200, null],
    ]
    const session = await loginAs(stack, 'admin')
    const wrong: string[] = []
    for (const [method, label, headers, status, code] of kept) {
      const res = await send(stack, method, '/logout', { Cookie: session.cookie, ...headers })
      if (res.status !== status || (code !== null && res.body?.code !== code)) wrong.push(`${label}: ${res.status} ${res.text.slice(0, 80)}`)
      else if (res.headers['set-cookie'] !== undefined) wrong.push(`${label}: the cookie was touched: ${res.headers['set-cookie']}`)
      else if (status === 200 && !/<form method="post" action="\/logout"><button type="submit" id="logout-confirm">/.test(res.text)) wrong.push(`${label}: no POST button`)
      if (await meStatus(session.cookie) !== 200) {
        wrong.push(`${label}: the session ended`)
        break
      }
    }
    assert.deepEqual(wrong, [])
  })

  it('GET /logout from this site (same-origin, or typed: none) and POST from our origin still log out', async () => {
    const rows: Array<[string, string, OutgoingHttpHeaders, number]> = [
      ['GET', 'navigation, Sec-Fetch-Site: same-origin', { Accept: 'text/html', 'Sec-Fetch-Mode': 'navigate', 'Sec-Fetch-Site': 'same-origin' }, 302],
      ['GET', 'navigation, Sec-Fetch-Site: none (typed or bookmarked)', { Accept: 'text/html', 'Sec-Fetch-Mode': 'navigate', 'Sec-Fetch-Site': 'none' }, 302],
      ['GET', 'fetch, Sec-Fetch-Site: same-origin', { 'Sec-Fetch-Site': 'same-origin', 'Sec-Fetch-Mode': 'cors' }, 200],
      ['POST', 'the menu\'s fetch POST', { 'Sec-Fetch-Site': 'same-origin', 'Sec-Fetch-Mode': 'cors', Origin: stack.url }, 200],
      ['POST', 'the page\'s form POST', { Accept: 'text/html', 'Sec-Fetch-Mode': 'navigate', 'Sec-Fetch-Site': 'same-origin', Origin: stack.url }, 302],
    ]
    for (const [method, label, headers, status] of rows) {
      const session = await loginAs(stack, 'admin')
      const res = await send(stack, method, '/logout', { Cookie: session.cookie, ...headers })
      assert.equal(res.status, status, `${label}: ${res.text}`)
      if (status === 302) assert.equal(res.headers.location, '/login', label)
      assert.match(String(res.headers['set-cookie']), /^jwt_token=;/, `${label}: the cookie is cleared`)
      assert.equal(await meStatus(session.cookie), 401, `${label}: the session is revoked`)
    }
    // POST keeps its own rule: cross-site is refused and the session stays
    const session = await loginAs(stack, 'admin')
    const cross = await send(stack, 'POST', '/logout', { Cookie: session.cookie, 'Sec-Fetch-Site': 'cross-site', Origin: 'https://evil.example' })
    assert.equal(cross.status, 403)
    assert.equal(cross.body.code, 'CSRF_REJECTED')
    assert.equal(await meStatus(session.cookie), 200)
    // a bearer session is exempt (no cookie rides along cross-site)
    const bearer = await loginAs(stack, 'admin')
    const out = await send(stack, 'GET', '/logout', { Authorization: `Bearer ${bearer.jwt}` })
    assert.deepEqual([out.status, out.body], [200, { message: 'Logged out' }])
    assert.equal((await send(stack, 'GET', '/authsvc/api/me', { Authorization: `Bearer ${bearer.jwt}` })).body.code, 'TOKEN_REVOKED')
  })

  // Hole 3: /loading re-read `next` in its script with a weaker rule than /login's: a tab, a
  // newline or a dot segment made a scheme-relative URL of it. The page now carries the server's
  // answer; /login's redirect_url is the same rule (the browser half is test/browser/loading-next.test.ts).
  const NEXT_ROWS: Array<[string, string]> = [
    ['%2F%09%2Fhost%3A9%2Fx', '/'],
    ['/%09/host:9/x', '/'],
    ['/%0A/host:9/x', '/'],
    ['/%0D/host:9/x', '/'],
    ['/%0D%0A/host:9/x', '/'],
    ['%09//host:9/x', '/'],
    ['%20//host:9/x', '/'],
    ['//host:9/x', '/'],
    ['/%5Chost:9/x', '/'],
    ['/%5C/host:9/x', '/'],
    ['%5C%5Chost:9/x', '/'],
    ['/%2F/host:9/x', '/'],
    ['%2F%2Fhost:9/x', '/'],
    ['/.//host:9/x', '/'],
    ['/..//host:9/x', '/'],
    ['/%2e//host:9/x', '/'],
    ['/a/..//host:9/x', '/'],
    ['/./%5Chost:9/x', '/'],
    ['/%00/host:9/x', '/'],
    ['/%7F/host:9/x', '/'],
    ['javascript:alert(1)', '/'],
    ['JaVaScRiPt%3Aalert(1)', '/'],
    ['http://host:9/x', '/'],
    ['https:host:9/x', '/'],
    ['data:text/html,x', '/'],
    ['host:9/x', '/'],
    ['', '/'],
    ['/authsvc/account', '/authsvc/account'],
    ['%2F%3Fa%3D1%26b%3D2', '/?a=1&b=2'],
    ['/x%23part', '/x#part'],
    ['/%252F/host', '/%2F/host'],
  ]
  it('/loading writes the server\'s `next` into the page, the same answer /login gives', async () => {
    const wrong: string[] = []
    for (const [query, expected] of NEXT_ROWS) {
      const page = await send(stack, 'GET', `/loading?next=${query}`, { Accept: 'text/html', Cookie: admin.cookie })
      const href = /<a href="([^"]*)" id="continue">/.exec(page.text)?.[1]?.replace(/&#(\d+);/g, (_m, c: string) => String.fromCharCode(Number(c)))
      if (page.status !== 200 || href !== expected) wrong.push(`/loading?next=${query}: ${page.status} continue → ${href}`)
      const login = await send(stack, 'POST', `/login?next=${query}`, {}, { username: 'admin', password: PASSWORD })
      if (login.body?.redirect_url !== expected) wrong.push(`/login?next=${query}: redirect_url ${login.body?.redirect_url}`)
    }
    assert.deepEqual(wrong, [])
  })
})
