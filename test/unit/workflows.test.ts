/**
 * Workflows per user (issue 12) through the real decider, its filters and the
 * owned /api/cpe routes, over a real user folder on disk: own and shared
 * workflows listed in the host's shapes (own wins), loaded own-first, deleted
 * only in one's own space (a shared one: admins only), and the cpe family over
 * the same files. End to end on the real ComfyUI: test/e2e/real-host-workflows.test.ts.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Decision } from '../../sidecar/src/kernel/protocol.js'
import type { UserRecord } from '../../sidecar/src/identity/users.js'
import { isWorkflowsPath } from '../../sidecar/src/workflows/behaviours/userdata-write.js'
import { workflowName } from '../../sidecar/src/workflows/routes.js'
import { bearer, addUser, apiToken, assertDenied, assertPass, call, decide, openSidecar, type DescOptions, type Sidecar } from './fixtures.js'
import { PROTOCOL_VERSION } from '../../sidecar/src/kernel/protocol.js'
import { spawnSync } from 'node:child_process'
import { unquoteOnce } from '../../sidecar/src/workflows/workflow-store.js'
import { PYTHON } from '../helpers/stack.js'


async function filtered(sc: Sidecar, o: DescOptions, status: number, hostAnswer: string): Promise<{ status: number; body: string } | 'unchanged'> {
  const d = assertPass(await decide(sc, o))
  assert.ok(d.filter, `${o.path}?${o.query ?? ''} is filtered`)
  const out = (await sc.handlers.filter({ type: 'filter', id: 1, name: d.filter.name, ctx: d.filter.ctx, status, content_type: 'application/json' }, Buffer.from(hostAnswer))) as unknown as
    { action: string; status?: number; body_text?: string } | { answer: { action: string }; payload: Buffer }
  if ('answer' in out) return { status, body: out.payload.toString() }
  if (out.action === 'keep') return 'unchanged'
  return { status: out.status!, body: out.body_text! }
}

describe('workflows: own and shared, through the gate', () => {
  let sc: Sidecar
  let userDir: string
  let admin: UserRecord
  let alice: UserRecord
  let guest: UserRecord
  let adminToken: string
  let aliceToken: string
  let guestToken: string
  const own = (u: UserRecord, name: string) => join(userDir, u.user_id, 'workflows', name)
  const shared = (name: string) => join(userDir, 'default', 'workflows', name)

  before(async () => {
    sc = await openSidecar()
    userDir = join(sc.dir, 'host', 'user') // the user folder of the Python host the tests resolve on (fixtures.ts)
    admin = await addUser(sc, 'admin', 'admin-password-1', 'admin')
    alice = await addUser(sc, 'alice', 'alice-password-1')
    guest = await addUser(sc, 'viewer', 'viewer-password-1', 'guest')
    ;[adminToken, aliceToken, guestToken] = await Promise.all([admin, alice, guest].map((u) => apiToken(sc, u)))
    for (const dir of [join(userDir, 'default', 'workflows', 'team'), join(userDir, alice.user_id, 'workflows')]) mkdirSync(dir, { recursive: true })
    writeFileSync(shared('house.json'), '{"from":"shared"}')
    writeFileSync(shared('clash.json'), '{"from":"shared"}')
    writeFileSync(shared('.hidden.json'), '{}')
    writeFileSync(shared('team/brief.json'), '{"from":"shared team"}')
    writeFileSync(own(alice, 'clash.json'), '{"from":"alice"}')
    sc.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 't', host: { user_dir: userDir } })
  })
  after(() => sc.close())

  const list = (token: string, query: string): DescOptions => ({ path: '/userdata', pattern: '/userdata', query, headers: bearer(token) })

  it('the list is the host\'s own list plus the shared files not shadowed (own wins); hidden files stay hidden', async () => {
    const out = await filtered(sc, list(aliceToken, 'dir=workflows'), 200, '["clash.json"]')
    assert.deepEqual(out, { status: 200, body: '["clash.json", "house.json"]' })
    const recursive = await filtered(sc, list(aliceToken, 'dir=workflows&recurse=true'), 200, '["clash.json"]')
    assert.deepEqual((JSON.parse((recursive as { body: string }).body) as string[]).sort(), ['clash.json', 'house.json', 'team/brief.json'])
  })

  it('full_info and split keep the host\'s shapes', async () => {
    const full = JSON.parse((await filtered(sc, list(aliceToken, 'dir=workflows&full_info=true'), 200, '[]') as { body: string }).body) as Array<Record<string, unknown>>
    assert.deepEqual(full.map((f) => Object.keys(f).sort()), [['created', 'modified', 'path', 'size'], ['created', 'modified', 'path', 'size']])
    const split = JSON.parse((await filtered(sc, list(aliceToken, 'dir=workflows&split=true&recurse=true'), 200, '[["clash.json", "clash.json"]]') as { body: string }).body) as string[][]
    assert.deepEqual(split.find((e) => e[0] === 'team/brief.json'), ['team/brief.json', 'team', 'brief.json'])
    assert.equal(split.filter((e) => e[0] === 'clash.json').length, 1)
  })

  it('a user with no workflows folder yet gets the shared list from the gate (the host would answer 404)', async () => {
    const d = await decide(sc, list(guestToken, 'dir=workflows')) as Decision & { status?: number; body_text?: string }
    assert.equal(d.action, 'respond')
    assert.equal(d.status, 200)
    assert.deepEqual((JSON.parse(d.body_text!) as string[]).sort(), ['clash.json', 'house.json'])
    const v2 = await decide(sc, { path: '/v2/userdata', pattern: '/v2/userdata', query: 'path=workflows', headers: bearer(guestToken) }) as Decision & { body_text?: string }
    assert.deepEqual((JSON.parse(v2.body_text!) as Array<{ path: string }>).map((e) => e.path), ['workflows/team', 'workflows/.hidden.json', 'workflows/team/brief.json', 'workflows/clash.json', 'workflows/house.json'])
  })

  it('/v2/userdata merges the same way, sorted folders first', async () => {
    const out = await filtered(sc, { path: '/v2/userdata', pattern: '/v2/userdata', query: 'path=workflows', headers: bearer(aliceToken) }, 200,
      '[{"name": "clash.json", "path": "workflows/clash.json", "type": "file", "size": 16, "modified": 1.5}]')
    const entries = JSON.parse((out as { body: string }).body) as Array<{ name: string; path: string; type: string }>
    // the host's order: folders first, then names without case (os.walk lists hidden names too)
    assert.deepEqual(entries.map((e) => e.path), ['workflows/team', 'workflows/.hidden.json', 'workflows/team/brief.json', 'workflows/clash.json', 'workflows/house.json'])
    assert.equal(entries.filter((e) => e.path === 'workflows/clash.json').length, 1)
  })

  it('lists outside workflows/ are the host\'s own, untouched', async () => {
    assert.equal((await decide(sc, list(aliceToken, 'dir=subgraphs'))).action, 'pass')
    assert.equal(assertPass(await decide(sc, list(aliceToken, 'dir=subgraphs'))).filter, undefined)
  })

  it('a listing that leaves the caller\'s own space is refused by the gate, not left to the host (issue 28: the data dir is a sibling)', async () => {
    for (const query of ['dir=workflows%2F..%2F..', 'dir=..%2Fauthsvc', 'dir=%2Ftmp']) {
      const out = await decide(sc, list(aliceToken, query))
      assert.equal(out.action, 'respond', query)
      assert.equal((out as { status: number }).status, 403, query)
      assert.equal(JSON.parse((out as { body_text: string }).body_text).code, 'PERMISSION_DENIED', query)
    }
  })

  const read = (token: string, file: string): DescOptions => ({ path: `/userdata/${encodeURIComponent(file)}`, pattern: '/userdata/{file}', match_info: { file }, headers: bearer(token) })

  it('a load is own first, then shared', async () => {
    assertPass(await decide(sc, read(aliceToken, 'workflows/clash.json')), 'her own: the host serves it')
    const d = await decide(sc, read(aliceToken, 'workflows/house.json')) as Decision & { body_text?: string; headers?: Array<[string, string]> }
    assert.equal(d.action, 'respond')
    assert.equal(d.body_text, '{"from":"shared"}')
    // the gate's own answer with a file's text reaches the browser as inert as the host's would
    assert.deepEqual(d.headers?.filter(([name]) => name !== 'Content-Type'), [['Content-Security-Policy', 'sandbox'], ['X-Content-Type-Options', 'nosniff'], ['Cache-Control', 'no-cache']])
    const own = await decide(sc, read(aliceToken, 'workflows/clash.json')) as Decision & { response_headers?: Record<string, string> }
    assert.deepEqual(own.response_headers, { 'Content-Security-Policy': 'sandbox', 'X-Content-Type-Options': 'nosniff', 'Cache-Control': 'no-cache' }, 'the host\'s answer gets them from the plugin')
    assertPass(await decide(sc, read(aliceToken, 'workflows/none.json')), 'neither: the host answers 404')
  })

  const del = (token: string, file: string): DescOptions => ({ method: 'DELETE', path: `/userdata/${encodeURIComponent(file)}`, pattern: '/userdata/{file}', match_info: { file }, headers: bearer(token) })

  it('deleting: own → the host; a shared one → 403 WORKFLOW_DENIED for users, done by the gate for an admin', async () => {
    assertPass(await decide(sc, del(aliceToken, 'workflows/clash.json')))
    assertDenied(await decide(sc, del(aliceToken, 'workflows/house.json')), 'WORKFLOW_DENIED')
    assert.ok(existsSync(shared('house.json')))
    writeFileSync(shared('gone.json'), '{}')
    const d = await decide(sc, del(adminToken, 'workflows/gone.json'))
    assert.equal(d.action, 'respond')
    assert.equal((d as { status: number }).status, 204)
    assert.equal(existsSync(shared('gone.json')), false)
    const move: DescOptions = { method: 'POST', path: '/userdata/x/move/y', pattern: '/userdata/{file}/move/{dest}', match_info: { file: 'workflows/house.json', dest: 'workflows/mine.json' }, headers: bearer(aliceToken) }
    assertDenied(await decide(sc, move), 'WORKFLOW_DENIED')
  })

  it('a role without can_modify_workflows reads but never writes', async () => {
    assert.equal(((await decide(sc, read(guestToken, 'workflows/clash.json'))) as { body_text?: string }).body_text, '{"from":"shared"}', 'reads the shared one')
    assertDenied(await decide(sc, del(guestToken, 'workflows/x.json')), 'PERMISSION_DENIED')
    const save = await call(sc, { method: 'POST', url: '/api/cpe/workflow/save', bearer: guestToken, body: { workflow: {}, name: 'x' } })
    assert.equal(save.statusCode, 403)
  })

  const PATHS: Array<[string, boolean]> = [
    ['workflows/a.json', true], ['Workflows/a.json', true], ['WORKFLOWS%2Fa.json', true], ['workflows%2Fa.json', true],
    ['/workflows/a.json', true], ['workflows\\a.json', true], ['x/../workflows/a.json', true], ['workflows/../a.json', false],
    ['settings.json', false], ['workflowsx/a.json', false], ['%2E%2E/workflows/a.json', false],
  ]
  for (const [file, expected] of PATHS) {
    it(`a write to ${JSON.stringify(file)} ${expected ? 'is' : 'is not'} a workflow write`, () => {
      assert.equal(isWorkflowsPath(file), expected)
    })
  }

  it('the cpe family: save, list (own + shared, own wins), get own first, health', async () => {
    const save = await call(sc, { method: 'POST', url: '/api/cpe/workflow/save', bearer: aliceToken, body: { workflow: { nodes: [1] }, name: 'fromcpe' } })
    assert.equal(save.statusCode, 200, save.body)
    assert.deepEqual(save.json(), { status: 'success', message: 'Workflow saved successfully', filename: 'fromcpe.json' })
    assert.equal(readFileSync(own(alice, 'fromcpe.json'), 'utf8'), '{"nodes":[1]}')
    const listed = await call(sc, { url: '/cpe/workflow/list', bearer: aliceToken })
    const names = (listed.json() as { workflows: Array<{ filename: string }> }).workflows.map((w) => w.filename).sort()
    assert.deepEqual(names, ['clash.json', 'fromcpe.json', 'house.json', 'team/brief.json'])
    const got = await call(sc, { url: '/api/cpe/workflow/get?filename=clash.json', bearer: aliceToken })
    assert.deepEqual(got.json(), { status: 'success', filename: 'clash.json', workflow: { from: 'alice' } })
    const missing = await call(sc, { url: '/api/cpe/workflow/get?filename=nope', bearer: aliceToken })
    assert.equal(missing.statusCode, 404)
    assert.equal((missing.json() as { status: string }).status, 'error')
    // decoded once by the query string, never again: %252e%252e is a name, not `..` (security review)
    writeFileSync(join(userDir, 'default', 'outside.json'), '{"secret":true}')
    const twice = await call(sc, { url: '/api/cpe/workflow/get?filename=%252e%252e/outside', bearer: aliceToken })
    assert.equal(twice.statusCode, 404, twice.body)
    const viaUserdata = await decide(sc, read(aliceToken, 'workflows/%252e%252e/outside.json')) as Decision & { body_text?: string }
    assert.notEqual(viaUserdata.body_text, '{"secret":true}')
    for (const bad of ['../x', '/etc/passwd', '.hidden', 'a/../../b']) {
      const r = await call(sc, { url: `/api/cpe/workflow/get?filename=${encodeURIComponent(bad)}`, bearer: aliceToken })
      assert.equal(r.statusCode, 400, bad)
    }
    assert.deepEqual((await call(sc, { url: '/api/cpe/health', bearer: aliceToken })).json(), { status: 'success' })
    assert.equal((await call(sc, { url: '/api/cpe/health', peer: '203.0.113.9' })).statusCode, 401)
  })

  it('the workflow-name rule', () => {
    assert.equal(workflowName('a'), 'a.json')
    assert.equal(workflowName('dir/b.JSON'), 'dir/b.JSON')
    for (const bad of ['', '..', 'a/../b', '/abs', '.dot', 'a//b', 'c:d']) assert.equal(workflowName(bad), null, bad)
  })

  it('an admin publishes one of his workflows to the shared set', async () => {
    mkdirSync(join(userDir, admin.user_id, 'workflows'), { recursive: true })
    writeFileSync(own(admin, 'release.json'), '{"v":1}')
    const r = await call(sc, { method: 'POST', url: '/authsvc/api/workflows/publish', bearer: adminToken, body: { filename: 'release.json' } })
    assert.equal(r.statusCode, 200, r.body)
    assert.equal(readFileSync(shared('release.json'), 'utf8'), '{"v":1}')
    const denied = await call(sc, { method: 'POST', url: '/authsvc/api/workflows/publish', bearer: aliceToken, body: { filename: 'clash.json' } })
    assert.equal(denied.statusCode, 403)
  })

  it('GET /users answers the single-user shape (no list of accounts); POST /users is refused', async () => {
    const d = await decide(sc, { path: '/users', pattern: '/users', headers: bearer(aliceToken) }) as Decision & { body_text?: string }
    assert.deepEqual(JSON.parse(d.body_text!), { storage: 'server', migrated: true })
    assertDenied(await decide(sc, { method: 'POST', path: '/users', pattern: '/users', headers: bearer(adminToken) }), 'PERMISSION_DENIED')
  })
})

describe('unquoteOnce reads a name as Python\'s urllib.parse.unquote does (the host unquotes userdata names once more)', () => {
  it('the same text as Python for every shape of escape: valid, invalid UTF-8, cut sequences, overlong forms, lone % and bad hex', () => {
    const names = [
      'plain.json', 'a%2Fb', 'workflows%2Fa.json', 'x%ff%2F..%2Fworkflows%2Fa.json', 'x%e2%82%2F..', '%c0%ae%c0%ae%2F', '%ed%a0%80%2F',
      '%f4%90%80%80/x', 'a%zz%2F', '%', '%%2F', '%2', '%2F%', 'caf%C3%A9%2F..', 'a%e2b%82c', '%F0%9F%98%80%2F..%2F', 'é%2Fü', '%00%2F',
    ]
    const python = spawnSync(PYTHON, ['-c', 'import json, sys, urllib.parse; print(json.dumps([urllib.parse.unquote(n) for n in json.load(sys.stdin)]))'], { input: JSON.stringify(names), encoding: 'utf8' })
    assert.equal(python.status, 0, python.stderr)
    const want = JSON.parse(python.stdout) as string[]
    assert.deepEqual(names.map((n) => unquoteOnce(n)), want)
  })
})
