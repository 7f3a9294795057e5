/**
 * DESIGN §2.1–2.3 end to end: no request reaches a host handler without a
 * decision. Every route of the real ComfyUI table in both twins, HEAD,
 * OPTIONS, the WebSocket upgrade, /internal, static files, unknown paths and
 * encoded variants, without a credential: each gets the policy's answer and
 * the stand-in's handler counter stays at 0. Run on aiohttp 3.8 and 3.11.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import WebSocket from 'ws'
import { AIOHTTP_VERSIONS, destroyStack, startStack, type Stack } from '../helpers/stack.js'
import { hostRoutes } from '../helpers/routes.js'

const API = { Accept: 'application/json' }
const NAVIGATE = { Accept: 'text/html,application/xhtml+xml', 'Sec-Fetch-Mode': 'navigate' }

const ODD_PATHS = [
  '/api%2Fprompt', '/%2e%2e/prompt', '/pro%6dpt', '/%252e%252e/prompt', '//prompt', '/prompt/', '/PROMPT',
  '/api//prompt', '/api/prompt/', '/./prompt', '/static/../prompt', '/internal/../prompt', '/no/such/route',
  '/view?filename=..%2F..%2Fetc%2Fpasswd', '/userdata/workflows%2F..%2F..%2Fx', '/extensions/authsvc/x.js',
  '/assets/app.js', '/index.html', '/favicon.ico', '/authsvc%2Fapi/me', '/AUTHSVC/api/me', '//authsvc/api/me',
]

for (const aiohttp of AIOHTTP_VERSIONS) {
  describe(`gate table, aiohttp ${aiohttp}`, { concurrency: false }, () => {
    let stack: Stack
    before(async () => {
      stack = await startStack({ aiohttp })
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

    it('odd and encoded path shapes are refused without reaching the host', async () => {
      for (const path of ODD_PATHS) {
        const res = await fetch(stack.url + path, { headers: API, redirect: 'manual' })
        assert.ok([401, 404].includes(res.status), `${path}: ${res.status}`)
      }
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
  })
}
