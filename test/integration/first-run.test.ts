/**
 * First run and forced MFA (issue 26): registering the first account signs it
 * in (a session cookie, the device kept), unless its role requires MFA, when
 * the answer is the setup step; later registrations by an admin sign nobody
 * in; a forced setup says which role requires it. Real services on a real
 * sqlite file, through inject().
 */
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { DEFAULT_GROUPS } from '../../sidecar/src/access/roles.js'
import { PASSWORD, bearer, openHarness, registerAndLogin } from './harness.js'
import { totpAt } from './totp-reference.js'

const FIREFOX = 'Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0'
const sessionCookie = (setCookie: unknown): string | undefined => {
  const all = Array.isArray(setCookie) ? setCookie : setCookie === undefined ? [] : [String(setCookie)]
  return all.map((c: string) => /^jwt_token=([^;]+)/.exec(c)?.[1]).find((v) => v !== undefined && v !== '')
}

describe('registering the first account', () => {
  it('signs it in: 201 with signed_in, a session cookie that works, the device and address kept, a login event', async () => {
    const h = await openHarness()
    try {
      const logins: Array<Record<string, unknown>> = []
      h.services.events.on('user_login', (r) => { logins.push(r as unknown as Record<string, unknown>) })
      const res = await h.call('POST', '/register', { body: { username: 'first', password: PASSWORD }, headers: { 'user-agent': FIREFOX }, peer: '192.0.2.10' })
      assert.equal(res.status, 201, JSON.stringify(res.body))
      assert.deepEqual(res.body, { message: 'User registered', username: 'first', role: 'admin', signed_in: true })
      const cookie = sessionCookie(res.headers['set-cookie'])
      assert.ok(cookie, 'a session cookie is set')
      const me = await h.call('GET', '/authsvc/api/me', { headers: { cookie: `jwt_token=${cookie}` } })
      assert.equal(me.status, 200)
      assert.deepEqual([me.body.username, me.body.is_admin, me.body.auth_type], ['first', true, 'session'])
      const sessions = (await h.call('GET', '/authsvc/me/sessions', { headers: { cookie: `jwt_token=${cookie}` } })).body.sessions
      assert.deepEqual(sessions.map((s: Record<string, unknown>) => [s.is_current, s.device, s.browser, s.ip]), [[true, 'Desktop', 'Firefox 128', '192.0.2.10']])
      assert.deepEqual(logins.map((e) => [e.actor, e.ip]), [['first', '192.0.2.10']])
    } finally {
      await h.close()
    }
  })

  it('attack table: another site\'s page cannot make the first account (its password would be the page\'s); a script and our own page can', async () => {
    const rows: Array<[string, Record<string, string>]> = [
      ['Sec-Fetch-Site cross-site', { 'sec-fetch-site': 'cross-site' }],
      ['Sec-Fetch-Site same-site', { 'sec-fetch-site': 'same-site' }],
      ['a foreign Origin, no Sec-Fetch-Site', { origin: 'https://evil.example' }],
      ['Origin null', { origin: 'null' }],
      ['cross-site beside our Origin', { 'sec-fetch-site': 'cross-site', origin: 'http://127.0.0.1:8188' }],
    ]
    for (const [label, headers] of rows) {
      const h = await openHarness()
      try {
        const res = await h.call('POST', '/register', { body: { username: 'first', password: PASSWORD }, headers })
        assert.equal(res.status, 403, `${label}: ${JSON.stringify(res.body)}`)
        assert.equal(res.body.code, 'CSRF_REJECTED', label)
        assert.equal(h.services.users.count, 0, `${label}: no account made`)
      } finally {
        await h.close()
      }
    }
    for (const [label, headers, signedIn] of [['a script', {}, true], ['our own page', { 'sec-fetch-site': 'same-origin', origin: 'http://127.0.0.1:8188' }, true]] as const) {
      const h = await openHarness()
      try {
        const res = await h.call('POST', '/register', { body: { username: 'first', password: PASSWORD }, headers })
        assert.equal(res.status, 201, `${label}: ${JSON.stringify(res.body)}`)
        assert.equal(res.body.signed_in, signedIn ? true : undefined, label)
      } finally {
        await h.close()
      }
    }
  })

  it('an admin registering someone else signs nobody in', async () => {
    const h = await openHarness()
    try {
      const admin = await registerAndLogin(h, 'root')
      const res = await h.call('POST', '/register', { body: { username: 'alice', password: PASSWORD }, headers: bearer(admin) })
      assert.deepEqual(res.body, { message: 'User registered', username: 'alice', role: 'user' })
      assert.equal(sessionCookie(res.headers['set-cookie']), undefined)
      assert.equal((await h.services.sessions.activeForUser(h.services.users.byUsername('alice')!.user_id)).length, 0)
    } finally {
      await h.close()
    }
  })

  it('when the admin role requires MFA: the setup step instead of a session, and the setup names the role; finishing it signs in', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'as-first-'))
    writeFileSync(join(dir, 'authsvc_groups.json'), JSON.stringify({ ...DEFAULT_GROUPS, admin: { ...DEFAULT_GROUPS.admin, mfa_required: true } }))
    const h = await openHarness({ dir })
    try {
      const res = await h.call('POST', '/register', { body: { username: 'first', password: PASSWORD } })
      assert.equal(res.status, 201)
      assert.equal(res.body.signed_in, undefined)
      assert.equal(res.body.mfa_setup_required, true)
      assert.equal(sessionCookie(res.headers['set-cookie']), undefined, 'no session before the second factor')
      const temp = res.body.mfa_temp_token as string
      const setup = await h.call('POST', '/authsvc/api/mfa/setup', { body: { mfa_temp_token: temp } })
      assert.equal(setup.status, 200)
      assert.deepEqual([setup.body.username, setup.body.required_by_role, setup.body.backup_codes.length], ['first', 'admin', 10])
      const done = await h.call('POST', '/authsvc/api/mfa/verify-setup', { body: { mfa_temp_token: temp, code: totpAt(setup.body.secret, h.clock()) }, headers: { 'user-agent': FIREFOX } })
      assert.equal(done.status, 200, JSON.stringify(done.body))
      const sessions = (await h.call('GET', '/authsvc/me/sessions', { headers: bearer(done.body.jwt_token) })).body.sessions
      assert.deepEqual(sessions.map((s: Record<string, unknown>) => [s.device, s.browser]), [['Desktop', 'Firefox 128']], 'the MFA step keeps the device too')
    } finally {
      await h.close()
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('a setup begun from a session names no role', async () => {
    const h = await openHarness()
    try {
      const admin = await registerAndLogin(h, 'root')
      const setup = await h.call('POST', '/authsvc/api/mfa/setup', { body: {}, headers: bearer(admin) })
      assert.deepEqual([setup.body.username, setup.body.required_by_role], ['root', null])
    } finally {
      await h.close()
    }
  })
})
