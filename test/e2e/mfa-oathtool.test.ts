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
import { randomUUID } from 'node:crypto'
import WebSocket from 'ws'
import { HOST_AIOHTTP, destroyStack, poll, startStack, type Stack } from '../helpers/stack.js'
import { PASSWORD, bearer, json, login, register } from '../helpers/client.js'
import { hostRoutes } from '../helpers/routes.js'

const OATHTOOL = '/usr/bin/oathtool'

/** The code oathtool computes for `secret` at `unixMs` (SHA-1, 6 digits, 30 s). */
function oathtool(secret: string, unixMs: number): string {
  const out = execFileSync(OATHTOOL, ['--totp', '-b', secret, '-N', `@${Math.floor(unixMs / 1000)}`], { encoding: 'utf8' }).trim()
  assert.match(out, /^\d{6}$/, `oathtool said: ${out}`)
  return out
}


interface RouteCase {
  method: string
  path: string
  body?: unknown
}

/** Owned routes that take a credential, in both twins (SPEC §5), plus the legacy generate_token (logout is apart: see the test). */
function ownedRoutes(): RouteCase[] {
  const out: RouteCase[] = [{ method: 'POST', path: '/generate_token', body: {} }]
  for (const prefix of ['/authsvc', '/api/authsvc']) {
    out.push(
      { method: 'POST', path: `${prefix}/generate_token`, body: { label: 'temp' } },
      { method: 'GET', path: `${prefix}/api/me` },
      { method: 'GET', path: `${prefix}/api/tokens` },
      { method: 'DELETE', path: `${prefix}/api/tokens`, body: { token_hash_prefix: 'deadbeef' } },
      { method: 'GET', path: `${prefix}/me/sessions` },
      { method: 'POST', path: `${prefix}/me/sessions/revoke`, body: { jti: 'x' } },
      { method: 'GET', path: `${prefix}/me/current-token` },
      { method: 'GET', path: `${prefix}/me/console` },
      { method: 'POST', path: `${prefix}/api/user-env`, body: { action: 'status' } },
      { method: 'GET', path: `${prefix}/api/settings/guest-jwt` },
      { method: 'PUT', path: `${prefix}/api/settings/guest-jwt`, body: { allow_guest_jwt: true } },
      { method: 'GET', path: `${prefix}/api/groups` },
      { method: 'PUT', path: `${prefix}/api/groups`, body: { groups: {} } },
      { method: 'GET', path: `${prefix}/api/users` },
      { method: 'PUT', path: `${prefix}/api/users/alice`, body: { disabled: true } },
      { method: 'DELETE', path: `${prefix}/api/users/alice` },
      { method: 'GET', path: `${prefix}/api/ip-lists` },
      { method: 'PUT', path: `${prefix}/api/ip-lists`, body: { whitelist: [], blacklist: [] } },
      { method: 'POST', path: `${prefix}/api/mfa/setup`, body: {} },
      { method: 'POST', path: `${prefix}/api/mfa/verify-setup`, body: { code: '123456' } },
      { method: 'POST', path: `${prefix}/api/mfa/disable`, body: { code: '123456' } },
      { method: 'GET', path: `${prefix}/admin` },
    )
  }
  return out
}

/** The four credential channels of SPEC §3, each carrying `token`. */
function channels(token: string): Array<{ name: string; query: string; headers: Record<string, string> }> {
  const q = encodeURIComponent(token)
  return [
    { name: 'bearer', query: '', headers: bearer(token) },
    { name: 'cookie', query: '', headers: { Cookie: `jwt_token=${token}` } },
    { name: '?token=', query: `token=${q}`, headers: {} },
    { name: '?access_token=', query: `access_token=${q}`, headers: {} },
  ]
}

const withQuery = (path: string, query: string) => (query ? `${path}${path.includes('?') ? '&' : '?'}${query}` : path)

/** The status a WebSocket upgrade gets (101 if it opened). */
function upgradeStatus(url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve) => {
    const ws = new WebSocket(url, { headers })
    ws.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0))
    ws.on('open', () => {
      ws.close()
      resolve(101)
    })
    ws.on('error', () => {})
  })
}

for (const aiohttp of [HOST_AIOHTTP]) {
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
      // the tests read login and logout events from the log, and every request's line (the access log)
      stack = await startStack({ aiohttp, env: { AUTHSVC_LOG_LEVEL: 'info', AUTHSVC_ACCESS_LOG: '1' } })
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

    it('the mfa_temp_token is no credential on any host or owned route, in any channel, and nothing reaches the host', async () => {
      const { body, setCookie } = await passwordLogin()
      assert.equal(body.mfa_required, true)
      assert.equal(body.jwt_token, undefined, 'no session before the code')
      assert.equal(setCookie, null, 'no cookie before the code')
      const temp: string = body.mfa_temp_token
      assert.ok(temp)

      const routes: RouteCase[] = [
        ...hostRoutes().map(({ method, path }) => ({ method, path, body: method === 'GET' || method === 'HEAD' ? undefined : {} })),
        { method: 'GET', path: '/view?filename=x.png&type=output' },
        { method: 'GET', path: '/api/view?filename=x.png&type=output' },
        ...ownedRoutes(),
      ]
      const before = (await stack.counter()).total
      const wrong: string[] = []
      const tries: Array<() => Promise<void>> = []
      for (const route of routes) {
        for (const channel of channels(temp)) {
          tries.push(async () => {
            const res = await fetch(stack.url + withQuery(route.path, channel.query), {
              method: route.method,
              headers: { Accept: 'application/json', ...(route.body !== undefined ? { 'Content-Type': 'application/json' } : {}), ...channel.headers },
              body: route.body !== undefined ? JSON.stringify(route.body) : undefined,
              redirect: 'manual',
            })
            const text = route.method === 'HEAD' ? '' : await res.text()
            let code: string | undefined
            try {
              code = JSON.parse(text).code
            } catch {
              code = undefined
            }
            if (res.status !== 401 || (route.method !== 'HEAD' && code !== 'TOKEN_INVALID')) {
              wrong.push(`${route.method} ${route.path} ${channel.name}: ${res.status} ${text.slice(0, 120)}`)
            }
          })
        }
      }
      // Logout is public and clears the cookie whatever it is sent; what matters is that it
      // does not act for alice with the temp token (it would log her logout).
      const logoutLines = () => stack.output().split('\n').filter((l) => l.includes('"event":"user_logout"') && l.includes('"subject":"alice"')).length
      const logoutsBefore = logoutLines()
      for (const method of ['GET', 'POST']) {
        for (const channel of channels(temp)) {
          tries.push(async () => {
            const res = await fetch(`${stack.url}${withQuery('/logout', channel.query)}`, { method, headers: { Accept: 'application/json', ...channel.headers }, redirect: 'manual' })
            await res.arrayBuffer()
          })
        }
      }
      for (const path of ['/ws', '/api/ws']) {
        for (const channel of channels(temp)) {
          tries.push(async () => {
            const status = await upgradeStatus(`${stack.url.replace('http', 'ws')}${withQuery(`${path}?clientId=temp-probe`, channel.query)}`, channel.headers)
            if (status !== 401) wrong.push(`upgrade ${path} ${channel.name}: ${status}`)
          })
        }
      }
      // a few at a time: the machine is shared
      for (let i = 0; i < tries.length; i += 8) await Promise.all(tries.slice(i, i + 8).map((t) => t()))
      assert.deepEqual(wrong, [], 'every try is 401 TOKEN_INVALID: a present but invalid credential never falls back to anonymous')
      assert.ok(tries.length > 600, `${tries.length} tries`)
      assert.equal((await stack.counter()).total, before, 'no host handler ran')

      // a marker request last: once its log line is in the output, every line before it is too
      const marker = `log-marker-${randomUUID()}`
      await (await fetch(`${stack.url}/authsvc/health?${marker}`)).arrayBuffer()
      assert.ok(await poll(async () => stack.output().includes(marker), 10_000), 'the marker line reached the output')
      assert.equal(stack.output().includes(temp), false, 'the temp token (sent in query strings above) is never logged')
      assert.equal(logoutLines(), logoutsBefore, 'no logout was done for alice with the temp token')

      // the token was live all along: it is still good for what it is meant for
      const wrongCode = oathtool(secret, Date.now()) === '000000' ? '111111' : '000000'
      const probe = await json(await api('/authsvc/api/mfa/verify', { mfa_temp_token: temp, code: wrongCode }))
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

      // a real logout is logged (what the temp-token test above looks for, and does not find)
      const logout = await fetch(`${stack.url}/logout`, { method: 'POST', headers: { Accept: 'application/json', ...bearer(session.jwt_token) } })
      assert.equal(logout.status, 200)
      const logged = () => stack.output().split('\n').some((l) => l.includes('"event":"user_logout"') && l.includes('"subject":"alice"'))
      assert.ok(await poll(async () => logged(), 5_000), 'user_logout of alice in the log')
      assert.equal((await fetch(`${stack.url}/queue`, { headers: { Accept: 'application/json', ...bearer(session.jwt_token) } })).status, 401, 'the session is revoked')
    })
  })
}
