/**
 * force_https (SPEC §10; issue 9, hole 8: the key was accepted and ignored).
 * Attack rows through the real decider and the owned routes: plain-HTTP browser
 * navigations are sent to https (301), API clients and WebSockets never are, a
 * spoofed X-Forwarded-Proto counts only from a trusted proxy, and owned answers
 * over HTTPS carry HSTS.
 */
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { answer, assertDenied, call, decide, openSidecar, type DescOptions, type Sidecar } from './fixtures.js'

const NAVIGATE = { 'sec-fetch-mode': 'navigate', accept: 'text/html' }
const PROXY = '10.9.9.9'

describe('force_https: the decision path', () => {
  let sc: Sidecar
  before(async () => {
    sc = await openSidecar({ config: { force_https: true, trusted_proxies: [PROXY] } })
  })
  after(() => sc.close())

  const redirects: Array<[string, DescOptions, string]> = [
    ['navigation to / over http', { path: '/', headers: NAVIGATE }, 'https://127.0.0.1:8188/'],
    ['navigation to a host page with a query', { path: '/extensions/x.js', pattern: '/extensions/{path}', query: 'a=1&b=%2F', headers: NAVIGATE }, 'https://127.0.0.1:8188/extensions/x.js?a=1&b=%2F'],
    ['navigation carrying ?token= (dropped from the Location)', { path: '/', query: 'token=ast_secret&a=1', headers: NAVIGATE }, 'https://127.0.0.1:8188/?a=1'],
    ['navigation to an owned page (/login)', { path: '/login', headers: NAVIGATE }, 'https://127.0.0.1:8188/login'],
    ['HEAD navigation', { method: 'HEAD', path: '/', headers: NAVIGATE }, 'https://127.0.0.1:8188/'],
    ['X-Forwarded-Proto: https from an untrusted peer (spoof)', { path: '/', headers: { ...NAVIGATE, 'x-forwarded-proto': 'https' }, peer: '203.0.113.9' }, 'https://127.0.0.1:8188/'],
    ['trusted proxy saying http', { path: '/', headers: { ...NAVIGATE, 'x-forwarded-proto': 'http' }, peer: PROXY }, 'https://127.0.0.1:8188/'],
  ]
  for (const [name, desc, location] of redirects) {
    it(`301: ${name}`, async () => {
      const a = answer(await decide(sc, desc))
      assert.equal(a.status, 301)
      assert.equal(a.headers.location, location)
    })
  }

  const untouched: Array<[string, DescOptions, string]> = [
    ['API client over http', { path: '/queue', headers: { accept: 'application/json' } }, 'AUTH_REQUIRED'],
    ['WebSocket upgrade over http', { path: '/ws', headers: { upgrade: 'websocket', 'sec-fetch-mode': 'websocket' } }, 'AUTH_REQUIRED'],
    ['POST navigation over http (a form is not re-sent by a redirect)', { method: 'POST', path: '/prompt', headers: NAVIGATE }, 'AUTH_REQUIRED'],
  ]
  for (const [name, desc, code] of untouched) {
    it(`no redirect: ${name}`, async () => {
      assertDenied(await decide(sc, desc), code as 'AUTH_REQUIRED', name)
    })
  }

  it('no redirect: navigation over https, or from the trusted proxy with X-Forwarded-Proto: https', async () => {
    for (const desc of [{ path: '/', headers: NAVIGATE, scheme: 'https' }, { path: '/', headers: { ...NAVIGATE, 'x-forwarded-proto': 'https' }, peer: PROXY }]) {
      const a = answer(await decide(sc, desc))
      assert.equal(a.status, 302, JSON.stringify(desc))
      assert.equal(a.headers.location, '/login?next=%2F')
    }
  })

  it('400: a navigation whose Host could point the redirect elsewhere', async () => {
    for (const host of ['evil.test/x', 'a@b', 'x y', '']) {
      assertDenied(await decide(sc, { path: '/', headers: { ...NAVIGATE, host } }), 'VALIDATION_FAILED', host)
    }
  })
})

describe('force_https: the owned routes', () => {
  let sc: Sidecar
  before(async () => {
    sc = await openSidecar({ config: { force_https: true, trusted_proxies: [PROXY] } })
  })
  after(() => sc.close())

  it('a plain-HTTP navigation to /login is sent to https', async () => {
    const res = await call(sc, { url: '/login?next=%2Fx', headers: NAVIGATE })
    assert.equal(res.statusCode, 301)
    assert.equal(res.headers.location, 'https://127.0.0.1:8188/login?next=%2Fx')
    assert.equal(res.headers['strict-transport-security'], undefined, 'HSTS over plain HTTP means nothing')
  })

  it('answers over https carry HSTS: scheme https, and a trusted proxy\'s X-Forwarded-Proto', async () => {
    const direct = await call(sc, { url: '/authsvc/api/is-https', scheme: 'https' })
    assert.equal(direct.statusCode, 200)
    assert.equal(direct.headers['strict-transport-security'], 'max-age=31536000')
    const proxied = await call(sc, { url: '/authsvc/api/is-https', peer: PROXY, headers: { 'x-forwarded-proto': 'https' } })
    assert.deepEqual(JSON.parse(proxied.body), { is_https: true })
    assert.equal(proxied.headers['strict-transport-security'], 'max-age=31536000')
    const spoofed = await call(sc, { url: '/authsvc/api/is-https', peer: '203.0.113.9', headers: { 'x-forwarded-proto': 'https' } })
    assert.deepEqual(JSON.parse(spoofed.body), { is_https: false })
    assert.equal(spoofed.headers['strict-transport-security'], undefined)
  })

  it('an API client over plain HTTP is answered, not redirected', async () => {
    const res = await call(sc, { url: '/authsvc/api/is-https' })
    assert.equal(res.statusCode, 200)
  })
})

describe('force_https off (the default)', () => {
  it('no redirect and no HSTS', async () => {
    const sc = await openSidecar()
    try {
      const a = answer(await decide(sc, { path: '/', headers: NAVIGATE }))
      assert.equal(a.status, 302)
      const res = await call(sc, { url: '/authsvc/api/is-https', scheme: 'https' })
      assert.equal(res.headers['strict-transport-security'], undefined)
    } finally {
      await sc.close()
    }
  })
})
