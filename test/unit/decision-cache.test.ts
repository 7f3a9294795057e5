/**
 * Kept decisions, sidecar side: which passes the plugin may reuse (`cache`), and the access
 * epoch: every change a decision reads, or a kept filter's memo names (prompt and file
 * ownership, the model lists), bumps it and pushes `forget` at once, synchronously, before the
 * change's own caller goes on; bookkeeping (last-used times) does not.
 */
import assert from 'node:assert/strict'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import type { Decision } from '../../sidecar/src/kernel/protocol.js'
import type { UserRecord } from '../../sidecar/src/identity/users.js'
import { bearer, addUser, apiToken, assertDenied, assertPass, call, decide, describeRequest, openSidecar, sessionJwt, type Sidecar } from './fixtures.js'
import { PROTOCOL_VERSION } from '../../sidecar/src/kernel/protocol.js'

const cacheOf = (d: Decision) => (d.action === 'pass' ? d.cache : undefined)

describe('kept decisions: what may be reused', () => {
  let sc: Sidecar
  let admin: UserRecord
  let alice: UserRecord
  let token: string
  let adminJwt: string
  before(async () => {
    sc = await openSidecar()
    admin = await addUser(sc, 'root', 'a-long-password-1', 'admin')
    alice = await addUser(sc, 'alice', 'a-long-password-1')
    token = await apiToken(sc, alice)
    adminJwt = await sessionJwt(sc, admin)
    await sc.services.ownership.recordPrompt({ prompt_id: 'p-1', owner: alice.user_id, user_id: alice.user_id, username: 'alice', client_id: 'c-1', created_at_iso: new Date(sc.clock()).toISOString() })
  })
  after(() => sc.close())

  it('a plain GET or HEAD pass is kept for 1 s at the current epoch', async () => {
    for (const method of ['GET', 'HEAD']) {
      const pass = assertPass(await decide(sc, { method, path: '/prompt', headers: bearer(token) }), method)
      assert.deepEqual(pass.cache, { ms: 1000, epoch: sc.services.accessEpoch.value }, method)
    }
  })

  // keepable behaviours: their decision reads the principal and what the filter's memo names
  const keptFiltered: Array<[string, Parameters<typeof decide>[1], string | null]> = [
    ['GET /queue (filtered to the caller\'s items)', { path: '/queue' }, 'queue'],
    ['GET /history (filtered)', { path: '/history', query: 'max_items=5' }, 'history'],
    ['GET /api/history (filtered)', { path: '/api/history', pattern: '/api/history' }, 'history'],
    ['GET /object_info (upload lists filtered)', { path: '/object_info' }, 'object_info'],
    ['HEAD /queue', { method: 'HEAD', path: '/queue' }, 'queue'],
  ]
  for (const [label, o, filter] of keptFiltered) {
    it(`kept, with its filter and memo: ${label}`, async () => {
      const pass = assertPass(await decide(sc, { ...o, headers: bearer(token) }), label)
      assert.deepEqual(pass.cache, { ms: 1000, epoch: sc.services.accessEpoch.value }, label)
      assert.equal(pass.filter?.name, filter, label)
      assert.equal(typeof pass.filter?.memo, 'string', `${label}: a kept filter always names its memo`)
    })
  }

  it('kept: an admin\'s /object_info and /queue (no filter at all, or the unfiltered view)', async () => {
    for (const path of ['/object_info', '/queue', '/history']) {
      const pass = assertPass(await decide(sc, { path, headers: bearer(adminJwt) }), path)
      assert.equal(pass.cache?.epoch, sc.services.accessEpoch.value, path)
    }
  })

  const notKept: Array<[string, Parameters<typeof decide>[1], 'pass' | 'respond' | 'proxy']> = [
    ['POST to a plain route', { method: 'POST', path: '/free', pattern: '/free' }, 'pass'],
    ['POST /queue (a scoped delete: needs its body)', { method: 'POST', path: '/queue' }, 'pass'],
    ['a behaviour that is not keepable (one history entry, the caller\'s own: passed to the host)', { path: '/history/p-1', pattern: '/history/{prompt_id}', match_info: { prompt_id: 'p-1' } }, 'pass'],
    ['a route behaviour (system_stats filter)', { path: '/system_stats' }, 'pass'],
    ['a WebSocket upgrade', { path: '/ws', headers: { upgrade: 'websocket', connection: 'Upgrade' } }, 'pass'],
    ['an owned route (proxied)', { path: '/authsvc/health' }, 'proxy'],
    ['OPTIONS', { method: 'OPTIONS', path: '/prompt' }, 'respond'],
  ]
  for (const [label, o, action] of notKept) {
    it(`not kept: ${label}`, async () => {
      const credential = label.startsWith('POST to') ? adminJwt : token
      const d = await decide(sc, { ...o, headers: { ...bearer(credential), ...(o.headers ?? {}) } })
      assert.equal(d.action, action, label)
      assert.equal(cacheOf(d), undefined, label)
    })
  }

  it('not kept: a refusal', async () => {
    const d = assertDenied(await decide(sc, { path: '/prompt' }), 'AUTH_REQUIRED')
    assert.equal((d as unknown as { cache?: unknown }).cache, undefined)
    const revokedLater = await apiToken(sc, alice)
    await sc.services.tokens.revokeAllForUser(alice.user_id)
    const refused = await decide(sc, { path: '/prompt', headers: bearer(revokedLater) })
    assert.equal(refused.action, 'respond')
    assert.equal((refused as unknown as { cache?: unknown }).cache, undefined)
  })
})

describe('the access epoch: every change a decision reads is pushed at once', () => {
  let sc: Sidecar
  let admin: UserRecord
  let bob: UserRecord
  const pushed: number[] = []
  before(async () => {
    sc = await openSidecar()
    admin = await addUser(sc, 'root', 'a-long-password-1', 'admin')
    bob = await addUser(sc, 'bob', 'a-long-password-1')
    sc.built.setPush((m) => {
      if (m.type === 'forget') pushed.push(m.epoch)
    })
  })
  after(() => sc.close())

  /**
   * Runs `change`; asserts one or more forgets were pushed before it resolved, each naming the
   * epoch as it is now, and (with `visible`) that the last one was pushed once the change was
   * there for decisions to read, never before.
   */
  async function bumps(label: string, change: () => unknown, visible?: () => boolean): Promise<void> {
    const epoch = sc.services.accessEpoch.value
    pushed.length = 0
    const seenAtPush: boolean[] = []
    if (visible) {
      sc.built.setPush((m) => {
        if (m.type !== 'forget') return
        pushed.push(m.epoch)
        seenAtPush.push(visible())
      })
    }
    try {
      await change()
    } finally {
      if (visible) sc.built.setPush((m) => {
        if (m.type === 'forget') pushed.push(m.epoch)
      })
    }
    if (visible) assert.equal(seenAtPush.at(-1), true, `${label}: the change was visible when the forget went`)
    assert.ok(pushed.length > 0, `${label}: a forget was pushed`)
    assert.ok(sc.services.accessEpoch.value > epoch, `${label}: the epoch moved`)
    assert.equal(pushed.at(-1), sc.services.accessEpoch.value, `${label}: the last forget names the current epoch`)
  }

  const rows: Array<[string, () => unknown, (() => boolean)?]> = [
    ['a new API token', async () => apiToken(sc, bob)],
    ['a token revoked', async () => sc.services.tokens.revokeAllForUser(bob.user_id)],
    ['a session issued', async () => sessionJwt(sc, bob)],
    ['a session revoked', async () => sc.services.sessions.revoke((await sc.services.sessions.activeForUser(bob.user_id))[0].jti)],
    ['a role change', async () => sc.services.users.update(bob.user_id, { role: 'guest' }, 'narrows')],
    ['a user disabled', async () => sc.services.users.update(bob.user_id, { disabled: true }, 'narrows')],
    ['a setting changed', async () => sc.services.settings.set('allow_guest_jwt', true)],
    ['the groups replaced', () => sc.services.roles.replace(sc.services.roles.snapshot())],
    // an edit on disk (a reload of the unchanged file is no change: roles.test.ts)
    ['the groups file edited and reloaded', () => {
      writeFileSync(join(sc.dir, 'authsvc_groups.json'), JSON.stringify({ ...sc.services.roles.snapshot(), epoch_role: { can_run: true } }))
      assert.ok(sc.services.roles.reload())
    }],
    ['the IP lists changed', () => sc.services.ipGate.update({ whitelist: [], blacklist: [{ ip: '10.9.9.9', permanent: true }] })],
    ['a model grant', async () => sc.services.modelGrants.grant({ user_id: bob.user_id, folder: 'checkpoints', item_name: 'a.safetensors', granted_by: admin.user_id, created_at_iso: new Date(sc.clock()).toISOString() })],
    ['a user deleted', async () => sc.services.users.delete(bob.user_id)],
    // what the memo of a kept filter names: a kept /queue or /history must not outlive a new prompt
    ['a prompt recorded (its owner sees it in a kept /queue at once)', () => sc.services.ownership.recordPrompt({ prompt_id: 'p-epoch-1', owner: admin.user_id, user_id: admin.user_id, username: 'root', client_id: 'c-1', created_at_iso: new Date(sc.clock()).toISOString() }),
      () => sc.services.ownership.promptIdsOf(admin.user_id).has('p-epoch-1')],
    ['a file gains an owner (an upload in a kept /object_info)', () => sc.services.ownership.addFileOwner('input/epoch.png', admin.user_id, undefined, new Date(sc.clock())),
      () => sc.services.ownership.file('input/epoch.png')?.owners.includes(admin.user_id) === true],
    ['a file gains a second owner', () => sc.services.ownership.addFileOwner('input/epoch.png', bob.user_id, undefined, new Date(sc.clock())),
      () => sc.services.ownership.file('input/epoch.png')?.owners.includes(bob.user_id) === true],
    ['a file is gone', () => sc.services.ownership.forgetFile('input/epoch.png'), () => sc.services.ownership.file('input/epoch.png') === undefined],
  ]
  for (const [label, change, visible] of rows) it(`bumps: ${label}`, () => bumps(label, change, visible))

  it('a decision made before a change is not kept under the new epoch; one made after is', async () => {
    const carol = await addUser(sc, 'carol', 'a-long-password-1')
    const token = await apiToken(sc, carol)
    const first = assertPass(await decide(sc, { path: '/prompt', headers: bearer(token) }))
    await sc.services.settings.set('allow_guest_jwt', false)
    const second = assertPass(await decide(sc, { path: '/prompt', headers: bearer(token) }))
    assert.ok(second.cache!.epoch > first.cache!.epoch)
    assert.equal(second.cache!.epoch, sc.services.accessEpoch.value)
  })

  it('a decision whose state changed while it was being made (an asynchronous signature check) is not kept', async () => {
    const erin = await addUser(sc, 'erin', 'a-long-password-1')
    const jwt = await sessionJwt(sc, erin) // never verified yet: its check is asynchronous
    const pending = sc.handlers.decide(describeRequest({ path: '/prompt', headers: bearer(jwt) }))
    assert.ok(pending instanceof Promise, 'a first verification is asynchronous')
    sc.services.ipGate.update({ whitelist: [], blacklist: [] }) // a change while it is decided
    const pass = assertPass(await pending)
    assert.equal(pass.cache, undefined, 'not kept: decided across a change')
    const again = assertPass(await decide(sc, { path: '/prompt', headers: bearer(jwt) }))
    assert.equal(again.cache?.epoch, sc.services.accessEpoch.value, 'kept once nothing moved while deciding')
  })

  it('does not bump: using a credential (last-used bookkeeping), or an owner a file already has', async () => {
    const dave = await addUser(sc, 'dave', 'a-long-password-1')
    const token = await apiToken(sc, dave)
    await sc.services.ownership.addFileOwner('output/dave.png', dave.user_id, undefined, new Date(sc.clock()))
    const epoch = sc.services.accessEpoch.value
    pushed.length = 0
    sc.clock.advance(3600_000) // past the last-used write interval: the next use writes last_used
    assertPass(await decide(sc, { path: '/prompt', headers: bearer(token) }))
    await sc.services.ownership.addFileOwner('output/dave.png', dave.user_id, undefined, new Date(sc.clock()))
    await sc.services.ownership.claimFile('output/dave.png', admin.user_id, undefined, new Date(sc.clock()))
    await sc.services.flush()
    assert.equal(sc.services.accessEpoch.value, epoch)
    assert.deepEqual(pushed, [])
  })

  it('bumps: the host\'s model facts, and every change of the model lists a kept /object_info filters by', { timeout: 15_000 }, async () => {
    const modelsDir = join(sc.dir, 'models')
    mkdirSync(join(modelsDir, 'checkpoints'), { recursive: true })
    const host = {
      model_folders: { checkpoints: [join(modelsDir, 'checkpoints')] },
      model_folder_extensions: { checkpoints: ['.safetensors'] },
      legacy_folders: {},
      model_inputs: { CheckpointLoaderSimple: { ckpt_name: { folders: ['checkpoints'], extras: [] } } },
    }
    let epoch = sc.services.accessEpoch.value
    pushed.length = 0
    sc.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 'test', host })
    assert.ok(sc.services.accessEpoch.value > epoch && pushed.at(-1) === sc.services.accessEpoch.value, 'new facts: pushed before the hello is answered')
    // the scan the hello started, then a file written on disk: each visible change is pushed
    const forgetAfter = (from: number): Promise<void> => new Promise((resolve) => {
      sc.built.setPush((m) => {
        if (m.type !== 'forget') return
        pushed.push(m.epoch)
        if (m.epoch > from) resolve()
      })
    })
    const admin2 = await sessionJwt(sc, admin)
    const refreshed = await call(sc, { method: 'POST', url: '/authsvc/api/model-cache/refresh', bearer: admin2 })
    assert.equal(refreshed.statusCode, 200, refreshed.body)
    epoch = sc.services.accessEpoch.value
    const moved = forgetAfter(epoch)
    writeFileSync(join(modelsDir, 'checkpoints', 'new.safetensors'), 'model')
    await moved
    assert.ok(sc.services.accessEpoch.value > epoch)
    const items = await call(sc, { method: 'GET', url: '/authsvc/api/model-cache/folders/checkpoints/items', bearer: admin2 })
    assert.deepEqual(JSON.parse(items.body).items, ['new.safetensors'], 'the forget came with the file in the lists')
  })
})
