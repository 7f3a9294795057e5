/**
 * SPEC §3: a credential may come in the query (`?token=`, `?access_token=`) on any route. A route
 * whose querystring schema closes its object would refuse that request with 400 (the app keeps
 * unknown keys and refuses them where a schema says so): no owned route's querystring schema may.
 * (Found on the audit routes by review: `/authsvc/me/console?token=` answered 400.)
 */
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import type { RouteOptions } from 'fastify'
import { openSidecar, type Sidecar } from './fixtures.js'

describe('query credentials on every owned route', async () => {
  const routes: RouteOptions[] = []
  const sc: Sidecar = await openSidecar({ onRoute: (route) => void routes.push(route) })
  after(() => sc.close())

  it('no querystring schema refuses keys it does not name', () => {
    const withQuery = routes.filter((r) => r.schema?.querystring !== undefined)
    assert.ok(withQuery.length >= 6, `the routes with a querystring schema were seen (${withQuery.length})`)
    const closed = withQuery
      .filter((r) => (r.schema!.querystring as { additionalProperties?: unknown }).additionalProperties === false)
      .map((r) => `${String(r.method)} ${r.url}`)
    assert.deepEqual(closed, [])
  })
})
