/**
 * The access pipeline's steps (sidecar/src/access/pipeline.ts), shared by the decision path and the
 * owned routes: which check wins first, and with which code. The decide-*.test.ts and
 * owned-routes-*.test.ts suites pin the same rules through the real decider and inject().
 */
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { addressRefusal, checkAccess, csrfRefusal, levelRefusal, type AccessRequest, type Requirement, type Resolution } from '../../sidecar/src/access/pipeline.js'
import type { ClientFacts } from '../../sidecar/src/access/client-facts.js'
import { isAdministrator, PERMISSION_KEYS, type Permissions, type Principal } from '../../sidecar/src/identity/principal.js'
import { tokenHashPrefix } from '../../sidecar/src/identity/api-tokens.js'

const facts = (over: Partial<ClientFacts> = {}): ClientFacts => ({ ip: '127.0.0.1', addresses: ['127.0.0.1'], isLocal: true, isHttps: false, isNavigation: false, ...over })
const none = Object.fromEntries(PERMISSION_KEYS.map((k) => [k, false])) as Permissions
const principal = (over: Partial<Principal> = {}): Principal => ({
  userId: 'u1', username: 'alice', role: 'user', isAdmin: false, permissions: { ...none, can_access_api: true }, authType: 'session', sfwCheck: true, mfaEnabled: false, ...over,
})
const admin = principal({ role: 'admin', isAdmin: true })
const crossSite = { 'sec-fetch-site': 'cross-site' }
const request = (over: Partial<AccessRequest>): AccessRequest => ({
  method: 'GET', headers: {}, facts: facts(), resolution: { principal: principal(), channel: 'cookie' }, requirement: { kind: 'principal' }, loginPage: false, ...over,
})

describe('access pipeline', () => {
  it('address: any refused address refuses the client', () => {
    const gate = { refuse: (ip: string) => (ip === '198.51.100.7' ? 'IP_DENIED' as const : null) }
    assert.equal(addressRefusal(facts({ addresses: ['10.0.0.1', '198.51.100.7'] }), gate), 'IP_DENIED')
    assert.equal(addressRefusal(facts({ addresses: ['10.0.0.1'] }), gate), null)
  })

  it('CSRF: only cookie credentials, only unsafe methods and WebSocket upgrades, same-origin passes', () => {
    assert.equal(csrfRefusal('cookie', 'POST', crossSite, facts()), 'CSRF_REJECTED')
    assert.equal(csrfRefusal('cookie', 'GET', { ...crossSite, upgrade: 'WebSocket' }, facts()), 'CSRF_REJECTED')
    assert.equal(csrfRefusal('cookie', 'GET', crossSite, facts()), null)
    assert.equal(csrfRefusal('bearer', 'POST', crossSite, facts()), null)
    assert.equal(csrfRefusal(undefined, 'POST', crossSite, facts()), null)
    assert.equal(csrfRefusal('cookie', 'POST', { 'sec-fetch-site': 'same-origin' }, facts()), null)
    assert.equal(csrfRefusal('cookie', 'POST', { origin: 'https://comfy.test', host: 'comfy.test' }, facts({ isHttps: true })), null)
    assert.equal(csrfRefusal('cookie', 'POST', { origin: 'http://comfy.test', host: 'comfy.test' }, facts({ isHttps: true })), 'CSRF_REJECTED')
  })

  it('level: each requirement and its code', () => {
    const rows: Array<[Requirement, Principal, string | null]> = [
      [{ kind: 'public' }, principal(), null],
      [{ kind: 'principal' }, principal({ userId: null, authType: 'anonymous' }), null],
      [{ kind: 'user' }, principal({ userId: null, authType: 'anonymous' }), 'AUTH_REQUIRED'],
      [{ kind: 'user' }, principal({ authType: 'anonymous' }), 'AUTH_REQUIRED'],
      [{ kind: 'user' }, principal(), null],
      [{ kind: 'admin' }, principal(), 'ADMIN_REQUIRED'],
      // the flag alone is not the admin role, nor the role name alone
      [{ kind: 'admin' }, principal({ isAdmin: true }), 'ADMIN_REQUIRED'],
      [{ kind: 'admin' }, principal({ role: 'admin' }), 'ADMIN_REQUIRED'],
      [{ kind: 'admin' }, admin, null],
      [{ kind: 'permission', key: 'can_run' }, principal(), 'PERMISSION_DENIED'],
      [{ kind: 'permission', key: 'can_access_api' }, principal(), null],
      [{ kind: 'permission', key: 'can_download_models' }, admin, null],
    ]
    for (const [requirement, p, code] of rows) assert.equal(levelRefusal(requirement, p), code, JSON.stringify(requirement))
  })

  it('isAdministrator: the admin role on an admin principal, never null', () => {
    assert.equal(isAdministrator(admin), true)
    assert.equal(isAdministrator(null), false)
    assert.equal(isAdministrator(principal({ isAdmin: true })), false)
  })

  it('without a principal: public passes, a page navigation logs in, else the credential error', () => {
    const anonymous: Resolution = { principal: null }
    const expired: Resolution = { error: 'TOKEN_EXPIRED' }
    assert.deepEqual(checkAccess(request({ resolution: expired, requirement: { kind: 'public' }, method: 'POST', headers: crossSite })), { allow: true, principal: null })
    assert.deepEqual(checkAccess(request({ resolution: anonymous, loginPage: true, facts: facts({ isNavigation: true }) })), { allow: false, login: true })
    assert.deepEqual(checkAccess(request({ resolution: anonymous, loginPage: true })), { allow: false, login: false, code: 'AUTH_REQUIRED' })
    assert.deepEqual(checkAccess(request({ resolution: expired, loginPage: false, facts: facts({ isNavigation: true }) })), { allow: false, login: false, code: 'TOKEN_EXPIRED' })
  })

  it('CSRF wins over the level, on public requirements too', () => {
    const post = { method: 'POST', headers: crossSite }
    assert.deepEqual(checkAccess(request({ ...post, requirement: { kind: 'admin' } })), { allow: false, login: false, code: 'CSRF_REJECTED' })
    assert.deepEqual(checkAccess(request({ ...post, requirement: { kind: 'public' } })), { allow: false, login: false, code: 'CSRF_REJECTED' })
    assert.deepEqual(checkAccess(request({ requirement: { kind: 'admin' } })), { allow: false, login: false, code: 'ADMIN_REQUIRED' })
    const p = principal()
    assert.deepEqual(checkAccess(request({ resolution: { principal: p, channel: 'bearer' }, ...post })), { allow: true, principal: p, channel: 'bearer' })
  })
})

describe('tokenHashPrefix', () => {
  it('ignores spaces, a trailing ... and case; needs 8 hex characters', () => {
    assert.equal(tokenHashPrefix('  3F9A0C1D2E4B...  '), '3f9a0c1d2e4b')
    assert.equal(tokenHashPrefix('3f9a0c1d'), '3f9a0c1d')
    for (const bad of ['3f9a0c1', 'not-hex-at-all', '3f9a0c1d....', '']) {
      assert.throws(() => tokenHashPrefix(bad), (err: { code?: string }) => err.code === 'VALIDATION_FAILED', bad)
    }
  })
})
