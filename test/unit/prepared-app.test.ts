/**
 * A standby sidecar registers every route before it may open the store (issue 27), so no route
 * plugin may read the services while it registers; one that did would crash every standby and
 * silently bring back cold restarts. And nothing may run on services that are not bound yet.
 */
import { it } from 'node:test'
import assert from 'node:assert/strict'
import { prepareApp } from '../../sidecar/src/app.js'
import { openServices } from '../../sidecar/src/services.js'
import { SECRET, T0, log, tempDir, testConfig } from './fixtures.js'

it('every route registers, and the app gets ready, before any service exists', async () => {
  const prepared = prepareApp(log, () => T0)
  await prepared.app.ready()
  assert.ok(prepared.owned.has('POST', '/login'))
  assert.ok(prepared.owned.has('GET', '/api/authsvc/health'))
  await prepared.app.close()
})

it('a request before bind() fails loudly instead of reading an empty store; after bind() it is served', async () => {
  const prepared = prepareApp(log, () => T0)
  await prepared.app.ready()
  const early = await prepared.app.inject({ method: 'GET', url: '/authsvc/health' })
  assert.equal(early.statusCode, 500)
  const dir = tempDir()
  const services = await openServices({ config: testConfig(), dataDir: dir, env: { AUTHSVC_SECRET: SECRET }, log, watchGroups: false })
  const built = prepared.bind(services)
  const served = await prepared.app.inject({ method: 'GET', url: '/authsvc/health' })
  assert.equal(served.statusCode, 200)
  assert.throws(() => prepared.bind(services), /bound once/)
  await built.stop()
  await prepared.app.close()
  await services.close()
})
