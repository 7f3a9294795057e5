/**
 * The decision path does no I/O (DESIGN §2, issue 25 item 4): the real decider and every route
 * behaviour's steps (decide, body, form, filter), driven for every row of the host route table
 * (access/host-routes.ts) and for representative requests of each behaviour (own and shared
 * workflows, /view, uploads, prompts, the filtered lists), call no function of `node:fs` nor
 * `node:fs/promises`. What a decision needs from the disk is in memory (ownership, the model
 * cache, the roles) or asked of the host (kernel/host-link.ts; the plugin's own resolver here).
 *
 * How: every function of both modules is replaced (node:test `mock.method` on the module objects,
 * then `syncBuiltinESMExports()`, so `import { readFileSync } from 'node:fs'` sees it too) by one
 * that records and throws when it is called from a decision (an AsyncLocalStorage set around each
 * step follows the step into its awaits, timers and callbacks); calls from anything else (the
 * store, the folder watchers a hello started) go to the real function. The decision server's CPU
 * check (kernel/cpu-room.ts, which reads /proc) is checked the same way: it samples after the
 * answers of a read have been handed on, never inside the turn that decides.
 */
import { describe, it, before, after, mock } from 'node:test'
import assert from 'node:assert/strict'
import { AsyncLocalStorage } from 'node:async_hooks'
import fs, { mkdirSync, writeFileSync } from 'node:fs'
import fsp from 'node:fs/promises'
import { syncBuiltinESMExports } from 'node:module'
import { join } from 'node:path'
import { HOST_ROUTE_KEYS, hostRoutePolicy, type HostRouteBehaviour } from '../../sidecar/src/access/host-routes.js'
import { PROTOCOL_VERSION, type Decision } from '../../sidecar/src/kernel/protocol.js'
import { CpuRoom } from '../../sidecar/src/kernel/cpu-room.js'
import type { UserRecord } from '../../sidecar/src/identity/users.js'
import { addUser, apiToken, bearer, call, decide, openSidecar, sessionJwt, stepAnswer, type DescOptions, type Sidecar } from './fixtures.js'

const DECIDING = new AsyncLocalStorage<string>()
/** `fs.name (what was being decided)` for every call made while deciding */
const calls: string[] = []

/** Replaces every function of `node:fs` and `node:fs/promises`; restored by `mock.restoreAll()`. */
function guardFs(): void {
  for (const [label, mod] of [['fs', fs], ['fs/promises', fsp]] as const) {
    const target = mod as unknown as Record<string, unknown>
    for (const name of Object.keys(target)) {
      const original = target[name]
      // classes (Stats, ReadStream, ...) are constructed by the functions, not called by decisions
      if (typeof original !== 'function' || /^[A-Z]/.test(name)) continue
      const replace = mock.method.bind(mock) as unknown as (object: object, name: string, implementation: (...args: unknown[]) => unknown) => void
      replace(target, name, function (this: unknown, ...args: unknown[]) {
        const deciding = DECIDING.getStore()
        if (deciding !== undefined) {
          calls.push(`${label}.${name} (${deciding})`)
          throw new Error(`${label}.${name} called while deciding ${deciding}`)
        }
        return (original as (...a: unknown[]) => unknown).apply(this, args)
      })
    }
  }
  syncBuiltinESMExports()
}

function unguardFs(): void {
  mock.restoreAll()
  syncBuiltinESMExports()
}

/** Runs `step` as a decision step: every fs call it makes, now or later in its async work, is recorded. */
function deciding<T>(what: string, step: () => T | Promise<T>): Promise<T> {
  return DECIDING.run(what, async () => step())
}

const SAMPLE: Record<string, string> = {
  folder: 'checkpoints', folder_name: 'checkpoints', node_class: 'LoadImage', prompt_id: 'p-1', id: 'Comfy.Setting',
  file: 'workflows/clash.json', dest: 'workflows/moved.json', path_index: '0', filename: 'a.safetensors', directory_type: 'output',
}

const PROMPT = JSON.stringify({
  client_id: 'client-1',
  prompt: {
    1: { class_type: 'LoadImage', inputs: { image: 'x.png' } },
    2: { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'a.safetensors' } },
    3: { class_type: 'SaveImage', inputs: { filename_prefix: 'ComfyUI', images: ['1', 0] } },
  },
})

/** A body for each body step, by the kind its context names. */
const BODIES: Record<string, string> = {
  prompt: PROMPT,
  'queue-write': '{"delete": ["p-1"], "clear": true}',
  'history-write': '{"delete": ["p-1"], "clear": true}',
  interrupt: '{"prompt_id": "p-1"}',
}

/** A host answer for each filter, by its name; anything else gets `{}`. */
const HOST_ANSWERS: Record<string, string> = {
  'queue-status': '{"exec_info": {"queue_remaining": 2}}',
  upload: '{"name": "x.png", "subfolder": "sub", "type": "input"}',
  queue: '{"queue_running": [[0, "p-1", {}, {"client_id": "client-1"}, []]], "queue_pending": [[1, "p-2", {}, {}, []]]}',
  history: '{"p-1": {"prompt": [0, "p-1", {}, {}, []], "outputs": {}, "status": {"status_str": "success", "completed": true, "messages": []}}}',
  object_info: JSON.stringify({
    LoadImage: { input: { required: { image: [['x.png', 'u_other/y.png'], { image_upload: true }] } } },
    CheckpointLoaderSimple: { input: { required: { ckpt_name: [['a.safetensors', 'b.safetensors'], {}] } } },
  }),
  system_stats: '{"system": {"argv": ["main.py", "--listen"], "os": "posix"}, "devices": []}',
  userdata: '["own.json", "clash.json"]',
  'userdata-v2': '[{"name": "own.json", "path": "workflows/own.json", "type": "file", "size": 2, "modified": 1.5}]',
  'prompt-answer': '{"error": {"type": "prompt_outputs_failed_validation", "message": "x", "details": "", "extra_info": {}}, "node_errors": {"2": {"errors": [{"type": "value_not_in_list", "message": "x", "details": "ckpt_name: \'c\' not in [\'a.safetensors\', \'b.safetensors\']", "extra_info": {}}]}}}',
}

describe('the decision path does no I/O', () => {
  let sc: Sidecar
  let admin: UserRecord
  let alice: UserRecord
  let bob: UserRecord
  const jwt: Record<string, string> = {}
  let token = ''
  const exercised = new Set<string>()

  before(async () => {
    sc = await openSidecar({ host: true })
    admin = await addUser(sc, 'admin', 'admin-password-1', 'admin')
    alice = await addUser(sc, 'alice', 'alice-password-1')
    bob = await addUser(sc, 'bob', 'bob-password-12')
    for (const u of [admin, alice, bob]) jwt[u.username] = await sessionJwt(sc, u)
    token = await apiToken(sc, alice)
    const hostDir = join(sc.dir, 'host')
    const userDir = join(hostDir, 'user')
    const models = join(sc.dir, 'models', 'checkpoints')
    for (const d of [join(userDir, 'default', 'workflows', 'team'), join(userDir, alice.user_id, 'workflows'), models]) mkdirSync(d, { recursive: true })
    for (const [path, text] of [
      [join(userDir, 'default', 'workflows', 'shared.json'), '{"from":"shared"}'],
      [join(userDir, 'default', 'workflows', 'clash.json'), '{"from":"shared"}'],
      [join(userDir, 'default', 'workflows', 'doomed.json'), '{}'],
      [join(userDir, 'default', 'workflows', 'team', 'brief.json'), '{}'],
      [join(userDir, alice.user_id, 'workflows', 'own.json'), '{"from":"alice"}'],
      [join(userDir, alice.user_id, 'workflows', 'clash.json'), '{"from":"alice"}'],
      [join(models, 'a.safetensors'), 'model'],
      [join(models, 'b.safetensors'), 'model'],
    ]) writeFileSync(path, text)
    const host: Record<string, unknown> = {
        user_dir: userDir, input_dir: join(hostDir, 'input'), output_dir: join(hostDir, 'output'), temp_dir: join(hostDir, 'temp'),
        model_folders: { checkpoints: [models] }, model_folder_extensions: { checkpoints: ['.safetensors'] },
        model_paths: { sep: '/', case_insensitive: false },
        model_inputs: { CheckpointLoaderSimple: { ckpt_name: { folders: ['checkpoints'], extras: [] } } },
    }
    sc.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 'test', host })
    // the model scan the hello started is complete once a refresh answers
    const refreshed = await call(sc, { method: 'POST', url: '/authsvc/api/model-cache/refresh', bearer: jwt.admin })
    assert.equal(refreshed.statusCode, 200, refreshed.body)
    await sc.host.resolve([{ op: 'userdata', path: userDir }]) // the resolver process is up before the guard
    guardFs()
  })
  after(async () => {
    unguardFs()
    await sc?.close()
  })

  /** One request through every step the plugin would drive: decide, then body, form and filter as asked. */
  async function drive(who: string, o: DescOptions, extra: { fields?: Record<string, string>; filterStatuses?: number[] } = {}): Promise<Decision> {
    const what = `${who} ${o.method ?? 'GET'} ${o.path}${o.query ? `?${o.query}` : ''}`
    const before = calls.length
    // a session JWT by name; or alice's API token, her session as a cookie (same origin), nobody
    const credential: Record<string, string> =
      who === 'alice-token' ? bearer(token) : who === 'alice-cookie' ? { cookie: `jwt_token=${jwt.alice}`, origin: 'http://127.0.0.1:8188', 'sec-fetch-site': 'same-origin' } : who === 'nobody' ? {} : bearer(jwt[who])
    const d = await deciding(what, () => decide(sc, { ...o, headers: { ...credential, ...(o.headers ?? {}) } })).catch((err: unknown) => ({ action: 'failed', err }) as unknown as Decision)
    const filterOf = async (spec: { name: string; ctx: unknown } | undefined): Promise<void> => {
      if (spec === undefined) return
      for (const status of extra.filterStatuses ?? [200, 404]) {
        await deciding(`${what} (filter ${spec.name}, host ${status})`, () =>
          sc.handlers.filter({ type: 'filter', id: 1, name: spec.name, ctx: spec.ctx, status, content_type: 'application/json' }, Buffer.from(status === 200 ? (HOST_ANSWERS[spec.name] ?? '{}') : 'Not found'))).catch(() => undefined)
      }
    }
    if (d.action === 'pass') {
      if (d.need_body) {
        const kind = String((d.need_body.ctx as { kind?: unknown }).kind)
        const out = stepAnswer(await deciding(`${what} (body)`, () => sc.handlers.body({ type: 'body', id: 1, ctx: d.need_body!.ctx }, Buffer.from(BODIES[kind] ?? '{}'))).catch(() => ({ action: 'failed' })))
        await filterOf((out as { filter?: { name: string; ctx: unknown } }).filter)
      }
      if (d.need_form) {
        const out = await deciding(`${what} (form)`, () =>
          sc.handlers.form({ type: 'form', id: 1, ctx: d.need_form!.ctx, fields: extra.fields ?? { type: 'input', subfolder: '', overwrite: 'false' }, files: { image: 'x.png' } })).catch(() => ({ action: 'failed' }) as unknown as Decision)
        if (out.action === 'pass') await filterOf(out.filter)
      }
      await filterOf(d.filter)
    }
    assert.deepEqual(calls.slice(before), [], `${what}: the decision called fs`)
    return d
  }

  it('every row of the host route table, as an admin and as a user (session, API token, cookie) and with no credential', async () => {
    for (const key of HOST_ROUTE_KEYS) {
      const [method, pattern] = key.split(' ')
      const policy = hostRoutePolicy(method, { pattern, kind: 'route' })
      if (policy.behaviour !== undefined) exercised.add(policy.behaviour)
      const match_info: Record<string, string> = {}
      const path = pattern.replace(/\{(\w+)\}/g, (_, name: string) => {
        match_info[name] = SAMPLE[name] ?? 'x'
        return encodeURIComponent(match_info[name])
      })
      for (const twin of [path, `/api${path === '/' ? '' : path}`]) {
        for (const who of twin === path ? ['admin', 'alice', 'alice-token', 'alice-cookie', 'nobody'] : ['admin', 'alice']) {
          const headers: Record<string, string> = pattern === '/ws' ? { upgrade: 'websocket', connection: 'Upgrade' } : {}
          await drive(who, { method, path: twin, pattern: twin === path ? pattern : `/api${pattern === '/' ? '' : pattern}`, match_info, headers })
        }
      }
    }
    const every: HostRouteBehaviour[] = [
      'prompt', 'queue-status', 'queue-read', 'queue-write', 'history-list', 'history-entry', 'history-write', 'interrupt', 'view', 'upload-image',
      'upload-mask', 'object-info', 'userdata-write', 'userdata-list', 'userdata-list-v2', 'userdata-read', 'users', 'system-stats', 'websocket',
      'model-list', 'embeddings', 'model-file',
    ]
    assert.deepEqual([...exercised].sort(), [...every].sort(), 'every behaviour has a row that was driven')
  })

  it('workflows: own and shared lists (every shape), loads, a new user\'s lists, deletes and moves', async () => {
    const list = (query: string): DescOptions => ({ path: '/userdata', pattern: '/userdata', query })
    const v2 = (query: string): DescOptions => ({ path: '/v2/userdata', pattern: '/v2/userdata', query })
    const file = (method: string, name: string, dest?: string): DescOptions => ({
      method, path: `/userdata/${encodeURIComponent(name)}`, pattern: dest === undefined ? '/userdata/{file}' : '/userdata/{file}/move/{dest}',
      match_info: dest === undefined ? { file: name } : { file: name, dest },
    })
    // the rows above had an admin delete the shared clash.json (no own one of that name)
    writeFileSync(join(sc.dir, 'host', 'user', 'default', 'workflows', 'clash.json'), '{"from":"shared"}')
    for (const who of ['alice', 'bob', 'admin']) {
      for (const query of ['dir=workflows', 'dir=workflows&recurse=true', 'dir=workflows&full_info=true', 'dir=workflows&split=true&recurse=true', 'dir=workflows%2Fteam', 'dir=subgraphs']) {
        await drive(who, list(query))
      }
      for (const query of ['path=workflows', 'path=workflows%2Fteam', 'path=']) await drive(who, v2(query))
      for (const name of ['workflows/own.json', 'workflows/shared.json', 'workflows/clash.json', 'workflows/none.json', 'comfy.settings.json']) await drive(who, file('GET', name))
      await drive(who, file('POST', 'workflows/new.json'))
      await drive(who, file('POST', 'workflows/shared.json', 'workflows/mine.json'))
      await drive(who, file('DELETE', 'workflows/own.json'))
      if (who !== 'admin') await drive(who, file('DELETE', 'workflows/clash.json')) // an admin's would remove the shared one
    }
    // what the steps answered is what they answered before the host looked for them
    const bobList = await drive('bob', list('dir=workflows'))
    assert.equal(bobList.action, 'respond')
    assert.deepEqual((JSON.parse((bobList as { body_text: string }).body_text) as string[]).sort(), ['clash.json', 'doomed.json', 'shared.json'])
    const shared = await drive('alice', file('GET', 'workflows/shared.json'))
    assert.equal((shared as { body_text?: string }).body_text, '{"from":"shared"}')
    assert.equal((await drive('alice', file('DELETE', 'workflows/doomed.json'))).action, 'respond')
    const gone = await drive('admin', file('DELETE', 'workflows/doomed.json'))
    assert.equal((gone as { status?: number }).status, 204)
    assert.equal(fs.existsSync(join(sc.dir, 'host', 'user', 'default', 'workflows', 'doomed.json')), false, 'the host removed it')
  })

  it('files, uploads, prompts, models and the filtered lists', async () => {
    for (const who of ['admin', 'alice', 'bob']) {
      for (const query of ['filename=x.png&type=input', 'filename=x.png&type=output&subfolder=u_other', 'filename=..%2Fx.png', 'filename=x.png&type=temp&preview=webp']) {
        await drive(who, { path: '/view', pattern: '/view', query })
      }
      for (const mask of [false, true]) {
        const fields: Record<string, string> = { type: 'input', subfolder: 'sub', overwrite: 'true' }
        if (mask) fields.original_ref = '{"filename": "x.png", "type": "input", "subfolder": ""}'
        await drive(who, { method: 'POST', path: mask ? '/upload/mask' : '/upload/image', pattern: mask ? '/upload/mask' : '/upload/image' }, { fields })
      }
      await drive(who, { method: 'POST', path: '/prompt', pattern: '/prompt' }, { filterStatuses: [200, 400] })
      for (const [path, pattern, match_info, query] of [
        ['/models/checkpoints', '/models/{folder}', { folder: 'checkpoints' }, ''],
        ['/experiment/models/checkpoints', '/experiment/models/{folder}', { folder: 'checkpoints' }, ''],
        ['/embeddings', '/embeddings', {}, ''],
        ['/view_metadata/checkpoints', '/view_metadata/{folder_name}', { folder_name: 'checkpoints' }, 'filename=a.safetensors'],
        ['/experiment/models/preview/checkpoints/0/a.safetensors', '/experiment/models/preview/{folder}/{path_index}/{filename}', { folder: 'checkpoints', path_index: '0', filename: 'a.safetensors' }, ''],
        ['/object_info', '/object_info', {}, ''],
        ['/object_info/LoadImage', '/object_info/{node_class}', { node_class: 'LoadImage' }, ''],
        ['/queue', '/queue', {}, ''],
        ['/history', '/history', {}, 'max_items=1'],
        ['/history/p-1', '/history/{prompt_id}', { prompt_id: 'p-1' }, ''],
        ['/prompt', '/prompt', {}, ''],
        ['/system_stats', '/system_stats', {}, ''],
        ['/ws', '/ws', {}, 'clientId=client-1'],
      ] as Array<[string, string, Record<string, string>, string]>) {
        await drive(who, { path, pattern, match_info, query, headers: path === '/ws' ? { upgrade: 'websocket', connection: 'Upgrade' } : {} })
      }
    }
  })

  it('the guard catches a decision that reads the disk (the test can fail)', async () => {
    const before = calls.length
    await deciding('a probe', () => {
      try {
        fs.readFileSync(join(sc.dir, 'host', 'user', 'default', 'workflows', 'shared.json'), 'utf8')
      } catch {
        // the guard throws as well as records
      }
    })
    await deciding('a later probe', async () => {
      await new Promise((resolve) => setImmediate(resolve))
      await Promise.resolve().then(() => fsp.stat(sc.dir)).catch(() => undefined)
    })
    assert.deepEqual(calls.splice(before), ['fs.readFileSync (a probe)', 'fs/promises.stat (a later probe)'])
  })

  it('the CPU check of the decision socket reads /proc after the turn that decides, never in it', async () => {
    const room = new CpuRoom(() => 2)
    const before = calls.length
    await deciding('a CPU check', () => {
      assert.equal(room.check(), false, 'no earlier sample: no room')
      assert.deepEqual(calls.slice(before), [], 'check() reads nothing itself')
    })
    // the sample is taken in a later turn (which the guard still counts, as it was scheduled there)
    await new Promise((resolve) => setImmediate(resolve))
    await new Promise((resolve) => setImmediate(resolve))
    const later = calls.splice(before)
    assert.ok(later.length > 0 && later.every((c) => c.startsWith('fs.readFileSync (a CPU check)')), JSON.stringify(later))
  })
})
