/**
 * Features compose (kernel/feature.ts, app.ts): a feature of its own folder (echo-feature/) is
 * added by one line of composition, and brings an owned route and a host route with a behaviour
 * that work like the sidecar's own: the access pipeline guards both, the behaviour's filter gets
 * its typed state back. Composition mistakes stop the start instead of weakening a decision: a
 * row naming a behaviour nobody brings, a behaviour brought twice, a row that would change an
 * existing route, a feature composed twice.
 */
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { buildApp, features } from '../../sidecar/src/app.js'
import { openServices } from '../../sidecar/src/services.js'
import { perm } from '../../sidecar/src/access/host-routes.js'
import { behaviourEntry } from '../../sidecar/src/kernel/behaviours.js'
import type { Feature } from '../../sidecar/src/kernel/feature.js'
import { echoFeature } from './echo-feature/feature.js'
import { addUser, assertDenied, assertPass, bearer, call, decide, fakeClock, log, openSidecar, SECRET, sessionJwt, stepAnswer, tempDir, testConfig, type Sidecar } from './fixtures.js'

describe('a feature added by one folder and one line', async () => {
  const sc: Sidecar = await openSidecar({ compose: (s, l, c) => [...features(s, l, c), echoFeature(s)] })
  after(() => sc.close())
  const alice = await addUser(sc, 'alice', 'correct-horse-battery')
  const jwt = await sessionJwt(sc, alice)

  it('its owned route answers under both prefixes, behind the access pipeline', async () => {
    for (const url of ['/authsvc/api/echo', '/api/authsvc/api/echo']) {
      const res = await call(sc, { url, bearer: jwt })
      assert.equal(res.statusCode, 200, url)
      assert.deepEqual(res.json(), { username: 'alice', users: 1 })
      const anonymous = await call(sc, { url })
      assert.equal(anonymous.statusCode, 401, `${url} without a credential`)
    }
  })

  it('its host route is decided by its row and its behaviour; the filter gets its typed state back', async () => {
    const pass = assertPass(await decide(sc, { path: '/echo_host', query: 'say=hi', headers: bearer(jwt) }), 'echo')
    assert.equal(pass.filter?.name, 'echo')
    const filtered = stepAnswer(await sc.handlers.filter({ type: 'filter', id: 1, name: 'echo', ctx: pass.filter?.ctx, status: 200, content_type: 'application/json' }, Buffer.from('host says')))
    assert.deepEqual(JSON.parse(filtered.body_text ?? ''), { owner: alice.user_id, said: 'hi', host: 'host says' })
    // the /api twin is the same row
    assertPass(await decide(sc, { path: '/api/echo_host', pattern: '/api/echo_host', headers: bearer(jwt) }), 'the /api twin')
  })

  it('its row\'s requirement holds: no credential, or a role without can_access_api, is refused', async () => {
    assertDenied(await decide(sc, { path: '/echo_host' }), 'AUTH_REQUIRED')
    const groups = sc.services.roles.snapshot()
    sc.services.roles.replace({ ...groups, user: { ...groups.user, can_access_api: false } })
    try {
      assertDenied(await decide(sc, { path: '/echo_host', headers: bearer(jwt) }), 'PERMISSION_DENIED')
    } finally {
      sc.services.roles.replace(groups)
    }
  })

  it('an operator\'s admin-only pattern outranks a feature\'s row', async () => {
    const strict = await openSidecar({ config: { admin_route_patterns: ['/echo_host'] }, compose: (s, l, c) => [...features(s, l, c), echoFeature(s)] })
    try {
      const carol = await addUser(strict, 'carol', 'correct-horse-battery')
      assertDenied(await decide(strict, { path: '/echo_host', headers: bearer(await sessionJwt(strict, carol)) }), 'ADMIN_REQUIRED')
    } finally {
      await strict.close()
    }
  })

  it('without the line, neither route exists: the owned route is a 404 and the host route needs can_access_api only', async () => {
    const plain = await openSidecar()
    try {
      const bob = await addUser(plain, 'bob', 'correct-horse-battery')
      const bobJwt = await sessionJwt(plain, bob)
      assert.equal((await call(plain, { url: '/authsvc/api/echo', bearer: bobJwt })).statusCode, 404)
      const pass = assertPass(await decide(plain, { path: '/echo_host', headers: bearer(bobJwt) }), 'an unlisted host route')
      assert.equal(pass.filter, undefined, 'no behaviour without the feature')
    } finally {
      await plain.close()
    }
  })
})

describe('composition mistakes stop the start', () => {
  const mistakes: Array<[string, (f: Feature[]) => Feature[], RegExp]> = [
    ['a row naming a behaviour no feature brings', (f) => [...f, { name: 'orphan', hostRoutes: { 'GET /orphan': { require: perm('can_run'), behaviour: 'nobody' } } }], /no feature brings: nobody/],
    ['a behaviour brought twice', (f) => [...f, { name: 'twice', bind: () => ({ behaviours: [behaviourEntry('view', { decide: ({ pass }) => pass })] }) }], /behaviour view is brought by two features/],
    ['a row for a route already in the table', (f) => [...f, { name: 'widen', hostRoutes: { 'POST /free': { require: perm('can_access_api') } } }], /POST \/free is already in the table/],
    ['a row spelled with its /api twin', (f) => [...f, { name: 'twin', hostRoutes: { 'GET /api/thing': { require: perm('can_run') } } }], /not a METHOD \/pattern key/],
    ['a feature composed twice', (f) => [...f, f[0]], /composed twice/],
  ]
  for (const [label, compose, message] of mistakes) {
    it(label, async () => {
      const dir = tempDir()
      const services = await openServices({ config: testConfig(), dataDir: dir, env: { AUTHSVC_SECRET: SECRET }, log, clock: fakeClock(), watchGroups: false })
      try {
        assert.throws(() => buildApp(services, log, (s, l, c) => compose(features(s, l, c))), message)
      } finally {
        await services.close()
      }
    })
  }
})
