/**
 * The admin API: users (list, role change, password reset, disable, delete,
 * the last admin kept), groups, IP lists and guest login, each applying to the
 * very next decision.
 *
 * Part of the owned routes through Fastify inject (SPEC §5.2, §5.4); the shared
 * request helpers are owned-requests.ts.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import {
  addUser, apiToken, assertDenied, assertError, assertPass, bootstrapAdmin, call, decide, openSidecar, sessionJwt, type Sidecar,
} from './fixtures.js'
import { FORM, form, json, login, me } from './owned-requests.js'

// -------------------------------------------------------------- admin: users

describe('admin: users', () => {
  let sc: Sidecar
  let adminJwt: string
  let admin: Awaited<ReturnType<typeof addUser>>
  before(async () => {
    sc = await openSidecar()
    const boot = await bootstrapAdmin(sc)
    adminJwt = boot.jwt
    admin = boot.user
  })
  after(() => sc.close())

  const put = (target: string, body: unknown, bearer = adminJwt) => call(sc, { method: 'PUT', url: `/authsvc/api/users/${target}`, bearer, body })
  const del = (target: string, bearer = adminJwt) => call(sc, { method: 'DELETE', url: `/authsvc/api/users/${target}`, bearer })

  it('GET users: the public fields only (never password_hash)', async () => {
    await addUser(sc, 'listed', 'listed-passphrase-1')
    const res = await call(sc, { url: '/authsvc/api/users', bearer: adminJwt })
    const users = json(res).users as Array<Record<string, unknown>>
    assert.ok(users.length >= 2)
    for (const u of users) assert.deepEqual(Object.keys(u).sort(), ['created_at_iso', 'disabled', 'mfa_enabled', 'role', 'sfw_check', 'user_id', 'username'])
    assert.doesNotMatch(res.body, /argon2|password/)
  })

  it('non-admins → 403 ADMIN_REQUIRED, anonymous → 401 on every admin route', async () => {
    const jwt = await sessionJwt(sc, await addUser(sc, 'nonadmin', 'nonadmin-passphrase-1'))
    const routes: Array<[string, string, unknown?]> = [
      ['GET', '/authsvc/api/users'], ['PUT', '/authsvc/api/users/nonadmin', { role: 'admin' }], ['DELETE', '/authsvc/api/users/root-admin'],
      ['GET', '/authsvc/api/groups'], ['PUT', '/authsvc/api/groups', { groups: { admin: {} } }], ['GET', '/authsvc/api/ip-lists'],
      ['PUT', '/authsvc/api/ip-lists', { whitelist: [], blacklist: [] }], ['PUT', '/authsvc/api/settings/guest-jwt', { allow_guest_jwt: true }],
    ]
    for (const [method, url, body] of routes) {
      assertError(await call(sc, { method, url, bearer: jwt, body }), 403, 'ADMIN_REQUIRED', `${method} ${url}`)
      assertError(await call(sc, { method, url, body }), 401, 'AUTH_REQUIRED', `${method} ${url} anonymous`)
    }
    assert.equal(sc.services.users.byUsername('nonadmin')?.role, 'user')
  })

  it('a non-admin sending a malformed body to an admin route still gets 403 ADMIN_REQUIRED', async () => {
    const jwt = await sessionJwt(sc, await addUser(sc, 'schema-prober', 'prober-passphrase-1'))
    assertError(await put('root-admin', { role: {} }, jwt), 403, 'ADMIN_REQUIRED')
    assertError(await call(sc, { method: 'PUT', url: '/authsvc/api/users/root-admin', body: { role: {} } }), 401, 'AUTH_REQUIRED')
  })

  it('role change revokes the user\'s sessions at once; the new role applies', async () => {
    const u = await addUser(sc, 'promo', 'promo-passphrase-1')
    const jwt = await sessionJwt(sc, u)
    const token = await apiToken(sc, u)
    const res = await put('promo', { role: 'guest' })
    assert.equal(res.statusCode, 200)
    assert.equal(json(res).user.role, 'guest')
    assertError(await me(sc, { bearer: jwt }), 401, 'TOKEN_REVOKED')
    assertDenied(await decide(sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: { authorization: `Bearer ${token}` } }), 'PERMISSION_DENIED')
  })

  it('password reset revokes sessions and API tokens; the old password stops working', async () => {
    const u = await addUser(sc, 'resetme', 'resetme-passphrase-1')
    const jwt = await sessionJwt(sc, u)
    const token = await apiToken(sc, u)
    assert.equal((await put('resetme', { password: 'brand-new-passphrase' })).statusCode, 200)
    assertError(await me(sc, { bearer: jwt }), 401, 'TOKEN_REVOKED')
    assert.equal((await me(sc, { bearer: token })).statusCode, 401)
    assertError(await login(sc, 'resetme', 'resetme-passphrase-1'), 401, 'INVALID_CREDENTIALS')
    assert.equal((await login(sc, 'resetme', 'brand-new-passphrase')).statusCode, 200)
  })

  it('a reset to a weak password → 400 and nothing changes', async () => {
    const u = await addUser(sc, 'weakreset', 'weakreset-passphrase-1')
    const jwt = await sessionJwt(sc, u)
    assertError(await put('weakreset', { password: 'short' }), 400, 'VALIDATION_FAILED')
    assertError(await put('weakreset', { password: 'password1' }), 400, 'VALIDATION_FAILED')
    assert.equal((await me(sc, { bearer: jwt })).statusCode, 200)
    assert.equal((await login(sc, 'weakreset', 'weakreset-passphrase-1')).statusCode, 200)
  })

  it('disable revokes sessions and tokens, login then fails like a wrong password; re-enable allows login', async () => {
    const u = await addUser(sc, 'disableme', 'disableme-passphrase-1')
    const jwt = await sessionJwt(sc, u)
    assert.equal((await put(u.user_id, { disabled: true })).statusCode, 200, 'target by user id')
    assertError(await me(sc, { bearer: jwt }), 401, 'TOKEN_REVOKED')
    assertError(await login(sc, 'disableme', 'disableme-passphrase-1'), 401, 'INVALID_CREDENTIALS')
    assert.equal((await put('disableme', { disabled: false })).statusCode, 200)
    assert.equal((await login(sc, 'disableme', 'disableme-passphrase-1')).statusCode, 200)
  })

  it('sfw_check and mfa_reset change only those fields and keep sessions', async () => {
    const u = await addUser(sc, 'sfw', 'sfw-passphrase-1')
    await sc.services.users.update(u.user_id, { mfa_enabled: true })
    const jwt = await sessionJwt(sc, u)
    const res = await put('sfw', { sfw_check: false, mfa_reset: true })
    assert.equal(json(res).user.sfw_check, false)
    assert.equal(json(res).user.mfa_enabled, false)
    assert.equal((await me(sc, { bearer: jwt })).statusCode, 200)
  })

  it('unknown user → 404; unknown role → 400', async () => {
    assertError(await put('ghost-user', { sfw_check: false }), 404, 'NOT_FOUND')
    assertError(await del('ghost-user'), 404, 'NOT_FOUND')
    assertError(await put('sfw', { role: 'superuser' }), 400, 'VALIDATION_FAILED')
  })

  it('the last enabled admin cannot be demoted, disabled or deleted → 409, even by itself', async () => {
    assert.equal(sc.services.users.enabledAdmins().length, 1)
    assertError(await put('root-admin', { role: 'user' }), 409, 'CONFLICT')
    assertError(await put('root-admin', { disabled: true }), 409, 'CONFLICT')
    assertError(await del('root-admin'), 409, 'CONFLICT')
    assertError(await put(admin.user_id, { role: 'guest', sfw_check: false }), 409, 'CONFLICT')
    const after = sc.services.users.byUsername('root-admin')!
    assert.equal(after.role, 'admin')
    assert.equal(after.disabled, false)
    assert.equal(after.sfw_check, true, 'a refused patch changes nothing')
  })

  it('with a second admin, one may go; then the other is the last', async () => {
    const second = await addUser(sc, 'second-admin', 'second-passphrase-1', 'admin')
    assert.equal((await put('second-admin', { role: 'user' })).statusCode, 200)
    assertError(await put('root-admin', { role: 'user' }), 409, 'CONFLICT')
    await put('second-admin', { role: 'admin' })
    const disabledAdmin = await addUser(sc, 'off-admin', 'off-passphrase-1', 'admin')
    await sc.services.users.update(disabledAdmin.user_id, { disabled: true })
    assert.equal((await del(second.user_id)).statusCode, 200)
    assertError(await del('root-admin'), 409, 'CONFLICT', 'a disabled admin does not count')
  })

  it('delete removes the user, its sessions and tokens; the name can be registered again', async () => {
    const u = await addUser(sc, 'deleteme', 'deleteme-passphrase-1')
    const jwt = await sessionJwt(sc, u)
    const token = await apiToken(sc, u)
    const res = await del('deleteme')
    assert.equal(res.statusCode, 200)
    assertError(await me(sc, { bearer: jwt }), 401, 'TOKEN_REVOKED')
    assert.equal((await me(sc, { bearer: token })).statusCode, 401)
    assert.equal((await sc.services.sessions.activeForUser(u.user_id)).length, 0)
    assert.equal((await sc.services.tokens.activeForUser(u.user_id)).length, 0)
    assert.ok(!(json(await call(sc, { url: '/authsvc/api/users', bearer: adminJwt })).users as Array<{ username: string }>).some((x) => x.username === 'deleteme'))
    assert.equal((await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: 'deleteme', password: 'deleteme-passphrase-2' } })).statusCode, 201)
  })
})

// ---------------------------------------------------- admin: groups, lists, guest

describe('admin: groups, IP lists, guest login', () => {
  let sc: Sidecar
  let adminJwt: string
  before(async () => {
    sc = await openSidecar()
    adminJwt = (await bootstrapAdmin(sc)).jwt
  })
  after(() => sc.close())

  const groupsFile = () => JSON.parse(readFileSync(join(sc.dir, 'authsvc_groups.json'), 'utf8')) as Record<string, unknown>

  it('GET groups: the seeded defaults', async () => {
    const groups = json(await call(sc, { url: '/authsvc/api/groups', bearer: adminJwt })).groups
    assert.deepEqual(Object.keys(groups).sort(), ['admin', 'guest', 'user'])
    assert.equal(groups.user.can_run, true)
    assert.equal(groups.user.can_download_models, false)
    assert.equal(groups.guest.can_run, false)
    assert.equal(groups.guest.can_access_api, true)
  })

  it('PUT groups replaces the map, on disk too, and applies to the next decision', async () => {
    const current = json(await call(sc, { url: '/authsvc/api/groups', bearer: adminJwt })).groups
    const next = { ...current, artist: { can_run: true, can_access_api: true } }
    const res = await call(sc, { method: 'PUT', url: '/authsvc/api/groups', bearer: adminJwt, body: { groups: next } })
    assert.equal(res.statusCode, 200, res.body)
    assert.deepEqual(groupsFile(), next)
    const artist = await addUser(sc, 'artist1', 'artist-passphrase-1', 'artist')
    const jwt = await sessionJwt(sc, artist)
    assertPass(await decide(sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: { authorization: `Bearer ${jwt}` } }))
    assertDenied(await decide(sc, { method: 'POST', path: '/upload/image', pattern: '/upload/image', headers: { authorization: `Bearer ${jwt}` } }), 'PERMISSION_DENIED')
  })

  const refused: Array<[string, unknown]> = [
    ['an unknown key', { can_fly: true }],
    ['a non-boolean value', { can_run: 'yes' }],
    ['a null value', { can_run: null }],
    ['a role that is not an object', 'all'],
  ]
  for (const [name, role] of refused) {
    it(`PUT groups with ${name} → 400, nothing changes`, async () => {
      const before = JSON.stringify(groupsFile())
      const current = json(await call(sc, { url: '/authsvc/api/groups', bearer: adminJwt })).groups
      const res = await call(sc, { method: 'PUT', url: '/authsvc/api/groups', bearer: adminJwt, body: { groups: { ...current, broken: role } } })
      assertError(res, 400, 'VALIDATION_FAILED')
      assert.equal(JSON.stringify(groupsFile()), before)
      assert.equal(sc.services.roles.has('broken'), false)
    })
  }

  it('PUT groups without the admin role → 400 (the admin role cannot be removed)', async () => {
    const res = await call(sc, { method: 'PUT', url: '/authsvc/api/groups', bearer: adminJwt, body: { groups: { user: { can_run: true } } } })
    assertError(res, 400, 'VALIDATION_FAILED')
    assert.ok(sc.services.roles.has('admin'))
  })

  it('PUT groups with invalid role names → 400', async () => {
    for (const name of ['bad role', '.dot', 'x'.repeat(65), '']) {
      const res = await call(sc, { method: 'PUT', url: '/authsvc/api/groups', bearer: adminJwt, body: { groups: { admin: {}, [name]: {} } } })
      assertError(res, 400, 'VALIDATION_FAILED', JSON.stringify(name))
    }
  })

  it('an admin role written with every key false still passes everything', async () => {
    const current = json(await call(sc, { url: '/authsvc/api/groups', bearer: adminJwt })).groups
    const res = await call(sc, { method: 'PUT', url: '/authsvc/api/groups', bearer: adminJwt, body: { groups: { ...current, admin: { can_run: false, can_access_api: false } } } })
    assert.equal(res.statusCode, 200)
    assertPass(await decide(sc, { method: 'POST', path: '/free', pattern: '/free', headers: { authorization: `Bearer ${adminJwt}` } }))
    assertPass(await decide(sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: { authorization: `Bearer ${adminJwt}` } }))
  })

  it('GET ip-lists: empty by default', async () => {
    assert.deepEqual(json(await call(sc, { url: '/authsvc/api/ip-lists', bearer: adminJwt })), { whitelist: [], blacklist: [] })
  })

  const badLists: Array<[string, unknown]> = [
    ['blacklisting 127.0.0.1', { whitelist: [], blacklist: [{ ip: '127.0.0.1', permanent: true }] }],
    ['blacklisting 127.0.0.0/8', { whitelist: [], blacklist: [{ ip: '127.0.0.0/8', permanent: true }] }],
    ['blacklisting 127.5.5.5', { whitelist: [], blacklist: [{ ip: '127.5.5.5' }] }],
    ['blacklisting ::1', { whitelist: [], blacklist: [{ ip: '::1', permanent: true }] }],
    ['blacklisting ::ffff:127.0.0.1', { whitelist: [], blacklist: [{ ip: '::ffff:127.0.0.1', permanent: true }] }],
    ['an invalid blacklist address', { whitelist: [], blacklist: [{ ip: 'not-an-ip' }] }],
    ['an invalid whitelist CIDR', { whitelist: ['10.0.0.0/40'], blacklist: [] }],
    ['a bad expiry date', { whitelist: [], blacklist: [{ ip: '10.1.1.1', expires_at_iso: 'tomorrow' }] }],
    ['a missing list', { whitelist: [] }],
  ]
  for (const [name, body] of badLists) {
    it(`PUT ip-lists ${name} → 400 and the lists are unchanged`, async () => {
      const before = json(await call(sc, { url: '/authsvc/api/ip-lists', bearer: adminJwt }))
      const res = await call(sc, { method: 'PUT', url: '/authsvc/api/ip-lists', bearer: adminJwt, body })
      assertError(res, 400, 'VALIDATION_FAILED')
      assert.deepEqual(json(await call(sc, { url: '/authsvc/api/ip-lists', bearer: adminJwt })), before)
    })
  }

  it('PUT ip-lists: an unknown key in an entry is refused (400 VALIDATION_FAILED), nothing stored', async () => {
    const before = json(await call(sc, { url: '/authsvc/api/ip-lists', bearer: adminJwt }))
    const res = await call(sc, { method: 'PUT', url: '/authsvc/api/ip-lists', bearer: adminJwt, body: { whitelist: [], blacklist: [{ ip: '10.1.1.1', permanent: true, reason: 'x' }] } })
    assertError(res, 400, 'VALIDATION_FAILED')
    assert.deepEqual(json(await call(sc, { url: '/authsvc/api/ip-lists', bearer: adminJwt })), before)
  })

  it('PUT ip-lists applies at once and persists; loopback still gets in', async () => {
    const lists = { whitelist: ['198.51.100.0/24'], blacklist: [{ ip: '198.51.100.66', permanent: true }] }
    const res = await call(sc, { method: 'PUT', url: '/authsvc/api/ip-lists', bearer: adminJwt, body: lists })
    assert.equal(res.statusCode, 200, res.body)
    assert.deepEqual(json(await call(sc, { url: '/authsvc/api/ip-lists', bearer: adminJwt })), lists)
    assertDenied(await decide(sc, { path: '/queue', pattern: '/queue', peer: '198.51.100.66' }), 'IP_DENIED')
    assertDenied(await decide(sc, { path: '/queue', pattern: '/queue', peer: '203.0.113.1' }), 'IP_DENIED')
    assertDenied(await decide(sc, { path: '/queue', pattern: '/queue', peer: '198.51.100.7' }), 'AUTH_REQUIRED')
    assertPass(await decide(sc, { path: '/queue', pattern: '/queue', headers: { authorization: `Bearer ${adminJwt}` } }))
    assert.equal((await call(sc, { method: 'PUT', url: '/authsvc/api/ip-lists', bearer: adminJwt, body: { whitelist: [], blacklist: [] } })).statusCode, 200)
  })

  it('guest login: 403 while disabled; an admin enables it; the guest session acts as the guest role', async () => {
    assertError(await call(sc, { method: 'POST', url: '/login', body: { guest_login: true } }), 403, 'GUEST_DISABLED')
    assert.deepEqual(json(await call(sc, { url: '/authsvc/api/settings/guest-jwt', bearer: adminJwt })), { allow_guest_jwt: false })
    assertError(await call(sc, { url: '/authsvc/api/settings/guest-jwt' }), 401, 'AUTH_REQUIRED')
    const put = await call(sc, { method: 'PUT', url: '/authsvc/api/settings/guest-jwt', bearer: adminJwt, body: { allow_guest_jwt: true } })
    assert.deepEqual(json(put), { allow_guest_jwt: true })
    const res = await call(sc, { method: 'POST', url: '/login', headers: FORM, body: form({ guest_login: 'true' }) })
    assert.equal(res.statusCode, 200, res.body)
    const jwt = json(res).jwt_token as string
    const who = json(await me(sc, { bearer: jwt }))
    assert.equal(who.role, 'guest')
    assert.equal(who.is_admin, false)
    assert.equal(who.permissions.can_run, false)
    assert.equal(json(await call(sc, { url: '/authsvc/api/settings/guest-jwt', bearer: jwt })).allow_guest_jwt, true)
    assertError(await call(sc, { method: 'POST', url: '/authsvc/generate_token', bearer: jwt, body: {} }), 401, 'AUTH_REQUIRED')
    await call(sc, { method: 'PUT', url: '/authsvc/api/settings/guest-jwt', bearer: adminJwt, body: { allow_guest_jwt: false } })
    assertError(await me(sc, { bearer: jwt }), 401, 'TOKEN_REVOKED')
  })
})
