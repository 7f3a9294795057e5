/**
 * An admin's user changes in the identity domain (sidecar/src/identity/user-administration.ts),
 * without HTTP: the last-admin rule, what a patch revokes, the delete cascade, and the codes.
 * owned-routes-admin.test.ts pins the same through the routes.
 */
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { UserAdministration } from '../../sidecar/src/identity/user-administration.js'
import { addUser, apiToken, openSidecar, sessionJwt, type Sidecar } from './fixtures.js'

const code = (expected: string) => (err: { code?: string }) => err.code === expected

describe('UserAdministration', () => {
  let sc: Sidecar
  let admin: UserAdministration
  before(async () => {
    sc = await openSidecar()
    admin = new UserAdministration(sc.services)
  })
  after(() => sc.close())

  it('the last enabled admin cannot be demoted, disabled or deleted (409)', async () => {
    const root = await addUser(sc, 'only-admin', 'Adm1n-passphrase!', 'admin')
    await assert.rejects(admin.patch(root.username, { role: 'user' }), code('CONFLICT'))
    await assert.rejects(admin.patch(root.user_id, { disabled: true }), code('CONFLICT'))
    await assert.rejects(admin.delete(root.username), code('CONFLICT'))
    assert.equal(sc.services.users.byId(root.user_id)?.role, 'admin')
    // with a second admin, the first may go
    await addUser(sc, 'second-admin', 'Adm1n-passphrase!', 'admin')
    const { user, roleChanged } = await admin.patch(root.username, { role: 'user' })
    assert.equal(user.role, 'user')
    assert.equal(roleChanged, true)
  })

  it('unknown users are 404, unknown roles and weak passwords 400', async () => {
    await assert.rejects(admin.patch('nobody-here', { sfw_check: false }), code('NOT_FOUND'))
    await assert.rejects(admin.delete('nobody-here'), code('NOT_FOUND'))
    const u = await addUser(sc, 'patch-target', 'User-passphrase!')
    await assert.rejects(admin.patch(u.username, { role: 'no-such-role' }), code('VALIDATION_FAILED'))
    await assert.rejects(admin.patch(u.username, { password: 'short' }), code('VALIDATION_FAILED'))
  })

  it('a role change revokes sessions and keeps tokens; a password reset revokes both', async () => {
    const u = await addUser(sc, 'revoke-target', 'User-passphrase!')
    await sessionJwt(sc, u)
    await apiToken(sc, u)
    await admin.patch(u.username, { role: 'guest' })
    assert.equal((await sc.services.sessions.activeForUser(u.user_id)).length, 0)
    assert.equal((await sc.services.tokens.activeForUser(u.user_id)).length, 1)
    await sessionJwt(sc, u)
    await admin.patch(u.username, { password: 'Another-passphrase-9' })
    assert.equal((await sc.services.sessions.activeForUser(u.user_id)).length, 0)
    assert.equal((await sc.services.tokens.activeForUser(u.user_id)).length, 0)
  })

  it('a sfw_check change revokes nothing', async () => {
    const u = await addUser(sc, 'sfw-target', 'User-passphrase!')
    await sessionJwt(sc, u)
    const { user, roleChanged } = await admin.patch(u.user_id, { sfw_check: false })
    assert.equal(user.sfw_check, false)
    assert.equal(roleChanged, false)
    assert.equal((await sc.services.sessions.activeForUser(u.user_id)).length, 1)
  })

  it('a deletion takes sessions, tokens and model grants with the user', async () => {
    const u = await addUser(sc, 'delete-target', 'User-passphrase!')
    await sessionJwt(sc, u)
    await apiToken(sc, u)
    await sc.services.modelGrants.grant({ user_id: u.user_id, folder: 'checkpoints', item_name: 'a.safetensors', granted_by: 'x', created_at_iso: new Date(sc.clock()).toISOString() })
    const deleted = await admin.delete(u.username)
    assert.equal(deleted.user_id, u.user_id)
    assert.equal(sc.services.users.byId(u.user_id), undefined)
    assert.equal((await sc.services.sessions.activeForUser(u.user_id)).length, 0)
    assert.equal((await sc.services.tokens.activeForUser(u.user_id)).length, 0)
    assert.equal(sc.services.modelGrants.list(u.user_id).length, 0)
  })
})
