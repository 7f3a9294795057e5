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

/** Enrols through the routes with `credential`: a session JWT, or a setup-purpose temp token; returns the code verify-setup accepted. */
async function enrol(h: Harness, credential: string, via: 'session' | 'setup-temp' = 'session'): Promise<{ secret: string; backup: string[]; code: string; jwt?: string }> {
  const auth = via === 'session' ? { headers: bearer(credential), body: {} } : { body: { mfa_temp_token: credential } }
  const setup = await h.call('POST', '/authsvc/api/mfa/setup', auth)
  assert.equal(setup.status, 200, JSON.stringify(setup.body))
  assert.equal(setup.headers['cache-control'], 'no-store', 'the TOTP secret and backup codes are kept by no cache')
  assert.match(setup.body.provisioning_uri, /^otpauth:\/\/totp\//)
  assert.match(setup.body.qr_svg, /^<svg/)
  assert.equal(setup.body.backup_codes.length, 10)
  const code = totpAt(setup.body.secret, h.clock())
  const ok = await h.call('POST', '/authsvc/api/mfa/verify-setup', { ...auth, body: { ...auth.body, code } })
  assert.equal(ok.status, 200, JSON.stringify(ok.body))
  assert.equal(ok.body.message, 'MFA enabled')
  return { secret: setup.body.secret, backup: setup.body.backup_codes, code, jwt: ok.body.jwt_token }
}

/** A six-digit code that is none of the codes `secret` accepts around now (±1 step). */
function wrongCode(secret: string, now: number): string {
  const window = [-1, 0, 1].map((step) => totpAt(secret, now, step))
  return ['000000', '111111', '222222', '333333'].find((c) => !window.includes(c))!
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
    assert.equal(older.body.code, 'MFA_INVALID_CODE')
    const next = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: t2, code: totpAt(secret, h.clock(), 1) } })
    assert.equal(next.status, 200, 'the next step (within the ±1 window) still works')
  })

  it('the code verify-setup accepted is refused at /verify within the same step', async () => {
    const { secret, code } = await enrol(h, admin)
    const temp = (await passwordLogin(h, 'admin')).body.mfa_temp_token
    assert.equal(totpAt(secret, h.clock()), code, 'still the step of the enrolment')
    const replay = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: temp, code } })
    assert.equal(replay.status, 401)
    assert.equal(replay.body.code, 'MFA_INVALID_CODE')
    const next = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: temp, code: totpAt(secret, h.clock(), 1) } })
    assert.equal(next.status, 200, 'the temp token was live and the secret right: only the replayed code was refused')
  })

  it('two parallel /verify calls with the same code on two temp tokens: exactly one succeeds', async () => {
    const { secret } = await enrol(h, admin)
    h.clock.advance(30_000)
    const code = totpAt(secret, h.clock())
    const t1 = (await passwordLogin(h, 'admin')).body.mfa_temp_token
    const t2 = (await passwordLogin(h, 'admin')).body.mfa_temp_token
    const answers = await Promise.all([t1, t2].map((t) => h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: t, code } })))
    assert.deepEqual(answers.map((a) => a.status).sort(), [200, 401], JSON.stringify(answers.map((a) => a.body)))
    const refused = answers.find((a) => a.status === 401)!
    assert.equal(refused.body.code, 'MFA_INVALID_CODE')
    assert.equal(refused.body.jwt_token, undefined)
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
    // Each row gets its own enrolled user (and its own loopback address), so no row is
    // throttled by another's failures. `valid` is a fresh current code that /verify would
    // accept: rows that send it fail for the credential alone. After every row the same
    // `valid` code still logs in, so the row spent no code and replaced no secret.
    const groups = (await h.call('GET', '/authsvc/api/groups', { headers: bearer(admin) })).body.groups
    groups.enrolling = { ...groups.user, mfa_required: true }
    assert.equal((await h.call('PUT', '/authsvc/api/groups', { headers: bearer(admin), body: { groups } })).status, 200)

    interface Victim {
      username: string
      /** a current code, newer than any accepted one */
      valid: string
      wrong: string
      /** the code verify-setup accepted (an already spent step, still inside the ±1 window) */
      spent: string
      /** a login-purpose temp token: the password was right, no code given yet */
      loginTemp: string
      /** a session from before enrolment: signed in, but it never saw a code */
      session: string
      /** an API token made with the password alone, before enrolment */
      apiToken: string
      /** a setup-purpose temp token issued before enrolment (role with mfa_required), still within its 300 s */
      staleSetupTemp: string
    }
    type Who = 'enrolled-from-session' | 'enrolled-by-role'
    interface Row {
      name: string
      who: Who
      route: 'setup' | 'verify-setup' | 'disable' | 'verify'
      request: (v: Victim) => { body: Record<string, unknown>; headers?: Record<string, string> }
      status: number
      code: string
    }
    const cookie = (t: string) => ({ cookie: `jwt_token=${t}` })
    const rows: Row[] = [
      // the login-purpose temp token, which the password alone yields
      { name: 'setup with a login temp token', who: 'enrolled-from-session', route: 'setup', request: (v) => ({ body: { mfa_temp_token: v.loginTemp } }), status: 401, code: 'MFA_TOKEN_INVALID' },
      { name: 'setup with a login temp token and a valid code', who: 'enrolled-from-session', route: 'setup', request: (v) => ({ body: { mfa_temp_token: v.loginTemp, code: v.valid } }), status: 401, code: 'MFA_TOKEN_INVALID' },
      { name: 'verify-setup with a login temp token and a valid code', who: 'enrolled-from-session', route: 'verify-setup', request: (v) => ({ body: { mfa_temp_token: v.loginTemp, code: v.valid } }), status: 401, code: 'MFA_TOKEN_INVALID' },
      { name: 'disable with a login temp token and a valid code', who: 'enrolled-from-session', route: 'disable', request: (v) => ({ body: { mfa_temp_token: v.loginTemp, code: v.valid } }), status: 401, code: 'AUTH_REQUIRED' },
      { name: 'setup with the login temp token as bearer and a valid code', who: 'enrolled-from-session', route: 'setup', request: (v) => ({ body: { code: v.valid }, headers: bearer(v.loginTemp) }), status: 401, code: 'TOKEN_INVALID' },
      { name: 'verify-setup with the login temp token as bearer and a valid code', who: 'enrolled-from-session', route: 'verify-setup', request: (v) => ({ body: { code: v.valid }, headers: bearer(v.loginTemp) }), status: 401, code: 'TOKEN_INVALID' },
      { name: 'disable with the login temp token as bearer and a valid code', who: 'enrolled-from-session', route: 'disable', request: (v) => ({ body: { code: v.valid }, headers: bearer(v.loginTemp) }), status: 401, code: 'TOKEN_INVALID' },
      { name: 'disable with the login temp token as cookie and a valid code', who: 'enrolled-from-session', route: 'disable', request: (v) => ({ body: { code: v.valid }, headers: cookie(v.loginTemp) }), status: 401, code: 'TOKEN_INVALID' },
      // the password itself offered as the credential
      { name: 'setup with username + password and a valid code', who: 'enrolled-from-session', route: 'setup', request: (v) => ({ body: { username: v.username, password: PASSWORD, code: v.valid } }), status: 401, code: 'AUTH_REQUIRED' },
      { name: 'verify-setup with username + password and a valid code', who: 'enrolled-from-session', route: 'verify-setup', request: (v) => ({ body: { username: v.username, password: PASSWORD, code: v.valid } }), status: 401, code: 'AUTH_REQUIRED' },
      { name: 'disable with username + password and a valid code', who: 'enrolled-from-session', route: 'disable', request: (v) => ({ body: { username: v.username, password: PASSWORD, code: v.valid } }), status: 401, code: 'AUTH_REQUIRED' },
      // an API token made with the password before enrolment
      { name: 'setup with a pre-enrolment API token and a valid code', who: 'enrolled-from-session', route: 'setup', request: (v) => ({ body: { code: v.valid }, headers: bearer(v.apiToken) }), status: 401, code: 'AUTH_REQUIRED' },
      { name: 'verify-setup with a pre-enrolment API token and a valid code', who: 'enrolled-from-session', route: 'verify-setup', request: (v) => ({ body: { code: v.valid }, headers: bearer(v.apiToken) }), status: 401, code: 'AUTH_REQUIRED' },
      { name: 'disable with a pre-enrolment API token and a valid code', who: 'enrolled-from-session', route: 'disable', request: (v) => ({ body: { code: v.valid }, headers: bearer(v.apiToken) }), status: 403, code: 'PERMISSION_DENIED' },
      // a session signed in before enrolment, without a current code
      { name: 'setup with a session, no code', who: 'enrolled-from-session', route: 'setup', request: (v) => ({ body: {}, headers: bearer(v.session) }), status: 401, code: 'MFA_REQUIRED' },
      { name: 'setup with a session, wrong code', who: 'enrolled-from-session', route: 'setup', request: (v) => ({ body: { code: v.wrong }, headers: bearer(v.session) }), status: 401, code: 'MFA_INVALID_CODE' },
      { name: 'setup with a session, the spent enrolment code', who: 'enrolled-from-session', route: 'setup', request: (v) => ({ body: { code: v.spent }, headers: bearer(v.session) }), status: 401, code: 'MFA_INVALID_CODE' },
      { name: 'setup with a session, a made-up backup code', who: 'enrolled-from-session', route: 'setup', request: (v) => ({ body: { backup_code: 'ABCDEFGHJK' }, headers: bearer(v.session) }), status: 401, code: 'MFA_INVALID_CODE' },
      { name: 'verify-setup with a session, nothing pending, a valid code', who: 'enrolled-from-session', route: 'verify-setup', request: (v) => ({ body: { code: v.valid }, headers: bearer(v.session) }), status: 401, code: 'MFA_INVALID_CODE' },
      { name: 'disable with a session, no code', who: 'enrolled-from-session', route: 'disable', request: (v) => ({ body: {}, headers: bearer(v.session) }), status: 401, code: 'MFA_REQUIRED' },
      { name: 'disable with a session, wrong code', who: 'enrolled-from-session', route: 'disable', request: (v) => ({ body: { code: v.wrong }, headers: bearer(v.session) }), status: 401, code: 'MFA_INVALID_CODE' },
      { name: 'disable with a session, the spent enrolment code', who: 'enrolled-from-session', route: 'disable', request: (v) => ({ body: { code: v.spent }, headers: bearer(v.session) }), status: 401, code: 'MFA_INVALID_CODE' },
      // a setup-purpose temp token issued before enrolment, used after it
      // (a setup token exists only for a user without MFA: once enrolled it is spent, code or not)
      { name: 'setup with a stale setup temp token, no code', who: 'enrolled-by-role', route: 'setup', request: (v) => ({ body: { mfa_temp_token: v.staleSetupTemp } }), status: 401, code: 'MFA_TOKEN_INVALID' },
      { name: 'setup with a stale setup temp token, wrong code', who: 'enrolled-by-role', route: 'setup', request: (v) => ({ body: { mfa_temp_token: v.staleSetupTemp, code: v.wrong } }), status: 401, code: 'MFA_TOKEN_INVALID' },
      { name: 'setup with a stale setup temp token and a valid code', who: 'enrolled-by-role', route: 'setup', request: (v) => ({ body: { mfa_temp_token: v.staleSetupTemp, code: v.valid } }), status: 401, code: 'MFA_TOKEN_INVALID' },
      { name: 'verify-setup with a stale setup temp token, nothing pending, a valid code', who: 'enrolled-by-role', route: 'verify-setup', request: (v) => ({ body: { mfa_temp_token: v.staleSetupTemp, code: v.valid } }), status: 401, code: 'MFA_TOKEN_INVALID' },
      { name: 'disable with a stale setup temp token and a valid code', who: 'enrolled-by-role', route: 'disable', request: (v) => ({ body: { mfa_temp_token: v.staleSetupTemp, code: v.valid } }), status: 401, code: 'AUTH_REQUIRED' },
      { name: 'disable with a stale setup temp token as bearer and a valid code', who: 'enrolled-by-role', route: 'disable', request: (v) => ({ body: { code: v.valid }, headers: bearer(v.staleSetupTemp) }), status: 401, code: 'TOKEN_INVALID' },
      { name: 'verify (login) with a stale setup temp token and a valid code', who: 'enrolled-by-role', route: 'verify', request: (v) => ({ body: { mfa_temp_token: v.staleSetupTemp, code: v.valid } }), status: 401, code: 'MFA_TOKEN_INVALID' },
    ]

    let serial = 0
    const victim = async (who: Who, peer: string): Promise<Victim & { secret: string }> => {
      const username = `victim${++serial}`
      const role = who === 'enrolled-by-role' ? 'enrolling' : 'user'
      assert.equal((await h.call('POST', '/register', { headers: bearer(admin), body: { username, password: PASSWORD, role } })).status, 201)
      const login = () => h.call('POST', '/login', { body: { username, password: PASSWORD }, peer })
      let session = ''
      let apiToken = ''
      let staleSetupTemp = ''
      let enrolled: Awaited<ReturnType<typeof enrol>>
      if (who === 'enrolled-from-session') {
        session = (await login()).body.jwt_token
        apiToken = (await h.call('POST', '/authsvc/generate_token', { body: { username, password: PASSWORD }, peer })).body.token
        assert.ok(session && apiToken)
        enrolled = await enrol(h, session)
      } else {
        const first = (await login()).body
        const second = (await login()).body
        assert.equal(first.mfa_setup_required, true)
        assert.equal(second.mfa_setup_required, true)
        staleSetupTemp = second.mfa_temp_token
        enrolled = await enrol(h, first.mfa_temp_token, 'setup-temp')
        assert.ok(enrolled.jwt, 'enrolment through the setup temp token ends in a session')
      }
      h.clock.advance(30_000)
      const loginTemp = (await login()).body
      assert.equal(loginTemp.mfa_required, true)
      const valid = totpAt(enrolled.secret, h.clock())
      return { username, secret: enrolled.secret, valid, wrong: wrongCode(enrolled.secret, h.clock()), spent: enrolled.code, loginTemp: loginTemp.mfa_temp_token, session, apiToken, staleSetupTemp }
    }

    const failures: string[] = []
    for (const prefix of ['/authsvc', '/api/authsvc']) {
      for (const row of rows) {
        const peer = `127.0.0.${(serial % 250) + 2}`
        const v = await victim(row.who, peer)
        const res = await h.call('POST', `${prefix}/api/mfa/${row.route}`, { ...row.request(v), peer })
        if (res.status !== row.status || res.body.code !== row.code) {
          failures.push(`${prefix} ${row.name}: ${res.status} ${res.body.code ?? JSON.stringify(res.body).slice(0, 80)} (want ${row.status} ${row.code})`)
        }
        // the original secret still logs in, with the very code the row sent
        const temp = (await h.call('POST', '/login', { body: { username: v.username, password: PASSWORD }, peer })).body.mfa_temp_token
        const proof = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: temp, code: v.valid }, peer })
        if (proof.status !== 200) {
          failures.push(`${prefix} ${row.name}: afterwards the original secret's current code no longer logs in: ${proof.status} ${proof.body.code}`)
          continue
        }
        const me = await h.call('GET', '/authsvc/api/me', { headers: bearer(proof.body.jwt_token) })
        if (me.body.mfa_enabled !== true) failures.push(`${prefix} ${row.name}: MFA no longer enabled`)
      }
    }
    assert.deepEqual(failures, [])
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
    h.clock.advance(30_000)
    const issued = h.clock()
    const early = (await passwordLogin(h, 'admin')).body.mfa_temp_token
    const late = (await passwordLogin(h, 'admin')).body.mfa_temp_token
    h.clock.advance(299_000)
    const at299 = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: early, code: totpAt(secret, h.clock()) } })
    assert.equal(at299.status, 200, `still accepted at +299 s: ${JSON.stringify(at299.body)}`)
    h.clock.advance(1_000)
    assert.equal(h.clock() - issued, 300_000)
    const fresh = totpAt(secret, h.clock())
    assert.notEqual(Math.floor(h.clock() / 30_000), Math.floor((h.clock() - 1_000) / 30_000), 'a newer step than the one just accepted')
    const at300 = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: late, code: fresh } })
    assert.equal(at300.status, 401, 'refused at +300 s')
    assert.equal(at300.body.code, 'MFA_TOKEN_INVALID')
    const control = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: (await passwordLogin(h, 'admin')).body.mfa_temp_token, code: fresh } })
    assert.equal(control.status, 200, 'the code sent at +300 s was good: only the token had expired')

    h.clock.advance(30_000)
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
    const decide = await h.services.resolver.resolve({ authorization: `Bearer ${temp}` }, new URLSearchParams(), { ip: '127.0.0.1', addresses: ['127.0.0.1'], isLocal: true, isHttps: false, isNavigation: false })
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

  it('attack table: a password changed after the password step ends the temp tokens that step issued (setup and login, every route that takes one)', async () => {
    const { secret } = await enrol(h, admin)
    const groups = (await h.call('GET', '/authsvc/api/groups', { headers: bearer(admin) })).body.groups
    groups.user.mfa_required = true
    assert.equal((await h.call('PUT', '/authsvc/api/groups', { headers: bearer(admin), body: { groups } })).status, 200)
    assert.equal((await h.call('POST', '/register', { headers: bearer(admin), body: { username: 'victim', password: PASSWORD } })).status, 201)
    let victimPassword = PASSWORD
    const NEW = ['brand-new-password-1', 'brand-new-password-2', 'brand-new-password-3']
    const adminReset = async () => {
      victimPassword = NEW.shift()!
      assert.equal((await h.call('PUT', '/authsvc/api/users/victim', { headers: bearer(admin), body: { password: victimPassword } })).status, 200)
    }
    const victimStep = async () => (await h.call('POST', '/login', { body: { username: 'victim', password: victimPassword } })).body.mfa_temp_token as string
    const refused = (res: { status: number; body: any }, what: string) => {
      assert.equal(res.status, 401, `${what}: ${JSON.stringify(res.body)}`)
      assert.equal(res.body.code, 'MFA_TOKEN_INVALID', what)
    }
    // setup-purpose: the attacker knew the password; the admin resets it before enrolment starts
    const setupTemp = await victimStep()
    await adminReset()
    refused(await h.call('POST', '/authsvc/api/mfa/setup', { body: { mfa_temp_token: setupTemp } }), 'setup after the reset')
    // and after enrolment started (the attacker already holds the secret) but before it is verified
    const started = await victimStep()
    const setup = await h.call('POST', '/authsvc/api/mfa/setup', { body: { mfa_temp_token: started } })
    assert.equal(setup.status, 200, JSON.stringify(setup.body))
    await adminReset()
    refused(await h.call('POST', '/authsvc/api/mfa/verify-setup', { body: { mfa_temp_token: started, code: totpAt(setup.body.secret, h.clock()) } }), 'verify-setup after the reset')
    assert.equal((await h.call('POST', '/login', { body: { username: 'victim', password: victimPassword } })).body.mfa_setup_required, true, 'the victim is still not enrolled with the attacker\'s secret')
    // the control: with no reset, the same steps end in a session
    const control = await enrol(h, await victimStep(), 'setup-temp')
    assert.ok(control.jwt, 'the setup token works when the password did not change')

    // login-purpose, on the admin's own account: a self change of the password
    h.clock.advance(30_000)
    const loginTemp = (await passwordLogin(h, 'admin')).body.mfa_temp_token
    const tokenTemp = (await h.call('POST', '/authsvc/generate_token', { body: { username: 'admin', password: PASSWORD } })).body.mfa_temp_token
    const changed = await h.call('POST', '/authsvc/api/me/password', { headers: bearer(admin), body: { current_password: PASSWORD, new_password: 'admin-new-password-9' } })
    assert.equal(changed.status, 200, JSON.stringify(changed.body))
    refused(await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: loginTemp, code: totpAt(secret, h.clock()) } }), '/mfa/verify after the change')
    refused(await h.call('POST', '/authsvc/generate_token', { body: { mfa_temp_token: tokenTemp, code: totpAt(secret, h.clock()) } }), 'generate_token after the change')
    // the new password's step works
    const fresh = (await h.call('POST', '/login', { body: { username: 'admin', password: 'admin-new-password-9' } })).body.mfa_temp_token
    const ok = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: fresh, code: totpAt(secret, h.clock()) } })
    assert.equal(ok.status, 200, JSON.stringify(ok.body))
  })

  it('attack table: the MFA steps that sign a browser in refuse another site\'s page (login CSRF into the page\'s own account)', async () => {
    const { secret } = await enrol(h, admin)
    const foreign: Array<Record<string, string>> = [{ 'sec-fetch-site': 'cross-site', origin: 'https://evil.example' }, { 'sec-fetch-site': 'same-site' }, { origin: 'null' }]
    for (const headers of foreign) {
      h.clock.advance(30_000)
      const temp = (await passwordLogin(h, 'admin')).body.mfa_temp_token
      const res = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: temp, code: totpAt(secret, h.clock()) }, headers })
      assert.equal(res.status, 403, JSON.stringify(headers))
      assert.equal(res.body.code, 'CSRF_REJECTED')
      assert.equal(res.headers['set-cookie'], undefined)
    }
    // verify-setup with a setup token signs in too
    const groups = (await h.call('GET', '/authsvc/api/groups', { headers: bearer(admin) })).body.groups
    groups.user.mfa_required = true
    assert.equal((await h.call('PUT', '/authsvc/api/groups', { headers: bearer(admin), body: { groups } })).status, 200)
    assert.equal((await h.call('POST', '/register', { headers: bearer(admin), body: { username: 'mallory', password: PASSWORD } })).status, 201)
    const setupTemp = (await passwordLogin(h, 'mallory')).body.mfa_temp_token
    const setup = await h.call('POST', '/authsvc/api/mfa/setup', { body: { mfa_temp_token: setupTemp } })
    const done = await h.call('POST', '/authsvc/api/mfa/verify-setup', { body: { mfa_temp_token: setupTemp, code: totpAt(setup.body.secret, h.clock()) }, headers: { 'sec-fetch-site': 'cross-site' } })
    assert.equal(done.status, 403)
    assert.equal(done.body.code, 'CSRF_REJECTED')
    // our own page signs in (the password step taken by the same browser: its step cookie)
    h.clock.advance(30_000)
    const page = { 'sec-fetch-site': 'same-origin', origin: 'http://127.0.0.1:8188' }
    const step = await h.call('POST', '/login', { body: { username: 'admin', password: PASSWORD }, headers: page })
    const cookie = ([] as string[]).concat(step.headers['set-cookie'] as string[]).find((l) => l.startsWith('authsvc_mfa_step='))!.split(';')[0]
    const own = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: step.body.mfa_temp_token, code: totpAt(secret, h.clock()) }, headers: { ...page, cookie } })
    assert.equal(own.status, 200, JSON.stringify(own.body))
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
    await registerAndLogin(h, 'bob', { admin })
    await registerAndLogin(h, 'carol', { admin })
    h.clock.advance(30_000)
    await enrol(h, (await passwordLogin(h, 'bob')).body.jwt_token)
    for (const name of ['admin', 'bob']) assert.equal((await passwordLogin(h, name)).body.mfa_required, true, `${name} enrolled`)
    assert.ok((await passwordLogin(h, 'carol')).body.jwt_token, 'carol never enrolled')

    const remote = await h.call('POST', '/api/authsvc/recovery/reset-mfa', { peer: '203.0.113.7' })
    assert.equal(remote.status, 403)
    assert.equal(remote.body.code, 'RECOVERY_DISABLED')
    assert.equal((await passwordLogin(h, 'bob')).body.mfa_required, true, 'the remote call reset nothing')

    const local = await h.call('POST', '/api/authsvc/recovery/reset-mfa')
    assert.equal(local.status, 200)
    assert.equal(local.body.message, 'MFA reset for 2 user(s).', 'counts the enrolled users only')
    for (const name of ['admin', 'bob', 'carol']) {
      const login = await passwordLogin(h, name)
      assert.equal(login.status, 200)
      assert.equal(login.body.mfa_required, undefined, `${name}: no code asked`)
      assert.ok(login.body.jwt_token, `${name} logs in with the password alone`)
      assert.equal((await h.call('GET', '/authsvc/api/me', { headers: bearer(login.body.jwt_token) })).body.mfa_enabled, false)
    }
    assert.equal((await h.call('POST', '/api/authsvc/recovery/reset-mfa')).body.message, 'MFA reset for 0 user(s).')
  })

  it('an admin mfa_reset, and deleting a user, remove the sealed secret and backup codes from the store', async () => {
    const stored = async () => (await h.services.kv.entries<unknown>('mfa')).map(([key]) => key).sort()
    const ids: Record<string, string> = {}
    for (const name of ['bob', 'carol']) {
      const jwt = await registerAndLogin(h, name, { admin })
      ids[name] = (await h.call('GET', '/authsvc/api/me', { headers: bearer(jwt) })).body.user_id
      await enrol(h, jwt)
    }
    await h.services.flush()
    assert.deepEqual(await stored(), [`mfa:${ids.bob}`, `mfa:${ids.carol}`].sort())

    const reset = await h.call('PUT', '/authsvc/api/users/bob', { headers: bearer(admin), body: { mfa_reset: true } })
    assert.equal(reset.status, 200, JSON.stringify(reset.body))
    assert.equal(reset.body.user.mfa_enabled, false)
    const removed = await h.call('DELETE', '/authsvc/api/users/carol', { headers: bearer(admin) })
    assert.equal(removed.status, 200)
    await h.services.flush()
    assert.deepEqual(await stored(), [], 'no secret of bob (reset) or carol (deleted) is left')
    const bob = await passwordLogin(h, 'bob')
    assert.ok(bob.body.jwt_token, 'bob signs in with the password alone')
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

describe('the second step belongs to the browser that took the first (login CSRF through our own /mfa page)', () => {
  let h: Harness
  let admin: string
  let secret: string
  beforeEach(async () => {
    h = await openHarness()
    admin = await registerAndLogin(h, 'admin')
    secret = (await enrol(h, admin)).secret
    const groups = (await h.call('GET', '/authsvc/api/groups', { headers: bearer(admin) })).body.groups
    groups.enrolling = { ...groups.user, mfa_required: true }
    assert.equal((await h.call('PUT', '/authsvc/api/groups', { headers: bearer(admin), body: { groups } })).status, 200)
    assert.equal((await h.call('POST', '/register', { headers: bearer(admin), body: { username: 'mallory', password: PASSWORD, role: 'enrolling' } })).status, 201)
    h.clock.advance(30_000)
  })
  afterEach(async () => {
    await h.close()
  })

  // what our own pages send (a fetch from this origin), and a browser without Sec-Fetch-Site (Origin only)
  const PAGE = { 'sec-fetch-site': 'same-origin', origin: 'http://127.0.0.1:8188', host: '127.0.0.1:8188' }
  const OLD_BROWSER = { origin: 'http://127.0.0.1:8188', host: '127.0.0.1:8188' }
  const stepCookie = (res: { headers: Record<string, unknown> }): string | undefined => {
    const lines = ([] as string[]).concat((res.headers['set-cookie'] as string | string[] | undefined) ?? [])
    const line = lines.find((l) => l.startsWith('authsvc_mfa_step='))
    return line?.split(';')[0]
  }
  const passwordStep = async (username: string, headers: Record<string, string>) => {
    const res = await h.call('POST', '/login', { body: { username, password: PASSWORD }, headers })
    assert.equal(res.status, 200, JSON.stringify(res.body))
    return { temp: res.body.mfa_temp_token as string, cookie: stepCookie(res) }
  }

  it('a browser gets the step cookie with its temp token (HttpOnly, SameSite=Strict, the token\'s life); a script gets none', async () => {
    const browser = await h.call('POST', '/login', { body: { username: 'admin', password: PASSWORD }, headers: PAGE })
    const line = ([] as string[]).concat(browser.headers['set-cookie'] as string[]).find((l) => l.startsWith('authsvc_mfa_step='))!
    assert.match(line, /HttpOnly/)
    assert.match(line, /SameSite=Strict/)
    assert.match(line, /Max-Age=300/)
    assert.match(line, /Path=\//)
    assert.equal(stepCookie(await h.call('POST', '/login', { body: { username: 'admin', password: PASSWORD } })), undefined)
    const https = await h.call('POST', '/login', { body: { username: 'admin', password: PASSWORD }, headers: { ...PAGE, 'x-forwarded-proto': 'https', origin: 'https://127.0.0.1:8188' } })
    assert.equal(https.status, 200, JSON.stringify(https.body))
  })

  it('the browser that took the password step finishes it (verify and setup), and its step cookie goes', async () => {
    for (const headers of [PAGE, OLD_BROWSER]) {
      const { temp, cookie } = await passwordStep('admin', headers)
      assert.ok(cookie, 'a step cookie')
      h.clock.advance(30_000)
      const res = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: temp, code: totpAt(secret, h.clock()) }, headers: { ...headers, cookie: cookie! } })
      assert.equal(res.status, 200, JSON.stringify(res.body))
      assert.match(String(res.headers['set-cookie']), /authsvc_mfa_step=;/, 'cleared')
    }
    const { temp, cookie } = await passwordStep('mallory', PAGE)
    const setup = await h.call('POST', '/authsvc/api/mfa/setup', { body: { mfa_temp_token: temp }, headers: { ...PAGE, cookie: cookie! } })
    assert.equal(setup.status, 200, JSON.stringify(setup.body))
    const done = await h.call('POST', '/authsvc/api/mfa/verify-setup', { body: { mfa_temp_token: temp, code: totpAt(setup.body.secret, h.clock()) }, headers: { ...PAGE, cookie: cookie! } })
    assert.equal(done.status, 200, JSON.stringify(done.body))
    assert.ok(done.body.jwt_token)
  })

  it('a script finishes a step a script began (no browser headers, no cookie)', async () => {
    const { temp, cookie } = await passwordStep('admin', {})
    assert.equal(cookie, undefined)
    const res = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: temp, code: totpAt(secret, h.clock()) } })
    assert.equal(res.status, 200, JSON.stringify(res.body))
    const token = await h.call('POST', '/authsvc/generate_token', { body: { username: 'admin', password: PASSWORD } })
    h.clock.advance(30_000)
    const made = await h.call('POST', '/authsvc/generate_token', { body: { mfa_temp_token: token.body.mfa_temp_token, code: totpAt(secret, h.clock()) } })
    assert.equal(made.status, 200, JSON.stringify(made.body))
  })

  // the attacker (mallory) takes the password step of her own account and hands the temp token to
  // the victim's browser (another site's page sends it to /mfa#setup:<token>); the victim's browser
  // holds no step cookie of that token, or its own step cookie of another one
  interface Attack {
    name: string
    /** how mallory took the step: a script, or her own browser */
    took: Record<string, string>
    /** the victim's browser: what it sends with the token */
    sends: (ownCookie: string) => Record<string, string>
  }
  const ATTACKS: Attack[] = [
    { name: 'a token a script got, used by a browser (our page)', took: {}, sends: () => PAGE },
    { name: 'a token a script got, used by a browser without Sec-Fetch-Site (Origin only)', took: {}, sends: () => OLD_BROWSER },
    { name: 'a token her own browser got, used by the victim\'s browser (no step cookie)', took: PAGE, sends: () => PAGE },
    { name: 'a token her own browser got, used by the victim\'s browser holding a step cookie of its own', took: PAGE, sends: (own) => ({ ...PAGE, cookie: own }) },
    { name: 'a step cookie with another value', took: PAGE, sends: () => ({ ...PAGE, cookie: 'authsvc_mfa_step=AAAA' }) },
    { name: 'an empty step cookie', took: PAGE, sends: () => ({ ...PAGE, cookie: 'authsvc_mfa_step=' }) },
  ]
  for (const attack of ATTACKS) {
    it(`refused, nothing enrolled, no session: ${attack.name}`, async () => {
      // the victim's own browser took a password step of its own account earlier: its own step cookie
      const own = (await passwordStep('admin', PAGE)).cookie!
      const { temp } = await passwordStep('mallory', attack.took)
      const headers = attack.sends(own)
      const setup = await h.call('POST', '/authsvc/api/mfa/setup', { body: { mfa_temp_token: temp }, headers })
      assert.equal(setup.status, 401, JSON.stringify(setup.body))
      assert.equal(setup.body.code, 'MFA_TOKEN_INVALID')
      const finish = await h.call('POST', '/authsvc/api/mfa/verify-setup', { body: { mfa_temp_token: temp, code: '123456' }, headers })
      assert.equal(finish.status, 401, JSON.stringify(finish.body))
      assert.equal(finish.body.code, 'MFA_TOKEN_INVALID')
      assert.doesNotMatch(String(finish.headers['set-cookie'] ?? ''), /jwt_token=[^;]/)
      const mallory = (await h.call('GET', '/authsvc/api/users', { headers: bearer(admin) })).body.users.find((u: { username: string }) => u.username === 'mallory')
      assert.equal(mallory.mfa_enabled, false)
    })
  }

  it('a second sign-in in the same browser keeps the step cookie it has: both steps finish with it', async () => {
    const first = await passwordStep('admin', PAGE)
    const second = await h.call('POST', '/login', { body: { username: 'admin', password: PASSWORD }, headers: { ...PAGE, cookie: first.cookie! } })
    assert.equal(stepCookie(second), first.cookie, 'the same secret again')
    h.clock.advance(30_000)
    const done = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: first.temp, code: totpAt(secret, h.clock()) }, headers: { ...PAGE, cookie: first.cookie! } })
    assert.equal(done.status, 200, JSON.stringify(done.body))
  })

  it('another site\'s form post of some password to generate_token is refused, and voids no step in progress', async () => {
    const mine = await passwordStep('admin', PAGE)
    for (const headers of [{ 'sec-fetch-site': 'cross-site', origin: 'https://evil.example' }, { 'sec-fetch-site': 'same-site', origin: 'http://127.0.0.1:9999' }]) {
      const res = await h.call('POST', '/authsvc/generate_token', { body: { username: 'mallory', password: PASSWORD }, headers: { ...headers, cookie: mine.cookie! } })
      assert.equal(res.status, 403, JSON.stringify(res.body))
      assert.equal(res.body.code, 'CSRF_REJECTED')
      assert.equal(stepCookie(res), undefined)
    }
    h.clock.advance(30_000)
    const done = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: mine.temp, code: totpAt(secret, h.clock()) }, headers: { ...PAGE, cookie: mine.cookie! } })
    assert.equal(done.status, 200, JSON.stringify(done.body))
  })

  it('a browser on HTTPS gets the __Host- cookie even where the service believes it is on HTTP (an untrusted proxy), and a secret never counts under the other name', async () => {
    const https = { 'sec-fetch-site': 'same-origin', origin: 'https://comfy.example', host: 'comfy.example' }
    const res = await h.call('POST', '/login', { body: { username: 'admin', password: PASSWORD }, headers: https })
    const line = ([] as string[]).concat(res.headers['set-cookie'] as string[]).find((l) => l.startsWith('__Host-authsvc_mfa_step='))
    assert.ok(line, JSON.stringify(res.headers['set-cookie']))
    assert.match(line!, /Secure/)
    const value = line!.split(';')[0].slice('__Host-authsvc_mfa_step='.length)
    h.clock.advance(30_000)
    const code = totpAt(secret, h.clock())
    // the same secret under the plain name, from a page on HTTP: refused
    const plain = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: res.body.mfa_temp_token, code }, headers: { ...PAGE, cookie: `authsvc_mfa_step=${value}` } })
    assert.equal(plain.status, 401, JSON.stringify(plain.body))
    const ok = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: res.body.mfa_temp_token, code }, headers: { ...https, cookie: `__Host-authsvc_mfa_step=${value}` } })
    assert.equal(ok.status, 200, JSON.stringify(ok.body))
  })

  it('a planted step cookie sent before the browser\'s own (a longer path is sent first) does not hide it', async () => {
    const mine = await passwordStep('admin', PAGE)
    const res = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: mine.temp, code: totpAt(secret, h.clock()) }, headers: { ...PAGE, cookie: `authsvc_mfa_step=${'A'.repeat(43)}; ${mine.cookie}` } })
    assert.equal(res.status, 200, JSON.stringify(res.body))
  })

  it('generate_token finishing a browser\'s step clears its step cookie', async () => {
    const step = await h.call('POST', '/authsvc/generate_token', { body: { username: 'admin', password: PASSWORD }, headers: PAGE })
    const cookie = stepCookie(step)!
    h.clock.advance(30_000)
    const made = await h.call('POST', '/authsvc/generate_token', { body: { mfa_temp_token: step.body.mfa_temp_token, code: totpAt(secret, h.clock()) }, headers: { ...PAGE, cookie } })
    assert.equal(made.status, 200, JSON.stringify(made.body))
    assert.match(String(made.headers['set-cookie']), /authsvc_mfa_step=;/)
  })

  it('refused the same way on the login step: a token of another browser or of a script, in a browser', async () => {
    const scripted = (await passwordStep('admin', {})).temp
    const other = (await passwordStep('admin', PAGE)).temp
    const mine = (await passwordStep('admin', PAGE)).cookie!
    for (const [what, temp, headers] of [['a script\'s', scripted, PAGE], ['another browser\'s', other, { ...PAGE, cookie: mine }]] as const) {
      const res = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: temp, code: totpAt(secret, h.clock()) }, headers })
      assert.equal(res.status, 401, what)
      assert.equal(res.body.code, 'MFA_TOKEN_INVALID', what)
      const made = await h.call('POST', '/authsvc/generate_token', { body: { mfa_temp_token: temp, code: totpAt(secret, h.clock()) }, headers })
      assert.equal(made.status, 401, what)
    }
  })
})
