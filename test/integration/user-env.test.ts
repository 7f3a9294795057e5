/**
 * `POST /authsvc/api/user-env` (SPEC §5.2, issue 24 item 5) on real services, a real sqlite file
 * and a real file system laid out as a host's (its facts point there): who may ask what, what the
 * answers hold (never an absolute host path for a non-admin), and an administrator's purge of one
 * user's folders: confirmed by the username, refused without it, reported, emitted once as
 * `user_env_purged`, and leaving the same-prefix user `alice2`, bob, the shared set and the shared
 * areas exactly as they were. The attack table of the purge itself is
 * test/unit/user-storage.test.ts; the stand-in host's own writes, test/e2e/user-env-updates.test.ts.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import type { EventRecord } from '../../sidecar/src/kernel/events.js'
import { bearer, openHarness, registerAndLogin, type Harness } from './harness.js'

const put = (path: string, text: string) => {
  mkdirSync(dirname(path), { recursive: true })
  writeFileSync(path, text)
}

/** Every file under `root` with its content. */
function files(root: string): Record<string, string> {
  const out: Record<string, string> = {}
  const visit = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const full = join(dir, entry.name)
      if (entry.isDirectory()) visit(full)
      else out[relative(root, full)] = readFileSync(full, 'utf8')
    }
  }
  visit(root)
  return out
}

describe('POST /authsvc/api/user-env', () => {
  let h: Harness
  let host: string
  const jwt: Record<string, string> = {}
  const id: Record<string, string> = {}
  const purged: EventRecord[] = []

  const env = (who: string, body: unknown) => h.call('POST', '/authsvc/api/user-env', { body, headers: bearer(jwt[who]) })

  before(async () => {
    h = await openHarness()
    host = join(h.dir, 'host')
    for (const d of ['user', 'input', 'output', 'temp']) mkdirSync(join(host, d), { recursive: true })
    h.services.host.facts = { user_dir: join(host, 'user'), input_dir: join(host, 'input'), output_dir: join(host, 'output'), temp_dir: join(host, 'temp') }
    jwt.root = await registerAndLogin(h, 'root')
    for (const name of ['alice', 'alice2', 'bob']) jwt[name] = await registerAndLogin(h, name, { admin: jwt.root })
    for (const name of ['root', 'alice', 'alice2', 'bob']) id[name] = h.services.users.byUsername(name)!.user_id
    h.services.events.on('user_env_purged', (record) => void purged.push(record))
    for (const name of ['alice', 'alice2', 'bob']) {
      put(join(host, 'user', id[name], 'workflows', `${name}.json`), `{"owner":"${name}"}`)
      put(join(host, 'user', id[name], 'comfy.settings.json'), '{}')
      put(join(host, 'output', `u_${id[name]}`, `${name}_00001_.png`), 'png-bytes')
    }
    put(join(host, 'input', `u_${id.alice}`, 'upload.png'), 'upload')
    put(join(host, 'user', 'default', 'workflows', 'shared.json'), '{"shared":true}')
    put(join(host, 'output', 'ComfyUI_00001_.png'), 'shared output')
    put(join(host, 'input', 'example.png'), 'shared input')
  })
  after(() => h.close())

  it('a user\'s status: four folders relative to their host folder, files, bytes, workflows; no absolute path', async () => {
    const res = await env('alice', { action: 'status' })
    assert.equal(res.status, 200, JSON.stringify(res.body))
    assert.deepEqual(res.body, {
      username: 'alice',
      folders: [
        { kind: 'userdata', path: `user/${id.alice}`, state: 'folder', files: 2, bytes: 17 + 2 },
        { kind: 'input', path: `input/u_${id.alice}`, state: 'folder', files: 1, bytes: 6 },
        { kind: 'output', path: `output/u_${id.alice}`, state: 'folder', files: 1, bytes: 9 },
        { kind: 'temp', path: `temp/u_${id.alice}`, state: 'none', files: 0, bytes: 0 },
      ],
      workflows: { count: 1, bytes: 17 },
      truncated: false,
    })
    assert.ok(!JSON.stringify(res.body).includes(h.dir), 'no host path')
    for (const twin of ['/api/authsvc/api/user-env']) {
      assert.deepEqual((await h.call('POST', twin, { body: { action: 'status' }, headers: bearer(jwt.alice) })).body, res.body)
    }
    assert.deepEqual((await env('alice', { action: 'status', user: 'ALICE' })).body, res.body, 'naming oneself (any case) is the same')
  })

  const refusals: Array<[string, string, unknown | (() => unknown), number, string]> = [
    ['a user naming another user', 'alice', { action: 'status', user: 'bob' }, 403, 'ADMIN_REQUIRED'],
    ['a user naming a user who does not exist (the same answer)', 'alice', { action: 'status', user: 'nobody' }, 403, 'ADMIN_REQUIRED'],
    ['a user naming another by id', 'alice', () => ({ action: 'status', user: id.bob }), 403, 'ADMIN_REQUIRED'],
    ['a user asking for the list', 'alice', { action: 'list' }, 403, 'ADMIN_REQUIRED'],
    ['a user purging themselves', 'alice', { action: 'purge', user: 'alice', confirm: 'alice' }, 403, 'ADMIN_REQUIRED'],
    ['a user purging another', 'alice', { action: 'purge', user: 'bob', confirm: 'bob' }, 403, 'ADMIN_REQUIRED'],
    ['an unknown action', 'alice', { action: 'delete' }, 400, 'VALIDATION_FAILED'],
    ['an unknown action (admin)', 'root', { action: 'wipe', user: 'alice', confirm: 'alice' }, 400, 'VALIDATION_FAILED'],
    ['no action', 'root', { user: 'alice' }, 400, 'VALIDATION_FAILED'],
    ['an unknown key', 'root', { action: 'status', path: '/etc' }, 400, 'VALIDATION_FAILED'],
    ['confirm: true instead of the username', 'root', { action: 'purge', user: 'alice', confirm: true }, 400, 'VALIDATION_FAILED'],
    ['a purge without confirm', 'root', { action: 'purge', user: 'alice' }, 400, 'VALIDATION_FAILED'],
    ['a purge confirmed with another name', 'root', { action: 'purge', user: 'alice', confirm: 'alice2' }, 400, 'VALIDATION_FAILED'],
    ['a purge that names nobody', 'root', { action: 'purge', confirm: 'root' }, 400, 'VALIDATION_FAILED'],
    ['an unknown user (status)', 'root', { action: 'status', user: 'nobody' }, 404, 'NOT_FOUND'],
    ['an unknown user (purge)', 'root', { action: 'purge', user: 'nobody', confirm: 'nobody' }, 404, 'NOT_FOUND'],
    ['a user named like a path', 'root', { action: 'purge', user: '../default', confirm: '../default' }, 404, 'NOT_FOUND'],
    ['the shared set by name', 'root', { action: 'purge', user: 'default', confirm: 'default' }, 404, 'NOT_FOUND'],
  ]
  for (const [name, who, body, status, code] of refusals) {
    it(`refuses ${name}: ${status} ${code}, and nothing changes`, async () => {
      const before = files(host)
      const res = await env(who, typeof body === 'function' ? body() : body)
      assert.equal(res.status, status, JSON.stringify(res.body))
      assert.equal(res.body.code, code)
      assert.deepEqual(files(host), before)
      assert.equal(purged.length, 0)
    })
  }

  it('without a credential: 401', async () => {
    const res = await h.call('POST', '/authsvc/api/user-env', { body: { action: 'status' } })
    assert.equal(res.status, 401)
    assert.equal(res.body.code, 'AUTH_REQUIRED')
  })

  it('an admin: another user\'s status with host paths; the list of users who have folders', async () => {
    const res = await env('root', { action: 'list', user: 'alice' })
    assert.equal(res.status, 200)
    assert.equal(res.body.username, 'alice')
    assert.equal(res.body.folders[2].host_path, join(host, 'output', `u_${id.alice}`))
    assert.deepEqual((await env('root', { action: 'status', user: 'alice' })).body, res.body)
    const list = await env('root', { action: 'list' })
    assert.deepEqual(list.body, {
      users: [
        { username: 'alice', folders: ['userdata', 'input', 'output'] },
        { username: 'alice2', folders: ['userdata', 'output'] },
        { username: 'bob', folders: ['userdata', 'output'] },
      ],
    })
  })

  it('an admin purges alice: her folders are emptied, reported and emitted once; alice2, bob and the shared files stay', async () => {
    const before = files(host)
    const res = await env('root', { action: 'purge', user: 'alice', confirm: 'Alice' })
    assert.equal(res.status, 200, JSON.stringify(res.body))
    assert.equal(res.body.status, 'ok')
    assert.equal(res.body.username, 'alice')
    assert.deepEqual({ files: res.body.removed.files, bytes: res.body.removed.bytes, workflows: res.body.removed.workflows }, { files: 4, bytes: 19 + 6 + 9, workflows: { count: 1, bytes: 17 } })
    const expected = Object.fromEntries(Object.entries(before).filter(([rel]) => !rel.includes(id.alice + '/') && !rel.includes(`u_${id.alice}/`)))
    assert.deepEqual(files(host), expected)
    assert.equal(Object.keys(before).length - Object.keys(expected).length, 4)
    for (const d of [join(host, 'user', id.alice), join(host, 'input', `u_${id.alice}`), join(host, 'output', `u_${id.alice}`)]) assert.deepEqual(readdirSync(d), [])
    assert.equal(purged.length, 1)
    const { at, ...event } = purged[0]
    assert.equal(typeof at, 'number')
    assert.deepEqual(event, { kind: 'user_env_purged', actor: 'root', subject: 'alice', ip: '127.0.0.1', outcome: 'success', files: 4, bytes: 34, folders: 3 })
    const after = await env('alice', { action: 'status' })
    assert.deepEqual(after.body.folders.map((f: { files: number }) => f.files), [0, 0, 0, 0])
    assert.deepEqual(after.body.workflows, { count: 0, bytes: 0 })
    assert.deepEqual((await env('root', { action: 'list' })).body.users.map((u: { username: string }) => u.username), ['alice', 'alice2', 'bob'], 'the emptied folders stay')
  })

  it('a user\'s own status is found by their id: a user whose name is someone\'s id changes nothing', async () => {
    const reg = await h.call('POST', '/register', { body: { username: id.bob, password: 'integration-password-2' }, headers: bearer(jwt.root) })
    assert.equal(reg.status, 201, JSON.stringify(reg.body))
    const res = await env('bob', { action: 'status' })
    assert.equal(res.status, 200)
    assert.equal(res.body.username, 'bob')
    assert.equal(res.body.workflows.count, 1)
  })
})
