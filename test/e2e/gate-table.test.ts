/**
 * DESIGN §2.1–2.3 end to end: no request reaches a host handler without a
 * decision. Every route of the real ComfyUI table in both twins, HEAD,
 * OPTIONS, the WebSocket upgrade, /internal, static files (the stand-in's and
 * a third-party custom node's WEB_DIRECTORY), unknown paths and encoded
 * variants, without a credential: each gets the policy's answer and the
 * stand-in's handler counter stays at 0. The request-target rows go over a
 * raw TCP socket byte for byte (fetch would normalise them), and a control
 * with an admin's credential shows which host resource each one would reach.
 * Last, the only anonymous 403 there is: the IP lists. Run on aiohttp 3.8 and 3.11.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { connect } from 'node:net'
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import WebSocket from 'ws'
import { AIOHTTP_VERSIONS, destroyStack, startStack, type AiohttpVersion, type Stack } from '../helpers/stack.js'
import { hostRoutes } from '../helpers/routes.js'
import { apiToken, json, register } from '../helpers/client.js'

const API = { Accept: 'application/json' }
const NAVIGATE = { Accept: 'text/html,application/xhtml+xml', 'Sec-Fetch-Mode': 'navigate' }

/** Odd path shapes and the one answer each gets from an anonymous API client (none reaches the host). */
const ODD_PATHS: Array<[string, number, string | undefined]> = [
  ['/api%2Fprompt', 401, 'AUTH_REQUIRED'],
  ['/%2e%2e/prompt', 401, 'AUTH_REQUIRED'],
  ['/pro%6dpt', 401, 'AUTH_REQUIRED'],
  ['/%252e%252e/prompt', 401, 'AUTH_REQUIRED'],
  ['//prompt', 401, 'AUTH_REQUIRED'],
  ['/prompt/', 401, 'AUTH_REQUIRED'],
  ['/PROMPT', 401, 'AUTH_REQUIRED'],
  ['/api//prompt', 401, 'AUTH_REQUIRED'],
  ['/api/prompt/', 401, 'AUTH_REQUIRED'],
  ['/./prompt', 401, 'AUTH_REQUIRED'],
  ['/static/../prompt', 401, 'AUTH_REQUIRED'],
  ['/internal/../prompt', 401, 'AUTH_REQUIRED'],
  ['/no/such/route', 401, 'AUTH_REQUIRED'],
  ['/view?filename=..%2F..%2Fetc%2Fpasswd', 401, 'AUTH_REQUIRED'],
  ['/userdata/workflows%2F..%2F..%2Fx', 401, 'AUTH_REQUIRED'],
  ['/extensions/authsvc/x.js', 401, 'AUTH_REQUIRED'],
  ['/assets/app.js', 401, 'AUTH_REQUIRED'],
  ['/index.html', 401, 'AUTH_REQUIRED'],
  ['/favicon.ico', 401, 'AUTH_REQUIRED'],
  ['/authsvc%2Fapi/me', 401, 'AUTH_REQUIRED'],
  ['/AUTHSVC/api/me', 401, 'AUTH_REQUIRED'],
  ['//authsvc/api/me', 401, 'AUTH_REQUIRED'],
]

interface RawAnswer {
  status: number
  headers: Record<string, string>
  body: string
}

/**
 * One request with the request target sent byte for byte (fetch and undici
 * normalise dot segments and reject some targets, so they cannot test this).
 * The target is written as latin1, so '\x00' is one NUL byte on the wire.
 */
function rawRequest(url: string, method: string, target: string, headers: Record<string, string> = {}, body?: string): Promise<RawAnswer> {
  const { hostname, port, host } = new URL(url)
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname)
    const chunks: Buffer[] = []
    const timer = setTimeout(() => socket.destroy(new Error(`${method} ${target}: no answer in 10 s`)), 10_000)
    socket.on('data', (d: Buffer) => chunks.push(d))
    socket.on('error', (err) => {
      clearTimeout(timer)
      reject(err)
    })
    socket.on('close', () => {
      clearTimeout(timer)
      const text = Buffer.concat(chunks).toString('latin1')
      const split = text.indexOf('\r\n\r\n')
      if (split < 0) return reject(new Error(`${method} ${JSON.stringify(target)}: no HTTP answer: ${JSON.stringify(text.slice(0, 200))}`))
      const [statusLine, ...lines] = text.slice(0, split).split('\r\n')
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(statusLine)
      if (!status) return reject(new Error(`bad status line ${JSON.stringify(statusLine)}`))
      const out: Record<string, string> = {}
      for (const line of lines) {
        const colon = line.indexOf(':')
        const name = line.slice(0, colon).trim().toLowerCase()
        const value = line.slice(colon + 1).trim()
        out[name] = out[name] === undefined ? value : `${out[name]}, ${value}`
      }
      let rest = text.slice(split + 4)
      if (out['transfer-encoding']?.includes('chunked')) {
        let decoded = ''
        for (;;) {
          const eol = rest.indexOf('\r\n')
          const size = parseInt(rest.slice(0, eol), 16)
          if (!size) break
          decoded += rest.slice(eol + 2, eol + 2 + size)
          rest = rest.slice(eol + 2 + size + 2)
        }
        rest = decoded
      }
      resolve({ status: Number(status[1]), headers: out, body: Buffer.from(rest, 'latin1').toString('utf8') })
    })
    // No half-close: aiohttp treats the client's EOF as a disconnect and drops the request.
    let head = `${method} ${target} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n`
    for (const [name, value] of Object.entries(headers)) head += `${name}: ${value}\r\n`
    if (body !== undefined) head += `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n`
    socket.write(Buffer.concat([Buffer.from(`${head}\r\n`, 'latin1'), Buffer.from(body ?? '', 'utf8')]))
  })
}

/**
 * A third-party custom node package with a WEB_DIRECTORY, placed in the
 * stand-in's custom_nodes/ beside authsvc; the stand-in serves its web dir at
 * /extensions/demo_ext/ as ComfyUI does.
 */
const DEMO_JS = "// authsvc e2e fixture\nexport const demo = 'demo_ext'\n"
function withDemoCustomNode(): string {
  const dir = mkdtempSync(join(tmpdir(), 'as-e2e-'))
  const pkg = join(dir, 'host', 'custom_nodes', 'demo_ext')
  mkdirSync(join(pkg, 'web'), { recursive: true })
  writeFileSync(join(pkg, '__init__.py'), 'WEB_DIRECTORY = "./web"\nNODE_CLASS_MAPPINGS = {}\nNODE_DISPLAY_NAME_MAPPINGS = {}\n')
  writeFileSync(join(pkg, 'web', 'demo.js'), DEMO_JS)
  return dir
}

const STATIC_ROOT = 'static root' // the stand-in's web.static('/') resource: its counter key is `${method} ` (canonical "")
const UNMATCHED = 'unmatched' // no resource: a 404/405 match, counter key `${method} <unmatched>`

/**
 * Raw request targets. `anon`: the status an anonymous API client gets, per
 * aiohttp version where they differ (400 = aiohttp's HTTP parser refused the
 * request line before any middleware ran: plain text, not the gate).
 * `reaches`: the resource aiohttp matches for it, checked with an admin's
 * credential below, which proves the target went over the wire as written
 * and what the anonymous 401 protected. `host` is replaced by the stack's host:port.
 */
interface RawRow {
  target: string
  anon?: number | Partial<Record<AiohttpVersion, number>>
  reaches?: Partial<Record<string, string>> | string
  /** where aiohttp versions route it differently */
  reachesOn?: Partial<Record<AiohttpVersion, string>>
  /** the gate refuses it (403) even to an admin: a userdata name out of the caller's own folder (issue 28, item 9: the data dir is beside them) */
  refusedToAll?: true
}

const LONG = `/${'a'.repeat(8000)}` // under aiohttp's 8190-byte request-line limit
const TOO_LONG = `/${'a'.repeat(9000)}` // over it

const RAW_ROWS: RawRow[] = [
  { target: '/%2e%2e/prompt', reaches: STATIC_ROOT },
  { target: '/%2E%2E/prompt', reaches: STATIC_ROOT },
  { target: '/.%2e/prompt', reaches: STATIC_ROOT },
  { target: '/%2e%2e%2fprompt', reaches: STATIC_ROOT },
  { target: '/..%2fprompt', reaches: STATIC_ROOT },
  { target: '/../prompt', reaches: STATIC_ROOT },
  { target: '/x/../prompt', reaches: STATIC_ROOT },
  { target: '/./prompt', reaches: STATIC_ROOT },
  { target: '/static/../prompt', reaches: STATIC_ROOT },
  { target: '/internal/../prompt', reaches: UNMATCHED, reachesOn: { '3.8': STATIC_ROOT } }, // 3.11: the /internal sub-app takes the prefix, then finds nothing
  { target: '/view/../prompt', reaches: STATIC_ROOT },
  { target: '/api/%2e%2e/prompt', reaches: STATIC_ROOT },
  { target: '/extensions/authsvc/../../prompt', reaches: STATIC_ROOT },
  { target: '/extensions/demo_ext/../../prompt', reaches: STATIC_ROOT },
  { target: '/authsvc/../prompt' }, // under the service's prefix: the gate answers it (its 404 for a principal, test/unit/decide-request-shapes.test.ts), never the host
  { target: '/login/../prompt', reaches: STATIC_ROOT },
  { target: '/internal/%2e%2e/prompt', reaches: UNMATCHED },
  { target: '/internal/../internal/logs', reaches: UNMATCHED },
  { target: '/%c0%ae%c0%ae/prompt', reaches: STATIC_ROOT },
  { target: '/userdata/workflows%2F..%2F..%2Fx', refusedToAll: true },
  { target: '/api/userdata/..%2F..%2Fsecret.json', refusedToAll: true },
  { target: '/%252e%252e/prompt', reaches: STATIC_ROOT },
  { target: '/api%252Fprompt', reaches: STATIC_ROOT },
  { target: '/api%2Fprompt', reaches: STATIC_ROOT },
  { target: '/%2fprompt', reaches: STATIC_ROOT },
  { target: '/prompt%2f', reaches: STATIC_ROOT },
  { target: '//prompt', reaches: STATIC_ROOT },
  { target: '///prompt', reaches: STATIC_ROOT },
  { target: '/prompt/', reaches: STATIC_ROOT },
  { target: '/PROMPT', reaches: STATIC_ROOT },
  { target: '/API/prompt', reaches: STATIC_ROOT },
  { target: '/api//prompt', reaches: STATIC_ROOT },
  { target: '/api\\prompt', reaches: STATIC_ROOT },
  { target: '\\prompt', anon: 400 },
  { target: '/prompt;x=1', reaches: STATIC_ROOT },
  { target: '/api/prompt;', reaches: STATIC_ROOT },
  { target: '/prompt%3Bx', reaches: STATIC_ROOT },
  { target: '/prompt%00', reaches: STATIC_ROOT },
  { target: '/prompt%00.js', reaches: STATIC_ROOT },
  { target: '/prompt\x00', anon: { '3.8': 400, '3.11': 401 } }, // a raw NUL byte: the C parser refuses it, the pure-Python one does not
  { target: '/prompt%20', reaches: STATIC_ROOT },
  { target: '/prompt.', reaches: STATIC_ROOT },
  { target: '/%zz/prompt', reaches: STATIC_ROOT },
  { target: '/prompt#frag', reaches: { GET: 'GET /prompt', POST: 'POST /prompt' } },
  { target: 'http://host/prompt', reaches: { GET: 'GET /prompt', POST: 'POST /prompt' } },
  { target: 'http://evil.example/prompt', reaches: { GET: 'GET /prompt', POST: 'POST /prompt' } },
  { target: 'http://evil.example/api/prompt', reaches: { GET: 'GET /api/prompt', POST: 'POST /api/prompt' } },
  { target: 'HTTP://host/internal/logs', reaches: { GET: 'GET /internal/logs' } },
  { target: '*', anon: { '3.8': 401, '3.11': 400 }, reaches: UNMATCHED },
  { target: 'prompt', anon: 400 },
  { target: LONG, reaches: STATIC_ROOT },
  { target: TOO_LONG, anon: 400 },
  { target: '/internal/logs', reaches: { GET: 'GET /internal/logs' } },
  { target: '/INTERNAL/logs', reaches: STATIC_ROOT },
  { target: '/internal%2Flogs', reaches: STATIC_ROOT },
  { target: '/extensions/demo_ext/demo.js', reaches: { GET: 'GET /extensions/demo_ext' } },
  { target: '/extensions/demo_ext/%2e%2e/%2e%2e/prompt', reaches: STATIC_ROOT },
]

function expectedAnon(row: RawRow, aiohttp: AiohttpVersion): number {
  if (row.anon === undefined) return 401
  return typeof row.anon === 'number' ? row.anon : (row.anon[aiohttp] ?? 401)
}

function expectedRoute(row: RawRow, method: string, aiohttp: AiohttpVersion): string | undefined {
  const reaches = row.reachesOn?.[aiohttp] ?? row.reaches
  if (reaches === undefined) return undefined
  if (reaches === STATIC_ROOT) return method === 'GET' ? 'GET ' : `${method} <unmatched>` // static: GET/HEAD only, else a 405
  if (reaches === UNMATCHED) return `${method} <unmatched>`
  if (typeof reaches === 'string') return reaches
  return reaches[method] ?? (method === 'POST' ? `POST <unmatched>` : undefined)
}

for (const aiohttp of AIOHTTP_VERSIONS) {
  describe(`gate table, aiohttp ${aiohttp}`, { concurrency: false }, () => {
    let stack: Stack
    before(async () => {
      stack = await startStack({ aiohttp, dir: withDemoCustomNode() })
      await stack.resetCounter()
    })
    after(async () => {
      await destroyStack(stack)
    })

    it('every host route in both twins answers 401 JSON to an anonymous API client and never reaches the host', async () => {
      const rows: string[] = []
      for (const route of hostRoutes()) {
        const res = await fetch(stack.url + route.path, { method: route.method, headers: API, body: route.method === 'POST' ? '{}' : undefined })
        const body = route.method === 'HEAD' ? '' : await res.text()
        if (res.status !== 401) rows.push(`${route.method} ${route.path}: ${res.status}`)
        if (route.method !== 'HEAD') assert.equal(JSON.parse(body).code, 'AUTH_REQUIRED', `${route.method} ${route.path}`)
      }
      assert.deepEqual(rows, [])
      assert.equal((await stack.counter()).total, 0)
    })

    it('browser navigations to pages are redirected to /login with next', async () => {
      for (const path of ['/', '/assets/app.js', '/no/such/page']) {
        const res = await fetch(stack.url + path, { headers: NAVIGATE, redirect: 'manual' })
        assert.equal(res.status, 302, path)
        assert.equal(res.headers.get('location'), `/login?next=${encodeURIComponent(path)}`)
      }
      const api = await fetch(`${stack.url}/prompt`, { headers: NAVIGATE, redirect: 'manual' })
      assert.equal(api.status, 401, 'an API route is never a page, even for a navigation')
      assert.equal((await stack.counter()).total, 0)
    })

    it('odd and encoded path shapes are refused without reaching the host, each with its one answer', async () => {
      const got: Array<[string, number, string | undefined]> = []
      for (const [path] of ODD_PATHS) {
        const res = await fetch(stack.url + path, { headers: API, redirect: 'manual' })
        const text = await res.text()
        got.push([path, res.status, (JSON.parse(text || '{}') as { code?: string }).code])
      }
      assert.deepEqual(got, ODD_PATHS)
      assert.equal((await stack.counter()).total, 0)
    })

    it('raw request targets (dot segments, encodings, absolute form...) are refused before the host, GET and POST', async () => {
      const { host } = new URL(stack.url)
      const wrong: string[] = []
      for (const row of RAW_ROWS) {
        const target = row.target.replace(/^(http:\/\/)host\//i, `$1${host}/`)
        for (const method of ['GET', 'POST']) {
          const res = await rawRequest(stack.url, method, target, API, method === 'POST' ? '{}' : undefined)
          const label = `${method} ${JSON.stringify(target.slice(0, 60))}`
          const want = expectedAnon(row, aiohttp)
          if (res.status !== want) wrong.push(`${label}: ${res.status} (want ${want}) ${res.body.slice(0, 120)}`)
          else if (want === 401) {
            // the gate's answer, not the host's: JSON with the code, stamped with the service version
            const body = JSON.parse(res.body)
            if (body.code !== 'AUTH_REQUIRED' || body.statusCode !== 401) wrong.push(`${label}: body ${res.body}`)
            if (res.headers['x-authsvc-version'] !== '0.1.0') wrong.push(`${label}: not stamped by the gate`)
          }
          const counted = await stack.counter()
          if (counted.total !== 0) {
            wrong.push(`${label}: REACHED THE HOST ${JSON.stringify(counted.by_route)}`)
            await stack.resetCounter()
          }
        }
      }
      assert.deepEqual(wrong, [])
    })

    it('raw HEAD targets get the 401 head and no body, without reaching the host', async () => {
      for (const target of ['/./prompt', '/%2e%2e/prompt', '//prompt', '/internal/../internal/logs', '/extensions/demo_ext/demo.js', 'http://evil.example/prompt']) {
        const res = await rawRequest(stack.url, 'HEAD', target, API)
        assert.equal(res.status, 401, target)
        assert.equal(res.body, '', target)
        assert.equal(res.headers['x-authsvc-version'], '0.1.0', target)
      }
      assert.equal((await stack.counter()).total, 0)
    })

    it('raw browser navigations are redirected to /login with the raw path as next, without reaching the host', async () => {
      const rows: Array<[string, string]> = [
        ['/static/../', '/static/../'],
        ['/./', '/./'],
        ['/%2e%2e/index.html', '/%2e%2e/index.html'],
        ['//evil.example/', '//evil.example/'],
        ['/\\evil.example/', '/\\evil.example/'],
        ['http://evil.example/', '/'], // absolute form: only the path goes into next, never the client's host
        ['/extensions/demo_ext/demo.js', '/extensions/demo_ext/demo.js'],
        ['/?token=not-a-token&x=1', '/?x=1'], // a query credential is dropped from next
      ]
      for (const [target, next] of rows) {
        const res = await rawRequest(stack.url, 'GET', target, NAVIGATE)
        assert.equal(res.status, 302, target)
        assert.equal(res.headers.location, `/login?next=${encodeURIComponent(next)}`, target)
      }
      assert.equal((await stack.counter()).total, 0)
    })

    it('raw OPTIONS targets get the gate\'s 204 (not the host\'s bare 200) and no CORS grant', async () => {
      // OPTIONS never reaches the handler counter (the host's origin middleware answers it first),
      // so what proves the gate answered is the 204 with its Allow list and the version stamp.
      const { host } = new URL(stack.url)
      for (const target of ['/prompt', '*', '/%2e%2e/prompt', '/./prompt', '//prompt', `http://${host}/prompt`, 'http://evil.example/prompt', '/internal/logs', '/extensions/demo_ext/demo.js', '/authsvc/api/me']) {
        const res = await rawRequest(stack.url, 'OPTIONS', target, { Origin: 'http://evil.example', 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'authorization' })
        assert.equal(res.status, 204, target)
        assert.equal(res.headers.allow, 'GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS', target)
        assert.equal(res.headers['x-authsvc-version'], '0.1.0', target)
        assert.deepEqual(Object.keys(res.headers).filter((h) => h.startsWith('access-control-')), [], target)
      }
      assert.equal((await stack.counter()).total, 0)
    })

    it('a custom node\'s existing static file (/extensions/<pkg>/<file>.js) is refused to anonymous clients', async () => {
      const api = await fetch(`${stack.url}/extensions/demo_ext/demo.js`, { headers: API })
      assert.equal(api.status, 401)
      assert.equal((await json(api)).code, 'AUTH_REQUIRED')
      const script = await fetch(`${stack.url}/extensions/demo_ext/demo.js`, { headers: { Accept: '*/*', 'Sec-Fetch-Dest': 'script' } })
      assert.equal(script.status, 401, 'a <script> load is an API client, not a navigation')
      assert.doesNotMatch(await script.text(), /demo_ext/)
      const page = await fetch(`${stack.url}/extensions/demo_ext/demo.js`, { headers: NAVIGATE, redirect: 'manual' })
      assert.equal(page.status, 302)
      assert.equal(page.headers.get('location'), `/login?next=${encodeURIComponent('/extensions/demo_ext/demo.js')}`)
      assert.equal((await stack.counter()).total, 0)
    })

    it('OPTIONS is answered by the gate with no CORS grant', async () => {
      for (const path of ['/prompt', '/api/prompt', '/internal/logs', '/nope']) {
        const res = await fetch(stack.url + path, { method: 'OPTIONS', headers: { Origin: 'http://evil.example', 'Access-Control-Request-Method': 'POST' } })
        assert.equal(res.status, 204)
        assert.equal(res.headers.get('access-control-allow-origin'), null)
      }
      assert.equal((await stack.counter()).total, 0)
    })

    it('WebSocket upgrades without a credential are refused before the handler', async () => {
      for (const path of ['/ws?clientId=abc', '/api/ws', '/ws?token=not-a-token']) {
        const status = await new Promise<number>((resolve, reject) => {
          const ws = new WebSocket(stack.url.replace('http', 'ws') + path)
          ws.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0))
          ws.on('open', () => reject(new Error(`${path} opened`)))
          ws.on('error', () => {})
        })
        assert.equal(status, 401, path)
      }
      assert.equal((await stack.counter()).total, 0)
    })

    it('owned routes are served by the sidecar, under both prefixes', async () => {
      for (const path of ['/authsvc/api/is-https', '/api/authsvc/api/is-https']) {
        const res = await fetch(stack.url + path)
        assert.equal(res.status, 200, path)
        assert.deepEqual(await res.json(), { is_https: false })
        assert.equal(res.headers.get('x-authsvc-version'), '0.1.0')
      }
      const login = await fetch(`${stack.url}/login`)
      assert.equal(login.status, 200)
      assert.match(await login.text(), /Sign in/)
      assert.equal((await stack.counter()).total, 0)
    })

    // Controls, last because they create the first (admin) user: with a credential the same
    // bytes do reach the host, at the resource named in the table. Were the raw targets
    // normalised on the way, or the fixture missing, these would not match.
    it('control: with an admin credential each raw target reaches the resource the table names', async () => {
      assert.equal((await register(stack, 'admin')).status, 201)
      const token = await apiToken(stack, 'admin')
      const { host } = new URL(stack.url)
      const wrong: string[] = []
      for (const row of RAW_ROWS) {
        const target = row.target.replace(/^(http:\/\/)host\//i, `$1${host}/`)
        for (const method of ['GET', 'POST']) {
          await stack.resetCounter()
          const res = await rawRequest(stack.url, method, target, { ...API, Authorization: `Bearer ${token}` }, method === 'POST' ? '{}' : undefined)
          const label = `${method} ${JSON.stringify(target.slice(0, 60))}`
          const counted = await stack.counter()
          if (expectedAnon(row, aiohttp) === 400) {
            if (res.status !== 400 || counted.total !== 0) wrong.push(`${label}: ${res.status} ${JSON.stringify(counted.by_route)} (want the parser's 400)`)
            continue
          }
          if (row.refusedToAll === true) {
            if (res.status !== 403 || counted.total !== 0) wrong.push(`${label}: ${res.status} ${JSON.stringify(counted.by_route)} (want the gate's 403, the host untouched)`)
            continue
          }
          const want = expectedRoute(row, method, aiohttp)
          if (want === undefined) continue
          if (JSON.stringify(counted.by_route) !== JSON.stringify({ [want]: 1 })) wrong.push(`${label}: reached ${JSON.stringify(counted.by_route)}, want ${JSON.stringify(want)} (${res.status})`)
        }
      }
      assert.deepEqual(wrong, [])
      await stack.resetCounter()
    })

    it('control: the custom node\'s file is really served to a signed-in user', async () => {
      const token = await apiToken(stack, 'admin')
      await stack.resetCounter()
      const res = await fetch(`${stack.url}/extensions/demo_ext/demo.js`, { headers: { Authorization: `Bearer ${token}` } })
      assert.equal(res.status, 200)
      assert.equal(await res.text(), DEMO_JS)
      assert.deepEqual((await stack.counter()).by_route, { 'GET /extensions/demo_ext': 1 })
      await stack.resetCounter()
    })
  })
}

/**
 * The one anonymous 403 the policy produces: the IP lists come before identity
 * (docs/architecture.md, order of a decision). The test client is loopback,
 * which is always admitted, so it stands in for a trusted reverse proxy and
 * names the client in X-Forwarded-For. The host-route policy itself gives an
 * anonymous client only 401 or 302 (never 403/404: nothing says whether a
 * route exists before the credential).
 */
for (const aiohttp of AIOHTTP_VERSIONS) {
  describe(`gate table, IP lists, aiohttp ${aiohttp}`, { concurrency: false }, () => {
    let stack: Stack
    let token: string
    before(async () => {
      stack = await startStack({ aiohttp, config: { trusted_proxies: ['127.0.0.1/32'] } })
      assert.equal((await register(stack, 'admin')).status, 201)
      token = await apiToken(stack, 'admin')
      const put = await fetch(`${stack.url}/authsvc/api/ip-lists`, {
        method: 'PUT',
        headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
        body: JSON.stringify({ whitelist: ['198.51.100.0/24'], blacklist: [] }),
      })
      assert.equal(put.status, 200, await put.clone().text())
      await stack.resetCounter()
    })
    after(async () => {
      await destroyStack(stack)
    })

    it('a client outside the whitelist gets 403 IP_DENIED on every shape of request, before the host', async () => {
      const denied = { 'X-Forwarded-For': '203.0.113.7' }
      const rows: Array<[string, string, Record<string, string>]> = [
        ['GET', '/prompt', API],
        ['POST', '/prompt', API],
        ['GET', '/./prompt', API],
        ['GET', '/%2e%2e/prompt', API],
        ['GET', 'http://evil.example/prompt', API],
        ['GET', '/', NAVIGATE], // would be a 302 to /login from an admitted address
        ['GET', '/extensions/authsvc/x.js', API],
        ['GET', '/no/such/route', API],
        ['GET', '/internal/logs', API],
        ['OPTIONS', '/prompt', { Origin: 'http://evil.example' }], // the IP lists come before the OPTIONS answer
        ['GET', '/prompt', { ...API, Authorization: `Bearer ${token}` }], // even with the admin's credential
      ]
      for (const [method, target, headers] of rows) {
        const res = await rawRequest(stack.url, method, target, { ...headers, ...denied }, method === 'POST' ? '{}' : undefined)
        assert.equal(res.status, 403, `${method} ${target}`)
        assert.equal(JSON.parse(res.body).code, 'IP_DENIED', `${method} ${target}`)
      }
      assert.equal((await stack.counter()).total, 0)
    })

    it('control: a whitelisted client is judged on its credential as usual', async () => {
      const admitted = { 'X-Forwarded-For': '198.51.100.7' }
      const anonymous = await rawRequest(stack.url, 'GET', '/prompt', { ...API, ...admitted })
      assert.equal(anonymous.status, 401)
      assert.equal(JSON.parse(anonymous.body).code, 'AUTH_REQUIRED')
      assert.equal((await stack.counter()).total, 0)
      const signedIn = await rawRequest(stack.url, 'GET', '/prompt', { ...API, ...admitted, Authorization: `Bearer ${token}` })
      assert.equal(signedIn.status, 200)
      assert.deepEqual((await stack.counter()).by_route, { 'GET /prompt': 1 })
    })
  })
}
