/**
 * The OpenAPI document of the owned routes (issue 24, item 6; kernel/http/openapi.ts).
 *
 * - it validates as OpenAPI 3.1 (@seriousme/openapi-schema-validator);
 * - it and the routes Fastify registered agree both ways: every registered route (method and
 *   path, seen by an `onRoute` hook) is an operation of the document, a twin
 *   (`/api/authsvc/...`, `/cpe/...`) as its documented route's `x-authsvc-twin`, and every
 *   operation (and twin) is a route the app has (`hasRoute`), with the auth level it enforces;
 * - every registered route has a schema for its answer and for its path parameters, and a
 *   route without one is named (shown on a feature made without one: the composition test's
 *   echo feature); no handler casts `request.body`, `.query` or `.params`;
 * - over a real socket, any principal gets the JSON and nobody else; the readable page is for
 *   admins (another principal gets a 403 page, a browser without a session the login page).
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { request as httpRequest } from 'node:http'
import { readFileSync, readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import type { RouteOptions } from 'fastify'
import { Validator } from '@seriousme/openapi-schema-validator'
import { features } from '../../sidecar/src/app.js'
import { documentedTwinOf } from '../../sidecar/src/kernel/http/openapi.js'
import { ROOT } from '../helpers/stack.js'
import { addUser, apiToken, bootstrapAdmin, openSidecar, sessionJwt, type Sidecar } from '../unit/fixtures.js'
import { echoFeature } from '../unit/echo-feature/feature.js'

interface Registered {
  method: string
  url: string
  schema: Record<string, any> | undefined
  auth: string | undefined
}

interface Operation {
  'x-authsvc-auth'?: string
  'x-authsvc-twin'?: string
  responses: Record<string, unknown>
  [key: string]: unknown
}

type Document = { openapi: string; paths: Record<string, Record<string, Operation>>; components: Record<string, any> }

const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'options', 'head', 'trace']

/** Every route the app registers, one row per method, as an `onRoute` hook sees them. */
function collector(): { rows: Registered[]; onRoute: (route: RouteOptions) => void } {
  const rows: Registered[] = []
  return {
    rows,
    onRoute(route) {
      const methods = Array.isArray(route.method) ? route.method : [route.method]
      for (const method of methods) rows.push({ method, url: route.url!, schema: route.schema as Record<string, any> | undefined, auth: route.config?.auth })
    },
  }
}

/** The routes the document is about: Fastify's automatic HEAD of a GET answers as the GET. */
function documentable(rows: Registered[]): Registered[] {
  const gets = new Set(rows.filter((r) => r.method === 'GET').map((r) => r.url))
  return rows.filter((r) => !(r.method === 'HEAD' && gets.has(r.url)))
}

const openApiPath = (url: string) => url.replace(/:(\w+)/g, '{$1}')
const fastifyPath = (path: string) => path.replace(/\{(\w+)\}/g, ':$1')
const routeName = (r: Registered) => `${r.method} ${r.url}`

/** What a registered route lacks for the document: an answer's schema, its path parameters' schema. */
function schemaProblems(rows: Registered[]): string[] {
  const problems: string[] = []
  for (const route of documentable(rows)) {
    const response = route.schema?.response ?? {}
    if (!Object.keys(response).some((status) => /^[23](\d\d|xx)$/.test(status))) problems.push(`${routeName(route)}: no schema for its success answer`)
    for (const [, name] of route.url.matchAll(/:(\w+)/g)) {
      const params = route.schema?.params
      if (!params?.properties?.[name] || !params.required?.includes(name)) problems.push(`${routeName(route)}: no params schema for :${name}`)
    }
  }
  return problems
}

/** Where a registered route and the document disagree. */
function coverageProblems(rows: Registered[], doc: Document): string[] {
  const problems: string[] = []
  for (const route of documentable(rows)) {
    const documented = documentedTwinOf(route.url)
    const op = doc.paths[openApiPath(documented ?? route.url)]?.[route.method.toLowerCase()]
    if (op === undefined) problems.push(`${routeName(route)}: not in the document`)
    else if (documented !== null && op['x-authsvc-twin'] !== openApiPath(route.url)) problems.push(`${routeName(route)}: its documented route does not name it as its twin`)
    else if (op['x-authsvc-auth'] !== route.auth) problems.push(`${routeName(route)}: the document says ${op['x-authsvc-auth']}, the route enforces ${route.auth}`)
  }
  return problems
}

function operations(doc: Document): Array<{ path: string; method: string; op: Operation }> {
  return Object.entries(doc.paths).flatMap(([path, item]) => Object.entries(item).filter(([method]) => METHODS.includes(method)).map(([method, op]) => ({ path, method, op })))
}

interface Answer {
  status: number
  headers: Record<string, string | string[] | undefined>
  body: string
}

/** One request over the app's real socket, as the plugin forwards it (`x-authsvc-peer`). */
function send(socketPath: string, path: string, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ socketPath, path, method: 'GET', headers: { host: '127.0.0.1:8188', 'x-authsvc-peer': '127.0.0.1', ...headers } }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end()
  })
}

describe('the OpenAPI document and the registered routes', () => {
  let sc: Sidecar
  let doc: Document
  const seen = collector()
  before(async () => {
    sc = await openSidecar({ onRoute: seen.onRoute })
    doc = sc.app.swagger() as unknown as Document
  })
  after(() => sc.close())

  it('validates as an OpenAPI 3.1 document', async () => {
    assert.equal(doc.openapi, '3.1.0')
    const result = await new Validator().validate(doc as unknown as Record<string, unknown>)
    assert.deepEqual(result.errors ?? [], [], 'validator errors')
    assert.equal(result.valid, true)
  })

  it('the validator refuses a broken document (it can fail)', async () => {
    const broken = structuredClone(doc) as Document
    broken.paths['/authsvc/api/me'].get.responses['200'] = { content: {} } // a response must have a description
    assert.equal((await new Validator().validate(broken as unknown as Record<string, unknown>)).valid, false)
  })

  it('every registered route is in the document, a twin as its route\'s x-authsvc-twin, with the auth level it enforces', () => {
    assert.ok(seen.rows.length > 80, `saw ${seen.rows.length} routes`)
    assert.deepEqual(coverageProblems(seen.rows, doc), [])
  })

  it('every operation of the document, and its twin, is a route the app has, with the same schema and auth level', () => {
    const byKey = new Map(documentable(seen.rows).map((r) => [`${r.method} ${r.url}`, r]))
    const problems: string[] = []
    const ops = operations(doc)
    assert.ok(ops.length > 40, `${ops.length} operations`)
    for (const { path, method, op } of ops) {
      const url = fastifyPath(path)
      const route = byKey.get(`${method.toUpperCase()} ${url}`)
      if (!sc.app.hasRoute({ method: method.toUpperCase() as 'GET', url }) || route === undefined) {
        problems.push(`${method.toUpperCase()} ${path}: documented, not registered`)
        continue
      }
      if (op['x-authsvc-auth'] !== route.auth) problems.push(`${method.toUpperCase()} ${path}: auth ${op['x-authsvc-auth']} in the document, ${route.auth} on the route`)
      const twinPath = op['x-authsvc-twin']
      if (twinPath === undefined) continue
      const twin = byKey.get(`${method.toUpperCase()} ${fastifyPath(twinPath)}`)
      if (!sc.app.hasRoute({ method: method.toUpperCase() as 'GET', url: fastifyPath(twinPath) }) || twin === undefined) problems.push(`${method.toUpperCase()} ${twinPath}: named as a twin, not registered`)
      else if (twin.auth !== route.auth || JSON.stringify(twin.schema) !== JSON.stringify(route.schema)) problems.push(`${method.toUpperCase()} ${twinPath}: the twin's schema or auth level differs from ${path}`)
    }
    assert.deepEqual(problems, [])
  })

  it('every registered route has a schema for its answer and its path parameters', () => {
    assert.deepEqual(schemaProblems(seen.rows), [])
  })

  it('each operation names its auth level and the credentials it takes; errors are the one shared ErrorAnswer', () => {
    for (const { path, method, op } of operations(doc)) {
      const where = `${method} ${path}`
      assert.ok(['public', 'principal', 'user', 'admin'].includes(op['x-authsvc-auth'] ?? ''), where)
      assert.deepEqual(op.security, op['x-authsvc-auth'] === 'public' ? [] : [{ bearer: [] }, { session_cookie: [] }, { query_token: [] }], where)
      for (const status of ['4XX', '5XX']) {
        assert.deepEqual((op.responses[status] as any)?.content?.['application/json']?.schema, { $ref: '#/components/schemas/ErrorAnswer' }, `${where} ${status}`)
      }
    }
    assert.deepEqual(doc.components.schemas.ErrorAnswer.required, ['error', 'code', 'statusCode'])
    assert.equal(JSON.stringify(doc).split('"VALIDATION_FAILED"').length - 1, 1, 'the error codes are listed once, in ErrorAnswer')
  })

  it('the forms routes take JSON and forms; pages and assets answer their own media types', () => {
    for (const path of ['/login', '/register', '/generate_token', '/authsvc/generate_token']) {
      assert.deepEqual(Object.keys((doc.paths[path].post.requestBody as any).content).sort(), ['application/json', 'application/x-www-form-urlencoded'], path)
    }
    for (const path of ['/login', '/register', '/mfa', '/loading', '/authsvc/account', '/authsvc/admin', '/authsvc/admin/api']) {
      assert.ok((doc.paths[path].get.responses['200'] as any)?.content?.['text/html'], `${path} is a page`)
    }
    assert.deepEqual(Object.keys((doc.paths['/authsvc/static/{name}'].get.responses['200'] as any).content).sort(), ['text/css', 'text/javascript'])
  })
})

describe('a route without a schema fails the checks, by name', () => {
  it('the echo feature\'s bare route is named, under both prefixes', async () => {
    const seen = collector()
    const sc = await openSidecar({ onRoute: seen.onRoute, compose: (s, l, c) => [...features(s, l, c), echoFeature(s)] })
    try {
      assert.deepEqual(schemaProblems(seen.rows), [
        'GET /authsvc/api/echo: no schema for its success answer',
        'GET /api/authsvc/api/echo: no schema for its success answer',
      ])
      // hidden from the document, it would be named as missing there too
      const doc = structuredClone(sc.app.swagger()) as unknown as Document
      delete doc.paths['/authsvc/api/echo']
      assert.deepEqual(coverageProblems(seen.rows, doc), ['GET /authsvc/api/echo: not in the document', 'GET /api/authsvc/api/echo: not in the document'])
    } finally {
      await sc.close()
    }
  })
})

describe('no handler casts what the type provider types', () => {
  it('no `request.body as`, `request.query as` or `request.params as` in sidecar/src', () => {
    const found: string[] = []
    const walk = (dir: string): void => {
      for (const name of readdirSync(dir)) {
        const full = join(dir, name)
        if (statSync(full).isDirectory()) walk(full)
        else if (name.endsWith('.ts')) {
          readFileSync(full, 'utf8').split('\n').forEach((line, i) => {
            if (/request\.(body|query|params)\s+as\b/.test(line)) found.push(`${full.slice(ROOT.length + 1)}:${i + 1}`)
          })
        }
      }
    }
    walk(join(ROOT, 'sidecar', 'src'))
    assert.deepEqual(found, [])
  })
})

describe('who gets the document and the readable page (real socket)', () => {
  let sc: Sidecar
  let socketPath: string
  const who: Record<string, Record<string, string>> = {}
  before(async () => {
    sc = await openSidecar({ config: { allow_guest_jwt: true } })
    socketPath = join(sc.dir, 'http.sock')
    await sc.app.listen({ path: socketPath })
    const admin = await bootstrapAdmin(sc)
    const alice = await addUser(sc, 'alice', 'alice-passphrase-1')
    const guest = await sc.services.sessions.issueGuest('127.0.0.1')
    who.admin = { authorization: `Bearer ${admin.jwt}` }
    who['a user (session)'] = { authorization: `Bearer ${await sessionJwt(sc, alice)}` }
    who['a user (cookie)'] = { cookie: `jwt_token=${await sessionJwt(sc, alice)}` }
    who['a user (API token in the query)'] = { 'x-query': `?token=${await apiToken(sc, alice)}` }
    who['the guest role'] = { authorization: `Bearer ${guest.token}` }
  })
  after(() => sc.close())

  const get = (path: string, headers: Record<string, string>) => {
    const { 'x-query': query = '', ...rest } = headers
    return send(socketPath, path + query, rest)
  }

  for (const name of ['admin', 'a user (session)', 'a user (cookie)', 'a user (API token in the query)', 'the guest role']) {
    for (const prefix of ['/authsvc', '/api/authsvc']) {
      it(`${name} gets the JSON at ${prefix}/api/openapi.json`, async () => {
        const answer = await get(`${prefix}/api/openapi.json`, { accept: 'application/json', ...who[name] })
        assert.equal(answer.status, 200, answer.body)
        assert.match(String(answer.headers['content-type']), /^application\/json/)
        const doc = JSON.parse(answer.body) as Document
        assert.equal(doc.openapi, '3.1.0')
        assert.deepEqual(doc, JSON.parse(JSON.stringify(sc.app.swagger())))
      })
    }
  }

  it('nobody (no credential) gets 401 AUTH_REQUIRED, a broken credential 401 too', async () => {
    const none = await get('/authsvc/api/openapi.json', { accept: 'application/json' })
    assert.equal(none.status, 401)
    assert.equal(JSON.parse(none.body).code, 'AUTH_REQUIRED')
    const broken = await get('/authsvc/api/openapi.json', { accept: 'application/json', authorization: 'Bearer ast_not-a-token' })
    assert.equal(broken.status, 401)
  })

  for (const prefix of ['/authsvc', '/api/authsvc']) {
    it(`the readable page ${prefix}/admin/api: the admin gets it`, async () => {
      const page = await get(`${prefix}/admin/api`, { accept: 'text/html', 'sec-fetch-mode': 'navigate', ...who.admin })
      assert.equal(page.status, 200)
      assert.match(String(page.headers['content-type']), /^text\/html/)
      assert.match(page.body, /<script type="module" src="\/authsvc\/static\/api\.js"><\/script>/)
      assert.match(String(page.headers['content-security-policy']), /script-src 'self'/)
    })
  }

  for (const name of ['a user (session)', 'a user (cookie)', 'the guest role']) {
    it(`the readable page refuses ${name}: 403, a page that says why`, async () => {
      const page = await get('/authsvc/admin/api', { accept: 'text/html', 'sec-fetch-mode': 'navigate', ...who[name] })
      assert.equal(page.status, 403)
      assert.match(String(page.headers['content-type']), /^text\/html/)
      assert.match(page.body, /id="refusal"/)
      assert.doesNotMatch(page.body, /static\/api\.js/)
    })
  }

  it('a browser without a session is sent to sign in first; an API client gets 401', async () => {
    const page = await get('/authsvc/admin/api', { accept: 'text/html', 'sec-fetch-mode': 'navigate' })
    assert.equal(page.status, 302)
    assert.equal(page.headers.location, `/login?next=${encodeURIComponent('/authsvc/admin/api')}`)
    const api = await get('/authsvc/admin/api', { accept: 'application/json' })
    assert.equal(api.status, 401)
  })
})

describe('a documented query takes what the route always took', () => {
  it('GET /loading and POST /login follow the first of two `next` values, as before the schema', async () => {
    const sc = await openSidecar()
    try {
      const socketPath = join(sc.dir, 'http.sock')
      await sc.app.listen({ path: socketPath })
      const page = await send(socketPath, '/loading?next=%2Ffirst&next=%2Fsecond', { accept: 'text/html' })
      assert.equal(page.status, 200)
      assert.match(page.body, /href="\/first" id="continue"/)
      const admin = await bootstrapAdmin(sc)
      const login = await sc.app.inject({
        method: 'POST',
        url: '/login?next=%2Ffirst&next=%2Fsecond',
        headers: { 'x-authsvc-peer': '127.0.0.1', 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
        payload: new URLSearchParams({ username: admin.user.username, password: admin.password }).toString(),
      })
      assert.equal(login.statusCode, 200, login.body)
      assert.equal(JSON.parse(login.body).redirect_url, '/first')
    } finally {
      await sc.close()
    }
  })
})
