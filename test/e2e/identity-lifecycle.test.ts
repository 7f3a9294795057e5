/**
 * Issue 3 end to end: revocation is immediate for every way a credential
 * dies; restarts (sidecar alone, or the whole host) log nobody out; the
 * sqlite file holds no raw secret; the groups file is live.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync, writeFileSync, existsSync } from 'node:fs'
import { join } from 'node:path'
import { HOST_AIOHTTP, destroyStack, poll, startStack, type Stack } from '../helpers/stack.js'
import { PASSWORD, bearer, apiToken, json, login, register, tinyGraph } from '../helpers/client.js'


async function status(stack: Stack, path: string, headers: Record<string, string>): Promise<number> {
  return (await fetch(stack.url + path, { headers: { Accept: 'application/json', ...headers } })).status
}

/** The credential is refused on a host route with 401 and the stable code. */
async function assertRefused(stack: Stack, credential: string, code: string, label: string): Promise<void> {
  const res = await fetch(`${stack.url}/queue`, { headers: { Accept: 'application/json', ...bearer(credential) } })
  const body = await res.text()
  assert.equal(res.status, 401, `${label}: ${res.status} ${body}`)
  assert.equal(JSON.parse(body).code, code, label)
}

async function assertWorks(stack: Stack, credential: string, label: string): Promise<void> {
  assert.equal(await status(stack, '/queue', bearer(credential)), 200, label)
}

const runPrompt = (stack: Stack, credential: string) =>
  fetch(`${stack.url}/prompt`, {
    method: 'POST',
    headers: { ...bearer(credential), 'Content-Type': 'application/json', Accept: 'application/json' },
    body: JSON.stringify({ prompt: tinyGraph('lifecycle') }),
  })

for (const aiohttp of [HOST_AIOHTTP]) {
  describe(`identity lifecycle through the gate, aiohttp ${aiohttp}`, () => {
    let stack: Stack
    let admin: string
    before(async () => {
      stack = await startStack({ aiohttp })
      await register(stack, 'root')
      admin = (await login(stack, 'root')).jwt
    })
    after(async () => {
      await destroyStack(stack)
    })

    const adminPut = (path: string, body: unknown) =>
      fetch(stack.url + path, { method: 'PUT', headers: { ...bearer(admin), 'Content-Type': 'application/json' }, body: JSON.stringify(body) })

    // Codes: a session whose record is revoked answers TOKEN_REVOKED; a revoked API token (by
    // its owner, or by a disable or password reset) leaves a tombstone of its hash until its
    // expiry, so it answers TOKEN_REVOKED too (issue 9, hole 10), never TOKEN_INVALID.
    it('revocation is immediate: logout, session revoke, token revoke, disable, role change, password reset', async () => {
      assert.equal((await register(stack, 'bob', { bearer: admin })).status, 201)

      const s1 = (await login(stack, 'bob')).jwt
      await assertWorks(stack, s1, 'session before logout')
      const logout = await fetch(`${stack.url}/logout`, { method: 'POST', headers: { ...bearer(s1), Accept: 'application/json' } })
      assert.equal(logout.status, 200)
      await assertRefused(stack, s1, 'TOKEN_REVOKED', 'session after logout')

      const s2 = (await login(stack, 'bob')).jwt
      const s3 = (await login(stack, 'bob')).jwt
      await assertWorks(stack, s2, 'session before it is revoked')
      const sessions = await json(await fetch(`${stack.url}/authsvc/me/sessions`, { headers: bearer(s3) }))
      const other = sessions.sessions.find((s: { is_current: boolean }) => !s.is_current)
      const revoke = await fetch(`${stack.url}/authsvc/me/sessions/revoke`, { method: 'POST', headers: { ...bearer(s3), 'Content-Type': 'application/json' }, body: JSON.stringify({ jti: other.jti }) })
      assert.equal(revoke.status, 200)
      await assertRefused(stack, s2, 'TOKEN_REVOKED', 'session after session revoke')
      await assertWorks(stack, s3, 'the session that revoked the other one')

      const t1 = await apiToken(stack, 'bob')
      await assertWorks(stack, t1, 'token before it is revoked')
      const list = await json(await fetch(`${stack.url}/authsvc/api/tokens`, { headers: bearer(t1) }))
      assert.equal(list.tokens.length, 1)
      const del = await fetch(`${stack.url}/authsvc/api/tokens`, { method: 'DELETE', headers: { ...bearer(s3), 'Content-Type': 'application/json' }, body: JSON.stringify({ token_hash_prefix: `${list.tokens[0].token_hash_prefix}...` }) })
      assert.equal(del.status, 200)
      await assertRefused(stack, t1, 'TOKEN_REVOKED', 'token after token revoke')

      const s4 = (await login(stack, 'bob')).jwt
      const t2 = await apiToken(stack, 'bob')
      await assertWorks(stack, s4, 'session before disable')
      await assertWorks(stack, t2, 'token before disable')
      assert.equal((await adminPut('/authsvc/api/users/bob', { disabled: true })).status, 200)
      await assertRefused(stack, s4, 'TOKEN_REVOKED', 'session after disable')
      await assertRefused(stack, t2, 'TOKEN_REVOKED', 'token after disable')
      assert.equal((await adminPut('/authsvc/api/users/bob', { disabled: false })).status, 200)
      // re-enabling the user revives none of the credentials the disable killed
      await assertRefused(stack, s4, 'TOKEN_REVOKED', 'session after re-enable')
      await assertRefused(stack, t2, 'TOKEN_REVOKED', 'token after re-enable')

      // docs/decisions.md: a role change revokes sessions; API tokens stay and take the new role
      const s5 = (await login(stack, 'bob')).jwt
      const t4 = await apiToken(stack, 'bob')
      await assertWorks(stack, s5, 'session before role change')
      assert.equal((await runPrompt(stack, t4)).status, 200, 'token may run as a user')
      assert.equal((await adminPut('/authsvc/api/users/bob', { role: 'guest' })).status, 200)
      await assertRefused(stack, s5, 'TOKEN_REVOKED', 'session after role change')
      const denied = await runPrompt(stack, t4)
      assert.equal(denied.status, 403, 'token after role change lost can_run')
      assert.equal((await json(denied)).code, 'PERMISSION_DENIED')
      const me = await json(await fetch(`${stack.url}/authsvc/api/me`, { headers: bearer(t4) }))
      assert.equal(me.role, 'guest')
      assert.equal(me.permissions.can_run, false)
      assert.equal((await adminPut('/authsvc/api/users/bob', { role: 'user' })).status, 200)
      assert.equal((await runPrompt(stack, t4)).status, 200, 'token regains can_run with the role')
      await assertRefused(stack, s5, 'TOKEN_REVOKED', 'a session revoked by a role change stays revoked')

      const s6 = (await login(stack, 'bob')).jwt
      const t3 = await apiToken(stack, 'bob')
      await assertWorks(stack, s6, 'session before password reset')
      await assertWorks(stack, t3, 'token before password reset')
      assert.equal((await adminPut('/authsvc/api/users/bob', { password: 'another-long-password' })).status, 200)
      await assertRefused(stack, s6, 'TOKEN_REVOKED', 'session after password reset')
      await assertRefused(stack, t3, 'TOKEN_REVOKED', 'token after password reset')
      await assertRefused(stack, t4, 'TOKEN_REVOKED', 'every token of the user after password reset')
      const oldPassword = await fetch(`${stack.url}/login`, { method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json' }, body: JSON.stringify({ username: 'bob', password: PASSWORD }) })
      assert.equal(oldPassword.status, 401)
      assert.equal((await json(oldPassword)).code, 'INVALID_CREDENTIALS')
      await assertWorks(stack, (await login(stack, 'bob', 'another-long-password')).jwt, 'the new password logs in')
    })

    it('restarting the sidecar, or the whole host, logs nobody out and keeps every token', async () => {
      assert.equal((await register(stack, 'carol', { bearer: admin })).status, 201)
      const session = (await login(stack, 'carol')).jwt
      const token = await apiToken(stack, 'carol')
      const oldPid = stack.sidecarPid()
      process.kill(oldPid, 'SIGKILL')
      assert.ok(await poll(async () => (await status(stack, '/queue', bearer(session))) === 200, 15_000), 'session after sidecar restart')
      const newPid = stack.sidecarPid()
      assert.notEqual(newPid, oldPid, 'a new sidecar process answers')
      assert.doesNotThrow(() => process.kill(newPid, 0), 'the new sidecar is alive')
      assert.equal(await status(stack, '/queue', bearer(token)), 200, 'token after sidecar restart')

      await stack.stop()
      const again = await startStack({ aiohttp, dir: stack.dir })
      stack = again
      assert.notEqual(stack.sidecarPid(), newPid, 'the host restart started another sidecar')
      assert.equal(await status(stack, '/queue', bearer(session)), 200, 'session after host restart')
      assert.equal(await status(stack, '/queue', bearer(token)), 200, 'token after host restart')
      assert.equal(await status(stack, '/queue', bearer(admin)), 200)
    })

    it('the sqlite file holds no raw API token, no password and no JWT', async () => {
      const token = await apiToken(stack, 'root')
      const session = (await login(stack, 'root')).jwt
      await stack.stop()
      let raw = readFileSync(join(stack.dataDir, 'authsvc.sqlite')).toString('latin1')
      const wal = join(stack.dataDir, 'authsvc.sqlite-wal')
      if (existsSync(wal)) raw += readFileSync(wal).toString('latin1')
      assert.ok(raw.includes('root'), 'the file is readable and holds the user')
      for (const secret of [token, token.slice(4), session, session.split('.')[2], PASSWORD]) {
        assert.equal(raw.includes(secret), false, `secret found in the store: ${secret.slice(0, 12)}…`)
      }
      stack = await startStack({ aiohttp, dir: stack.dir })
    })

    it('a valid edit of the groups file applies within 2 s; an invalid edit keeps the previous policy', async () => {
      assert.equal((await register(stack, 'dave', { bearer: admin })).status, 201)
      const dave = await apiToken(stack, 'dave')
      const file = join(stack.dataDir, 'authsvc_groups.json')
      const valid = JSON.parse(readFileSync(file, 'utf8'))
      const REFUSED = 'groups file edit refused'
      const refusals = () => stack.output().split(REFUSED).length - 1
      // an empty graph: with can_run the host itself answers (400, its own error shape)
      const run = () => fetch(`${stack.url}/prompt`, { method: 'POST', headers: { ...bearer(dave), 'Content-Type': 'application/json' }, body: JSON.stringify({ prompt: {} }) })
      const allowed = async () => {
        const res = await run()
        const body = await json(res)
        return res.status === 400 && typeof body.error?.type === 'string' && body.code === undefined
      }
      const denied = async () => {
        const res = await run()
        return res.status === 403 && (await json(res)).code === 'PERMISSION_DENIED'
      }
      const applyWithin2s = async (canRun: boolean, label: string) => {
        valid.user.can_run = canRun
        writeFileSync(file, JSON.stringify(valid))
        const started = Date.now()
        assert.ok(await poll(canRun ? allowed : denied, 2000), `${label}: not applied within 2 s`)
        assert.ok(Date.now() - started <= 2000, label)
      }
      const refuseAndKeepDenial = async (text: string, label: string) => {
        const seen = refusals()
        writeFileSync(file, text)
        assert.ok(await poll(async () => refusals() > seen, 2000), `${label}: the watcher did not report the invalid edit`)
        assert.ok(await denied(), `${label}: the previous policy (denial) is no longer in force`)
      }

      assert.ok(await allowed(), 'a user may run before the edit')
      await applyWithin2s(false, 'valid edit taking can_run away')
      await refuseAndKeepDenial('{"user": {"can_run": true, "not_a_key": true}}', 'unknown key, no admin role')
      await applyWithin2s(true, 'valid edit after the unknown-key edit')
      await applyWithin2s(false, 'valid edit taking can_run away again')
      await refuseAndKeepDenial('{ not json', 'not JSON')
      await applyWithin2s(true, 'valid edit after the non-JSON edit')
    })
  })
}
