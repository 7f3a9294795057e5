/**
 * The host-route policy table (SPEC §6, DESIGN §2.2–2.3): keyed on the route
 * the host matched, `/api` twin folded, HEAD folded into GET, /internal admin,
 * unknown routes never public. Every route of the real ComfyUI 0.3.64 table
 * (shared fixtures/comfyui/routes.txt, copied into ./fixtures.ts) is a row.
 */
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { COMFYUI_ROUTES } from './fixtures.js'
import { HOST_ROUTE_KEYS, foldApiTwin, hostRoutePolicy, operatorPatternForms, operatorPatterns, type HostRoutePolicy, type Requirement } from '../../sidecar/src/access/host-routes.js'
import type { MatchedRoute } from '../../sidecar/src/kernel/protocol.js'

const P: Requirement = { kind: 'principal' }
const ADMIN: Requirement = { kind: 'admin' }
const perm = (key: string): Requirement => ({ kind: 'permission', key } as Requirement)

/** SPEC §6 (and §4's permission table) as expected rows, keyed `METHOD pattern` with HEAD folded into GET. */
const EXPECTED: Record<string, { require: Requirement; behaviour?: string; page?: boolean }> = {
  'GET /': { require: P, page: true },
  'GET /ws': { require: P, behaviour: 'websocket' },
  'GET /embeddings': { require: perm('can_access_api'), behaviour: 'embeddings' },
  'GET /models': { require: perm('can_access_api') },
  'GET /models/{folder}': { require: perm('can_access_api'), behaviour: 'model-list' },
  'GET /extensions': { require: P, page: true },
  'GET /i18n': { require: P, page: true },
  'GET /features': { require: P, page: true },
  'GET /workflow_templates': { require: P, page: true },
  'POST /upload/image': { require: perm('can_upload'), behaviour: 'upload-image' },
  'POST /upload/mask': { require: perm('can_upload'), behaviour: 'upload-mask' },
  'GET /view': { require: P, behaviour: 'view' },
  'GET /view_metadata/{folder_name}': { require: perm('can_access_api'), behaviour: 'model-file' },
  'GET /system_stats': { require: perm('can_access_api'), behaviour: 'system-stats' },
  'GET /prompt': { require: perm('can_access_api'), behaviour: 'queue-status' },
  'POST /prompt': { require: perm('can_run'), behaviour: 'prompt' },
  'GET /object_info': { require: perm('can_access_api'), behaviour: 'object-info' },
  'GET /object_info/{node_class}': { require: perm('can_access_api'), behaviour: 'object-info' },
  'GET /history': { require: perm('can_access_api'), behaviour: 'history-list' },
  'GET /history/{prompt_id}': { require: perm('can_access_api'), behaviour: 'history-entry' },
  'GET /queue': { require: perm('can_access_api'), behaviour: 'queue-read' },
  'POST /queue': { require: perm('can_run'), behaviour: 'queue-write' },
  'POST /history': { require: perm('can_run'), behaviour: 'history-write' },
  'POST /interrupt': { require: perm('can_run'), behaviour: 'interrupt' },
  'POST /free': { require: ADMIN },
  'GET /settings': { require: P },
  'GET /settings/{id}': { require: P },
  'POST /settings': { require: P },
  'POST /settings/{id}': { require: P },
  'GET /users': { require: P, behaviour: 'users' },
  'POST /users': { require: P, behaviour: 'users' },
  'GET /userdata': { require: perm('can_access_api'), behaviour: 'userdata-list' },
  'GET /v2/userdata': { require: perm('can_access_api'), behaviour: 'userdata-list-v2' },
  'GET /userdata/{file}': { require: perm('can_access_api'), behaviour: 'userdata-read' },
  'POST /userdata/{file}': { require: P, behaviour: 'userdata-write' },
  'DELETE /userdata/{file}': { require: P, behaviour: 'userdata-write' },
  'POST /userdata/{file}/move/{dest}': { require: P, behaviour: 'userdata-write' },
  'GET /experiment/models': { require: perm('can_access_api') },
  'GET /experiment/models/{folder}': { require: perm('can_access_api'), behaviour: 'model-list' },
  'GET /experiment/models/preview/{folder}/{path_index}/{filename}': { require: perm('can_access_api'), behaviour: 'model-file' },
}

const route = (pattern: string) => ({ pattern, kind: 'route' as const })
const policyOf = (method: string, pattern: string, admin?: Set<string>, inert?: Set<string>): HostRoutePolicy =>
  hostRoutePolicy(method, route(pattern), { admin, inert })
const strip = (p: HostRoutePolicy) => ({ require: p.require, page: p.page, behaviour: p.behaviour })

describe('host-route policy table', () => {
  it('the copied route list is the real table (76 routes, 9 /internal)', () => {
    assert.equal(COMFYUI_ROUTES.length, 76)
    assert.equal(COMFYUI_ROUTES.filter((r) => r.pattern.startsWith('/internal')).length, 9)
  })

  for (const { method, pattern } of COMFYUI_ROUTES) {
    const isInternal = pattern.startsWith('/internal')
    it(`${method} ${pattern}${isInternal ? '' : ' and its /api twin'} get the SPEC §6 policy`, () => {
      const plain = policyOf(method, pattern)
      if (isInternal) {
        assert.deepEqual(plain.require, ADMIN)
        assert.equal(plain.page, false)
        return
      }
      const folded = method === 'HEAD' ? 'GET' : method
      const expected = EXPECTED[`${folded} ${pattern}`]
      assert.ok(expected, `no expectation for ${folded} ${pattern}`)
      assert.deepEqual(plain.require, expected.require)
      assert.equal(plain.behaviour, expected.behaviour)
      assert.equal(plain.page, expected.page ?? false)
      assert.equal(plain.key, `${folded} ${pattern}`)
      const twin = policyOf(method, `/api${pattern === '/' ? '' : pattern}`)
      assert.deepEqual(strip(twin), strip(plain), '/api twin differs')
      const twinSlash = policyOf(method, `/api${pattern}`)
      assert.deepEqual(strip(twinSlash), strip(plain), '/api twin (with slash) differs')
    })
  }

  it('every table key is a real host route (or one the spec names: PUT /prompt, the §6.1 /cpe family), so no row is a typo', () => {
    const real = new Set(COMFYUI_ROUTES.map((r) => `${r.method} ${r.pattern}`))
    real.add('PUT /prompt')
    for (const k of ['GET /cpe/workflow/list', 'GET /cpe/workflow/get', 'POST /cpe/workflow/save', 'GET /cpe/health']) real.add(k)
    assert.deepEqual(HOST_ROUTE_KEYS.filter((k) => !real.has(k)), [])
  })

  it('every row of the expectation is in the table (nothing falls to the default by accident)', () => {
    assert.deepEqual(Object.keys(EXPECTED).filter((k) => !HOST_ROUTE_KEYS.includes(k)), [])
  })

  it('PUT /prompt and PUT /api/prompt need can_run and stamp the owner', () => {
    for (const p of ['/prompt', '/api/prompt']) {
      const policy = policyOf('PUT', p)
      assert.deepEqual(policy.require, perm('can_run'))
      assert.equal(policy.behaviour, 'prompt')
    }
  })

  it('HEAD folds into GET for every GET route (never a separate, weaker row)', () => {
    for (const { pattern } of COMFYUI_ROUTES.filter((r) => r.method === 'GET')) {
      assert.deepEqual(strip(policyOf('HEAD', pattern)), strip(policyOf('GET', pattern)), pattern)
      assert.equal(policyOf('HEAD', pattern).key, policyOf('GET', pattern).key)
    }
  })

  it('no host route is public: every policy requires at least a principal', () => {
    const all = [...COMFYUI_ROUTES.map((r) => policyOf(r.method, r.pattern)), hostRoutePolicy('GET', null), hostRoutePolicy('GET', { pattern: '/', kind: 'static' })]
    for (const p of all) assert.ok(['principal', 'permission', 'admin'].includes(p.require.kind), p.key)
  })
})

describe('/internal, unknown, unmatched and static routes', () => {
  for (const pattern of ['/internal', '/internal/logs', '/internal/new_thing/{x}', '/api/internal/logs', '/api/internal']) {
    for (const method of ['GET', 'HEAD', 'POST', 'PATCH', 'DELETE']) {
      it(`${method} ${pattern} is admin`, () => {
        assert.deepEqual(policyOf(method, pattern).require, ADMIN)
      })
    }
  }

  it('a route whose name merely starts with "internal" is not the /internal sub-app', () => {
    assert.deepEqual(policyOf('GET', '/internals').require, perm('can_access_api'))
    assert.deepEqual(policyOf('GET', '/internal_stats').require, perm('can_access_api'))
  })

  it('an unknown matched route (another custom node) needs can_access_api, in both twins', () => {
    for (const pattern of ['/custom_node/thing', '/api/custom_node/thing', '/manager/queue/start', '/api/cpe/other']) {
      for (const method of ['GET', 'POST', 'DELETE']) {
        const p = policyOf(method, pattern)
        assert.deepEqual(p.require, perm('can_access_api'), `${method} ${pattern}`)
        assert.equal(p.page, false)
      }
    }
  })

  it('a known method on a route the table lists under another method falls to the default, not to principal', () => {
    assert.deepEqual(policyOf('DELETE', '/prompt').require, perm('can_access_api'))
    assert.deepEqual(policyOf('PATCH', '/free').require, perm('can_access_api'))
  })

  it('config admin_route_patterns map a known extension to admin (plain and /api pattern)', () => {
    const admin = new Set(['/manager/queue/start'])
    assert.deepEqual(policyOf('POST', '/manager/queue/start', admin).require, ADMIN)
    assert.deepEqual(policyOf('GET', '/api/manager/queue/start', admin).require, ADMIN)
    assert.deepEqual(policyOf('GET', '/manager/other', admin).require, perm('can_access_api'))
  })

  it('admin_route_patterns never weaken a listed route', () => {
    const admin = new Set(['/prompt'])
    assert.deepEqual(policyOf('POST', '/prompt', admin).require, perm('can_run'))
  })

  it('inert_route_patterns mark another custom node\'s file route inert, on every method, plain and /api pattern, and a static folder by its prefix', () => {
    const inert = new Set(['/vhs/viewvideo', '/gallery/files'])
    const rows: Array<[string, MatchedRoute, true | undefined]> = [
      ['GET', route('/vhs/viewvideo'), true],
      ['HEAD', route('/vhs/viewvideo'), true],
      ['GET', route('/api/vhs/viewvideo'), true],
      ['GET', { pattern: '/gallery/files', kind: 'static' }, true],
      // a form's POST opens a page too
      ['POST', route('/vhs/viewvideo'), true],
      ['GET', route('/vhs/viewvideo/'), undefined],
      ['GET', route('/vhs'), undefined],
      ['GET', route('/vhs/queryvideo'), undefined],
      ['GET', { pattern: '/gallery', kind: 'static' }, undefined],
    ]
    for (const [method, matched, expected] of rows) {
      const p = hostRoutePolicy(method, matched, { inert })
      assert.equal(p.inert, expected, `${method} ${matched.kind} ${matched.pattern}`)
      // the mark adds headers only: the requirement is the route's own
      assert.deepEqual(strip(p), strip(hostRoutePolicy(method, matched)), `${method} ${matched.pattern}`)
    }
    assert.equal(hostRoutePolicy('GET', null, { inert: new Set(['/nothing']) }).inert, undefined)
    // a static match without its prefix (the shared vectors' shape) is the plain static policy
    assert.deepEqual(hostRoutePolicy('GET', { kind: 'static' } as MatchedRoute, { inert }), hostRoutePolicy('GET', { pattern: '/x', kind: 'static' }))
    // the table's own inert rows stay inert without any operator list
    assert.equal(policyOf('GET', '/view').inert, true)
    assert.equal(policyOf('GET', '/view', undefined, new Set()).inert, true)
  })

  it('an operator\'s pattern is compared in the form the host reports: /api twin folded, {name:regex} as {name}, a trailing / also without', () => {
    const rows: Array<[string, string[]]> = [
      ['/vhs/viewvideo', ['/vhs/viewvideo']],
      ['/api/vhs/viewvideo', ['/vhs/viewvideo']],
      ['/gallery/{name:.*}', ['/gallery/{name}']],
      ['/gallery/{id:\\d{1,3}}/file/{f}', ['/gallery/{id}/file/{f}']],
      ['/api/gallery/{name:[a-z]+}', ['/gallery/{name}']],
      ['/gallery/files/', ['/gallery/files/', '/gallery/files']],
      ['/api//', ['//', '/']],
      ['/extensions/My Node', ['/extensions/My Node', '/extensions/My%20Node']],
      ['/extensions/Über/', ['/extensions/Über/', '/extensions/Über', '/extensions/%C3%9Cber/', '/extensions/%C3%9Cber']],
      ['/extensions/My%20Node', ['/extensions/My%20Node']],
    ]
    for (const [entry, forms] of rows) assert.deepEqual(operatorPatternForms(entry), forms, entry)
    const patterns = operatorPatterns({ admin_route_patterns: ['/api/manager/queue/start'], inert_route_patterns: ['/api/gallery/{name:.*}', '/gallery/files/', '/api//'] })
    assert.deepEqual(policyOf('POST', '/manager/queue/start', new Set(patterns.admin)).require, ADMIN)
    assert.equal(hostRoutePolicy('GET', route('/gallery/{name}'), patterns).inert, true)
    assert.equal(hostRoutePolicy('GET', route('/api/gallery/{name}'), patterns).inert, true)
    assert.equal(hostRoutePolicy('GET', { pattern: '/gallery/files', kind: 'static' }, patterns).inert, true)
    // whatever the spelling, never the frontend's page
    assert.equal(patterns.inert.has('/'), false)
    assert.equal(hostRoutePolicy('GET', route('/'), patterns).inert, undefined)
  })

  it('an operator\'s inert and admin patterns together: admin-only and inert', () => {
    const p = policyOf('GET', '/viewer/file', new Set(['/viewer/file']), new Set(['/viewer/file']))
    assert.deepEqual(p.require, ADMIN)
    assert.equal(p.inert, true)
  })

  it('an unmatched request (host 404/405) needs a principal and is a page (navigation → /login)', () => {
    for (const method of ['GET', 'HEAD', 'POST', 'DELETE', 'PATCH']) {
      const p = hostRoutePolicy(method, null)
      assert.deepEqual(p.require, P)
      assert.equal(p.page, true)
      assert.equal(p.behaviour, undefined)
    }
  })

  it('a static match (web root files, /extensions/<pkg>/*) needs a principal and is a page', () => {
    for (const pattern of ['/', '/extensions/authsvc', '/assets']) {
      const p = hostRoutePolicy('GET', { pattern, kind: 'static' })
      assert.deepEqual(p.require, P)
      assert.equal(p.page, true)
    }
  })

  it('a static folder the operator lists in admin_route_patterns is admin-only (still a page), under every spelling of its prefix; others stay as they were', () => {
    for (const entry of ['/gallery/files', '/gallery/files/', '/api/gallery/files']) {
      const patterns = operatorPatterns({ admin_route_patterns: [entry], inert_route_patterns: [] })
      const p = hostRoutePolicy('GET', { pattern: '/gallery/files', kind: 'static' }, patterns)
      assert.deepEqual(p.require, ADMIN, entry)
      assert.equal(p.page, true, entry)
      assert.deepEqual(hostRoutePolicy('GET', { pattern: '/api/gallery/files', kind: 'static' }, patterns).require, ADMIN, `${entry}: the /api twin`)
      assert.deepEqual(hostRoutePolicy('GET', { pattern: '/extensions/other', kind: 'static' }, patterns).require, P, `${entry}: another folder`)
    }
  })

  it('the policy never looks at strings beyond the matched pattern: a pattern that only looks like /prompt is not /prompt', () => {
    for (const pattern of ['/prompt/', '/PROMPT', '/api//prompt', '//prompt', '/apiprompt', '/x/api/prompt']) {
      assert.notEqual(policyOf('POST', pattern).behaviour, 'prompt', pattern)
      assert.deepEqual(policyOf('POST', pattern).require, perm('can_access_api'), pattern)
    }
  })
})

describe('foldApiTwin', () => {
  const rows: Array<[string, string]> = [
    ['/api', '/'],
    ['/api/', '/'],
    ['/api/prompt', '/prompt'],
    ['/api/api/prompt', '/api/prompt'],
    ['/apiprompt', '/apiprompt'],
    ['/prompt', '/prompt'],
    ['/x/api/prompt', '/x/api/prompt'],
  ]
  for (const [input, output] of rows) {
    it(`${input} → ${output}`, () => assert.equal(foldApiTwin(input), output))
  }
})

describe('SPEC §6 rows not matching the table', () => {
  it('browser navigations to /i18n, /features, /workflow_templates and /extensions without a principal are redirected to /login', () => {
    for (const pattern of ['/extensions', '/i18n', '/features', '/workflow_templates']) {
      assert.equal(policyOf('GET', pattern).page, true, pattern)
    }
  })

  it('POST /api/cpe/workflow/save needs can_modify_workflows; GET /api/cpe/workflow/get a principal (SPEC §4, §6.1)', () => {
    assert.deepEqual(policyOf('POST', '/api/cpe/workflow/save').require, perm('can_modify_workflows'))
    assert.deepEqual(policyOf('POST', '/cpe/workflow/save').require, perm('can_modify_workflows'))
  })
})
