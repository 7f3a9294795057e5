/**
 * Per-user isolation through the real decider and its later steps (body, form,
 * filter, host events), with the real services and sqlite file: an attack table
 * of what bob must not do to alice's things, and what alice can still do with
 * them. End to end on the real ComfyUI: test/e2e/real-host-isolation.test.ts.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { PROTOCOL_VERSION } from '../../sidecar/src/decide/protocol.js'
import { userFolder } from '../../sidecar/src/isolation/user-folders.js'
import type { UserRecord } from '../../sidecar/src/identity/users.js'
import { CLOSE_ACCESS_CHANGED, CLOSE_CREDENTIAL_ENDED } from '../../sidecar/src/isolation/credential-state.js'
import {
  bearer, addUser, apiToken, assertDenied, assertPass, decide, openSidecar, sessionJwt, stepAnswer, type DescOptions, type Sidecar, type Stepped,
} from './fixtures.js'

interface World {
  sc: Sidecar
  admin: UserRecord
  alice: UserRecord
  bob: UserRecord
  adminJwt: string
  aliceJwt: string
  bobJwt: string
}

async function world(config: Record<string, unknown> = {}): Promise<World> {
  const sc = await openSidecar({ config, host: true })
  const admin = await addUser(sc, 'admin', 'admin-password-1', 'admin')
  const alice = await addUser(sc, 'alice', 'alice-password-1')
  const bob = await addUser(sc, 'bob', 'bob-password-12')
  return {
    sc, admin, alice, bob,
    adminJwt: await sessionJwt(sc, admin), aliceJwt: await sessionJwt(sc, alice), bobJwt: await sessionJwt(sc, bob),
  }
}

/** POST /prompt as `jwt` with this raw body: the body step's answer. */
async function postPrompt(sc: Sidecar, jwt: string, body: string): Promise<Stepped> {
  const d = assertPass(await decide(sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: bearer(jwt) }))
  return stepAnswer(await sc.handlers.body({ type: 'body', id: 1, ctx: d.need_body!.ctx }, Buffer.from(body, 'utf8'), sc.host))
}

/** The prompt_id a passed prompt body carries. */
async function ownPrompt(sc: Sidecar, jwt: string, extra = ''): Promise<string> {
  const out = await postPrompt(sc, jwt, `{"prompt":{"1":{}}${extra}}`)
  assert.equal(out.action, 'pass', JSON.stringify(out))
  return (JSON.parse(out.body_text!) as { prompt_id: string }).prompt_id
}

async function withBody(sc: Sidecar, o: DescOptions, body: string): Promise<Stepped> {
  const d = await decide(sc, o)
  if (d.action !== 'pass' || !('need_body' in d) || d.need_body === undefined) return d as Stepped
  return stepAnswer(await sc.handlers.body({ type: 'body', id: 1, ctx: d.need_body.ctx }, Buffer.from(body, 'utf8'), sc.host))
}

async function filtered(sc: Sidecar, o: DescOptions, hostAnswer: string): Promise<string | 'unchanged'> {
  const d = assertPass(await decide(sc, o))
  if (!d.filter) return 'unchanged'
  const out = stepAnswer(await sc.handlers.filter({ type: 'filter', id: 1, name: d.filter.name, ctx: d.filter.ctx, status: 200, content_type: 'application/json' }, Buffer.from(hostAnswer, 'utf8')))
  return (out.action as string) === 'keep' ? 'unchanged' : out.body_text!
}

const event = (sc: Sidecar, name: string, data: Record<string, unknown>, t = Date.now() / 1000) => sc.handlers.event({ type: 'event', name, t, data })

describe('prompt ownership at POST /prompt', () => {
  let w: World
  before(async () => {
    w = await world()
  })
  after(() => w.sc.close())

  it('the body reaches the host byte for byte but for the keys authsvc sets (64-bit seed, 1e400, \\u escapes, key order)', async () => {
    const raw = '{"prompt": {"3": {"class_type": "KSampler", "inputs": {"seed": 18446744073709551615, "cfg": 1e400, "text": "caf\\u00e9 \\ud83d\\ude00"}}}, "client_id": "alice-tab", "extra_data": {"extra_pnginfo": {"n": 12345678901234567890}}}'
    const out = await postPrompt(w.sc, w.aliceJwt, raw)
    assert.equal(out.action, 'pass')
    const sent = out.body_text!
    const promptId = (JSON.parse(sent) as { prompt_id: string }).prompt_id
    assert.match(promptId, /^[0-9a-f-]{36}$/)
    // the node's cache entry is hers (prompt-files.ts): authsvc_scope is added to its inputs
    const expected = raw
      .replace('\\ud83d\\ude00"}', `\\ud83d\\ude00","authsvc_scope":"${userFolder(w.alice.user_id)}"}`)
      .replace('{"extra_pnginfo": {"n": 12345678901234567890}}', `{"extra_pnginfo": {"n": 12345678901234567890},"authsvc_user":"alice","authsvc_user_id":"${w.alice.user_id}","authsvc_folder":"${userFolder(w.alice.user_id)}"}`)
      .replace(/}$/, `,"prompt_id":"${promptId}"}`)
    assert.equal(sent, expected)
  })

  it('a prompt without client_id gets a fresh id of its owner (no broadcast), bound to her', async () => {
    const out = await postPrompt(w.sc, w.aliceJwt, '{"prompt":{}}')
    const clientId = (JSON.parse(out.body_text!) as { client_id: string }).client_id
    assert.match(clientId, /^authsvc-/)
    assertDenied(await decide(w.sc, { path: '/ws', pattern: '/ws', query: `clientId=${clientId}`, headers: bearer(w.bobJwt) }), 'CLIENT_ID_TAKEN')
    assertPass(await decide(w.sc, { path: '/ws', pattern: '/ws', query: `clientId=${clientId}`, headers: bearer(w.aliceJwt) }))
  })

  const HIJACKS: Array<[string, string]> = [
    ['top-level client_id', '{"prompt":{},"client_id":"alice-tab"}'],
    ['extra_data.client_id', '{"prompt":{},"extra_data":{"client_id":"alice-tab"}}'],
    ['extra_data.client_id behind a top-level one of his own', '{"prompt":{},"client_id":"bob-tab","extra_data":{"client_id":"alice-tab"}}'],
  ]
  for (const [name, body] of HIJACKS) {
    it(`bob naming alice's socket in ${name} → 403 CLIENT_ID_TAKEN`, async () => {
      assertDenied(await postPrompt(w.sc, w.bobJwt, body), 'CLIENT_ID_TAKEN')
    })
  }

  it('"client_id": null (which ComfyUI would broadcast) is replaced by a fresh id', async () => {
    const out = JSON.parse((await postPrompt(w.sc, w.bobJwt, '{"prompt":{},"client_id":null,"extra_data":{"client_id":null}}')).body_text!) as { client_id: string }
    assert.match(out.client_id, /^authsvc-/)
  })

  it('a client prompt_id is accepted only when nobody else owns it', async () => {
    const out = JSON.parse((await postPrompt(w.sc, w.aliceJwt, '{"prompt":{},"prompt_id":"mine-1"}')).body_text!) as { prompt_id: string }
    assert.equal(out.prompt_id, 'mine-1')
    assertDenied(await postPrompt(w.sc, w.bobJwt, '{"prompt":{},"prompt_id":"mine-1"}'), 'PROMPT_ID_TAKEN')
    assert.equal((await postPrompt(w.sc, w.aliceJwt, '{"prompt":{},"prompt_id":"mine-1"}')).action, 'pass', 'her own again')
    for (const bad of ['null', '7', '""', '["x"]']) assertDenied(await postPrompt(w.sc, w.bobJwt, `{"prompt":{},"prompt_id":${bad}}`), 'VALIDATION_FAILED', bad)
  })

  it('two submissions of one prompt_id at once: exactly one owner gets it', async () => {
    const [a, b] = await Promise.all([
      postPrompt(w.sc, w.aliceJwt, '{"prompt":{},"prompt_id":"race-1"}'),
      postPrompt(w.sc, w.bobJwt, '{"prompt":{},"prompt_id":"race-1"}'),
    ])
    assert.deepEqual([a.action, b.action].sort(), ['pass', 'respond'])
    assert.equal(w.sc.services.ownership.ownerOfPrompt('race-1'), a.action === 'pass' ? w.alice.user_id : w.bob.user_id)
  })

  // ComfyUI reads `front` with Python's truthiness: every value it takes as true is a queue jump
  const frontRows: Array<[string, boolean]> = [
    ['true', true], ['1', true], ['-1', true], ['0.5', true], ['1e300', true], ['"yes"', true], ['"false"', true], ['"0"', true],
    ['[0]', true], ['[false]', true], ['{"a":0}', true], ['false', false], ['null', false], ['0', false], ['0.0', false],
    ['-0', false], ['0e5', false], ['""', false], ['[]', false], ['{}', false],
  ]
  for (const [value, jumps] of frontRows) {
    it(`front: ${value} is ${jumps ? 'refused to a non-admin (the host puts it first)' : 'fine (the host does not put it first)'}`, async () => {
      const decision = await postPrompt(w.sc, w.bobJwt, `{"prompt":{},"front":${value}}`)
      if (jumps) assertDenied(decision, 'PERMISSION_DENIED')
      else assert.equal(decision.action, 'pass')
    })
  }

  it('a duplicated front key is read as the host reads it: the last one', async () => {
    assertDenied(await postPrompt(w.sc, w.bobJwt, '{"prompt":{},"front":false,"front":1}'), 'PERMISSION_DENIED')
    assert.equal((await postPrompt(w.sc, w.bobJwt, '{"prompt":{},"front":1,"front":false}')).action, 'pass')
  })

  it('non-admins cannot choose their place in the queue; a prompt_id is a plain name', async () => {
    assertDenied(await postPrompt(w.sc, w.bobJwt, '{"prompt":{},"front":true}'), 'PERMISSION_DENIED')
    assertDenied(await postPrompt(w.sc, w.bobJwt, '{"prompt":{},"number":-5}'), 'PERMISSION_DENIED')
    assert.equal((await postPrompt(w.sc, w.adminJwt, '{"prompt":{},"front":true}')).action, 'pass')
    assertDenied(await postPrompt(w.sc, w.bobJwt, '{"prompt":{},"prompt_id":"p+ACI-"}'), 'VALIDATION_FAILED')
  })

  it('ownership is in the store: a restarted sidecar still knows whose prompt it is', async () => {
    const id = await ownPrompt(w.sc, w.aliceJwt)
    await w.sc.services.flush()
    const again = await openSidecar({ dir: w.sc.dir })
    try {
      assert.equal(again.services.ownership.ownerOfPrompt(id), w.alice.user_id)
    } finally {
      await again.close({ keepDir: true })
    }
  })

  it('a body that is not UTF-8 is refused, never mangled', async () => {
    const d = assertPass(await decide(w.sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: bearer(w.aliceJwt) }))
    assertDenied(stepAnswer(await w.sc.handlers.body({ type: 'body', id: 1, ctx: d.need_body!.ctx }, Buffer.from([0x7b, 0xff, 0x7d]))), 'VALIDATION_FAILED')
  })
})

describe('queue, history and actions per owner', () => {
  let w: World
  let alicePrompt: string
  let bobPrompt: string
  const queueItem = (id: string, extra: string) => `[1, "${id}", {"1": {"inputs": {"seed": 18446744073709551615}}}, ${extra}, ["1"]]`
  let queue: string
  before(async () => {
    w = await world()
    alicePrompt = await ownPrompt(w.sc, w.aliceJwt)
    bobPrompt = await ownPrompt(w.sc, w.bobJwt)
    queue = `{"queue_running": [${queueItem(alicePrompt, '{"client_id": "a", "api_key_comfy_org": "ALICE-KEY"}')}], "queue_pending": [${queueItem(bobPrompt, '{"client_id": "b"}')}, ${queueItem('before-authsvc', '{}')}]}`
  })
  after(() => w.sc.close())

  it('GET /queue: bob sees only his item; alice only hers, with her own secret', async () => {
    const forBob = await filtered(w.sc, { path: '/queue', pattern: '/queue', headers: bearer(w.bobJwt) }, queue)
    assert.equal(forBob, `{"queue_running": [], "queue_pending": [${queueItem(bobPrompt, '{"client_id": "b"}')}]}`)
    const forAlice = JSON.parse(await filtered(w.sc, { path: '/api/queue', pattern: '/api/queue', headers: bearer(w.aliceJwt) }, queue) as string) as { queue_running: unknown[][]; queue_pending: unknown[] }
    assert.equal(forAlice.queue_running[0][1], alicePrompt)
    assert.equal((forAlice.queue_running[0][3] as Record<string, unknown>).api_key_comfy_org, 'ALICE-KEY')
    assert.equal(forAlice.queue_pending.length, 0)
  })

  it('GET /queue: the admin sees everything, but not alice\'s secret; numbers stay as the host wrote them', async () => {
    const forAdmin = await filtered(w.sc, { path: '/queue', pattern: '/queue', headers: bearer(w.adminJwt) }, queue) as string
    assert.doesNotMatch(forAdmin, /ALICE-KEY/)
    assert.match(forAdmin, /18446744073709551615/)
    const parsed = JSON.parse(forAdmin) as { queue_running: unknown[]; queue_pending: unknown[] }
    assert.equal(parsed.queue_running.length + parsed.queue_pending.length, 3)
  })

  const history = () => `{"${alicePrompt}": {"prompt": [1]}, "${bobPrompt}": {"prompt": [2]}, "old": {"prompt": [3]}}`

  it('GET /history: bob gets only his entries; max_items/offset apply to his own', async () => {
    const d = assertPass(await decide(w.sc, { path: '/history', pattern: '/history', query: 'max_items=1&offset=0', headers: bearer(w.bobJwt) }))
    assert.deepEqual(d.drop_query, ['max_items', 'offset'], 'the host is asked for everything')
    assert.equal(await filtered(w.sc, { path: '/history', pattern: '/history', query: 'max_items=1', headers: bearer(w.bobJwt) }, history()), `{"${bobPrompt}": {"prompt": [2]}}`)
    assert.equal(await filtered(w.sc, { path: '/history', pattern: '/history', query: 'max_items=1&offset=1', headers: bearer(w.bobJwt) }, history()), '{}')
    assert.equal(await filtered(w.sc, { path: '/history', pattern: '/history', headers: bearer(w.adminJwt) }, history()), 'unchanged')
  })

  for (const q of ['max_items=1_0', 'max_items=%EF%BC%91', 'offset=%D9%A1', 'max_items=1.5', 'max_items=']) {
    it(`GET /history?${q} (numbers Python reads and the sidecar would not) → 400, never unfiltered`, async () => {
      assertDenied(await decide(w.sc, { path: '/history', pattern: '/history', query: q, headers: bearer(w.bobJwt) }), 'VALIDATION_FAILED')
    })
  }

  it('every body the sidecar checks reaches the host as plain application/json (no client charset: utf-7 would read other keys)', async () => {
    for (const [method, path] of [['POST', '/prompt'], ['POST', '/queue'], ['POST', '/history'], ['POST', '/interrupt']]) {
      const d = assertPass(await decide(w.sc, { method, path, pattern: path, headers: { ...bearer(w.bobJwt), 'content-type': 'application/json; charset=utf-7' } }))
      assert.ok(d.need_body, path)
      assert.equal(d.set_headers?.['content-type'], 'application/json', path)
    }
  })

  it('GET /history/{id}: someone else\'s entry answers {} without asking the host', async () => {
    const d = await decide(w.sc, { path: `/history/${alicePrompt}`, pattern: '/history/{prompt_id}', match_info: { prompt_id: alicePrompt }, headers: bearer(w.bobJwt) })
    assert.equal(d.action, 'respond')
    assert.equal((d as { body_text: string }).body_text, '{}')
    assertPass(await decide(w.sc, { path: `/history/${alicePrompt}`, pattern: '/history/{prompt_id}', match_info: { prompt_id: alicePrompt }, headers: bearer(w.aliceJwt) }))
  })

  const writes: Array<[string, string]> = [['/queue', '/queue'], ['/history', '/history'], ['/api/queue', '/api/queue']]
  let reports = 0
  for (const [path, pattern] of writes) {
    it(`POST ${path}: bob deleting alice's id → 403 NOT_OWNER; clear → a delete of his own ids only`, async () => {
      const o = { method: 'POST', path, pattern, headers: bearer(w.bobJwt) }
      assertDenied(await withBody(w.sc, o, JSON.stringify({ delete: [alicePrompt] })), 'NOT_OWNER')
      assertDenied(await withBody(w.sc, o, JSON.stringify({ delete: [bobPrompt, alicePrompt] })), 'NOT_OWNER', 'one foreign id in the list')
      const own = await withBody(w.sc, o, JSON.stringify({ delete: [bobPrompt] }))
      assert.deepEqual(JSON.parse(own.body_text!), { delete: [bobPrompt] })
      // clear: only his ids still there (queue: waiting; history: finished), as the host last reported
      const queued = pattern.endsWith('/queue')
      // his prompt running (for the queue) or waiting (for the history): not there to clear
      event(w.sc, 'host_prompts', { seq: ++reports, running: queued ? [bobPrompt] : [], pending: queued ? [alicePrompt] : [bobPrompt], added: [alicePrompt], gone: [] })
      assert.deepEqual(JSON.parse((await withBody(w.sc, o, JSON.stringify({ clear: true }))).body_text!), { delete: [] }, 'nothing of his is there')
      event(w.sc, 'host_prompts', { seq: ++reports, running: [], pending: queued ? [bobPrompt, alicePrompt] : [], added: [bobPrompt], gone: [] })
      const clear = await withBody(w.sc, o, JSON.stringify({ clear: true }))
      assert.deepEqual(JSON.parse(clear.body_text!), { delete: [bobPrompt] })
      for (const bad of ['[]', '{"delete": "abc"}', '{"delete": [1]}', 'nonsense']) assertDenied(await withBody(w.sc, o, bad), 'VALIDATION_FAILED', bad)
      assertPass(await decide(w.sc, { ...o, headers: bearer(w.adminJwt) }), 'the admin clears for everyone')
    })
  }

  it('POST /interrupt: only a running prompt of the caller', async () => {
    const o = (jwt: string) => ({ method: 'POST', path: '/interrupt', pattern: '/interrupt', headers: bearer(jwt) })
    assertDenied(await withBody(w.sc, o(w.bobJwt), ''), 'NOT_OWNER', 'nothing of his runs')
    event(w.sc, 'execution_start', { prompt_id: alicePrompt })
    assertDenied(await withBody(w.sc, o(w.bobJwt), ''), 'NOT_OWNER', 'without prompt_id')
    assertDenied(await withBody(w.sc, o(w.bobJwt), JSON.stringify({ prompt_id: alicePrompt })), 'NOT_OWNER', 'naming hers')
    assert.deepEqual(JSON.parse((await withBody(w.sc, o(w.aliceJwt), '')).body_text!), { prompt_id: alicePrompt }, 'hers, pinned to its id')
    assert.deepEqual(JSON.parse((await withBody(w.sc, o(w.aliceJwt), 'not json')).body_text!), { prompt_id: alicePrompt })
    event(w.sc, 'execution_end', { prompt_id: alicePrompt, status: 'success' })
    assertDenied(await withBody(w.sc, o(w.aliceJwt), ''), 'NOT_OWNER', 'after her run ended')
  })

  it('with seperate_users false everything is shared, secrets still filtered', async () => {
    const shared = await world({ seperate_users: false })
    try {
      const a = await ownPrompt(shared.sc, shared.aliceJwt)
      const q = `{"queue_running": [], "queue_pending": [${queueItem(a, '{"auth_token_comfy_org": "SECRET"}')}]}`
      const forBob = await filtered(shared.sc, { path: '/queue', pattern: '/queue', headers: bearer(shared.bobJwt) }, q) as string
      assert.match(forBob, new RegExp(a))
      assert.doesNotMatch(forBob, /SECRET/)
      assertPass(await decide(shared.sc, { method: 'POST', path: '/queue', pattern: '/queue', headers: bearer(shared.bobJwt) }))
    } finally {
      await shared.sc.close()
    }
  })
})

describe('files: per-user folders, decided on the path the host resolves', () => {
  // The plugin's own resolver (host-plugin/host_paths.py) over the stand-in's folder_paths, rooted
  // at <sidecar dir>/host; the same rows run through the gate on the real ComfyUI
  // (test/e2e/real-host-isolation.test.ts).
  let w: World
  let hostDir: string
  let A: string // alice's folder name
  let B: string // bob's
  const put = (rel: string, text = 'x') => {
    mkdirSync(join(hostDir, rel, '..'), { recursive: true })
    writeFileSync(join(hostDir, rel), text)
  }
  before(async () => {
    w = await world()
    hostDir = join(w.sc.dir, 'host')
    A = userFolder(w.alice.user_id)
    B = userFolder(w.bob.user_id)
    w.sc.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 't', host: { output_dir: join(hostDir, 'output'), input_dir: join(hostDir, 'input'), temp_dir: join(hostDir, 'temp'), writer_inputs: { SaveLoRANode: ['prefix'] } } })
    put(`output/${A}/a_00001_.png`)
    put(`input/${A}/pets/cat.png`)
    put(`input/${A}/cat\nx.png`)
    put(`input/${A}/x.latent`)
    put(`input/${B}/mine.png`)
    put(`input/${A.toUpperCase()}/upper.png`)
    put('input/shared.png')
    // from before per-user folders: owned by the table (an upload, an output, a preview the host named)
    put('input/old/cat-legacy.png')
    put('output/legacy_00001_.png')
    put('temp/x/prev.png')
    const now = new Date()
    for (const key of ['input/old/cat-legacy.png', 'output/legacy_00001_.png', 'temp/x/prev.png']) await w.sc.services.ownership.addFileOwner(key, w.alice.user_id, undefined, now)
    symlinkSync(join(hostDir, 'output', A), join(hostDir, 'output', 'link')) // an operator's symlink into her folder
    await w.sc.services.flush()
  })
  after(() => w.sc.close())

  const view = (jwt: string, query: string) => decide(w.sc, { path: '/view', pattern: '/view', query, headers: bearer(jwt) })
  const hers = (): string[] => [
    `filename=a_00001_.png&type=output&subfolder=${A}`, `filename=a_00001_.png&subfolder=${A}`, `filename=a_00001_.png%20[output]&subfolder=${A}`,
    `filename=a_00001_.png&type=output&subfolder=../output/${A}`, `filename=a_00001_.png&type=output&subfolder=x/../${A}`,
    `filename=a_00001_.png&type=output&subfolder=${A}/`, `filename=a_00001_.png&type=output&subfolder=./${A}//`,
    `filename=a_00001_.png&type=output&subfolder=%2E%2E%2Foutput%2F${A}`,
    `filename=a_00001_.png&type=output&subfolder=link`,
    `filename=cat.png&type=input&subfolder=${A}/pets`, `filename=cat.png&type=input&subfolder=../input/${A}/pets`,
    `filename=cat.png&type=input&subfolder=${A}%2Fpets`, `filename=cat.png%20[input]&subfolder=${A}/pets`,
    `filename=cat%0Ax.png&type=input&subfolder=${A}`,
    'filename=legacy_00001_.png&type=output', 'filename=legacy_00001_.png&type=output&subfolder=../output', 'filename=prev.png&subfolder=x&type=temp',
    'filename=cat-legacy.png&subfolder=old&type=input', 'filename=cat-legacy.png&subfolder=../input/old&type=input',
  ]
  const nobodys = (): string[] => [
    `filename=never.png&type=output&subfolder=${A}`, 'filename=never.png&type=output', 'filename=never.png&type=input&subfolder=../input/old',
    `filename=a_00001_.png&type=output&subfolder=u_00000000-0000-0000-0000-000000000000`, 'filename=prev.png&subfolder=y&type=temp',
  ]

  it('bob: every spelling of alice\'s files answers 404 NOT_FOUND, the very answer for a file nobody has', async () => {
    const none = await view(w.bobJwt, 'filename=never.png&type=output')
    assertDenied(none, 'NOT_FOUND')
    for (const q of [...hers(), ...nobodys()]) assert.deepEqual({ q, d: await view(w.bobJwt, q) }, { q, d: none })
  })

  it('alice views hers in every spelling; the admin views anything; bob views the shared inputs and his own', async () => {
    for (const q of hers()) assertPass(await view(w.aliceJwt, q), q)
    for (const q of hers()) assertPass(await view(w.adminJwt, q), q)
    assertPass(await view(w.bobJwt, 'filename=shared.png&type=input'))
    assertPass(await view(w.bobJwt, `filename=mine.png&type=input&subfolder=${B}`))
    assertPass(await view(w.bobJwt, `filename=mine.png%20[input]&subfolder=../input/${B}`))
  })

  it('shapes the host refuses by itself whatever exists get the gate\'s JSON error of the same status (400 VALIDATION_FAILED, 403 PERMISSION_DENIED)', async () => {
    const hostRefuses = [
      'filename=../x.png', 'filename=/etc/passwd', 'filename=a.png&type=nope', 'filename=a.png&subfolder=../../etc', 'filename=a.png&subfolder=/etc', '',
      // a subfolder that leaves its type's folder is the host's 403, even into another of the host's folders
      `filename=a_00001_.png&type=temp&subfolder=../output/${A}`, `filename=a_00001_.png&type=input&subfolder=../output/${A}`,
      `filename=cat.png&type=output&subfolder=../input/${A}/pets`,
    ]
    const codes: Record<string, 'VALIDATION_FAILED' | 'NOT_FOUND'> = {
      'filename=../x.png': 'VALIDATION_FAILED', 'filename=/etc/passwd': 'VALIDATION_FAILED', 'filename=a.png&type=nope': 'VALIDATION_FAILED',
      'filename=a%00.png': 'VALIDATION_FAILED',
    }
    assertPass(await view(w.bobJwt, ''), 'no file named: the host\'s own 404')
    for (const q of [...hostRefuses.filter((q) => q !== ''), 'filename=a%00.png']) assertDenied(await view(w.bobJwt, q), codes[q] ?? 'PERMISSION_DENIED', q)
    for (const q of hostRefuses) assertPass(await view(w.adminJwt, q), `the admin's request goes to the host: ${q}`)
  })

  async function upload(jwt: string, fields: Record<string, string>, filename: string, mask = false): Promise<Stepped> {
    const path = mask ? '/upload/mask' : '/upload/image'
    const d = assertPass(await decide(w.sc, { method: 'POST', path, pattern: path, headers: bearer(jwt) }))
    return (await w.sc.handlers.form({ type: 'form', id: 1, ctx: d.need_form!.ctx, fields, files: { image: filename } }, w.sc.host)) as Stepped
  }
  const placedIn = async (jwt: string, fields: Record<string, string>, filename: string, mask = false): Promise<string | undefined> => {
    const d = await upload(jwt, fields, filename, mask)
    assert.equal(d.action, 'pass', JSON.stringify(d))
    return (d as { set_fields?: Record<string, string> }).set_fields?.subfolder
  }

  it('an upload lands in the uploader\'s folder whatever subfolder was asked for; the host\'s answer names it', async () => {
    assert.equal(await placedIn(w.bobJwt, {}, 'x.png'), B)
    assert.equal(await placedIn(w.bobJwt, { subfolder: '' }, 'x.png'), B)
    assert.equal(await placedIn(w.bobJwt, { subfolder: 'pets' }, 'x.png'), `${B}/pets`)
    assert.equal(await placedIn(w.bobJwt, { subfolder: 'clipspace', original_ref: JSON.stringify({ filename: 'shared.png', type: 'input' }) }, 'x.png', true), `${B}/clipspace`)
    assert.equal(await placedIn(w.bobJwt, { subfolder: `${B}/pets` }, 'x.png'), `${B}/pets`, 'his own folder named again is kept (a re-upload of an answer)')
    assert.equal(await placedIn(w.bobJwt, { subfolder: `./pets//a/../` }, 'x.png'), `${B}/pets`)
    assert.equal(await placedIn(w.bobJwt, { subfolder: `${A}/pets`, overwrite: 'true' }, 'cat.png'), `${B}/${A}/pets`, 'her folder name is only a name inside his')
    assert.equal(await placedIn(w.bobJwt, { type: 'output', overwrite: 'true' }, 'a_00001_.png'), B)
    assert.equal(await placedIn(w.bobJwt, { type: 'temp' }, 'x.png'), B)
    assert.equal(await placedIn(w.bobJwt, {}, `face\\ComfyUI_00001_.png`), B, 'a backslash is a character of the name here')
    assert.equal(await placedIn(w.adminJwt, { subfolder: 'pets' }, 'x.png'), undefined, 'an administrator uploads where asked')
  })

  const UPLOAD_REFUSALS: Array<[string, Record<string, string>, string]> = [
    ['subfolder ../input', { subfolder: '../input', overwrite: 'true' }, 'cat.png'],
    ['subfolder x/../../input', { subfolder: 'x/../../input', overwrite: 'true' }, 'cat.png'],
    ['an absolute subfolder', { subfolder: '/srv/comfy/input', overwrite: 'true' }, 'x.png'],
    ['a file name that climbs out', { overwrite: 'true' }, '../shared.png'],
    ['a file name into her folder', { overwrite: 'true' }, `../${'A'}/pets/cat.png`],
    ['an absolute file name', { overwrite: 'true' }, '/srv/comfy/input/x.png'],
    ['an unknown type', { type: 'nope' }, 'x.png'],
  ]
  for (const [name, fields, filename] of UPLOAD_REFUSALS) {
    it(`bob's upload with ${name} → 400 VALIDATION_FAILED, nothing written`, async () => {
      const fixed = filename.replace('/A/', `/${A}/`)
      assertDenied(await upload(w.bobJwt, fields, fixed), 'VALIDATION_FAILED')
    })
  }

  it('an upload\'s answer does not depend on others\' files: overwrite or not, her name or a free one', async () => {
    for (const overwrite of [{}, { overwrite: 'true' }] as Array<Record<string, string>>) {
      const onHers = await upload(w.bobJwt, { subfolder: `${A}/pets`, ...overwrite }, 'cat.png')
      assert.deepEqual(await upload(w.bobJwt, { subfolder: `${A}/pets`, ...overwrite }, 'free-name.png'), onHers)
      assert.equal(onHers.action, 'pass')
      assert.deepEqual((onHers as { set_fields?: unknown }).set_fields, { subfolder: `${B}/${A}/pets` })
    }
  })

  it('a mask\'s original_ref must be a file its uploader may read; hers and a missing one get the same 403', async () => {
    const ref = (o: Record<string, string>) => ({ original_ref: JSON.stringify(o) })
    const missing = await upload(w.bobJwt, ref({ filename: 'never.png', type: 'output' }), 'm.png', true)
    assertDenied(missing, 'NOT_OWNER')
    for (const o of [
      { filename: 'a_00001_.png', subfolder: A, type: 'output' } as Record<string, string>, { filename: `${A}/a_00001_.png`, type: 'output' },
      { filename: 'a_00001_.png', subfolder: `../output/${A}`, type: 'output' }, { filename: `a_00001_.png [output]`, subfolder: A },
      { filename: 'cat.png', subfolder: `${A}/pets`, type: 'input' }, { filename: 'legacy_00001_.png', type: 'output' },
      { filename: 'a_00001_.png', subfolder: 'link', type: 'output' },
      // the review's shapes: keys of the client's never steer the resolver
      { filename: 'a_00001_.png', subfolder: A, type: 'output', op: 'x' }, { filename: 'legacy_00001_.png', type: 'output', op: 'x' },
      { filename: 'a_00001_.png', subfolder: A, type: 'output', op: 'view', query: `filename=mine.png&type=input&subfolder=${B}` },
      { filename: 'a_00001_.png', subfolder: A, type: 'output', op: 'name', name: 'shared.png' },
    ]) assert.deepEqual(await upload(w.bobJwt, ref(o), 'm.png', true), missing, JSON.stringify(o))
    assert.equal((await upload(w.aliceJwt, ref({ filename: 'a_00001_.png', subfolder: A, type: 'output' }), 'm.png', true)).action, 'pass')
    assert.equal((await upload(w.bobJwt, ref({ filename: 'shared.png', type: 'input' }), 'm.png', true)).action, 'pass')
    assertDenied(await upload(w.bobJwt, { original_ref: '{nope' }, 'm.png', true), 'VALIDATION_FAILED')
    assertDenied(await upload(w.bobJwt, {}, 'm.png', true), 'VALIDATION_FAILED', 'a mask without original_ref (the host\'s 500)')
  })

  const graph = (image: unknown, cls = 'LoadImage', input = 'image') => JSON.stringify({ prompt: { 1: { class_type: cls, inputs: { [input]: image } }, 2: { class_type: 'PreviewImage', inputs: { images: ['1', 0] } } } })

  it('a prompt reads none of her files, in any spelling, wrapper, length or node', async () => {
    const tries: unknown[] = [
      `${A}/pets/cat.png`, `${A}/a_00001_.png [output]`, `../output/${A}/a_00001_.png`, `${'./'.repeat(600)}${A}/pets/cat.png`,
      `${A}/cat\nx.png`, join(hostDir, 'input', A, 'pets', 'cat.png'), `link/a_00001_.png [output]`, 'legacy_00001_.png [output]',
      'x/prev.png [temp]', 'old/cat-legacy.png', `${A}/pets/../pets/cat.png`, '/etc/hostname', '../../../../../../etc/hostname',
      { __value__: `${A}/pets/cat.png` }, { __value__: { __value__: `${A}/a_00001_.png [output]` } }, [`${A}/pets/cat.png`], { path: `${A}/pets/cat.png` },
      // the host unwraps once: what sits beside a wrapper reaches the node too; and any depth
      { __value__: { __value__: 'shared.png', k: `${A}/pets/cat.png` } }, JSON.parse(`${'['.repeat(40)}"${A}/pets/cat.png"${']'.repeat(40)}`),
      // a case-insensitive host opens U_<ID> as u_<id> (here: such a folder exists): still hers
      `${A.toUpperCase()}/upper.png`,
    ]
    for (const t of tries) assertDenied(await postPrompt(w.sc, w.bobJwt, graph(t)), 'NOT_OWNER', JSON.stringify(t))
    for (const folder of [A, `${A}/pets`, 'old', `../input/${A}`]) {
      assertDenied(await postPrompt(w.sc, w.bobJwt, graph(folder, 'LoadImageSetFromFolderNode', 'folder')), 'NOT_OWNER', folder)
    }
  })

  it('a prompt naming a place in her folder gets one answer whether or not a file is there (no existence oracle)', async () => {
    const hersExisting = await postPrompt(w.sc, w.bobJwt, graph(`${A}/pets/cat.png`))
    assertDenied(hersExisting, 'NOT_OWNER')
    for (const t of [`${A}/pets/never.png`, `${A}/never.png`, `${A}/nofolder/x.png`, `${A}/never.png [output]`, `${A}/never.png [temp]`, `../output/${A}/never.png`,
      { __value__: `${A}/never.png` }, `${A.toUpperCase()}/never.png`, `o_0123456789abcdef/never.png`, `${A}`]) {
      assert.deepEqual(await postPrompt(w.sc, w.bobJwt, graph(t)), hersExisting, JSON.stringify(t))
    }
    for (const t of [`${B}/never.png`, `${B}/never.png [output]`, 'never.png', 'never.png [temp]']) {
      assert.equal((await postPrompt(w.sc, w.bobJwt, graph(t))).action, 'pass', `${JSON.stringify(t)}: his own or the shared area, nothing there`)
    }
  })

  it('a prompt reads the shared inputs, his own files, and texts; alice reads hers; the admin anything', async () => {
    for (const t of ['shared.png', `${B}/mine.png`, { __value__: 'shared.png' }, 'not-a-file.png', 'a prompt text', '', '.', 'x'.repeat(5000)]) {
      assert.equal((await postPrompt(w.sc, w.bobJwt, graph(t))).action, 'pass', JSON.stringify(t))
    }
    assert.equal((await postPrompt(w.sc, w.bobJwt, graph(B, 'LoadImageSetFromFolderNode', 'folder'))).action, 'pass')
    for (const t of [`${A}/pets/cat.png`, `${A}/a_00001_.png [output]`, 'old/cat-legacy.png', 'legacy_00001_.png [output]']) {
      assert.equal((await postPrompt(w.sc, w.aliceJwt, graph(t))).action, 'pass', t)
      assert.equal((await postPrompt(w.sc, w.adminJwt, graph(t))).action, 'pass', t)
    }
  })

  const saved = (prefix: unknown, extra = '') => `{"prompt": {"9": {"class_type": "SaveImage", "inputs": {"filename_prefix": ${JSON.stringify(prefix)}${extra}, "images": ["1", 0]}}, "1": {"class_type": "EmptyImage", "inputs": {"seed": 18446744073709551615}}}}`
  const inputsOf = (out: Stepped, node: string) => (JSON.parse(out.body_text!) as { prompt: Record<string, { inputs: Record<string, unknown> }> }).prompt[node].inputs

  it('every filename_prefix is placed under the owner\'s output folder; every node\'s cache entry is the owner\'s', async () => {
    for (const [given, placed] of [['ComfyUI', `${B}/ComfyUI`], ['portraits/face', `${B}/portraits/face`], [`${B}/again`, `${B}/again`], [`./a//b`, `${B}/a/b`], [`${A}/x`, `${B}/${A}/x`], [{ __value__: 'wrapped' }, `${B}/wrapped`], ['%year%/img', `${B}/%year%/img`]] as Array<[unknown, string]>) {
      const out = await postPrompt(w.sc, w.bobJwt, saved(given))
      assert.equal(out.action, 'pass', JSON.stringify(given))
      assert.equal(inputsOf(out, '9').filename_prefix, placed, JSON.stringify(given))
      assert.equal(inputsOf(out, '9').authsvc_scope, B)
      assert.equal(inputsOf(out, '1').authsvc_scope, B)
      assert.match(out.body_text!, /"seed": 18446744073709551615/, 'the rest of the body is the client\'s text')
    }
    const spoof = await postPrompt(w.sc, w.bobJwt, saved('x', `, "authsvc_scope": "${A}"`))
    assert.equal(inputsOf(spoof, '9').authsvc_scope, B, 'a scope the client sends is replaced')
    const twice = await postPrompt(w.sc, w.bobJwt, saved('x', ', "filename_prefix": "../../evil"'))
    assertDenied(twice, 'VALIDATION_FAILED', 'the host reads the last of two keys: both are judged')
  })

  // BOB and ALICE stand for their folders
  for (const prefix of ['../x', 'a/../../x', 'BOB/../ALICE/x', '/abs/x', '\\abs', '', '.', './', 'BOB', 'BOB/', './BOB/.', ['5', 0], 7, null, { __value__: '../x' }]) {
    it(`filename_prefix ${JSON.stringify(prefix)} → 400 VALIDATION_FAILED`, async () => {
      const given = typeof prefix === 'string' ? prefix.replace('BOB', B).replace('ALICE', A) : prefix
      assertDenied(await postPrompt(w.sc, w.bobJwt, saved(given)), 'VALIDATION_FAILED')
    })
  }

  it('the host\'s validation error lists no other owner\'s folder (a combo\'s options in value_not_in_list)', async () => {
    const d = assertPass(await decide(w.sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: bearer(w.bobJwt) }))
    const out = await w.sc.handlers.body({ type: 'body', id: 1, ctx: d.need_body!.ctx }, Buffer.from(graph('zzz', 'LoadImageSetFromFolderNode', 'folder'))) as { answer: { filter?: { name: string; ctx: unknown } } }
    const spec = out.answer.filter!
    const hostAnswer = JSON.stringify({ error: { type: 'prompt_outputs_failed_validation' }, node_errors: { 1: { errors: [{ type: 'value_not_in_list', details: `folder: 'zzz' not in ['${A}', '${A}/pets', '${B}', '${A.toUpperCase()}', 'old']`, extra_info: { input_config: [[A, `${A}/pets`, B, 'old']] } }] } } })
    const filteredAnswer: { action: string; body_text?: string } = stepAnswer(await w.sc.handlers.filter({ type: 'filter', id: 1, name: spec.name, ctx: spec.ctx, status: 400, content_type: 'application/json' }, Buffer.from(hostAnswer)))
    assert.equal(filteredAnswer.action, 'replace')
    assert.ok(!filteredAnswer.body_text!.toLowerCase().includes(A.slice(2)), 'her id appears nowhere')
    assert.ok(filteredAnswer.body_text!.includes(B), 'his own folder stays')
    assert.deepEqual(JSON.parse(filteredAnswer.body_text!).node_errors['1'].errors[0].extra_info.input_config, [['u_hidden', 'u_hidden/pets', B, 'old']])
    const ok = stepAnswer(await w.sc.handlers.filter({ type: 'filter', id: 1, name: spec.name, ctx: spec.ctx, status: 200, content_type: 'application/json' }, Buffer.from(`{"prompt_id": "x", "number": 1, "node_errors": {}}`)))
    assert.equal(ok.action, 'keep')
  })

  it('an output node that names its files by another input (SaveLoRANode\'s prefix, from the host facts) writes into the owner\'s folder too', async () => {
    const lora = (prefix: unknown) => JSON.stringify({ prompt: { 7: { class_type: 'SaveLoRANode', inputs: { lora: ['6', 0], prefix } } } })
    const out = await postPrompt(w.sc, w.bobJwt, lora('loras/trained'))
    assert.equal(out.action, 'pass', out.body_text)
    assert.equal(inputsOf(out, '7').prefix, `${B}/loras/trained`)
    for (const bad of ['../loras/x', `${B}/../${A}/x`, ['5', 0]]) assertDenied(await postPrompt(w.sc, w.bobJwt, lora(bad)), 'VALIDATION_FAILED', JSON.stringify(bad))
    const other = await postPrompt(w.sc, w.bobJwt, JSON.stringify({ prompt: { 1: { class_type: 'CLIPTextEncode', inputs: { text: 'a', prefix: 'kept as written' } } } }))
    assert.equal(inputsOf(other, '1').prefix, 'kept as written', 'a "prefix" of a node the host does not report stays')
  })

  it('an administrator\'s prompt is not edited', async () => {
    const out = await postPrompt(w.sc, w.adminJwt, saved('ComfyUI'))
    assert.equal(inputsOf(out, '9').filename_prefix, 'ComfyUI')
    assert.equal(inputsOf(out, '9').authsvc_scope, undefined)
  })

  it('/object_info: every option list shows bob his own and the shared entries, nothing of hers, and nothing else changes', async () => {
    const lists = (load: string[], latent: string[], folders: string[], outputs: string[]) =>
      `{"LoadImage": {"input": {"required": {"image": [${JSON.stringify(load)}, {"image_upload": true}]}}}, ` +
      `"LoadLatent": {"input": {"required": {"latent": [${JSON.stringify(latent)}]}}}, ` +
      `"LoadImageSetFromFolderNode": {"input": {"required": {"folder": [${JSON.stringify(folders)}]}}}, ` +
      `"LoadImageOutput": {"input": {"required": {"image": [${JSON.stringify(outputs)}]}}}, ` +
      `"KSampler": {"input": {"required": {"seed": ["INT", {"max": 18446744073709551615}], "sampler_name": [["euler", "dpmpp_2m"]]}}}}`
    const info = lists([`${A}/pets/cat.png`, `${B}/mine.png`, 'old/cat-legacy.png', 'shared.png'], [`${A}/x.latent`, 'shared.latent'], [A, `${A}/pets`, B, 'old'],
      [`${A}/a_00001_.png [output]`, 'legacy_00001_.png [output]', `${B}/b_00001_.png [output]`])
    put(`input/${B}/sub/later.png`)
    put(`input/${B}/notes.txt`)
    const forBob = await filtered(w.sc, { path: '/object_info', pattern: '/object_info', headers: bearer(w.bobJwt) }, info)
    assert.notEqual(forBob, 'unchanged')
    const bob = JSON.parse(forBob) as Record<string, { input: { required: Record<string, [unknown]> } }>
    assert.deepEqual(bob.LoadImage.input.required.image[0], [`${B}/mine.png`, 'shared.png', `${B}/sub/later.png`], 'his own uploads the host does not list are added')
    assert.deepEqual(bob.LoadLatent.input.required.latent[0], ['shared.latent'])
    assert.deepEqual(bob.LoadImageSetFromFolderNode.input.required.folder[0], [B, 'old'])
    assert.deepEqual(bob.LoadImageOutput.input.required.image[0], [`${B}/b_00001_.png [output]`])
    assert.deepEqual(bob.KSampler.input.required.sampler_name[0], ['euler', 'dpmpp_2m'])
    assert.match(forBob, /"max": 18446744073709551615/)
    assert.equal(await filtered(w.sc, { path: '/object_info', pattern: '/object_info', headers: bearer(w.adminJwt) }, info), 'unchanged')
  })
})

describe('live WebSockets follow their credential', () => {
  let w: World
  before(async () => {
    w = await world()
  })
  after(() => w.sc.close())

  /** Opens (decides) a socket for this credential; returns its tag. */
  async function open(jwt: string): Promise<string> {
    return assertPass(await decide(w.sc, { path: '/ws', pattern: '/ws', headers: bearer(jwt) })).ws_tag!
  }
  function pushes(): Array<{ tags: string[]; code: number }> {
    const seen: Array<{ tags: string[]; code: number }> = []
    w.sc.built.setPush((m) => { if (m.type === 'close_ws') seen.push({ tags: m.tags, code: m.code }) })
    return seen
  }

  it('a revoked session, a deleted token, a disabled user and a role change each close exactly their sockets', async () => {
    const seen = pushes()
    const aliceSession = await open(w.aliceJwt)
    const bobSession = await open(w.bobJwt)
    const aliceToken = await apiToken(w.sc, w.alice)
    const tokenSocket = await open(aliceToken)
    assert.equal(w.sc.built.liveSockets.sweep(), 0, 'nothing ended yet')

    const jti = w.sc.services.sessions.activeForUser(w.alice.user_id)[0].jti
    await w.sc.services.sessions.revoke(jti)
    assert.equal(w.sc.built.liveSockets.sweep(), 1)
    assert.deepEqual(seen.pop(), { tags: [aliceSession], code: CLOSE_CREDENTIAL_ENDED })

    await w.sc.services.tokens.revokeAllForUser(w.alice.user_id)
    assert.equal(w.sc.built.liveSockets.sweep(), 1)
    assert.deepEqual(seen.pop(), { tags: [tokenSocket], code: CLOSE_CREDENTIAL_ENDED })

    await w.sc.services.users.update(w.bob.user_id, { role: 'guest' })
    assert.equal(w.sc.built.liveSockets.sweep(), 1)
    assert.deepEqual(seen.pop(), { tags: [bobSession], code: CLOSE_ACCESS_CHANGED })
    assert.equal(w.sc.built.liveSockets.size, 0)
  })

  it('after a sidecar restart, the plugin\'s hello hands its sockets back: a logout meanwhile closes them at once', async () => {
    const pass = assertPass(await decide(w.sc, { path: '/ws', pattern: '/ws', headers: bearer(w.adminJwt) })) as { ws_tag?: string; ws_entry?: object }
    assert.equal((pass.ws_entry as { tag: string }).tag, pass.ws_tag)
    await w.sc.services.flush()
    const restarted = await openSidecar({ dir: w.sc.dir })
    try {
      const seen: Array<{ tags: string[]; code: number }> = []
      restarted.built.setPush((m) => { if (m.type === 'close_ws') seen.push({ tags: m.tags, code: m.code }) })
      const jti = restarted.services.sessions.activeForUser(w.admin.user_id)[0].jti
      await restarted.services.sessions.revoke(jti)
      restarted.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 't', sockets: [pass.ws_entry, { tag: 7 }, 'junk'] })
      assert.deepEqual(seen, [{ tags: [pass.ws_tag], code: CLOSE_CREDENTIAL_ENDED }], 'closed on adoption; malformed entries ignored')
    } finally {
      await restarted.close({ keepDir: true })
    }
  })

  it('one principal cannot push others out of the watch list: past its cap its upgrades are refused (429)', async () => {
    const { MAX_PER_PRINCIPAL } = await import('../../sidecar/src/isolation/live-sockets.js')
    const guestless = await world()
    try {
      const bobToken = await apiToken(guestless.sc, guestless.bob)
      for (let i = 0; i < MAX_PER_PRINCIPAL; i++) assertPass(await decide(guestless.sc, { path: '/ws', pattern: '/ws', headers: bearer(bobToken) }))
      assertDenied(await decide(guestless.sc, { path: '/ws', pattern: '/ws', headers: bearer(bobToken) }), 'TOO_MANY_ATTEMPTS')
      assertPass(await decide(guestless.sc, { path: '/ws', pattern: '/ws', headers: bearer(guestless.aliceJwt) }), 'alice still opens hers')
      assert.equal(guestless.sc.built.liveSockets.size, MAX_PER_PRINCIPAL + 1)
    } finally {
      await guestless.sc.close()
    }
  })

  it('a socket the plugin reports closed is no longer watched', async () => {
    const before = w.sc.built.liveSockets.size
    const tag = await open(w.adminJwt)
    assert.equal(w.sc.built.liveSockets.size, before + 1)
    event(w.sc, 'ws_closed', { tag })
    assert.equal(w.sc.built.liveSockets.size, before)
  })
})

describe('an upgrade of a populated data dir (issue 21, item 7): every file visible to exactly the same people', () => {
  it('files owned in the layout before per-user folders keep their readers after a restart on the new code', async () => {
    const first = await world()
    const dir = first.sc.dir
    const hostDir = join(dir, 'host')
    const put = (rel: string) => {
      mkdirSync(join(hostDir, rel, '..'), { recursive: true })
      writeFileSync(join(hostDir, rel), 'x')
    }
    // the old layout: uploads and outputs beside everyone else's, owners in the table
    const owned: Array<[string, string[]]> = [
      ['input/cat.png', [first.alice.user_id]], ['input/pets/dog.png', [first.alice.user_id, first.bob.user_id]],
      ['output/ComfyUI_00001_.png', [first.alice.user_id]], ['output/ComfyUI_00002_.png', [first.bob.user_id]], ['temp/ComfyUI_temp_abcde_00001_.png', [first.alice.user_id]],
    ]
    for (const [key, owners] of owned) {
      put(key)
      for (const o of owners) await first.sc.services.ownership.addFileOwner(key, o, undefined, new Date())
    }
    put('input/shared.png')
    put('output/unowned_00001_.png')
    await first.sc.services.flush()
    const ids = { alice: first.alice.user_id, bob: first.bob.user_id }
    await first.sc.close({ keepDir: true })

    const sc = await openSidecar({ dir })
    try {
      const jwt = async (name: 'alice' | 'bob' | 'admin') => {
        const user = sc.services.users.list().find((u) => u.username === name)!
        return sessionJwt(sc, user)
      }
      sc.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 't', host: { output_dir: join(hostDir, 'output'), input_dir: join(hostDir, 'input'), temp_dir: join(hostDir, 'temp') } })
      const tokens = { alice: await jwt('alice'), bob: await jwt('bob'), admin: await jwt('admin') }
      const viewQuery: Record<string, string> = {
        'input/cat.png': 'filename=cat.png&type=input', 'input/pets/dog.png': 'filename=dog.png&type=input&subfolder=pets',
        'output/ComfyUI_00001_.png': 'filename=ComfyUI_00001_.png&type=output', 'output/ComfyUI_00002_.png': 'filename=ComfyUI_00002_.png&type=output',
        'temp/ComfyUI_temp_abcde_00001_.png': 'filename=ComfyUI_temp_abcde_00001_.png&type=temp', 'input/shared.png': 'filename=shared.png&type=input',
        'output/unowned_00001_.png': 'filename=unowned_00001_.png&type=output',
      }
      const readers: Record<string, string[]> = {
        'input/cat.png': ['alice', 'admin'], 'input/pets/dog.png': ['alice', 'bob', 'admin'], 'output/ComfyUI_00001_.png': ['alice', 'admin'],
        'output/ComfyUI_00002_.png': ['bob', 'admin'], 'temp/ComfyUI_temp_abcde_00001_.png': ['alice', 'admin'],
        'input/shared.png': ['alice', 'bob', 'admin'], 'output/unowned_00001_.png': ['admin'],
      }
      for (const [key, who] of Object.entries(readers)) {
        for (const name of ['alice', 'bob', 'admin'] as const) {
          const d = await decide(sc, { path: '/view', pattern: '/view', query: viewQuery[key], headers: bearer(tokens[name]) })
          assert.equal(d.action, who.includes(name) ? 'pass' : 'respond', `${name} on ${key}`)
        }
      }
      // the same readers for a prompt naming the input files
      const prompt = (image: string) => JSON.stringify({ prompt: { 1: { class_type: 'LoadImage', inputs: { image } } } })
      for (const [image, who] of [['cat.png', ['alice', 'admin']], ['pets/dog.png', ['alice', 'bob', 'admin']], ['shared.png', ['alice', 'bob', 'admin']]] as Array<[string, string[]]>) {
        for (const name of ['alice', 'bob', 'admin'] as const) {
          const d = assertPass(await decide(sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: bearer(tokens[name]) }))
          const out = stepAnswer(await sc.handlers.body({ type: 'body', id: 1, ctx: d.need_body!.ctx }, Buffer.from(prompt(image))))
          assert.equal(out.action, who.includes(name) ? 'pass' : 'respond', `${name} prompts ${image}`)
        }
      }
      assert.ok(ids.alice && ids.bob)
    } finally {
      await sc.close()
    }
  })
})

describe('large host answers are edited off the event loop', () => {
  const entry = (id: string) => `"${id}": {"prompt": [1, "${id}", {"3": {"inputs": {"seed": 18446744073709551615, "text": "${'x'.repeat(2000)}"}}}, {}, []], "outputs": {}}`
  const ids = Array.from({ length: 400 }, (_, i) => `p${i}`)
  const history = `{${ids.map(entry).join(', ')}}`
  const own = new Set(ids.filter((_, i) => i % 3 === 0))

  it('a large history is filtered in the worker, exactly as inline, while the loop stays free', async () => {
    const { FilterPool, INLINE_BYTES } = await import('../../sidecar/src/isolation/filter-pool.js')
    const { filterHistory } = await import('../../sidecar/src/isolation/host-json-filters.js')
    assert.ok(Buffer.byteLength(history) > INLINE_BYTES * 10)
    const pool = new FilterPool()
    try {
      let loopTurned = false
      setImmediate(() => (loopTurned = true))
      const out = (await pool.history(Buffer.from(history), own, 5, -1)).toString('utf8')
      assert.equal(loopTurned, true, 'the event loop ran while the worker filtered')
      assert.equal(out, filterHistory(history, own, 5, -1))
      assert.deepEqual(Object.keys(JSON.parse(out) as object), ['p387', 'p390', 'p393', 'p396', 'p399'])
      assert.match(out, /18446744073709551615/)
    } finally {
      await pool.close()
    }
  })

  it('one slow edit (a huge history) never holds up another user\'s filtered read', async () => {
    const { FilterPool } = await import('../../sidecar/src/isolation/filter-pool.js')
    const pool = new FilterPool()
    try {
      // two threads, warmed up: the pool keeps what it started
      await Promise.all([pool.history(Buffer.from(history), own, null, -1), pool.history(Buffer.from(history), own, null, -1)])
      assert.equal(pool.size, 2)
      const huge = `{${Array.from({ length: 12_000 }, (_, i) => entry(`h${i}`)).join(', ')}}` // about 25 MB
      let hugeDone = false
      const slow = pool.history(Buffer.from(huge), new Set(['h1']), null, -1).then((b) => {
        hugeDone = true
        return b
      })
      const quick = await pool.queue(Buffer.from(`{"queue_running": [], "queue_pending": [[0, "q1", {"t": "${'y'.repeat(80_000)}"}, {}, []]]}`), new Set(['q1']), false)
      assert.equal(hugeDone, false, 'the small read was answered while the huge edit was still running')
      assert.match(quick.toString('utf8'), /"q1"/)
      assert.deepEqual(Object.keys(JSON.parse((await slow).toString('utf8')) as object), ['h1'])
    } finally {
      await pool.close()
    }
  })

  it('a small answer is edited inline (a worker round trip would cost more)', async () => {
    const { FilterPool } = await import('../../sidecar/src/isolation/filter-pool.js')
    const pool = new FilterPool()
    try {
      let loopTurned = false
      setImmediate(() => (loopTurned = true))
      await pool.history(Buffer.from(`{${entry('p0')}}`), own, null, -1)
      assert.equal(loopTurned, false)
    } finally {
      await pool.close()
    }
  })
})

describe('file ownership under concurrent changes', () => {
  it('two owners added to one file at once are both kept (a store write takes time)', async () => {
    const sc = await openSidecar()
    try {
      const at = new Date(sc.clock())
      await Promise.all([
        sc.services.ownership.addFileOwner('input/same.png', 'alice-id', undefined, at),
        sc.services.ownership.addFileOwner('input/same.png', 'bob-id', undefined, at),
        sc.services.ownership.addFileOwner('input/same.png', 'carol-id', undefined, at),
      ])
      assert.deepEqual(sc.services.ownership.file('input/same.png')?.owners, ['alice-id', 'bob-id', 'carol-id'])
    } finally {
      await sc.close()
    }
  })
})

describe('the host-folder watcher (real files, real inotify)', () => {
  const until = async (check: () => boolean, what: string): Promise<void> => {
    const deadline = Date.now() + 5000
    while (!check()) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
      await new Promise((r) => setTimeout(r, 20))
    }
  }

  it('a run claims the files it writes; an administrator\'s upload during that run stays hers; a removed file is forgotten', async () => {
    const { writeFileSync: write, rmSync } = await import('node:fs')
    const sc = await openSidecar()
    try {
      const admin = await addUser(sc, 'admin', 'admin-password-1', 'admin')
      const alice = await addUser(sc, 'alice', 'alice-password-1')
      const bob = await addUser(sc, 'bob', 'bob-password-12')
      const dirs = Object.fromEntries(['output', 'input', 'temp'].map((d) => [d, join(sc.dir, 'host', d)]))
      for (const d of Object.values(dirs)) mkdirSync(d, { recursive: true })
      sc.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 't', host: { output_dir: dirs.output, input_dir: dirs.input, temp_dir: dirs.temp } })
      await sc.built.hostFiles.ready()
      const bobPrompt = await ownPrompt(sc, await sessionJwt(sc, bob))
      const own = sc.services.ownership
      event(sc, 'execution_start', { prompt_id: bobPrompt })
      // the administrator uploads where she asks (a user's upload lands in their own folder: owned by its path)
      const aliceJwt = await sessionJwt(sc, alice)
      const adminJwt = await sessionJwt(sc, admin)
      const d = assertPass(await decide(sc, { method: 'POST', path: '/upload/image', pattern: '/upload/image', headers: bearer(adminJwt) }))
      const f = assertPass(await sc.handlers.form({ type: 'form', id: 1, ctx: d.need_form!.ctx, fields: {}, files: { image: 'hers.png' } }))
      write(join(dirs.input, 'hers.png'), 'x')
      write(join(dirs.output, 'bobs_00001_.png'), 'x')
      await until(() => own.file('output/bobs_00001_.png') !== undefined, 'the run\'s output to be claimed')
      await sc.handlers.filter({ type: 'filter', id: 1, name: f.filter!.name, ctx: f.filter!.ctx, status: 200, content_type: 'application/json' }, Buffer.from('{"name":"hers.png","subfolder":"","type":"input"}'))
      event(sc, 'execution_end', { prompt_id: bobPrompt, status: 'success' })
      assert.deepEqual(own.file('output/bobs_00001_.png')?.owners, [bob.user_id])
      assert.deepEqual(own.file('input/hers.png')?.owners, [admin.user_id], 'bob\'s run did not claim her upload')
      // a cached node re-reports bob's file for alice's identical prompt: alice is not added
      const alicePrompt = await ownPrompt(sc, aliceJwt)
      event(sc, 'execution_start', { prompt_id: alicePrompt })
      event(sc, 'executed', { prompt_id: alicePrompt, output: { images: [{ filename: 'bobs_00001_.png', subfolder: '', type: 'output' }] } })
      event(sc, 'execution_end', { prompt_id: alicePrompt, status: 'success' })
      assert.deepEqual(own.file('output/bobs_00001_.png')?.owners, [bob.user_id])
      rmSync(join(dirs.output, 'bobs_00001_.png'))
      await until(() => own.file('output/bobs_00001_.png') === undefined, 'the removed file to be forgotten')
      // files in per-user folders are their owners' by their path: a run claims none of them
      mkdirSync(join(dirs.output, userFolder(bob.user_id)))
      const third = await ownPrompt(sc, aliceJwt)
      event(sc, 'execution_start', { prompt_id: third })
      write(join(dirs.output, userFolder(bob.user_id), 'b_00001_.png'), 'x')
      write(join(dirs.output, 'marker_00001_.png'), 'x')
      await until(() => own.file('output/marker_00001_.png') !== undefined, 'the run\'s root output to be claimed')
      event(sc, 'execution_end', { prompt_id: third, status: 'success' })
      assert.equal(own.file(`output/${userFolder(bob.user_id)}/b_00001_.png`), undefined)
    } finally {
      await sc.close()
    }
  })

  it('in a folder of thousands: files there before the watch stay unowned; a run claims its files, in new subfolders and renamed too', async () => {
    const { writeFileSync: write, renameSync, rmSync } = await import('node:fs')
    const sc = await openSidecar()
    try {
      const alice = await addUser(sc, 'alice', 'alice-password-1')
      const dirs = Object.fromEntries(['output', 'input', 'temp'].map((d) => [d, join(sc.dir, 'host', d)]))
      for (const d of Object.values(dirs)) mkdirSync(d, { recursive: true })
      const alicePrompt = await ownPrompt(sc, await sessionJwt(sc, alice))
      // running while these files are made and the watch starts (a restarted sidecar): by their
      // time they would be the run's, but they were there before the watch, so they are not news
      event(sc, 'execution_start', { prompt_id: alicePrompt }, Date.now() / 1000 - 1)
      for (let i = 0; i < 3000; i++) write(join(dirs.output, `old_${String(i).padStart(5, '0')}_.png`), 'x')
      mkdirSync(join(dirs.output, 'olddir'))
      write(join(dirs.output, 'olddir', 'inside.png'), 'x')
      sc.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 't', host: { output_dir: dirs.output, input_dir: dirs.input, temp_dir: dirs.temp } })
      await sc.built.hostFiles.ready()
      const own = sc.services.ownership
      write(join(dirs.output, 'new_00001_.png'), 'x')
      mkdirSync(join(dirs.output, 'sub', 'deeper'), { recursive: true }) // SaveImage with filename_prefix "sub/deeper/x"
      write(join(dirs.output, 'sub', 'deeper', 'x_00001_.png'), 'x')
      write(join(dirs.output, 'olddir', 'later.png'), 'x')
      write(join(dirs.temp, 'preview_00001_.png'), 'x')
      for (const key of ['output/new_00001_.png', 'output/sub/deeper/x_00001_.png', 'output/olddir/later.png', 'temp/preview_00001_.png']) {
        await until(() => own.file(key) !== undefined, `${key} to be claimed`)
        assert.deepEqual(own.file(key)?.owners, [alice.user_id], key)
      }
      renameSync(join(dirs.output, 'new_00001_.png'), join(dirs.output, 'renamed_00001_.png'))
      await until(() => own.file('output/renamed_00001_.png') !== undefined && own.file('output/new_00001_.png') === undefined, 'the rename to be seen')
      rmSync(join(dirs.output, 'sub'), { recursive: true })
      await until(() => own.file('output/sub/deeper/x_00001_.png') === undefined, 'a removed folder\'s files to be forgotten')
      event(sc, 'execution_end', { prompt_id: alicePrompt, status: 'success' })
      for (const key of ['output/old_00000_.png', 'output/old_02999_.png', 'output/olddir/inside.png']) {
        assert.equal(own.file(key), undefined, `${key} was there before: not claimed by the run`)
      }
    } finally {
      await sc.close()
    }
  })
})
