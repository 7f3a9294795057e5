/**
 * Issue 4 through the owned routes (real services, real sqlite, injected
 * clock): enrolment and login with TOTP, replay refusal, backup codes, the
 * password-only attack table, temp-token rules, recovery, secrets at rest.
 */
import { describe, it, beforeEach, afterEach } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync, existsSync } from 'node:fs'
import { join } from 'node:path'
import { PASSWORD, bearer, openHarness, registerAndLogin, type Harness } from './harness.js'
import { totpAt } from './totp-reference.js'

async function enrol(h: Harness, session: string): Promise<{ secret: string; backup: string[] }> {
  const setup = await h.call('POST', '/authsvc/api/mfa/setup', { headers: bearer(session), body: {} })
  assert.equal(setup.status, 200, JSON.stringify(setup.body))
  assert.match(setup.body.provisioning_uri, /^otpauth:\/\/totp\//)
  assert.match(setup.body.qr_svg, /^<svg/)
  assert.equal(setup.body.backup_codes.length, 10)
  const ok = await h.call('POST', '/authsvc/api/mfa/verify-setup', { headers: bearer(session), body: { code: totpAt(setup.body.secret, h.clock()) } })
  assert.equal(ok.status, 200, JSON.stringify(ok.body))
  assert.equal(ok.body.message, 'MFA enabled')
  return { secret: setup.body.secret, backup: setup.body.backup_codes }
}

const passwordLogin = (h: Harness, username: string) => h.call('POST', '/login', { body: { username, password: PASSWORD } })

describe('MFA through the owned routes', () => {
  let h: Harness
  let admin: string
  beforeEach(async () => {
    h = await openHarness({ env: { RECOVERY_MODE: 'true' } })
    admin = await registerAndLogin(h, 'admin')
  })
  afterEach(async () => {
    await h.close()
  })

  it('login with MFA: password gives a temp token, no cookie; the code gives the session', async () => {
    const { secret } = await enrol(h, admin)
    const first = await passwordLogin(h, 'admin')
    assert.equal(first.status, 200)
    assert.equal(first.body.mfa_required, true)
    assert.equal(first.body.jwt_token, undefined)
    assert.equal(first.headers['set-cookie'], undefined)
    h.clock.advance(30_000)
    const verified = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: first.body.mfa_temp_token, code: totpAt(secret, h.clock()) } })
    assert.equal(verified.status, 200, JSON.stringify(verified.body))
    assert.ok(verified.body.jwt_token)
    assert.match(String(verified.headers['set-cookie']), /jwt_token=/)
    const me = await h.call('GET', '/authsvc/api/me', { headers: bearer(verified.body.jwt_token) })
    assert.equal(me.body.mfa_enabled, true)
  })

  it('the same code is never accepted twice, nor an older step after a newer one', async () => {
    const { secret } = await enrol(h, admin)
    h.clock.advance(60_000)
    const code = totpAt(secret, h.clock())
    const t1 = (await passwordLogin(h, 'admin')).body.mfa_temp_token
    assert.equal((await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: t1, code } })).status, 200)
    const t2 = (await passwordLogin(h, 'admin')).body.mfa_temp_token
    const replay = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: t2, code } })
    assert.equal(replay.status, 401)
    assert.equal(replay.body.code, 'MFA_INVALID_CODE')
    const older = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: t2, code: totpAt(secret, h.clock(), -1) } })
    assert.equal(older.status, 401, 'a code of the previous step is refused after a newer one was accepted')
    const next = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: t2, code: totpAt(secret, h.clock(), 1) } })
    assert.equal(next.status, 200, 'the next step (within the ±1 window) still works')
  })

  it('backup codes work once each', async () => {
    const { backup } = await enrol(h, admin)
    const t1 = (await passwordLogin(h, 'admin')).body.mfa_temp_token
    assert.equal((await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: t1, backup_code: backup[0].toLowerCase() } })).status, 200)
    const t2 = (await passwordLogin(h, 'admin')).body.mfa_temp_token
    assert.equal((await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: t2, backup_code: backup[0] } })).status, 401)
    assert.equal((await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: t2, backup_code: backup[1] } })).status, 200)
  })

  it('attack table: the password alone never re-enrols or disables MFA', async () => {
    await enrol(h, admin)
    const temp = (await passwordLogin(h, 'admin')).body.mfa_temp_token
    // a second, fully signed-in session of the same user, but without a current code
    const rows: Array<[string, string, { body: unknown; headers?: Record<string, string> }, number]> = [
      ['setup with a login temp token', '/authsvc/api/mfa/setup', { body: { mfa_temp_token: temp } }, 401],
      ['verify-setup with a login temp token', '/authsvc/api/mfa/verify-setup', { body: { mfa_temp_token: temp, code: '123456' } }, 401],
      ['setup with a session, no code', '/authsvc/api/mfa/setup', { body: {}, headers: bearer(admin) }, 401],
      ['setup with a session, wrong code', '/authsvc/api/mfa/setup', { body: { code: '000000' }, headers: bearer(admin) }, 401],
      ['verify-setup with a session, nothing pending', '/authsvc/api/mfa/verify-setup', { body: { code: '000000' }, headers: bearer(admin) }, 401],
      ['disable with a session, no code', '/authsvc/api/mfa/disable', { body: {}, headers: bearer(admin) }, 401],
      ['disable with a session, wrong code', '/authsvc/api/mfa/disable', { body: { code: '000000' }, headers: bearer(admin) }, 401],
      ['disable with a temp token only', '/authsvc/api/mfa/disable', { body: { mfa_temp_token: temp, code: '000000' } }, 401],
      ['disable with the temp token as bearer', '/authsvc/api/mfa/disable', { body: {}, headers: bearer(temp) }, 401],
    ]
    for (const [name, url, req, status] of rows) {
      const res = await h.call('POST', url, req)
      assert.equal(res.status, status, `${name}: ${res.status} ${JSON.stringify(res.body)}`)
    }
    const me = await h.call('GET', '/authsvc/api/me', { headers: bearer(admin) })
    assert.equal(me.body.mfa_enabled, true, 'still enrolled')
  })

  it('disable needs a current code and revokes the other sessions', async () => {
    const { secret } = await enrol(h, admin)
    h.clock.advance(30_000)
    const other = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: (await passwordLogin(h, 'admin')).body.mfa_temp_token, code: totpAt(secret, h.clock()) } })
    h.clock.advance(30_000)
    const off = await h.call('POST', '/authsvc/api/mfa/disable', { headers: bearer(admin), body: { code: totpAt(secret, h.clock()) } })
    assert.equal(off.status, 200, JSON.stringify(off.body))
    assert.equal((await h.call('GET', '/authsvc/api/me', { headers: bearer(other.body.jwt_token) })).status, 401, 'other session revoked')
    assert.equal((await h.call('GET', '/authsvc/api/me', { headers: bearer(admin) })).status, 200, 'this one kept')
    assert.equal((await passwordLogin(h, 'admin')).body.jwt_token !== undefined, true, 'password alone works again')
  })

  it('temp token: 300 s, single use, 5 wrong codes consume it, never a bearer credential', async () => {
    const { secret } = await enrol(h, admin)
    const expired = (await passwordLogin(h, 'admin')).body.mfa_temp_token
    h.clock.advance(301_000)
    assert.equal((await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: expired, code: totpAt(secret, h.clock()) } })).body.code, 'MFA_TOKEN_INVALID')

    const once = (await passwordLogin(h, 'admin')).body.mfa_temp_token
    assert.equal((await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: once, code: totpAt(secret, h.clock()) } })).status, 200)
    h.clock.advance(30_000)
    assert.equal((await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: once, code: totpAt(secret, h.clock()) } })).body.code, 'MFA_TOKEN_INVALID', 'single use')

    const guessed = (await passwordLogin(h, 'admin')).body.mfa_temp_token
    for (let i = 0; i < 5; i++) {
      assert.equal((await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: guessed, code: '000000' } })).body.code, 'MFA_INVALID_CODE')
    }
    h.clock.advance(30_000)
    assert.equal((await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: guessed, code: totpAt(secret, h.clock()) } })).body.code, 'MFA_TOKEN_INVALID', 'consumed after 5 wrong codes')

    const temp = (await passwordLogin(h, 'admin')).body.mfa_temp_token
    for (const url of ['/authsvc/api/me', '/authsvc/api/tokens', '/authsvc/me/sessions']) {
      assert.equal((await h.call('GET', url, { headers: bearer(temp) })).status, 401, url)
      assert.equal((await h.call('GET', `${url}?token=${temp}`)).status, 401, `${url}?token=`)
    }
    const decide = await h.services.resolver.resolve({ authorization: `Bearer ${temp}` }, new URLSearchParams(), { ip: '127.0.0.1', isLocal: true, isHttps: false, isNavigation: false })
    assert.deepEqual(decide, { error: 'TOKEN_INVALID' })
  })

  it('a role that requires MFA: login answers mfa_setup_required, enrolment through the temp token ends in a session', async () => {
    const groups = (await h.call('GET', '/authsvc/api/groups', { headers: bearer(admin) })).body.groups
    groups.user.mfa_required = true
    assert.equal((await h.call('PUT', '/authsvc/api/groups', { headers: bearer(admin), body: { groups } })).status, 200)
    assert.equal((await h.call('POST', '/register', { headers: bearer(admin), body: { username: 'eve', password: PASSWORD } })).status, 201)
    const login = await passwordLogin(h, 'eve')
    assert.equal(login.body.mfa_setup_required, true)
    assert.equal(login.body.jwt_token, undefined)
    const setup = await h.call('POST', '/authsvc/api/mfa/setup', { body: { mfa_temp_token: login.body.mfa_temp_token } })
    assert.equal(setup.status, 200)
    const done = await h.call('POST', '/authsvc/api/mfa/verify-setup', { body: { mfa_temp_token: login.body.mfa_temp_token, code: totpAt(setup.body.secret, h.clock()) } })
    assert.equal(done.status, 200, JSON.stringify(done.body))
    assert.ok(done.body.jwt_token)
    assert.match(String(done.headers['set-cookie']), /jwt_token=/)
  })

  it('generate_token with MFA: password alone asks for the code; password + code, or temp token + code, gives the token', async () => {
    const { secret } = await enrol(h, admin)
    const ask = await h.call('POST', '/authsvc/generate_token', { body: { username: 'admin', password: PASSWORD } })
    assert.equal(ask.status, 200)
    assert.equal(ask.body.mfa_required, true)
    assert.equal(ask.body.token, undefined)
    h.clock.advance(30_000)
    const direct = await h.call('POST', '/authsvc/generate_token', { body: { username: 'admin', password: PASSWORD, code: totpAt(secret, h.clock()) } })
    assert.match(direct.body.token, /^ast_/)
    h.clock.advance(30_000)
    const viaTemp = await h.call('POST', '/authsvc/generate_token', { body: { mfa_temp_token: ask.body.mfa_temp_token, code: totpAt(secret, h.clock()) } })
    assert.match(viaTemp.body.token, /^ast_/)
  })

  it('recovery: loopback with RECOVERY_MODE resets MFA for all users; remote refused', async () => {
    await enrol(h, admin)
    const remote = await h.call('POST', '/api/authsvc/recovery/reset-mfa', { peer: '203.0.113.7' })
    assert.equal(remote.status, 403)
    assert.equal(remote.body.code, 'RECOVERY_DISABLED')
    const local = await h.call('POST', '/api/authsvc/recovery/reset-mfa')
    assert.equal(local.status, 200)
    assert.equal(local.body.message, 'MFA reset for 1 user(s).')
    assert.ok((await passwordLogin(h, 'admin')).body.jwt_token)
  })

  it('the sqlite file holds no TOTP secret and no backup code in clear', async () => {
    const { secret, backup } = await enrol(h, admin)
    await h.services.flush()
    let raw = readFileSync(join(h.dir, 'authsvc.sqlite')).toString('latin1')
    if (existsSync(join(h.dir, 'authsvc.sqlite-wal'))) raw += readFileSync(join(h.dir, 'authsvc.sqlite-wal')).toString('latin1')
    assert.ok(raw.includes('admin'))
    assert.equal(raw.includes(secret), false, 'TOTP secret in clear')
    for (const code of backup) assert.equal(raw.includes(code), false, 'backup code in clear')
  })
})

describe('recovery without RECOVERY_MODE', () => {
  it('answers 403 RECOVERY_DISABLED even from loopback', async () => {
    const h = await openHarness()
    try {
      const res = await h.call('POST', '/api/authsvc/recovery/reset-mfa')
      assert.equal(res.status, 403)
      assert.equal(res.body.code, 'RECOVERY_DISABLED')
    } finally {
      await h.close()
    }
  })
})

describe('encryption_level all', () => {
  it('every stored value is sealed, and reopening reads it back', async () => {
    const h = await openHarness({ config: { store: { encryption_level: 'all' } } })
    const dir = h.dir
    const session = await registerAndLogin(h, 'sealed-admin')
    await h.services.flush()
    const raw = readFileSync(join(dir, 'authsvc.sqlite')).toString('latin1') + (existsSync(join(dir, 'authsvc.sqlite-wal')) ? readFileSync(join(dir, 'authsvc.sqlite-wal')).toString('latin1') : '')
    assert.equal(raw.includes('sealed-admin'), false, 'username readable in the file')
    assert.equal(raw.includes('argon2id'), false, 'password hash readable in the file')
    await h.app.close()
    await h.services.close()
    const again = await openHarness({ config: { store: { encryption_level: 'all' } }, dir, clock: h.clock })
    try {
      assert.equal((await again.call('GET', '/authsvc/api/me', { headers: bearer(session) })).body.username, 'sealed-admin')
    } finally {
      await again.close()
    }
  })
})
