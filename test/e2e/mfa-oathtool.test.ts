/**
 * MFA end to end through the stand-in (real plugin, real sidecar, real HTTP,
 * real clock), with codes made by an independent TOTP implementation:
 * Debian's `oathtool --totp`. Enrol with the current code, log in with the
 * code of the next step, refuse its replay; the mfa_temp_token is never a
 * credential for host routes, on any channel, and never reaches a handler.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { AIOHTTP_VERSIONS, destroyStack, startStack, type Stack } from '../helpers/stack.js'
import { PASSWORD, json, login, register } from '../helpers/client.js'

const OATHTOOL = '/usr/bin/oathtool'

/** The code oathtool computes for `secret` at `unixMs` (SHA-1, 6 digits, 30 s). */
function oathtool(secret: string, unixMs: number): string {
  const out = execFileSync(OATHTOOL, ['--totp', '-b', secret, '-N', `@${Math.floor(unixMs / 1000)}`], { encoding: 'utf8' }).trim()
  assert.match(out, /^\d{6}$/, `oathtool said: ${out}`)
  return out
}

const bearer = (t: string) => ({ Authorization: `Bearer ${t}` })

for (const aiohttp of AIOHTTP_VERSIONS) {
  describe(`MFA with oathtool codes, aiohttp ${aiohttp}`, { concurrency: false }, () => {
    let stack: Stack
    let secret: string

    const api = (path: string, body: unknown, headers: Record<string, string> = {}) =>
      fetch(stack.url + path, { method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json', ...headers }, body: JSON.stringify(body) })
    const passwordLogin = async () => {
      const res = await api('/login', { username: 'alice', password: PASSWORD })
      assert.equal(res.status, 200)
      const setCookie = res.headers.get('set-cookie')
      const body = await json(res)
      return { body, setCookie }
    }

    before(async () => {
      stack = await startStack({ aiohttp })
      assert.equal((await register(stack, 'root')).status, 201)
      const root = (await login(stack, 'root')).jwt
      assert.equal((await register(stack, 'alice', { bearer: root })).status, 201)
    })
    after(async () => {
      await destroyStack(stack)
    })

    it('enrols with the current oathtool code', async () => {
      const session = (await login(stack, 'alice')).jwt
      const setup = await api('/authsvc/api/mfa/setup', {}, bearer(session))
      assert.equal(setup.status, 200)
      const body = await json(setup)
      secret = body.secret
      assert.match(secret, /^[A-Z2-7]+=*$/, 'a base32 secret')
      assert.match(body.provisioning_uri, new RegExp(`^otpauth://totp/.*[?&]secret=${secret}`))
      assert.equal(body.backup_codes.length, 10)

      const me = await json(await fetch(`${stack.url}/authsvc/api/me`, { headers: bearer(session) }))
      assert.equal(me.mfa_enabled, false, 'not on before verify-setup')
      const verify = await api('/authsvc/api/mfa/verify-setup', { code: oathtool(secret, Date.now()) }, bearer(session))
      const answer = await json(verify)
      assert.equal(verify.status, 200, JSON.stringify(answer))
      assert.equal(answer.message, 'MFA enabled')
      const after = await json(await fetch(`${stack.url}/authsvc/api/me`, { headers: bearer(session) }))
      assert.equal(after.mfa_enabled, true)
    })

    it('the mfa_temp_token is no credential for host routes on any channel, and nothing reaches the host', async () => {
      const { body, setCookie } = await passwordLogin()
      assert.equal(body.mfa_required, true)
      assert.equal(body.jwt_token, undefined, 'no session before the code')
      assert.equal(setCookie, null, 'no cookie before the code')
      const temp: string = body.mfa_temp_token
      assert.ok(temp)

      const before = (await stack.counter()).total
      const tries: Array<[string, string, Record<string, string>]> = []
      for (const path of ['/queue', '/object_info', '/api/queue', '/history']) {
        tries.push([`${path} bearer`, path, bearer(temp)])
        tries.push([`${path}?token=`, `${path}?token=${encodeURIComponent(temp)}`, {}])
        tries.push([`${path}?access_token=`, `${path}?access_token=${encodeURIComponent(temp)}`, {}])
        tries.push([`${path} cookie`, path, { Cookie: `jwt_token=${temp}` }])
      }
      for (const [what, path, headers] of tries) {
        const res = await fetch(stack.url + path, { headers: { Accept: 'application/json', ...headers } })
        const text = await res.text()
        assert.equal(res.status, 401, `${what}: ${res.status} ${text.slice(0, 200)}`)
        assert.equal(JSON.parse(text).code, 'TOKEN_INVALID', `${what}: a present but invalid credential never falls back to anonymous`)
      }
      assert.equal((await stack.counter()).total, before, 'no host handler ran')
      // an owned route too (the sidecar logs owned requests with their URL)
      const me = await fetch(`${stack.url}/authsvc/api/me?token=${encodeURIComponent(temp)}`, { headers: { Accept: 'application/json' } })
      assert.equal(me.status, 401)
      assert.equal((await json(me)).code, 'TOKEN_INVALID')
      await new Promise((r) => setTimeout(r, 200)) // let the sidecar's log lines arrive through the host's output
      assert.equal(stack.output().includes(temp), false, 'the temp token (sent in query strings above) is never logged')

      // the token was live all along: it is still good for what it is meant for
      const wrong = oathtool(secret, Date.now()) === '000000' ? '111111' : '000000'
      const probe = await json(await api('/authsvc/api/mfa/verify', { mfa_temp_token: temp, code: wrong }))
      assert.equal(probe.code, 'MFA_INVALID_CODE', 'a live temp token (only the code was wrong)')
    })

    it('logs in with the code of the next step; the session works on /queue; the same code is refused after', async () => {
      const { body } = await passwordLogin()
      assert.equal(body.mfa_required, true)
      // newer than the step used at enrolment, and within the ±1 window
      const code = oathtool(secret, Date.now() + 30_000)
      const verify = await api('/authsvc/api/mfa/verify', { mfa_temp_token: body.mfa_temp_token, code })
      const session = await json(verify)
      assert.equal(verify.status, 200, JSON.stringify(session))
      assert.equal(session.message, 'Login successful')
      assert.ok(session.jwt_token)
      assert.match(verify.headers.get('set-cookie') ?? '', /jwt_token=[^;]+;.*HttpOnly/i)

      const before = (await stack.counter()).total
      const queue = await fetch(`${stack.url}/queue`, { headers: { Accept: 'application/json', ...bearer(session.jwt_token) } })
      assert.equal(queue.status, 200)
      assert.ok('queue_running' in (await json(queue)))
      assert.equal((await stack.counter()).total, before + 1, 'the host answered /queue')

      const again = await passwordLogin()
      const replay = await api('/authsvc/api/mfa/verify', { mfa_temp_token: again.body.mfa_temp_token, code })
      const refused = await json(replay)
      assert.equal(replay.status, 401)
      assert.equal(refused.code, 'MFA_INVALID_CODE', 'a code is accepted once')
      assert.equal(refused.jwt_token, undefined)
    })
  })
}
