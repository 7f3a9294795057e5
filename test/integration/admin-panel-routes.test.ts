/**
 * The admin panel's own routes (issue 26, sidecar/src/admin-panel/), through `inject()` with real
 * services and a real user folder on disk: the network facts, and the shared workflows as an
 * admin manages them. Who may call them, what each answer holds, what lands on disk, and an
 * attack table of workflow names that must never leave the workflows folder.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { bearer, openHarness, registerAndLogin, type Harness } from './harness.js'

interface World { h: Harness; admin: string; alice: string; aliceId: string; user: string }

async function withWorld(run: (w: World) => Promise<void>, config: Record<string, unknown> = {}): Promise<void> {
  const h = await openHarness({ config })
  const host = mkdtempSync(join(tmpdir(), 'as-panel-'))
  try {
    h.services.host.facts = { user_dir: join(host, 'user'), input_dir: join(host, 'input'), output_dir: join(host, 'output'), temp_dir: join(host, 'temp') }
    const admin = await registerAndLogin(h, 'root')
    const alice = await registerAndLogin(h, 'alice', { admin })
    const aliceId = h.services.users.find('alice').user_id
    mkdirSync(join(host, 'user', aliceId, 'workflows', 'sub'), { recursive: true })
    writeFileSync(join(host, 'user', aliceId, 'workflows', 'portrait.json'), '{"nodes":[1]}')
    writeFileSync(join(host, 'user', aliceId, 'workflows', 'sub', 'deep.json'), '{"nodes":[2]}')
    writeFileSync(join(host, 'user', aliceId, 'workflows', '.hidden.json'), '{}')
    writeFileSync(join(host, 'user', aliceId, 'secret.json'), '{"not":"a workflow"}')
    await run({ h, admin, alice, aliceId, user: join(host, 'user') })
  } finally {
    await h.close()
    rmSync(host, { recursive: true, force: true })
  }
}

describe('admin panel routes', () => {
  it('GET /authsvc/api/admin/network: the trusted proxies from config and the caller\'s address', () =>
    withWorld(async ({ h, admin }) => {
      const res = await h.call('GET', '/authsvc/api/admin/network', { headers: bearer(admin) })
      assert.equal(res.status, 200)
      assert.deepEqual(res.body, { trusted_proxies: ['10.9.0.0/16'], your_ip: '127.0.0.1' })
    }, { trusted_proxies: ['10.9.0.0/16'] }))

  it('lists a user\'s own workflows (hidden names left out), publishes one, lists and removes the shared copy; the user keeps theirs', () =>
    withWorld(async ({ h, admin, user, aliceId }) => {
      const own = await h.call('GET', '/authsvc/api/users/alice/workflows', { headers: bearer(admin) })
      assert.equal(own.status, 200)
      assert.deepEqual(own.body.workflows.map((w: { filename: string }) => w.filename), ['portrait.json', 'sub/deep.json'])
      assert.match(own.body.workflows[0].modified_iso, /^\d{4}-\d\d-\d\dT/)
      const published = await h.call('POST', '/api/authsvc/api/users/alice/workflows/publish', { body: { filename: 'sub/deep' }, headers: bearer(admin) })
      assert.deepEqual(published.body, { status: 'ok', filename: 'sub/deep.json' })
      assert.equal(readFileSync(join(user, 'default', 'workflows', 'sub', 'deep.json'), 'utf8'), '{"nodes":[2]}')
      const shared = await h.call('GET', '/authsvc/api/workflows/shared', { headers: bearer(admin) })
      assert.deepEqual(shared.body.workflows.map((w: { filename: string }) => w.filename), ['sub/deep.json'])
      const removed = await h.call('DELETE', '/authsvc/api/workflows/shared', { body: { filename: 'sub/deep.json' }, headers: bearer(admin) })
      assert.deepEqual(removed.body, { status: 'ok', filename: 'sub/deep.json' })
      assert.equal(existsSync(join(user, 'default', 'workflows', 'sub', 'deep.json')), false)
      assert.equal(existsSync(join(user, aliceId, 'workflows', 'sub', 'deep.json')), true, 'alice keeps hers')
      const again = await h.call('DELETE', '/authsvc/api/workflows/shared', { body: { filename: 'sub/deep.json' }, headers: bearer(admin) })
      assert.equal(again.status, 404)
      assert.equal(again.body.code, 'NOT_FOUND')
      const kinds = (await h.call('GET', '/authsvc/api/audit?limit=50', { headers: bearer(admin) })).body.events.map((e: { kind: string }) => e.kind)
      assert.ok(kinds.includes('workflow_published') && kinds.includes('workflow_unshared'), 'both changes are in the audit')
    }))

  // names that must never reach a file outside alice's workflows folder (or the shared one)
  const badNames: Array<[string, string, number, string]> = [
    ['a parent segment', '../secret.json', 400, 'VALIDATION_FAILED'],
    ['a deep parent segment', 'sub/../../secret.json', 400, 'VALIDATION_FAILED'],
    ['an absolute path', '/etc/passwd', 400, 'VALIDATION_FAILED'],
    ['a hidden name', '.hidden.json', 400, 'VALIDATION_FAILED'],
    ['an empty name', '', 400, 'VALIDATION_FAILED'],
    ['a backslash parent', '..\\secret.json', 400, 'VALIDATION_FAILED'],
    ['a NUL byte', 'portrait.json\u0000.png', 400, 'VALIDATION_FAILED'],
    ['a name that is not there', 'nothing.json', 404, 'NOT_FOUND'],
    ['an escaped parent (names are never unquoted here)', '%2e%2e/secret.json', 404, 'NOT_FOUND'],
  ]
  for (const [what, filename, status, code] of badNames) {
    it(`publish refuses ${what}: ${status} ${code}, nothing written`, () =>
      withWorld(async ({ h, admin, user }) => {
        const res = await h.call('POST', '/authsvc/api/users/alice/workflows/publish', { body: { filename }, headers: bearer(admin) })
        assert.equal(res.status, status, JSON.stringify(res.body))
        assert.equal(res.body.code, code)
        assert.equal(existsSync(join(user, 'default')), false, 'no shared folder was made')
      }))
    it(`removing a shared workflow refuses ${what}: ${status} ${code}`, () =>
      withWorld(async ({ h, admin, user, aliceId }) => {
        mkdirSync(join(user, 'default', 'workflows'), { recursive: true })
        writeFileSync(join(user, 'default', 'secret.json'), '{}')
        const res = await h.call('DELETE', '/authsvc/api/workflows/shared', { body: { filename }, headers: bearer(admin) })
        assert.equal(res.status, status, JSON.stringify(res.body))
        assert.equal(res.body.code, code)
        assert.equal(existsSync(join(user, 'default', 'secret.json')), true, 'the file beside the workflows folder stays')
        assert.equal(existsSync(join(user, aliceId, 'secret.json')), true)
      }))
  }

  const refusals: Array<[string, (w: World) => Promise<{ status: number; body: any }>, number, string]> = [
    ['a non-admin lists the shared set', ({ h, alice }) => h.call('GET', '/authsvc/api/workflows/shared', { headers: bearer(alice) }), 403, 'ADMIN_REQUIRED'],
    ['a non-admin publishes', ({ h, alice }) => h.call('POST', '/authsvc/api/users/alice/workflows/publish', { body: { filename: 'portrait.json' }, headers: bearer(alice) }), 403, 'ADMIN_REQUIRED'],
    ['a non-admin removes', ({ h, alice }) => h.call('DELETE', '/authsvc/api/workflows/shared', { body: { filename: 'portrait.json' }, headers: bearer(alice) }), 403, 'ADMIN_REQUIRED'],
    ['a non-admin reads the network facts', ({ h, alice }) => h.call('GET', '/authsvc/api/admin/network', { headers: bearer(alice) }), 403, 'ADMIN_REQUIRED'],
    ['no credential', ({ h }) => h.call('GET', '/authsvc/api/users/alice/workflows'), 401, 'AUTH_REQUIRED'],
    ['an unknown user', ({ h, admin }) => h.call('GET', '/authsvc/api/users/nobody/workflows', { headers: bearer(admin) }), 404, 'NOT_FOUND'],
    ['an unknown key in the body', ({ h, admin }) => h.call('POST', '/authsvc/api/users/alice/workflows/publish', { body: { filename: 'portrait.json', to: 'x' }, headers: bearer(admin) }), 400, 'VALIDATION_FAILED'],
    ['a name that is not a string', ({ h, admin }) => h.call('DELETE', '/authsvc/api/workflows/shared', { body: { filename: 7 }, headers: bearer(admin) }), 400, 'VALIDATION_FAILED'],
  ]
  for (const [what, send, status, code] of refusals) {
    it(`refuses ${what}: ${status} ${code}`, () =>
      withWorld(async (w) => {
        const res = await send(w)
        assert.equal(res.status, status, JSON.stringify(res.body))
        assert.equal(res.body.code, code)
      }))
  }

  it('answers 503 in words while the host has not named its user folder', async () => {
    const h = await openHarness()
    try {
      const admin = await registerAndLogin(h, 'root')
      const res = await h.call('GET', '/authsvc/api/workflows/shared', { headers: bearer(admin) })
      assert.equal(res.status, 503)
      assert.equal(res.body.code, 'AUTHSVC_UNAVAILABLE')
    } finally {
      await h.close()
    }
  })
})
