/**
 * Issue 3's attack table, end to end through the stand-in on aiohttp 3.8 and
 * 3.11: cookie-authenticated cross-site writes to host and owned routes, a
 * client's own `comfy-user` header, forwarded-address headers from an
 * untrusted peer (locality and the throttle key), and the `/api/authsvc`
 * twin of a write route answering exactly as `/authsvc`.
 *
 * Requests go through node:http, not fetch: fetch adds Sec-Fetch-* headers of
 * its own and cannot name another Host, and these rows need exact headers.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { request, type IncomingHttpHeaders, type OutgoingHttpHeaders } from 'node:http'
import { AIOHTTP_VERSIONS, destroyStack, startStack, type Stack } from '../helpers/stack.js'
import { PASSWORD, apiToken, login, register, tinyGraph } from '../helpers/client.js'

interface Answer {
  status: number
  headers: IncomingHttpHeaders
  text: string
  body: any
}

function send(stack: Stack, method: string, path: string, headers: OutgoingHttpHeaders = {}, body?: unknown): Promise<Answer> {
  const { hostname, port } = new URL(stack.url)
  const payload = body === undefined ? undefined : JSON.stringify(body)
  // an explicit length: node:http frames no body of a DELETE by itself
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

/** What the stand-in recorded for the last request that reached a host handler (null: none did). */
type Seen = { route: string; headers: Record<string, string> } | null

const CROSS_SITE = { Origin: 'https://evil.example', 'Sec-Fetch-Site': 'cross-site' }
/** A private network the stack treats as local; loopback, the real peer, is left out of it. */
const LOCAL_NET = '10.77.0.0/16'
const LAN_CLIENT = '10.77.0.5'
const CONFIG = { local_network_cidrs: [LOCAL_NET], local_anonymous_role: 'guest' }
const FORWARDED_SHAPES: Array<[string, OutgoingHttpHeaders]> = [
  ['X-Forwarded-For', { 'X-Forwarded-For': LAN_CLIENT }],
  ['X-Forwarded-For, two hops', { 'X-Forwarded-For': `${LAN_CLIENT}, ${LAN_CLIENT}` }],
  ['X-Real-IP', { 'X-Real-IP': LAN_CLIENT }],
  ['Forwarded', { Forwarded: `for=${LAN_CLIENT}` }],
  ['the plugin\'s own peer header', { 'X-Authsvc-Peer': LAN_CLIENT }],
  ['all of them', { 'X-Forwarded-For': LAN_CLIENT, 'X-Real-IP': LAN_CLIENT, Forwarded: `for=${LAN_CLIENT}`, 'X-Authsvc-Peer': LAN_CLIENT }],
]

const tokenPrefix = (token: string) => createHash('sha256').update(token).digest('hex').slice(0, 12)

for (const aiohttp of AIOHTTP_VERSIONS) {
  describe(`CSRF and spoofing, aiohttp ${aiohttp}`, () => {
    let stack: Stack
    let root: { jwt: string; cookie: string; id: string }
    let alice: { jwt: string; cookie: string; id: string; token: string }
    const lastSeen = async () => (await stack.lastRequest()) as unknown as Seen
    const userId = async (jwt: string) => (await send(stack, 'GET', '/authsvc/api/me', { Authorization: `Bearer ${jwt}` })).body.user_id as string
    const queueStatus = async (credential: string) => (await send(stack, 'GET', '/queue', { Authorization: `Bearer ${credential}` })).status

    before(async () => {
      stack = await startStack({ aiohttp, config: CONFIG })
      assert.equal((await register(stack, 'root')).status, 201)
      const rootLogin = await login(stack, 'root')
      root = { ...rootLogin, id: await userId(rootLogin.jwt) }
      assert.equal((await register(stack, 'alice', { bearer: root.jwt })).status, 201)
      const aliceLogin = await login(stack, 'alice')
      alice = { ...aliceLogin, id: await userId(aliceLogin.jwt), token: await apiToken(stack, 'alice') }
      assert.notEqual(alice.id, root.id)
    })
    after(async () => {
      await destroyStack(stack)
    })

    it('a cookie-authenticated cross-site POST /prompt is refused with 403 CSRF_REJECTED before the host', async () => {
      const rows: Array<[string, string, OutgoingHttpHeaders]> = [
        ['/prompt', 'foreign Origin', { Origin: 'https://evil.example' }],
        ['/prompt', 'Sec-Fetch-Site: cross-site', { 'Sec-Fetch-Site': 'cross-site' }],
        ['/prompt', 'both', CROSS_SITE],
        ['/api/prompt', 'both, on the /api twin', CROSS_SITE],
        ['/prompt', 'Sec-Fetch-Site: same-site (a sibling origin)', { 'Sec-Fetch-Site': 'same-site' }],
        ['/prompt', 'Sec-Fetch-Site: cross-site beside a same-origin Origin', { 'Sec-Fetch-Site': 'cross-site', Origin: stack.url }],
        ['/prompt', 'Origin on another port', { Origin: 'http://127.0.0.1:1' }],
        ['/prompt', 'Origin: null (a sandboxed frame)', { Origin: 'null' }],
        ['/prompt', 'neither Origin nor Sec-Fetch-Site', {}],
      ]
      const wrong: string[] = []
      for (const [path, label, headers] of rows) {
        await stack.resetCounter()
        const res = await send(stack, 'POST', path, { Cookie: alice.cookie, ...headers }, { prompt: tinyGraph('csrf') })
        const reached = (await stack.counter()).total
        // the JSON code tells the gate's refusal from ComfyUI's own (a bare 403 on a foreign Origin)
        if (res.status !== 403 || res.body?.code !== 'CSRF_REJECTED' || reached !== 0) wrong.push(`${label} (${path}): ${res.status} ${res.text.slice(0, 80)}, host handlers run: ${reached}`)
      }
      assert.deepEqual(wrong, [])
    })

    it('the same cookie POST from the same origin reaches the host', async () => {
      for (const headers of [{ Origin: stack.url }, { 'Sec-Fetch-Site': 'same-origin' }]) {
        await stack.resetCounter()
        const res = await send(stack, 'POST', '/prompt', { Cookie: alice.cookie, ...headers }, { prompt: tinyGraph('csrf') })
        assert.equal(res.status, 200, `${JSON.stringify(headers)}: ${res.text}`)
        assert.equal(typeof res.body.prompt_id, 'string')
        assert.deepEqual((await stack.counter()).by_route, { 'POST /prompt': 1 })
      }
    })

    it('bearer and query-token writes are exempt, even with a foreign Origin', async () => {
      // ComfyUI itself refuses a foreign Origin when Host is a loopback name, so the server is
      // named as on a LAN: whatever the host answers is then the gate's pass.
      const lan = { Host: `comfy.example:${new URL(stack.url).port}`, ...CROSS_SITE }
      const graph = { prompt: tinyGraph('csrf') }
      for (const [label, path, headers] of [
        ['bearer API token', '/prompt', { Authorization: `Bearer ${alice.token}` }],
        ['bearer session', '/prompt', { Authorization: `Bearer ${alice.jwt}` }],
        ['query token', `/prompt?token=${alice.token}`, {}],
      ] as const) {
        await stack.resetCounter()
        const res = await send(stack, 'POST', path, { ...lan, ...headers }, graph)
        assert.equal(res.status, 200, `${label}: ${res.text}`)
        assert.deepEqual((await stack.counter()).by_route, { 'POST /prompt': 1 }, label)
      }
      // the very same request shape with the cookie is the one refused
      await stack.resetCounter()
      const cookie = await send(stack, 'POST', '/prompt', { ...lan, Cookie: alice.cookie }, graph)
      assert.equal(cookie.status, 403)
      assert.equal(cookie.body.code, 'CSRF_REJECTED')
      assert.equal((await stack.counter()).total, 0)
    })

    it('cookie cross-site writes to owned routes are refused with 403 CSRF_REJECTED and change nothing', async () => {
      const listTokens = async () => (await send(stack, 'GET', '/authsvc/api/tokens', { Authorization: `Bearer ${alice.jwt}` })).body.tokens as unknown[]
      const tokensBefore = (await listTokens()).length
      const sessions = await send(stack, 'GET', '/authsvc/me/sessions', { Authorization: `Bearer ${alice.jwt}` })
      const aliceJti = (sessions.body.sessions as Array<{ jti: string }>)[0].jti
      const rows: Array<[string, string, string, unknown]> = [
        ['DELETE', '/authsvc/api/tokens', alice.cookie, { token_hash_prefix: tokenPrefix(alice.token) }],
        ['DELETE', '/api/authsvc/api/tokens', alice.cookie, { token_hash_prefix: tokenPrefix(alice.token) }],
        ['POST', '/authsvc/generate_token', alice.cookie, { label: 'stolen' }],
        ['POST', '/api/authsvc/generate_token', alice.cookie, { label: 'stolen' }],
        ['POST', '/generate_token', alice.cookie, { label: 'stolen' }],
        ['POST', '/authsvc/me/sessions/revoke', alice.cookie, { jti: aliceJti }],
        ['POST', '/register', root.cookie, { username: 'mallory', password: PASSWORD, role: 'admin' }],
        ['PUT', '/authsvc/api/users/alice', root.cookie, { role: 'admin' }],
        ['PUT', '/authsvc/api/settings/guest-jwt', root.cookie, { allow_guest_jwt: true }],
        ['POST', '/logout', alice.cookie, undefined],
      ]
      const wrong: string[] = []
      for (const [method, path, cookie, body] of rows) {
        const res = await send(stack, method, path, { Cookie: cookie, ...CROSS_SITE }, body)
        if (res.status !== 403 || res.body?.code !== 'CSRF_REJECTED') wrong.push(`${method} ${path}: ${res.status} ${res.text.slice(0, 100)}`)
      }
      assert.deepEqual(wrong, [])

      assert.equal(await queueStatus(alice.token), 200, 'the token is not revoked')
      assert.equal((await listTokens()).length, tokensBefore, 'no token was created')
      assert.equal((await send(stack, 'GET', '/authsvc/api/me', { Cookie: alice.cookie })).status, 200, 'the session is not revoked or logged out')
      const users = (await send(stack, 'GET', '/authsvc/api/users', { Authorization: `Bearer ${root.jwt}` })).body.users as Array<{ username: string; role: string }>
      assert.deepEqual(users.map((u) => `${u.username}:${u.role}`).sort(), ['alice:user', 'root:admin'], 'no user registered or promoted')
      assert.equal((await send(stack, 'GET', '/authsvc/api/settings/guest-jwt', { Authorization: `Bearer ${root.jwt}` })).body.allow_guest_jwt, false)

      // the origin is the only difference: from the same origin the cookie may create a token
      const same = await send(stack, 'POST', '/authsvc/generate_token', { Cookie: alice.cookie, Origin: stack.url }, { label: 'same-origin' })
      assert.equal(same.status, 200, same.text)
      assert.equal((await listTokens()).length, tokensBefore + 1)
    })

    it('the host sees the principal\'s comfy-user, never the one a client sends', async () => {
      const channels: Array<[string, OutgoingHttpHeaders, string]> = [
        ['bearer API token', { Authorization: `Bearer ${alice.token}` }, ''],
        ['bearer session', { Authorization: `Bearer ${alice.jwt}` }, ''],
        ['cookie', { Cookie: alice.cookie, Origin: stack.url }, ''],
        ['query token', {}, `token=${alice.token}`],
      ]
      const routes: Array<[string, string, string, unknown]> = [
        ['GET', '/userdata?dir=workflows', 'GET /userdata', undefined],
        ['GET', '/settings', 'GET /settings', undefined],
        ['POST', '/settings/Comfy.Locale', 'POST /settings/{id}', 'en'],
        ['POST', '/prompt', 'POST /prompt', { prompt: tinyGraph('spoof') }],
      ]
      const spoofs: Array<[string, OutgoingHttpHeaders]> = [
        ['another user\'s id', { 'comfy-user': root.id }],
        ['"admin"', { 'Comfy-User': 'admin' }],
        ['the header twice', { 'comfy-user': ['admin', root.id] }],
      ]
      const wrong: string[] = []
      for (const [channel, credential, query] of channels) {
        for (const [method, path, route, body] of routes) {
          for (const [spoof, header] of spoofs) {
            await stack.resetCounter()
            const url = query ? `${path}${path.includes('?') ? '&' : '?'}${query}` : path
            const res = await send(stack, method, url, { ...credential, ...header }, body)
            const seen = await lastSeen()
            const label = `${channel}, ${method} ${path}, ${spoof}`
            if (seen?.route !== route) wrong.push(`${label}: did not reach the host (${res.status} ${res.text.slice(0, 80)})`)
            else if (seen.headers['comfy-user'] !== alice.id) wrong.push(`${label}: the host saw comfy-user ${JSON.stringify(seen.headers['comfy-user'])}`)
          }
        }
      }
      assert.deepEqual(wrong, [])
    })

    // issue 9, hole 3: a cross-site page can open a WebSocket with the user's cookie and read it
    const upgrade = (headers: OutgoingHttpHeaders): Promise<number> => new Promise((resolve, reject) => {
      const { hostname, port } = new URL(stack.url)
      const key = Buffer.from('authsvc-test-key').toString('base64')
      const req = request({ host: hostname, port, path: '/ws?clientId=csrf-probe', headers: { Connection: 'Upgrade', Upgrade: 'websocket', 'Sec-WebSocket-Version': '13', 'Sec-WebSocket-Key': key, ...headers } })
      req.on('upgrade', (_res, socket) => {
        socket.destroy()
        resolve(101)
      })
      req.on('response', (res) => {
        res.resume()
        resolve(res.statusCode ?? 0)
      })
      req.on('error', reject)
      req.end()
    })
    const WS_ROWS: Array<[string, () => OutgoingHttpHeaders, number]> = [
      ['cookie, cross-site Origin', () => ({ Cookie: alice.cookie, Origin: 'https://evil.example' }), 403],
      ['cookie, a sibling port of the same host', () => ({ Cookie: alice.cookie, Origin: stack.url.replace(/:(\d+)$/, (_m, p: string) => `:${Number(p) + 1}`) }), 403],
      ['cookie, a sibling subdomain', () => ({ Cookie: alice.cookie, Origin: 'http://evil.127.0.0.1.nip.io' }), 403],
      ['cookie, no Origin at all', () => ({ Cookie: alice.cookie }), 403],
      ['cookie, Sec-Fetch-Site cross-site with our Origin', () => ({ Cookie: alice.cookie, Origin: stack.url, 'Sec-Fetch-Site': 'cross-site' }), 403],
      ['cookie, same origin', () => ({ Cookie: alice.cookie, Origin: stack.url }), 101],
      // (a public Host name: ComfyUI's own origin check refuses any cross-origin request to a loopback Host)
      ['bearer, foreign Origin (exempt)', () => ({ Authorization: `Bearer ${alice.token}`, Origin: 'https://evil.example', Host: 'comfy.example' }), 101],
      ['cookie, foreign Origin, public Host (the control of the row above)', () => ({ Cookie: alice.cookie, Origin: 'https://evil.example', Host: 'comfy.example' }), 403],
    ]
    for (const [name, headers, expected] of WS_ROWS) {
      it(`WebSocket upgrade with ${name} → ${expected}`, async () => {
        assert.equal(await upgrade(headers()), expected)
      })
    }

    it('a principal without a user id (a guest session) acts in a space of its own, never as the client says', async () => {
      const setGuest = (allow: boolean) => send(stack, 'PUT', '/authsvc/api/settings/guest-jwt', { Authorization: `Bearer ${root.jwt}` }, { allow_guest_jwt: allow })
      assert.equal((await setGuest(true)).status, 200)
      try {
        const guest = await send(stack, 'POST', '/login', {}, { guest_login: true })
        assert.equal(guest.status, 200, guest.text)
        for (const [path, route] of [['/settings', 'GET /settings'], ['/userdata?dir=workflows', 'GET /userdata']]) {
          await stack.resetCounter()
          await send(stack, 'GET', path, { Authorization: `Bearer ${guest.body.jwt_token}`, 'comfy-user': alice.id })
          const seen = await lastSeen()
          assert.equal(seen?.route, route, `${path} reached the host`)
          assert.match(seen!.headers['comfy-user'], /^authsvc-guest-[0-9a-f]{16}$/, `${path}: the guest acts in a space of its own, not the client's comfy-user`)
        }
      } finally {
        assert.equal((await setGuest(false)).status, 200)
      }
    })

    it('forwarded-address headers from an untrusted peer do not make a client local', async () => {
      // the control: an anonymous local client would act as the guest role and read /queue
      await stack.resetCounter()
      const wrong: string[] = []
      for (const [label, headers] of FORWARDED_SHAPES) {
        const res = await send(stack, 'GET', '/queue', headers)
        if (res.status !== 401 || res.body?.code !== 'AUTH_REQUIRED') wrong.push(`${label}: ${res.status} ${res.text.slice(0, 80)}`)
      }
      assert.deepEqual(wrong, [])
      assert.equal((await stack.counter()).total, 0)
    })

    it('/api/authsvc/... answers exactly as /authsvc/... for a token revoke', async () => {
      const [first, second] = [await apiToken(stack, 'alice'), await apiToken(stack, 'alice')]
      const rootToken = await apiToken(stack, 'root')
      const session = { Authorization: `Bearer ${alice.jwt}` }
      const revoke = async (prefix: string, tokenPrefixValue: string, headers: OutgoingHttpHeaders) => {
        const res = await send(stack, 'DELETE', `${prefix}/api/tokens`, headers, { token_hash_prefix: tokenPrefixValue })
        return { status: res.status, type: res.headers['content-type'], body: res.body }
      }
      const cases: Array<[string, OutgoingHttpHeaders, string, string, number]> = [
        ['an unknown prefix', session, 'deadbeefdeadbeef', 'deadbeefdeadbeef', 404],
        ['a prefix that is not hex', session, 'not-hex!', 'not-hex!', 400],
        ['another user\'s token', session, tokenPrefix(rootToken), tokenPrefix(rootToken), 404],
        ['no credential', {}, tokenPrefix(first), tokenPrefix(second), 401],
        ['a cross-site cookie', { Cookie: alice.cookie, ...CROSS_SITE }, tokenPrefix(first), tokenPrefix(second), 403],
        ['the caller\'s own token', session, `${tokenPrefix(first)}...`, `${tokenPrefix(second)}...`, 200],
      ]
      for (const [label, headers, plainPrefix, twinPrefix, expected] of cases) {
        const plain = await revoke('/authsvc', plainPrefix, headers)
        const twin = await revoke('/api/authsvc', twinPrefix, headers)
        assert.equal(plain.status, expected, `${label}: ${JSON.stringify(plain.body)}`)
        assert.deepEqual(twin, plain, label)
      }
      assert.equal(await queueStatus(first), 401, 'revoked through /authsvc')
      assert.equal(await queueStatus(second), 401, 'revoked through /api/authsvc')
      assert.equal(await queueStatus(rootToken), 200, 'another user\'s token survives both')
    })

    // Last: it locks the stack's real address out of /login for ten minutes.
    it('forwarded-address headers from an untrusted peer do not change the throttle key', async () => {
      for (let i = 0; i < 10; i++) {
        const address = `10.78.1.${i}`
        const res = await send(stack, 'POST', '/login', { 'X-Forwarded-For': address, 'X-Real-IP': address, 'X-Authsvc-Peer': address }, { username: `nobody${i}`, password: 'not-the-password' })
        assert.equal(res.status, 401, res.text)
        assert.equal(res.body.code, 'INVALID_CREDENTIALS')
      }
      // ten failures from the one real address lock it, whatever address the client claims next
      const res = await send(stack, 'POST', '/login', { 'X-Forwarded-For': LAN_CLIENT }, { username: 'alice', password: PASSWORD })
      assert.equal(res.status, 429, res.text)
      assert.equal(res.body.code, 'TOO_MANY_ATTEMPTS')
      assert.ok(Number(res.headers['retry-after']) > 0)
    })
  })
}

// The control for the two forwarded-address rows above: from a trusted proxy the same
// headers do count, so what those rows observe would change if the headers were trusted.
describe('forwarded-address headers from a trusted proxy', () => {
  let stack: Stack
  before(async () => {
    stack = await startStack({ aiohttp: AIOHTTP_VERSIONS[0], config: { ...CONFIG, trusted_proxies: ['127.0.0.1/32'] } })
    assert.equal((await register(stack, 'root')).status, 201)
  })
  after(async () => {
    await destroyStack(stack)
  })

  it('make a client local', async () => {
    assert.equal((await send(stack, 'GET', '/queue')).status, 401, 'the proxy itself is not local')
    assert.equal((await send(stack, 'GET', '/queue', { 'X-Forwarded-For': LAN_CLIENT })).status, 200)
  })

  // issue 9, hole 1: a proxy that appends its own X-Forwarded-For line (HAProxy's option forwardfor)
  it('a repeated X-Forwarded-For: the line the proxy appended counts, not the client\'s first one', async () => {
    const spoofed = await send(stack, 'GET', '/queue', { 'X-Forwarded-For': [LAN_CLIENT, '203.0.113.9'] })
    assert.equal(spoofed.status, 401, `the client's own line made it local: ${spoofed.text}`)
    assert.equal(spoofed.body.code, 'AUTH_REQUIRED')
    const honest = await send(stack, 'GET', '/queue', { 'X-Forwarded-For': ['203.0.113.9', LAN_CLIENT] })
    assert.equal(honest.status, 200, 'control: the proxy saw a local client')
  })

  it('set the throttle key', async () => {
    for (let i = 0; i < 10; i++) {
      const address = `10.78.1.${i}`
      const res = await send(stack, 'POST', '/login', { 'X-Forwarded-For': address }, { username: `nobody${i}`, password: 'not-the-password' })
      assert.equal(res.status, 401, res.text)
    }
    const res = await send(stack, 'POST', '/login', { 'X-Forwarded-For': LAN_CLIENT }, { username: 'root', password: PASSWORD })
    assert.equal(res.status, 200, res.text)
  })
})
