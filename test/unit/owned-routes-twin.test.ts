/**
 * The /api/authsvc/... twin answers exactly as /authsvc/... does, row by row.
 *
 * Part of the owned routes through Fastify inject (SPEC §5.2, §5.4); the shared
 * request helpers are owned-requests.ts.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import type { LightMyRequestResponse } from 'fastify'
import { addUser, apiToken, bootstrapAdmin, call, openSidecar, sessionJwt, type CallOptions, type Sidecar } from './fixtures.js'

// -------------------------------------------------------- /api/authsvc twin

describe('/api/authsvc/... behaves exactly as /authsvc/...', () => {
  let sc: Sidecar
  let adminJwt: string
  let aliceJwt: string
  let aliceToken: string
  before(async () => {
    sc = await openSidecar()
    adminJwt = (await bootstrapAdmin(sc)).jwt
    const alice = await addUser(sc, 'alice', 'alice-passphrase-1')
    aliceJwt = await sessionJwt(sc, alice)
    aliceToken = await apiToken(sc, alice)
  })
  after(() => sc.close())

  const normalise = (res: LightMyRequestResponse) => ({
    status: res.statusCode,
    type: String(res.headers['content-type']),
    body: res.body.replace(/ast_[\w-]{43}/g, 'TOKEN').replace(/"token_hash_prefix":"[0-9a-f]+"/g, '"token_hash_prefix":"P"').replace(/"expires_iso":"[^"]+"/g, '"expires_iso":"T"'),
  })

  const rows: Array<[string, Partial<CallOptions> & { path: string }]> = [
    ['me anonymous', { path: '/api/me' }],
    ['me as alice', { path: '/api/me', bearer: 'ALICE' }],
    ['me with a broken token', { path: '/api/me', bearer: 'ast_broken' }],
    ['me via the query token', { path: '/api/me?token=ALICE_TOKEN' }],
    ['tokens list', { path: '/api/tokens', bearer: 'ALICE' }],
    ['sessions anonymous', { path: '/me/sessions' }],
    ['current-token by cookie', { path: '/me/current-token', cookie: 'ALICE' }],
    ['users as alice', { path: '/api/users', bearer: 'ALICE' }],
    ['users as admin', { path: '/api/users', bearer: 'ADMIN' }],
    ['groups as admin', { path: '/api/groups', bearer: 'ADMIN' }],
    ['ip-lists as alice', { path: '/api/ip-lists', bearer: 'ALICE' }],
    ['guest-jwt as alice', { path: '/api/settings/guest-jwt', bearer: 'ALICE' }],
    ['PUT guest-jwt as alice', { path: '/api/settings/guest-jwt', method: 'PUT', bearer: 'ALICE', body: { allow_guest_jwt: true } }],
    ['PUT groups by cookie cross-site', { path: '/api/groups', method: 'PUT', cookie: 'ADMIN', headers: { origin: 'https://evil.example' }, body: { groups: {} } }],
    ['generate_token wrong password', { path: '/generate_token', method: 'POST', body: { username: 'alice', password: 'wrong-pass-word' } }],
    ['generate_token missing credential', { path: '/generate_token', method: 'POST', body: {} }],
    ['unknown route', { path: '/api/nope' }],
    ['static asset', { path: '/static/authsvc.css' }],
    ['unknown static asset', { path: '/static/../../package.json' }],
    ['health', { path: '/health' }],
  ]
  for (const [name, row] of rows) {
    it(name, async () => {
      const sub = (v?: string) => (v === 'ALICE' ? aliceJwt : v === 'ADMIN' ? adminJwt : v)
      const make = (prefix: string): CallOptions => ({
        ...row, url: prefix + row.path.replace('ALICE_TOKEN', aliceToken), bearer: sub(row.bearer), cookie: sub(row.cookie),
      })
      const plain = await call(sc, make('/authsvc'))
      const twin = await call(sc, make('/api/authsvc'))
      assert.deepEqual(normalise(twin), normalise(plain))
      assert.ok(plain.statusCode < 500, plain.body)
    })
  }
})
