/**
 * Issue 3 end to end: revocation is immediate for every way a credential
 * dies; restarts (sidecar alone, or the whole host) log nobody out; the
 * sqlite file holds no raw secret; the groups file is live.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync, writeFileSync, existsSync } from 'node:fs'
import { join } from 'node:path'
import { destroyStack, poll, startStack, type Stack } from '../helpers/stack.js'
import { PASSWORD, apiToken, json, login, register } from '../helpers/client.js'

const bearer = (t: string) => ({ Authorization: `Bearer ${t}` })

async function status(stack: Stack, path: string, headers: Record<string, string>): Promise<number> {
  return (await fetch(stack.url + path, { headers: { Accept: 'application/json', ...headers } })).status
}


describe('identity lifecycle through the gate', () => {
  let stack: Stack
  let admin: string
  before(async () => {
    stack = await startStack()
    await register(stack, 'root')
    admin = (await login(stack, 'root')).jwt
  })
  after(async () => {
    await destroyStack(stack)
  })

  const adminPut = (path: string, body: unknown) =>
    fetch(stack.url + path, { method: 'PUT', headers: { ...bearer(admin), 'Content-Type': 'application/json' }, body: JSON.stringify(body) })

  it('revocation is immediate: logout, session revoke, token revoke, disable, role change, password reset', async () => {
    assert.equal((await register(stack, 'bob', { bearer: admin })).status, 201)

    const s1 = (await login(stack, 'bob')).jwt
    assert.equal(await status(stack, '/queue', bearer(s1)), 200)
    await fetch(`${stack.url}/logout`, { method: 'POST', headers: { ...bearer(s1), Accept: 'application/json' } })
    assert.equal(await status(stack, '/queue', bearer(s1)), 401, 'after logout')

    const s2 = (await login(stack, 'bob')).jwt
    const s3 = (await login(stack, 'bob')).jwt
    const sessions = await json(await fetch(`${stack.url}/authsvc/me/sessions`, { headers: bearer(s3) }))
    const other = sessions.sessions.find((s: { is_current: boolean }) => !s.is_current)
    const revoke = await fetch(`${stack.url}/authsvc/me/sessions/revoke`, { method: 'POST', headers: { ...bearer(s3), 'Content-Type': 'application/json' }, body: JSON.stringify({ jti: other.jti }) })
    assert.equal(revoke.status, 200)
    assert.equal(await status(stack, '/queue', bearer(s2)), 401, 'after session revoke')
    assert.equal(await status(stack, '/queue', bearer(s3)), 200)

    const t1 = await apiToken(stack, 'bob')
    const list = await json(await fetch(`${stack.url}/authsvc/api/tokens`, { headers: bearer(t1) }))
    const del = await fetch(`${stack.url}/authsvc/api/tokens`, { method: 'DELETE', headers: { ...bearer(s3), 'Content-Type': 'application/json' }, body: JSON.stringify({ token_hash_prefix: `${list.tokens[0].token_hash_prefix}...` }) })
    assert.equal(del.status, 200)
    assert.equal(await status(stack, '/queue', bearer(t1)), 401, 'after token revoke')

    const s4 = (await login(stack, 'bob')).jwt
    const t2 = await apiToken(stack, 'bob')
    assert.equal((await adminPut('/authsvc/api/users/bob', { disabled: true })).status, 200)
    assert.equal(await status(stack, '/queue', bearer(s4)), 401, 'session after disable')
    assert.equal(await status(stack, '/queue', bearer(t2)), 401, 'token after disable')
    assert.equal((await adminPut('/authsvc/api/users/bob', { disabled: false })).status, 200)

    const s5 = (await login(stack, 'bob')).jwt
    assert.equal((await adminPut('/authsvc/api/users/bob', { role: 'guest' })).status, 200)
    assert.equal(await status(stack, '/queue', bearer(s5)), 401, 'session after role change')
    assert.equal((await adminPut('/authsvc/api/users/bob', { role: 'user' })).status, 200)

    const s6 = (await login(stack, 'bob')).jwt
    const t3 = await apiToken(stack, 'bob')
    assert.equal((await adminPut('/authsvc/api/users/bob', { password: 'another-long-password' })).status, 200)
    assert.equal(await status(stack, '/queue', bearer(s6)), 401, 'session after password reset')
    assert.equal(await status(stack, '/queue', bearer(t3)), 401, 'token after password reset')
    assert.equal((await fetch(`${stack.url}/login`, { method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json' }, body: JSON.stringify({ username: 'bob', password: PASSWORD }) })).status, 401)
  })

  it('restarting the sidecar, or the whole host, logs nobody out and keeps every token', async () => {
    assert.equal((await register(stack, 'carol', { bearer: admin })).status, 201)
    const session = (await login(stack, 'carol')).jwt
    const token = await apiToken(stack, 'carol')
    process.kill(stack.sidecarPid(), 'SIGKILL')
    assert.ok(await poll(async () => (await status(stack, '/queue', bearer(session))) === 200, 15_000), 'session after sidecar restart')
    assert.equal(await status(stack, '/queue', bearer(token)), 200, 'token after sidecar restart')

    await stack.stop()
    const again = await startStack({ dir: stack.dir })
    stack = again
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
    stack = await startStack({ dir: stack.dir })
  })

  it('a valid edit of the groups file applies within 2 s; an invalid edit keeps the previous policy', async () => {
    assert.equal((await register(stack, 'dave', { bearer: admin })).status, 201)
    const dave = await apiToken(stack, 'dave')
    const run = () => fetch(`${stack.url}/prompt`, { method: 'POST', headers: { ...bearer(dave), 'Content-Type': 'application/json' }, body: JSON.stringify({ prompt: {} }) })
    assert.notEqual((await run()).status, 403)
    const file = join(stack.dataDir, 'authsvc_groups.json')
    const groups = JSON.parse(readFileSync(file, 'utf8'))
    groups.user.can_run = false
    writeFileSync(file, JSON.stringify(groups))
    const started = Date.now()
    assert.ok(await poll(async () => (await run()).status === 403, 2500), 'denied after the edit')
    assert.ok(Date.now() - started < 2500)
    writeFileSync(file, '{"user": {"can_run": true, "not_a_key": true}}')
    await new Promise((r) => setTimeout(r, 1200))
    assert.equal((await run()).status, 403, 'an invalid edit leaves the denial in force')
    writeFileSync(file, '{ not json')
    await new Promise((r) => setTimeout(r, 1200))
    assert.equal((await run()).status, 403)
  })
})
