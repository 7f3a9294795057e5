/**
 * What the gate changes on the way to and from the host: comfy-user set to
 * the principal and credential query keys dropped, the prompt body stamped
 * with its owner (handlers.body), and /system_stats filtered for non-admins.
 *
 * Part of the decision path's attack table (DESIGN §6 "Attack tables", STYLE 7):
 * one row per bypass shape, through the real decider and real services; the
 * shared world is decide-world.ts.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { addUser, answer, assertDenied, assertPass, bearer, decide, hostRouteRequests, openSidecar, sessionJwt, type Stepped } from './fixtures.js'
import { QUEUE, at, bodyStep, filterStep, passedWithBody, world, type World } from './decide-world.js'

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
      // another user's history entry is answered {} without asking the host (isolation-queue-history.test.ts)
      if (r.pattern.endsWith('/history/{prompt_id}')) continue
      // who has an account is answered by the gate itself (workflows/behaviours/userdata-read.ts)
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

  it('a credential key behind a leading ? (`/x??token=`) is no credential, yet never reaches the host', async () => {
    const d = assertPass(await decide(w.sc, at(QUEUE, { query: `?token=${w.aliceToken}&x=1`, headers: bearer(w.bobJwt) })))
    assert.deepEqual(d.drop_query, ['?token'])
    assert.equal(d.set_headers?.['comfy-user'], w.bob.user_id, 'decided on bob\'s bearer, not on the token behind the ?')
  })

  // the session cookie and a bearer credential are nobody else's to read: not ComfyUI's, not another custom node's middleware
  const COOKIES: Array<[string, string, { set?: string; strip?: boolean }]> = [
    ['the session cookie alone', 'jwt_token=JWT', { strip: true }],
    ['beside other cookies', 'theme=dark; jwt_token=JWT; lang=en', { set: 'theme=dark; lang=en' }],
    ['with spaces around =', 'a=1; jwt_token = JWT', { set: 'a=1' }],
    ['twice', 'jwt_token=JWT;a=1;jwt_token=JWT', { set: 'a=1' }],
    ['in a second Cookie header (joined with ", ")', 'a=1, jwt_token=JWT', { set: 'a=1' }],
  ]
  for (const [label, raw, want] of COOKIES) {
    it(`the session cookie never reaches the host: ${label}`, async () => {
      const cookie = raw.replaceAll('JWT', w.aliceJwt)
      const d = assertPass(await decide(w.sc, at(QUEUE, { headers: { ...bearer(w.aliceToken), cookie } })))
      if (want.strip) assert.ok(d.strip_headers?.includes('cookie'), JSON.stringify(d))
      else assert.equal(d.set_headers?.cookie, want.set)
      assert.ok(!JSON.stringify(d).includes(w.aliceJwt))
    })
  }

  it('other cookies pass untouched; an Authorization header carrying a bearer anywhere is stripped, another scheme alone is left', async () => {
    const plain = assertPass(await decide(w.sc, at(QUEUE, { headers: { ...bearer(w.aliceToken), cookie: 'theme=dark; my_jwt_token=1' } })))
    assert.equal(plain.set_headers?.cookie, undefined)
    assert.ok(!(plain.strip_headers ?? []).includes('cookie'))
    const mixed = assertPass(await decide(w.sc, at(QUEUE, { headers: { authorization: `Basic Zm9vOmJhcg==, Bearer ${w.aliceToken}`, cookie: `jwt_token=${w.aliceJwt}` } })))
    assert.ok(mixed.strip_headers?.includes('authorization'), 'a bearer after a Basic')
    const basic = assertPass(await decide(w.sc, at(QUEUE, { headers: { authorization: 'Basic Zm9vOmJhcg==', cookie: `jwt_token=${w.aliceJwt}` } })))
    assert.ok(!(basic.strip_headers ?? []).includes('authorization'), 'a proxy\'s Basic alone is not ours')
  })

  // a file users put on the host (an inert route's answer) is never loaded as code: the inert headers
  // cannot stop a <script src> or a service worker of an uploaded .js (application/javascript)
  const meta = (headers: Record<string, string>) => ({ path: '/view_metadata/loras', pattern: '/view_metadata/{folder_name}', match_info: { folder_name: 'loras' }, query: 'filename=a.js', headers: { ...bearer(w.aliceToken), ...headers } })
  for (const dest of ['script', 'worker', 'sharedworker', 'serviceworker', 'style', 'audioworklet', 'paintworklet', 'xslt', 'Script']) {
    it(`an inert route's file fetched as code (Sec-Fetch-Dest: ${dest}) → 403`, async () => {
      assertDenied(await decide(w.sc, meta({ 'sec-fetch-dest': dest })), 'PERMISSION_DENIED')
    })
  }
  it('an inert route\'s file registered as a service worker (the Service-Worker header, any Sec-Fetch-Dest) → 403; as an image, a document or by fetch it passes with the inert headers', async () => {
    assertDenied(await decide(w.sc, meta({ 'service-worker': 'script' })), 'PERMISSION_DENIED')
    assertDenied(await decide(w.sc, meta({ 'service-worker': 'script', 'sec-fetch-dest': 'empty' })), 'PERMISSION_DENIED')
    for (const dest of ['image', 'document', 'empty', 'video', 'iframe']) {
      const d = assertPass(await decide(w.sc, meta({ 'sec-fetch-dest': dest })), dest) as { response_headers?: Record<string, string> }
      // a document or a frame also gets the frame policy, in the same header
      assert.equal(d.response_headers?.['Content-Security-Policy'], ['document', 'iframe'].includes(dest) ? "sandbox; frame-ancestors 'self'" : 'sandbox', dest)
    }
  })

  // clickjacking: a sibling origin (another port of this host) is same-site, so a frame of ComfyUI
  // in its page carries the session cookie; the host's pages say which pages may frame them
  const page = (headers: Record<string, string>) => ({ path: '/', pattern: '/', headers: { cookie: `jwt_token=${w.aliceJwt}`, ...headers } })
  for (const dest of ['document', 'iframe', 'frame', 'embed', 'object', 'fencedframe', 'IFrame']) {
    it(`the host's page requested as a ${dest}: frame-ancestors 'self'`, async () => {
      const d = assertPass(await decide(w.sc, page({ 'sec-fetch-dest': dest, 'sec-fetch-site': 'same-site' })), dest)
      assert.deepEqual(d.response_headers, { 'Content-Security-Policy': "frame-ancestors 'self'" })
    })
  }
  it('over plain HTTP to a LAN address a browser sends no Sec-Fetch-*: a request that takes HTML gets the policy', async () => {
    for (const accept of ['text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8', 'TEXT/HTML']) {
      const d = assertPass(await decide(w.sc, page({ accept })), accept)
      assert.deepEqual(d.response_headers, { 'Content-Security-Policy': "frame-ancestors 'self'" }, accept)
    }
  })
  it('what cannot be framed carries no frame policy: a fetch, an image, a socket, a script, and a client that names no destination and takes no HTML', async () => {
    const noFrame: Array<Record<string, string>> = [{ 'sec-fetch-dest': 'empty' }, { 'sec-fetch-dest': 'image' }, { 'sec-fetch-dest': 'websocket' }, { 'sec-fetch-dest': 'script' }, { 'sec-fetch-dest': 'empty', accept: 'text/html' }, {}, { accept: 'application/json' }, { accept: '*/*' }]
    for (const headers of noFrame) {
      const d = assertPass(await decide(w.sc, page(headers)), JSON.stringify(headers))
      assert.equal(d.response_headers, undefined, JSON.stringify(headers))
    }
  })
  it('frame_ancestors: the origins the operator lists may frame the host\'s pages too; `*` lets any (no policy)', async () => {
    for (const [ancestors, want] of [
      [['https://portal.example.com', 'http://127.0.0.1:3000'], "frame-ancestors 'self' https://portal.example.com http://127.0.0.1:3000"],
      [['*'], undefined],
    ] as const) {
      const sc = await openSidecar({ config: { frame_ancestors: ancestors } })
      try {
        const admin = await addUser(sc, 'admin', 'admin-password-1', 'admin')
        const d = assertPass(await decide(sc, { path: '/', pattern: '/', headers: { ...bearer(await sessionJwt(sc, admin)), 'sec-fetch-dest': 'iframe' } }))
        assert.equal(d.response_headers?.['Content-Security-Policy'], want, JSON.stringify(ancestors))
      } finally {
        await sc.close()
      }
    }
  })

  it('a JWT in ?token= on the WebSocket passes and is dropped', async () => {
    const d = assertPass(await decide(w.sc, { path: '/ws', pattern: '/ws', query: `clientId=q1&token=${w.aliceJwt}`, headers: { upgrade: 'websocket' } }))
    assert.deepEqual(d.drop_query, ['token'])
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
    assert.deepEqual(out.extra_data, { authsvc_user: 'bob', authsvc_user_id: w.bob.user_id, authsvc_folder: `u_${w.bob.user_id}`, authsvc_models: null })
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

  it('a body message without a step the sidecar opened → 503 (only the plugin sends a ctx), never a pass', async () => {
    for (const ctx of [null, {}, { kind: 'other' }, 'prompt']) {
      assertDenied(await bodyStep(w.sc, ctx, '{"prompt":{}}'), 'AUTHSVC_UNAVAILABLE', JSON.stringify(ctx))
    }
  })

  it('an anonymous local principal is stamped with its role and a null id', async () => {
    const sc = await openSidecar({ config: { local_anonymous_role: 'user' } })
    try {
      const d = assertPass(await decide(sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: { 'comfy-user': 'someone' } }))
      const out = JSON.parse(passedWithBody(await bodyStep(sc, d.need_body!.ctx, '{"prompt":{},"extra_data":{"authsvc_user_id":"x"}}')).body_text!) as { extra_data: Record<string, unknown> }
      const { authsvc_folder: folder, ...rest } = out.extra_data
      assert.deepEqual(rest, { authsvc_user: 'user', authsvc_user_id: null, authsvc_models: null })
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
