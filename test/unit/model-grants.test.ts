/**
 * Model grants through the real decider, its filter and body steps, and the
 * admin routes, with the real services, sqlite store and a model cache watching
 * real folders on disk: what an intern (a role without
 * can_view_all_comfyui_items) may see and use, an attack table of prompts that
 * try to reach an item not granted, and what a user who sees every model gets
 * (no filter step at all). End to end on the real ComfyUI:
 * test/e2e/real-host-models.test.ts.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { UserRecord } from '../../sidecar/src/identity/users.js'
import type { KeyValueStore } from '../../sidecar/src/store/kv.js'
import { optionListsOf } from '../../sidecar/src/isolation/behaviours/option-lists.js'
import {
  bearer, addUser, answer, assertDenied, assertPass, call, decide, openSidecar, sessionJwt, stepAnswer, tempDir, type DescOptions, type Sidecar, type Stepped,
} from './fixtures.js'
import { PROTOCOL_VERSION } from '../../sidecar/src/kernel/protocol.js'

const MODELS: Record<string, string[]> = {
  checkpoints: ['granted.safetensors', 'secret.safetensors', 'sub/deep.safetensors', 'notes.txt'],
  loras: ['style.safetensors', 'other.safetensors'],
  vae: ['plain.safetensors'],
  embeddings: ['good.pt', 'bad.safetensors', 'private/hidden.safetensors', 'paren(v2).pt'],
  custom_models: ['mine.ckpt', 'theirs.ckpt'],
  // Diffusers models are folders holding a model_index.json (ComfyUI's extension "folder")
  diffusers: ['granteddiff/model_index.json', 'granteddiff/unet/w.safetensors', 'secretdiff/model_index.json', 'nested/deepdiff/model_index.json'],
}

/** The facts the plugin sends: folders, extensions, and the model inputs it read from the host. */
function facts(modelsDir: string, paths: Record<string, unknown> = { sep: '/', case_insensitive: false }) {
  const folders = Object.keys(MODELS)
  return {
    model_folders: { ...Object.fromEntries(folders.map((f) => [f, [join(modelsDir, f)]])), custom_nodes: [join(modelsDir, '..', 'custom_nodes')] },
    model_folder_extensions: { ...Object.fromEntries(folders.map((f) => [f, f === 'custom_models' ? ['.ckpt'] : f === 'diffusers' ? ['folder'] : ['.safetensors', '.pt', '.ckpt']])), custom_nodes: [] },
    model_paths: paths,
    legacy_folders: { unet: 'diffusion_models', clip: 'text_encoders' },
    model_inputs: {
      CheckpointLoaderSimple: { ckpt_name: { folders: ['checkpoints'], extras: [] } },
      LoraLoader: { lora_name: { folders: ['loras'], extras: [] } },
      VAELoader: { vae_name: { folders: ['vae'], extras: ['pixel_space'] } },
      CustomLoader: { model: { folders: ['custom_models'], extras: [] } },
    },
  }
}

interface World {
  sc: Sidecar
  modelsDir: string
  adminJwt: string
  intern: UserRecord
  internJwt: string
  userJwt: string
}

async function hello(sc: Sidecar, host: Record<string, unknown>, adminJwt: string): Promise<void> {
  sc.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 'test', host })
  // the refresh runs after the scan the hello started: once it answers, the cache is complete
  const res = await call(sc, { method: 'POST', url: '/authsvc/api/model-cache/refresh', bearer: adminJwt })
  assert.equal(res.statusCode, 200, res.body)
}

async function world(config: Record<string, unknown> = {}): Promise<World> {
  const sc = await openSidecar({ config })
  const modelsDir = join(sc.dir, 'models')
  for (const [folder, items] of Object.entries(MODELS)) {
    for (const item of items) {
      mkdirSync(join(modelsDir, folder, item, '..'), { recursive: true })
      writeFileSync(join(modelsDir, folder, item), 'model')
    }
  }
  const groups = sc.services.roles.snapshot()
  sc.services.roles.replace({ ...groups, intern: { ...groups.user, can_view_all_comfyui_items: false } })
  const admin = await addUser(sc, 'admin', 'admin-password-1', 'admin')
  const intern = await addUser(sc, 'intern', 'intern-password-1', 'intern')
  const user = await addUser(sc, 'carol', 'carol-password-1', 'user')
  const adminJwt = await sessionJwt(sc, admin)
  await hello(sc, facts(modelsDir), adminJwt)
  for (const [folder, item_name] of [['checkpoints', 'granted.safetensors'], ['loras', 'style.safetensors'], ['embeddings', 'good.pt'], ['custom_models', 'mine.ckpt'], ['diffusers', 'granteddiff']]) {
    const res = await call(sc, { method: 'POST', url: '/authsvc/api/users/intern/shared-items', bearer: adminJwt, body: { folder, item_name } })
    assert.equal(res.statusCode, 200, res.body)
  }
  return { sc, modelsDir, adminJwt, intern, internJwt: await sessionJwt(sc, intern), userJwt: await sessionJwt(sc, user) }
}

/** GET through the decider; when it asks for a filter, the host's answer is filtered. */
async function filtered(sc: Sidecar, o: DescOptions, hostAnswer: string): Promise<{ filter: boolean; body: string }> {
  const d = assertPass(await decide(sc, o))
  if (!d.filter) return { filter: false, body: hostAnswer }
  const out = stepAnswer(await sc.handlers.filter({ type: 'filter', id: 1, name: d.filter.name, ctx: d.filter.ctx, status: 200, content_type: 'application/json' }, Buffer.from(hostAnswer, 'utf8')))
  return { filter: true, body: (out.action as string) === 'keep' ? hostAnswer : out.body_text! }
}

async function postPrompt(sc: Sidecar, jwt: string, graph: unknown, method = 'POST'): Promise<Stepped> {
  const d = assertPass(await decide(sc, { method, path: '/prompt', pattern: '/prompt', headers: bearer(jwt) }))
  return stepAnswer(await sc.handlers.body({ type: 'body', id: 1, ctx: d.need_body!.ctx }, Buffer.from(JSON.stringify({ prompt: graph }), 'utf8')))
}

const node = (class_type: string, inputs: Record<string, unknown>) => ({ class_type, inputs })

/** Polls an in-memory answer until `ok` (the watcher's event arrived) or 2 s passed; returns the elapsed time. */
async function within2s(probe: () => Promise<boolean>): Promise<number> {
  const start = Date.now()
  while (!(await probe())) {
    if (Date.now() - start > 2000) assert.fail('not seen within 2 s')
    await new Promise((r) => setTimeout(r, 20))
  }
  return Date.now() - start
}

describe('model admin API', () => {
  let w: World
  before(async () => {
    w = await world()
  })
  after(() => w.sc.close())

  const get = async (url: string, jwt = w.adminJwt) => {
    const res = await call(w.sc, { url, bearer: jwt })
    return { status: res.statusCode, json: JSON.parse(res.body) as Record<string, unknown> }
  }

  it('lists the host folders (live and cached) without custom_nodes, and items as the host lists them', async () => {
    const want = ['checkpoints', 'custom_models', 'diffusers', 'embeddings', 'loras', 'vae']
    assert.deepEqual((await get('/authsvc/api/available-model-folders')).json, { folders: want })
    assert.deepEqual((await get('/authsvc/api/model-cache/folders')).json, { folders: want })
    const ckpts = ['granted.safetensors', 'secret.safetensors', 'sub/deep.safetensors']
    assert.deepEqual((await get('/authsvc/api/available-models/checkpoints')).json, { folder: 'checkpoints', items: ckpts })
    assert.deepEqual((await get('/authsvc/api/model-cache/folders/checkpoints/items')).json, { folder: 'checkpoints', items: ckpts })
    assert.deepEqual((await get('/api/authsvc/api/model-cache/folders/custom_models/items')).json, { folder: 'custom_models', items: ['mine.ckpt', 'theirs.ckpt'] })
    // a Diffusers model is the folder that holds its model_index.json, as DiffusersLoader lists it
    const diffusers = ['granteddiff', 'nested/deepdiff', 'secretdiff']
    assert.deepEqual((await get('/authsvc/api/available-models/diffusers')).json, { folder: 'diffusers', items: diffusers })
    assert.deepEqual((await get('/authsvc/api/model-cache/folders/diffusers/items')).json, { folder: 'diffusers', items: diffusers })
  })

  it('unknown folders are 404; every model admin route is admin only', async () => {
    for (const url of ['/authsvc/api/available-models/nope', '/authsvc/api/model-cache/folders/nope/items', '/authsvc/api/available-models/custom_nodes']) {
      const r = await get(url)
      assert.equal(r.status, 404, url)
      assert.equal(r.json.code, 'NOT_FOUND', url)
    }
    for (const url of ['/authsvc/api/available-model-folders', '/authsvc/api/model-cache/folders', '/authsvc/api/users/intern/shared-items']) {
      const r = await get(url, w.userJwt)
      assert.equal(r.status, 403, url)
      assert.equal(r.json.code, 'ADMIN_REQUIRED', url)
    }
  })

  it('a file added, renamed and removed on disk shows in the cache within 2 s', async () => {
    const items = async () => ((await get('/authsvc/api/model-cache/folders/loras/items')).json.items as string[])
    const added = join(w.modelsDir, 'loras', 'new', 'fresh.safetensors')
    mkdirSync(join(added, '..'), { recursive: true })
    writeFileSync(added, 'model')
    await within2s(async () => (await items()).includes('new/fresh.safetensors'))
    renameSync(added, join(w.modelsDir, 'loras', 'renamed.safetensors'))
    await within2s(async () => {
      const now = await items()
      return now.includes('renamed.safetensors') && !now.includes('new/fresh.safetensors')
    })
    rmSync(join(w.modelsDir, 'loras', 'renamed.safetensors'))
    await within2s(async () => !(await items()).includes('renamed.safetensors'))
  })

  it('refresh rebuilds the cache and reports its size', async () => {
    const res = await call(w.sc, { method: 'POST', url: '/authsvc/api/model-cache/refresh', bearer: w.adminJwt })
    const body = JSON.parse(res.body) as Record<string, unknown>
    assert.equal(body.status, 'ok')
    assert.equal(body.folders_count, 6)
    assert.equal(body.items_count, 3 + 2 + 1 + 4 + 2 + 3)
    assert.match(String(body.refreshed_at_iso), /^\d{4}-\d\d-\d\dT/)
  })

  it('grants: unknown folder or item 400, granting twice is idempotent, revoking works even once the file is gone', async () => {
    const post = (body: unknown, method = 'POST') => call(w.sc, { method, url: '/authsvc/api/users/intern/shared-items', bearer: w.adminJwt, body })
    const bad: Array<[string, unknown]> = [
      ['unknown folder', { folder: 'nope', item_name: 'granted.safetensors' }],
      ['unknown item', { folder: 'checkpoints', item_name: 'missing.safetensors' }],
      ['a file the folder does not list (extension)', { folder: 'checkpoints', item_name: 'notes.txt' }],
      ['custom_nodes is no model folder', { folder: 'custom_nodes', item_name: 'x' }],
      ['missing item_name', { folder: 'checkpoints' }],
      ['extra key', { folder: 'checkpoints', item_name: 'granted.safetensors', user: 'x' }],
    ]
    for (const [label, body] of bad) {
      for (const method of ['POST', 'DELETE']) {
        const res = await post(body, method)
        assert.equal(res.statusCode, 400, `${method} ${label}: ${res.body}`)
        assert.equal(JSON.parse(res.body).code, 'VALIDATION_FAILED', `${method} ${label}`)
      }
    }
    const before = JSON.parse((await post({ folder: 'checkpoints', item_name: 'granted.safetensors' })).body) as { items: Array<Record<string, string>> }
    const again = JSON.parse((await post({ folder: 'checkpoints', item_name: 'granted.safetensors' })).body) as { items: Array<Record<string, string>> }
    assert.deepEqual(again, before)
    assert.equal(before.items.filter((i) => i.item_name === 'granted.safetensors').length, 1)
    assert.deepEqual(Object.keys(before.items[0]).sort(), ['created_at_iso', 'folder', 'granted_by', 'host_only', 'item_name'])
    assert.equal(before.items[0].granted_by, 'admin')

    const doomed = join(w.modelsDir, 'vae', 'doomed.safetensors')
    writeFileSync(doomed, 'model')
    const granted = await post({ folder: 'vae', item_name: 'doomed.safetensors' })
    assert.equal(granted.statusCode, 200, 'a file copied a moment ago can be granted (the disk is asked when the cache has not seen it)')
    rmSync(doomed)
    const revoked = JSON.parse((await post({ folder: 'vae', item_name: 'doomed.safetensors' }, 'DELETE')).body) as { items: Array<Record<string, string>> }
    assert.ok(!revoked.items.some((i) => i.item_name === 'doomed.safetensors'))
    assert.equal((await post({ folder: 'vae', item_name: 'plain.safetensors' }, 'DELETE')).statusCode, 200, 'revoking what was never granted is a no-op')
    assert.equal((await call(w.sc, { url: '/authsvc/api/users/nobody/shared-items', bearer: w.adminJwt })).statusCode, 404)
  })

  it('grants are in the store (a restarted sidecar has them) and deleting the user deletes them', async () => {
    const temp = await addUser(w.sc, 'temp-intern', 'temp-password-1', 'intern')
    const res = await call(w.sc, { method: 'POST', url: '/authsvc/api/users/temp-intern/shared-items', bearer: w.adminJwt, body: { folder: 'loras', item_name: 'other.safetensors' } })
    assert.equal(res.statusCode, 200, res.body)
    await w.sc.services.flush()
    const again = await openSidecar({ dir: w.sc.dir })
    try {
      assert.deepEqual(again.services.modelGrants.list(temp.user_id).map((g) => `${g.folder}/${g.item_name}`), ['loras/other.safetensors'])
    } finally {
      await again.close({ keepDir: true })
    }
    const del = await call(w.sc, { method: 'DELETE', url: '/authsvc/api/users/temp-intern', bearer: w.adminJwt })
    assert.equal(del.statusCode, 200, del.body)
    assert.deepEqual(w.sc.services.modelGrants.list(temp.user_id), [])
    await w.sc.services.flush()
    const after = await openSidecar({ dir: w.sc.dir })
    try {
      assert.deepEqual(after.services.modelGrants.list(temp.user_id), [])
    } finally {
      await after.close({ keepDir: true })
    }
  })
})

describe('model lists for a principal without can_view_all_comfyui_items', () => {
  let w: World
  before(async () => {
    w = await world()
  })
  after(() => w.sc.close())

  const MODELS_ANSWER = '["granted.safetensors", "secret.safetensors", "sub/deep.safetensors"]'

  it('/models/{folder} and its /api twin: only granted items; a user who sees everything gets no filter step', async () => {
    for (const path of ['/models/checkpoints', '/api/models/checkpoints']) {
      const o = { path, pattern: path.replace('checkpoints', '{folder}'), match_info: { folder: 'checkpoints' } }
      assert.deepEqual(await filtered(w.sc, { ...o, headers: bearer(w.internJwt) }, MODELS_ANSWER), { filter: true, body: '["granted.safetensors"]' })
      assert.deepEqual(await filtered(w.sc, { ...o, headers: bearer(w.userJwt) }, MODELS_ANSWER), { filter: false, body: MODELS_ANSWER })
      assert.deepEqual(await filtered(w.sc, { ...o, headers: bearer(w.adminJwt) }, MODELS_ANSWER), { filter: false, body: MODELS_ANSWER })
    }
  })

  it('/experiment/models/{folder}: objects kept whole (64-bit numbers too) only for granted names', async () => {
    const host = '[{"name": "granted.safetensors", "pathIndex": 0, "size": 18446744073709551615}, {"name": "secret.safetensors", "pathIndex": 0}]'
    const out = await filtered(w.sc, { path: '/experiment/models/checkpoints', pattern: '/experiment/models/{folder}', match_info: { folder: 'checkpoints' }, headers: bearer(w.internJwt) }, host)
    assert.equal(out.body, '[{"name": "granted.safetensors", "pathIndex": 0, "size": 18446744073709551615}]')
  })

  it('/embeddings: names without extension, only granted ones', async () => {
    const out = await filtered(w.sc, { path: '/embeddings', pattern: '/embeddings', headers: bearer(w.internJwt) }, '["bad", "good"]')
    assert.equal(out.body, '["good"]')
  })

  it('a host answer that is not a list (or a 404) reveals nothing and is never a 500', async () => {
    const o = { path: '/models/checkpoints', pattern: '/models/{folder}', match_info: { folder: 'checkpoints' }, headers: bearer(w.internJwt) }
    assert.equal((await filtered(w.sc, o, '{"secret.safetensors": 1}')).body, '[]')
    assert.equal((await filtered(w.sc, o, 'not json')).body, '[]')
    const d = assertPass(await decide(w.sc, o))
    assert.deepEqual(await w.sc.handlers.filter({ type: 'filter', id: 1, name: d.filter!.name, ctx: d.filter!.ctx, status: 404, content_type: 'text/plain' }, Buffer.alloc(0)), { action: 'keep' })
  })

  const FILE_ROWS: Array<[string, DescOptions, 'pass' | 404]> = [
    ['view_metadata of a granted item', { path: '/view_metadata/checkpoints', pattern: '/view_metadata/{folder_name}', match_info: { folder_name: 'checkpoints' }, query: 'filename=granted.safetensors' }, 'pass'],
    ['view_metadata of an item not granted', { path: '/view_metadata/checkpoints', pattern: '/view_metadata/{folder_name}', match_info: { folder_name: 'checkpoints' }, query: 'filename=secret.safetensors' }, 404],
    ['view_metadata through ../', { path: '/view_metadata/checkpoints', pattern: '/view_metadata/{folder_name}', match_info: { folder_name: 'checkpoints' }, query: 'filename=sub/../secret.safetensors' }, 404],
    ['view_metadata of a granted name in another folder', { path: '/view_metadata/loras', pattern: '/view_metadata/{folder_name}', match_info: { folder_name: 'loras' }, query: 'filename=granted.safetensors' }, 404],
    ['view_metadata without filename', { path: '/view_metadata/checkpoints', pattern: '/view_metadata/{folder_name}', match_info: { folder_name: 'checkpoints' } }, 404],
    ['api twin of view_metadata', { path: '/api/view_metadata/checkpoints', pattern: '/api/view_metadata/{folder_name}', match_info: { folder_name: 'checkpoints' }, query: 'filename=secret.safetensors' }, 404],
    ['preview of a granted item', { path: '/experiment/models/preview/checkpoints/0/granted.safetensors', pattern: '/experiment/models/preview/{folder}/{path_index}/{filename}', match_info: { folder: 'checkpoints', path_index: '0', filename: 'granted.safetensors' } }, 'pass'],
    ['preview of an item not granted', { path: '/experiment/models/preview/checkpoints/0/secret.safetensors', pattern: '/experiment/models/preview/{folder}/{path_index}/{filename}', match_info: { folder: 'checkpoints', path_index: '0', filename: 'secret.safetensors' } }, 404],
    ['preview with a path index the folder does not have', { path: '/experiment/models/preview/checkpoints/1/granted.safetensors', pattern: '/experiment/models/preview/{folder}/{path_index}/{filename}', match_info: { folder: 'checkpoints', path_index: '1', filename: 'granted.safetensors' } }, 404],
    ['preview with a path index that is no number (the host would fail with a 500)', { path: '/experiment/models/preview/checkpoints/x/granted.safetensors', pattern: '/experiment/models/preview/{folder}/{path_index}/{filename}', match_info: { folder: 'checkpoints', path_index: 'x', filename: 'granted.safetensors' } }, 404],
    ['preview through ./', { path: '/experiment/models/preview/checkpoints/0/./secret.safetensors', pattern: '/experiment/models/preview/{folder}/{path_index}/{filename}', match_info: { folder: 'checkpoints', path_index: '0', filename: './secret.safetensors' } }, 404],
  ]
  for (const [label, o, want] of FILE_ROWS) {
    it(`${label} → ${want === 'pass' ? 'the host answers' : 'the host\'s own 404 for a missing item'}`, async () => {
      const d = await decide(w.sc, { ...o, headers: bearer(w.internJwt) })
      if (want === 'pass') {
        assertPass(d, label)
      } else {
        const a = answer(d)
        assert.equal(a.status, 404)
        assert.equal(a.body, '')
      }
      assertPass(await decide(w.sc, { ...o, headers: bearer(w.userJwt) }), `${label} for a user who sees everything`)
    })
  }

  // the host joins a preview's name to the folder as it is: a name that leaves it reaches any image on the disk
  const LEAVING: Array<[string, string]> = [
    ['../ out of the folder', '../../output/u_someone/secret_00001_.png'],
    ['an absolute name', '/srv/comfy/output/u_someone/secret_00001_.png'],
    ['../ after a subfolder', 'sub/../../secret.png'],
    ['.. alone', '..'],
    ['a trailing ..', 'sub/..'],
    ['a NUL byte', 'granted\u0000.safetensors'],
  ]
  for (const [label, filename] of LEAVING) {
    it(`a model preview by ${label} is the host's own 404 for everyone, whatever models they see`, async () => {
      const o = { path: `/experiment/models/preview/checkpoints/0/${encodeURIComponent(filename)}`, pattern: '/experiment/models/preview/{folder}/{path_index}/{filename}', match_info: { folder: 'checkpoints', path_index: '0', filename } }
      for (const [who, token] of [['intern', w.internJwt], ['user', w.userJwt], ['admin', w.adminJwt]] as const) {
        const a = answer(await decide(w.sc, { ...o, headers: bearer(token) }))
        assert.deepEqual([a.status, a.body], [404, ''], who)
      }
    })
  }

  it('/object_info: every model list the host reports keeps only granted items (and non-file options); a list it did not report is found from the cache; everything else is byte for byte', async () => {
    const host =
      '{"CheckpointLoaderSimple": {"input": {"required": {"ckpt_name": [["granted.safetensors", "secret.safetensors", "sub/deep.safetensors"], {"tooltip": "x"}]}}, "output": ["MODEL"]}, ' +
      '"VAELoader": {"input": {"required": {"vae_name": [["plain.safetensors", "pixel_space"]]}}}, ' +
      '"V3Loader": {"input": {"required": {"lora": ["COMBO", {"options": ["other.safetensors", "style.safetensors"], "default": "other.safetensors"}]}}}, ' +
      '"UnreportedLoader": {"input": {"optional": {"m": [["None", "mine.ckpt", "theirs.ckpt"]]}}}, ' +
      '"KSampler": {"input": {"required": {"seed": ["INT", {"default": 0, "min": 0, "max": 18446744073709551615}], "sampler_name": [["euler", "secret.safetensors"]]}}}}'
    const want =
      '{"CheckpointLoaderSimple": {"input": {"required": {"ckpt_name": [["granted.safetensors"], {"tooltip": "x"}]}}, "output": ["MODEL"]}, ' +
      '"VAELoader": {"input": {"required": {"vae_name": [["pixel_space"]]}}}, ' +
      '"V3Loader": {"input": {"required": {"lora": ["COMBO", {"options": ["style.safetensors"], "default": "style.safetensors"}]}}}, ' +
      '"UnreportedLoader": {"input": {"optional": {"m": [["None", "mine.ckpt"]]}}}, ' +
      '"KSampler": {"input": {"required": {"seed": ["INT", {"default": 0, "min": 0, "max": 18446744073709551615}], "sampler_name": [["euler", "secret.safetensors"]]}}}}'
    for (const path of ['/object_info', '/object_info/CheckpointLoaderSimple']) {
      const o = { path, pattern: path === '/object_info' ? '/object_info' : '/object_info/{node_class}' }
      assert.equal((await filtered(w.sc, { ...o, headers: bearer(w.internJwt) }, host)).body, want, path)
      assert.deepEqual(await filtered(w.sc, { ...o, headers: bearer(w.adminJwt) }, host), { filter: false, body: host }, `${path}: admin`)
    }
  })

  it('/object_info: DiffusersLoader\'s list of folders keeps only granted Diffusers models', async () => {
    const host = '{"DiffusersLoader": {"input": {"required": {"model_path": [["granteddiff", "nested/deepdiff", "secretdiff"]]}}}}'
    const o = { path: '/object_info/DiffusersLoader', pattern: '/object_info/{node_class}' }
    assert.equal((await filtered(w.sc, { ...o, headers: bearer(w.internJwt) }, host)).body, '{"DiffusersLoader": {"input": {"required": {"model_path": [["granteddiff"]]}}}}')
  })

  it('/object_info: a list the host did not report never keeps a name in a download staging directory (the cache does not know it: unknown names are otherwise kept)', async () => {
    const partial = '.authsvc-partial/theirs.ckpt.1a2b3c4d.authsvc-partial'
    const host = `{"UnreportedLoader": {"input": {"optional": {"m": [["None", "mine.ckpt", "theirs.ckpt", "${partial}", "sub/.authsvc-partial/x.ckpt"]]}}}}`
    const o = { path: '/object_info', pattern: '/object_info' }
    assert.equal((await filtered(w.sc, { ...o, headers: bearer(w.internJwt) }, host)).body, '{"UnreportedLoader": {"input": {"optional": {"m": [["None", "mine.ckpt"]]}}}}')
    assert.deepEqual(await filtered(w.sc, { ...o, headers: bearer(w.adminJwt) }, host), { filter: false, body: host }, 'admin')
    // a list the cache cannot tie to a folder (nothing else of a folder in it): the partial still goes
    const alone = `{"OtherLoader": {"input": {"required": {"m": [["None", "${partial}"]]}}}}`
    assert.equal((await filtered(w.sc, { ...o, headers: bearer(w.internJwt) }, alone)).body, '{"OtherLoader": {"input": {"required": {"m": [["None"]]}}}}')
  })

  it('a grant or a revocation changes the next answer', async () => {
    const o = { path: '/models/loras', pattern: '/models/{folder}', match_info: { folder: 'loras' }, headers: bearer(w.internJwt) }
    const host = '["other.safetensors", "style.safetensors"]'
    const grants = '/authsvc/api/users/intern/shared-items'
    assert.equal((await filtered(w.sc, o, host)).body, '["style.safetensors"]')
    await call(w.sc, { method: 'POST', url: grants, bearer: w.adminJwt, body: { folder: 'loras', item_name: 'other.safetensors' } })
    assert.equal((await filtered(w.sc, o, host)).body, host)
    assert.equal((await postPrompt(w.sc, w.internJwt, { 1: node('LoraLoader', { lora_name: 'other.safetensors' }) })).action, 'pass')
    await call(w.sc, { method: 'DELETE', url: grants, bearer: w.adminJwt, body: { folder: 'loras', item_name: 'other.safetensors' } })
    assert.equal((await filtered(w.sc, o, host)).body, '["style.safetensors"]')
    assertDenied(await postPrompt(w.sc, w.internJwt, { 1: node('LoraLoader', { lora_name: 'other.safetensors' }) }), 'MODEL_NOT_ALLOWED')
  })
})

describe('the /prompt model check', () => {
  let w: World
  before(async () => {
    w = await world()
  })
  after(() => w.sc.close())

  const ok = node('CheckpointLoaderSimple', { ckpt_name: 'granted.safetensors' })

  it('a graph using only granted models passes, for POST and PUT', async () => {
    const graph = {
      4: ok,
      10: node('LoraLoader', { lora_name: 'style.safetensors', model: ['4', 0], clip: ['4', 1], strength_model: 1 }),
      11: node('VAELoader', { vae_name: 'pixel_space' }),
      12: node('CLIPTextEncode', { text: 'a cat, embedding:good', clip: ['10', 1] }),
      13: node('CustomLoader', { model: 'mine.ckpt' }),
      14: node('DiffusersLoader', { model_path: 'granteddiff' }),
    }
    assert.equal((await postPrompt(w.sc, w.internJwt, graph)).action, 'pass')
    assert.equal((await postPrompt(w.sc, w.internJwt, graph, 'PUT')).action, 'pass')
  })

  it('the prompt is stamped with what its owner may load while it runs (authsvc_models: host folders, granted names), whatever the client sent; null for one who sees every model', async () => {
    const stamped = async (jwt: string, extra: unknown): Promise<unknown> => {
      const d = assertPass(await decide(w.sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: bearer(jwt) }))
      const body = JSON.stringify({ prompt: { 4: ok }, extra_data: extra })
      const out = stepAnswer(await w.sc.handlers.body({ type: 'body', id: 1, ctx: d.need_body!.ctx }, Buffer.from(body, 'utf8')))
      assert.equal(out.action, 'pass')
      return (JSON.parse(out.body_text!) as { extra_data: Record<string, unknown> }).extra_data.authsvc_models
    }
    const granted = { checkpoints: ['granted.safetensors'], custom_models: ['mine.ckpt'], diffusers: ['granteddiff'], embeddings: ['good.pt'], loras: ['style.safetensors'] }
    assert.deepEqual(await stamped(w.internJwt, { authsvc_models: null }), granted, 'a spoofed null is replaced')
    assert.deepEqual(await stamped(w.internJwt, { authsvc_models: { checkpoints: ['secret.safetensors'] } }), granted)
    assert.equal(await stamped(w.userJwt, { authsvc_models: { checkpoints: [] } }), null)
    assert.equal(await stamped(w.adminJwt, {}), null)
    // a grant is in the next prompt's stamp, a subfolder's item by its path
    const item = { folder: 'checkpoints', item_name: 'sub/deep.safetensors' }
    assert.equal((await call(w.sc, { method: 'POST', url: '/authsvc/api/users/intern/shared-items', bearer: w.adminJwt, body: item })).statusCode, 200)
    assert.deepEqual(await stamped(w.internJwt, {}), { ...granted, checkpoints: ['granted.safetensors', 'sub/deep.safetensors'] })
    assert.equal((await call(w.sc, { method: 'DELETE', url: '/authsvc/api/users/intern/shared-items', bearer: w.adminJwt, body: item })).statusCode, 200)
    assert.deepEqual(await stamped(w.internJwt, {}), granted, 'a revocation is in the next stamp')
  })

  it('the host\'s execution cache: a limited owner\'s results are those of one grant set (a grant or revocation runs the graph again); a loader of literal granted files stays shared; a list option that is not a file is not', async () => {
    const scopes = async (jwt: string, graph: Record<string, unknown>): Promise<Record<string, unknown>> => {
      const out = await postPrompt(w.sc, jwt, graph)
      assert.equal(out.action, 'pass', JSON.stringify(out))
      const sent = JSON.parse(out.body_text!) as { prompt: Record<string, { inputs: Record<string, unknown> }> }
      return Object.fromEntries(Object.entries(sent.prompt).map(([id, n]) => [id, n.inputs.authsvc_scope]))
    }
    const graph = { 1: node('PrimitiveString', { value: 'em' }), 2: ok, 3: node('VAELoader', { vae_name: 'pixel_space' }) }
    const first = await scopes(w.internJwt, graph)
    assert.equal(first[2], undefined, 'a loader of a literal granted file stays shared')
    assert.match(String(first[1]), new RegExp(`^u_${w.intern.user_id}:[0-9a-f]{40}$`), 'her folder and her grant set')
    assert.equal(first[3], first[1], 'a list option that is not a file loads what the host finds: not shared')
    const item = { folder: 'loras', item_name: 'other.safetensors' }
    assert.equal((await call(w.sc, { method: 'POST', url: '/authsvc/api/users/intern/shared-items', bearer: w.adminJwt, body: item })).statusCode, 200)
    const granted = await scopes(w.internJwt, graph)
    assert.notEqual(granted[1], first[1], 'another grant set, another scope')
    assert.equal((await call(w.sc, { method: 'DELETE', url: '/authsvc/api/users/intern/shared-items', bearer: w.adminJwt, body: item })).statusCode, 200)
    assert.equal((await scopes(w.internJwt, graph))[1], first[1], 'the same set again, the same scope')
    const seesAll = await scopes(w.userJwt, graph)
    assert.match(String(seesAll[1]), /^u_[0-9a-f-]+$/, 'one who sees every model: the folder alone')
  })

  const ATTACKS: Array<[string, Record<string, unknown>, string[]]> = [
    ['a checkpoint not granted', { 1: node('CheckpointLoaderSimple', { ckpt_name: 'secret.safetensors' }) }, ['checkpoints/secret.safetensors']],
    ['two refused items are both named', { 1: node('CheckpointLoaderSimple', { ckpt_name: 'secret.safetensors' }), 2: node('LoraLoader', { lora_name: 'other.safetensors' }) }, ['checkpoints/secret.safetensors', 'loras/other.safetensors']],
    ['a granted name from another folder', { 1: node('LoraLoader', { lora_name: 'granted.safetensors' }) }, ['loras/granted.safetensors']],
    ['the custom node\'s loader', { 1: node('CustomLoader', { model: 'theirs.ckpt' }) }, ['custom_models/theirs.ckpt']],
    ['a link into a model input (the value is known only when it runs)', { 1: node('PrimitiveString', { value: 'x' }), 2: node('CheckpointLoaderSimple', { ckpt_name: ['1', 0] }) }, ['checkpoints/<linked from node 2.ckpt_name>']],
    ['../ the host would resolve', { 1: node('CheckpointLoaderSimple', { ckpt_name: 'sub/../secret.safetensors' }) }, ['checkpoints/sub/../secret.safetensors']],
    ['./ the host would resolve', { 1: node('CheckpointLoaderSimple', { ckpt_name: './secret.safetensors' }) }, ['checkpoints/./secret.safetensors']],
    ['a loader the host did not report, naming an item', { 1: node('SomeOtherLoader', { anything: 'secret.safetensors' }) }, ['checkpoints/secret.safetensors']],
    ['a model name in a text a string node feeds into a loader', { 1: node('PrimitiveString', { value: 'sub/deep.safetensors' }), 2: node('CheckpointLoaderSimple', { ckpt_name: 'granted.safetensors' }) }, ['checkpoints/sub/deep.safetensors']],
    ['an embedding not granted, in a prompt text', { 1: node('CLIPTextEncode', { text: 'a cat, (embedding:bad:1.2)' }) }, ['embeddings/bad.safetensors']],
    ['an embedding with its extension', { 1: node('CLIPTextEncode', { text: 'embedding:bad.safetensors' }) }, ['embeddings/bad.safetensors']],
    // the host looks a name up in every folder under embeddings/ too, reads \( \) as literal parentheses, and splits words on spaces only
    ['an embedding in a subfolder, by its bare name', { 1: node('CLIPTextEncode', { text: 'a cat, embedding:hidden' }) }, ['embeddings/private/hidden.safetensors']],
    ['an embedding with escaped parentheses in its name', { 1: node('CLIPTextEncode', { text: 'a cat, embedding:paren\\(v2\\)' }) }, ['embeddings/paren(v2).pt']],
    ['an escaped name under a weight', { 1: node('CLIPTextEncode', { text: '(embedding:paren\\(v2\\):1.1)' }) }, ['embeddings/paren(v2).pt']],
    // the host's str.split() ends the name at any of Python's whitespace, not only a space
    ['an embedding name ended by a tab', { 1: node('CLIPTextEncode', { text: 'a cat, embedding:bad\tx' }) }, ['embeddings/bad.safetensors']],
    ['an embedding name ended by a no-break space', { 1: node('CLIPTextEncode', { text: 'a cat, embedding:bad\u00a0x' }) }, ['embeddings/bad.safetensors']],
    ['an embedding name ended by a carriage return', { 1: node('CLIPTextEncode', { text: 'a cat, embedding:bad\rx' }) }, ['embeddings/bad.safetensors']],
    ['an embedding name ended by a unit separator (whitespace to Python, not to JS)', { 1: node('CLIPTextEncode', { text: 'a cat, embedding:bad\u001fx' }) }, ['embeddings/bad.safetensors']],
    ['an embedding name ended by U+0085', { 1: node('CLIPTextEncode', { text: 'a cat, embedding:bad\u0085x' }) }, ['embeddings/bad.safetensors']],
    ['an embedding with trailing commas', { 1: node('CLIPTextEncode', { text: 'embedding:bad,,' }) }, ['embeddings/bad.safetensors']],
    ['an embedding through ../ inside the folder', { 1: node('CLIPTextEncode', { text: 'embedding:private/../bad' }) }, ['embeddings/bad.safetensors']],
    // the host takes any two-item list as a link (`true` is output 1), and any other value is no name
    ['a link whose index is true', { 1: node('PrimitiveString', { value: 'x' }), 2: node('CheckpointLoaderSimple', { ckpt_name: ['1', true] }) }, ['checkpoints/<linked from node 2.ckpt_name>']],
    // DiffusersLoader's list is folders (os.walk), which the host does not report as a model input
    ['a Diffusers model not granted', { 1: node('DiffusersLoader', { model_path: 'secretdiff' }) }, ['diffusers/secretdiff']],
    ['a nested Diffusers model not granted', { 1: node('DiffusersLoader', { model_path: 'nested/deepdiff' }) }, ['diffusers/nested/deepdiff']],
    ['a number in a model input', { 1: node('CheckpointLoaderSimple', { ckpt_name: 7 }) }, ['checkpoints/<not a name in node 1.ckpt_name>']],
    ['a non-file option of another input is no pass', { 1: node('CheckpointLoaderSimple', { ckpt_name: 'pixel_space' }) }, ['checkpoints/pixel_space']],
    // issue 21: ComfyUI unwraps {"__value__": x} before it validates and loads
    ['a name wrapped in __value__', { 1: node('CheckpointLoaderSimple', { ckpt_name: { __value__: 'secret.safetensors' } }) }, ['checkpoints/secret.safetensors']],
    ['a name wrapped twice', { 1: node('LoraLoader', { lora_name: { __value__: { __value__: 'other.safetensors' } } }) }, ['loras/other.safetensors']],
    ['a wrapped name in a loader the host did not report', { 1: node('SomeOtherLoader', { anything: { __value__: 'secret.safetensors' } }) }, ['checkpoints/secret.safetensors']],
    // a download's staging directory is never entered by the cache, yet the host loads from it by name
    ['a partial download in a loader the host did not report', { 1: node('SomeOtherLoader', { anything: '.authsvc-partial/big.ckpt.1a2b3c4d.authsvc-partial' }) }, ['.authsvc-partial/big.ckpt.1a2b3c4d.authsvc-partial']],
    ['a staging directory reached through ../', { 1: node('SomeOtherLoader', { anything: 'sub/../.authsvc-partial/x.safetensors' }) }, ['sub/../.authsvc-partial/x.safetensors']],
    ['a staging directory deeper down', { 1: node('SomeOtherLoader', { anything: { __value__: 'sub/.authsvc-partial/x.safetensors' } }) }, ['sub/.authsvc-partial/x.safetensors']],
    ['a staging directory in a reported model input', { 1: node('CheckpointLoaderSimple', { ckpt_name: '.authsvc-partial/x.safetensors.1a2b3c4d.authsvc-partial' }) }, ['checkpoints/.authsvc-partial/x.safetensors.1a2b3c4d.authsvc-partial']],
  ]
  for (const [label, graph, named] of ATTACKS) {
    it(`${label} → 403 MODEL_NOT_ALLOWED naming ${named.join(', ')}; nothing is recorded`, async () => {
      const before = w.sc.services.ownership.promptIdsOf(w.intern.user_id).size
      const a = assertDenied(await postPrompt(w.sc, w.internJwt, graph), 'MODEL_NOT_ALLOWED')
      assert.equal(a.json.error, `Model not allowed: ${named.join(', ')}`)
      assert.equal(w.sc.services.ownership.promptIdsOf(w.intern.user_id).size, before)
      assert.equal((await postPrompt(w.sc, w.userJwt, graph)).action, 'pass', 'a user who sees every model is not checked')
    })
  }

  it('an embedding named by its absolute path inside the embeddings folder is that item (the host joins it as it is); outside it, no item', async () => {
    const root = join(w.modelsDir, 'embeddings')
    for (const text of [`embedding:${root}/bad`, `embedding:${root}/private/hidden.safetensors`, `embedding:${root}//sub/../bad.safetensors`]) {
      assertDenied(await postPrompt(w.sc, w.internJwt, { 1: node('CLIPTextEncode', { text }) }), 'MODEL_NOT_ALLOWED', text)
    }
    assert.equal((await postPrompt(w.sc, w.internJwt, { 1: node('CLIPTextEncode', { text: `embedding:${root}/good` }) })).action, 'pass', 'a granted one by its path')
  })

  // each name the host may try was once every prefix at every `,` `:` `(`: minutes for a 2 MB word (found by a review)
  it('a 2 MB embedding word of commas, escapes or colons is decided (a bound against a hang, not a speed target)', { timeout: 30_000 }, async () => {
    for (const rest of ['a,'.repeat(1_000_000), '\\('.repeat(1_000_000), 'x:'.repeat(1_000_000)]) {
      assert.equal((await postPrompt(w.sc, w.internJwt, { 1: node('CLIPTextEncode', { text: `embedding:${rest}` }) })).action, 'pass', rest.slice(0, 4))
    }
  })

  it('on a case-insensitive Windows host, case and backslashes cannot reach an item not granted, and a granted one may be spelled as the host resolves it', async () => {
    await hello(w.sc, facts(w.modelsDir, { sep: '\\', case_insensitive: true }), w.adminJwt)
    try {
      const rows: Array<[string, string | null]> = [
        ['SECRET.safetensors', 'checkpoints/SECRET.safetensors'],
        ['sub\\..\\secret.safetensors', 'checkpoints/sub\\..\\secret.safetensors'],
        ['sub\\DEEP.safetensors', 'checkpoints/sub\\DEEP.safetensors'],
        ['GRANTED.safetensors', null],
      ]
      for (const [value, refused] of rows) {
        const out = await postPrompt(w.sc, w.internJwt, { 1: node('CheckpointLoaderSimple', { ckpt_name: value }) })
        if (refused === null) assert.equal(out.action, 'pass', value)
        else assert.equal(assertDenied(out, 'MODEL_NOT_ALLOWED', value).json.error, `Model not allowed: ${refused}`)
      }
      const meta = answer(await decide(w.sc, { path: '/view_metadata/checkpoints', pattern: '/view_metadata/{folder_name}', match_info: { folder_name: 'checkpoints' }, query: 'filename=SUB%5C..%5CSecret.safetensors', headers: bearer(w.internJwt) }))
      assert.equal(meta.status, 404)
    } finally {
      await hello(w.sc, facts(w.modelsDir), w.adminJwt)
    }
  })

  it('on a case-sensitive host another case is another file: not granted', async () => {
    assertDenied(await postPrompt(w.sc, w.internJwt, { 1: node('CheckpointLoaderSimple', { ckpt_name: 'GRANTED.safetensors' }) }), 'MODEL_NOT_ALLOWED')
  })
})

describe('a model folder path that does not exist yet', () => {
  it('is watched from its parent: once created, its files are in the cache within 2 s', async () => {
    const w = await world()
    try {
      const late = join(w.modelsDir, 'not-yet', 'deeper')
      const host = facts(w.modelsDir)
      await hello(w.sc, { ...host, model_folders: { ...host.model_folders, late: [late] } }, w.adminJwt)
      const items = async () => (JSON.parse((await call(w.sc, { url: '/authsvc/api/model-cache/folders/late/items', bearer: w.adminJwt })).body) as { items: string[] }).items
      assert.deepEqual(await items(), [])
      mkdirSync(late, { recursive: true })
      writeFileSync(join(late, 'arrived.safetensors'), 'model')
      await within2s(async () => (await items()).includes('arrived.safetensors'))
    } finally {
      await w.sc.close()
    }
  })
})

describe('model grants by role', () => {
  let w: World
  let rolie: UserRecord
  let rolieJwt: string
  before(async () => {
    w = await world()
    const groups = w.sc.services.roles.snapshot()
    w.sc.services.roles.replace({ ...groups, trainee: { ...groups.intern } })
    rolie = await addUser(w.sc, 'rolie', 'rolie-password-1', 'intern')
    rolieJwt = await sessionJwt(w.sc, rolie)
  })
  after(() => w.sc.close())

  const roleGrants = (role: string, method = 'GET', body?: unknown, jwt = w.adminJwt) =>
    call(w.sc, { method, url: `/authsvc/api/roles/${role}/shared-items`, bearer: jwt, ...(body === undefined ? {} : { body }) })
  const list = { path: '/models/checkpoints', pattern: '/models/{folder}', match_info: { folder: 'checkpoints' } }
  const HOST = '["granted.safetensors", "secret.safetensors", "sub/deep.safetensors"]'
  const OBJECT_INFO = '{"CheckpointLoaderSimple": {"input": {"required": {"ckpt_name": [["granted.safetensors", "secret.safetensors"]]}}}}'
  const objectInfo = (names: string[]) => `{"CheckpointLoaderSimple": {"input": {"required": {"ckpt_name": [[${names.map((n) => JSON.stringify(n)).join(', ')}]]}}}}`
  const secretGraph = { 1: node('CheckpointLoaderSimple', { ckpt_name: 'secret.safetensors' }) }
  const secret = { folder: 'checkpoints', item_name: 'secret.safetensors' }

  it('a user with no grant of their own sees and uses an item through their role\'s grant, and loses it when the role\'s grant goes', async () => {
    const epoch = w.sc.services.accessEpoch.value
    const granted = await roleGrants('intern', 'POST', secret)
    assert.equal(granted.statusCode, 200, granted.body)
    const body = JSON.parse(granted.body) as { role: string; items: Array<Record<string, string>> }
    assert.equal(body.role, 'intern')
    assert.deepEqual(body.items.map((i) => [i.folder, i.item_name, i.granted_by]), [['checkpoints', 'secret.safetensors', 'admin']])
    assert.ok(w.sc.services.accessEpoch.value > epoch, 'a role grant moves the access epoch (kept decisions end)')
    assert.deepEqual(JSON.parse((await roleGrants('intern')).body), body)

    assert.equal((await filtered(w.sc, { ...list, headers: bearer(rolieJwt) }, HOST)).body, '["secret.safetensors"]')
    assert.equal((await filtered(w.sc, { path: '/object_info', pattern: '/object_info', headers: bearer(rolieJwt) }, OBJECT_INFO)).body, objectInfo(['secret.safetensors']))
    assert.equal((await postPrompt(w.sc, rolieJwt, secretGraph)).action, 'pass')
    // the intern's own grants and the role's, together
    assert.equal((await filtered(w.sc, { ...list, headers: bearer(w.internJwt) }, HOST)).body, '["granted.safetensors", "secret.safetensors"]')
    assert.equal((await filtered(w.sc, { path: '/object_info', pattern: '/object_info', headers: bearer(w.internJwt) }, OBJECT_INFO)).body, OBJECT_INFO)

    const epoch2 = w.sc.services.accessEpoch.value
    const revoked = await roleGrants('intern', 'DELETE', secret)
    assert.equal(revoked.statusCode, 200, revoked.body)
    assert.deepEqual(JSON.parse(revoked.body), { role: 'intern', items: [] })
    assert.ok(w.sc.services.accessEpoch.value > epoch2)
    assert.equal((await filtered(w.sc, { ...list, headers: bearer(rolieJwt) }, HOST)).body, '[]')
    assert.equal((await filtered(w.sc, { path: '/object_info', pattern: '/object_info', headers: bearer(rolieJwt) }, OBJECT_INFO)).body, objectInfo([]))
    assertDenied(await postPrompt(w.sc, rolieJwt, secretGraph), 'MODEL_NOT_ALLOWED')
    assert.equal((await filtered(w.sc, { ...list, headers: bearer(w.internJwt) }, HOST)).body, '["granted.safetensors"]', 'the intern keeps their own grant')
    assert.equal((await roleGrants('intern', 'DELETE', secret)).statusCode, 200, 'revoking what the role does not have is a no-op')
  })

  it('a role change takes the old role\'s grants away and brings the new role\'s at once', async () => {
    assert.equal((await roleGrants('intern', 'POST', secret)).statusCode, 200)
    assert.equal((await roleGrants('trainee', 'POST', { folder: 'checkpoints', item_name: 'sub/deep.safetensors' })).statusCode, 200)
    const move = async (role: string) => {
      const res = await call(w.sc, { method: 'PUT', url: '/authsvc/api/users/rolie', bearer: w.adminJwt, body: { role } })
      assert.equal(res.statusCode, 200, res.body)
      // a role change ends the user's sessions; the next sign-in acts as the new role
      return sessionJwt(w.sc, w.sc.services.users.find('rolie'))
    }
    const asTrainee = await move('trainee')
    assert.equal((await filtered(w.sc, { ...list, headers: bearer(asTrainee) }, HOST)).body, '["sub/deep.safetensors"]')
    assertDenied(await postPrompt(w.sc, asTrainee, secretGraph), 'MODEL_NOT_ALLOWED')
    const asIntern = await move('intern')
    assert.equal((await filtered(w.sc, { ...list, headers: bearer(asIntern) }, HOST)).body, '["secret.safetensors"]')
    assert.equal((await postPrompt(w.sc, asIntern, secretGraph)).action, 'pass')
    // an API token acts as the user's role of now, not of when it was made
    const token = (await w.sc.services.tokens.issue(rolie.user_id, 'unit', 24)).token
    assert.equal((await filtered(w.sc, { ...list, headers: bearer(token) }, HOST)).body, '["secret.safetensors"]')
    await move('trainee')
    const afterMove = await filtered(w.sc, { ...list, headers: bearer(token) }, HOST)
    assert.equal(afterMove.body, '["sub/deep.safetensors"]')
    assert.equal((await roleGrants('intern', 'DELETE', secret)).statusCode, 200)
  })

  it('a deleted role\'s grants go with it (a role made again with the same name starts with none); they outlive a restart until then', async () => {
    const groups = w.sc.services.roles.snapshot()
    w.sc.services.roles.replace({ ...groups, doomed: { ...groups.intern } })
    assert.equal((await roleGrants('doomed', 'POST', secret)).statusCode, 200)
    await w.sc.services.flush()
    const again = await openSidecar({ dir: w.sc.dir })
    try {
      assert.deepEqual(again.services.modelGrants.listRole('doomed').map((g) => `${g.folder}/${g.item_name}`), ['checkpoints/secret.safetensors'])
    } finally {
      await again.close({ keepDir: true })
    }
    const put = await call(w.sc, { method: 'PUT', url: '/authsvc/api/groups', bearer: w.adminJwt, body: { groups } })
    assert.equal(put.statusCode, 200, put.body)
    assert.deepEqual(w.sc.services.modelGrants.listRole('doomed'), [])
    const gone = await roleGrants('doomed')
    assert.equal(gone.statusCode, 404)
    assert.equal(JSON.parse(gone.body).code, 'NOT_FOUND')
    w.sc.services.roles.replace({ ...groups, doomed: { ...groups.intern } })
    assert.deepEqual(JSON.parse((await roleGrants('doomed')).body), { role: 'doomed', items: [] })
    await w.sc.services.flush()
    const restarted = await openSidecar({ dir: w.sc.dir })
    try {
      assert.deepEqual(restarted.services.modelGrants.listRole('doomed'), [])
    } finally {
      await restarted.close({ keepDir: true })
    }
  })

  // role names the route must not mistake for a role it has (prototype keys, case, encodings, traversal)
  const ODD_ROLES = ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'Intern', 'INTERN', 'intern%20', '%20intern', 'intern%00', '..%2Fadmin', '%2e%2e', 'intern%2Fx', '%C3%AFntern', '%E2%80%8Bintern', "intern'--", '%3Cscript%3E', 'x'.repeat(65)]
  for (const role of ODD_ROLES) {
    it(`an unknown role ${JSON.stringify(role.slice(0, 40))} is 404 NOT_FOUND for every method, and grants nothing`, async () => {
      const stored = () => [...w.sc.services.modelGrants['roleRecords'].values()].map((r) => r.role).sort()
      const before = stored()
      for (const method of ['GET', 'POST', 'DELETE']) {
        const res = await roleGrants(role, method, method === 'GET' ? undefined : secret)
        assert.equal(res.statusCode, 404, `${method}: ${res.body}`)
        assert.equal(JSON.parse(res.body).code, 'NOT_FOUND', method)
      }
      assert.deepEqual(stored(), before)
    })
  }

  it('only an admin may read or change a role\'s grants (401/403 with stable codes, nothing stored)', async () => {
    const rows: Array<[string, string | undefined, number, string]> = [
      ['a limited user', w.internJwt, 403, 'ADMIN_REQUIRED'],
      ['a user who sees everything', w.userJwt, 403, 'ADMIN_REQUIRED'],
      ['nobody signed in', undefined, 401, 'AUTH_REQUIRED'],
    ]
    for (const [label, jwt, status, code] of rows) {
      for (const method of ['GET', 'POST', 'DELETE']) {
        const res = await call(w.sc, { method, url: '/authsvc/api/roles/intern/shared-items', ...(jwt ? { bearer: jwt } : {}), ...(method === 'GET' ? {} : { body: secret }) })
        assert.equal(res.statusCode, status, `${label} ${method}: ${res.body}`)
        assert.equal(JSON.parse(res.body).code, code, `${label} ${method}`)
      }
    }
    assert.deepEqual(w.sc.services.modelGrants.listRole('intern'), [])
  })

  it('a bad body is 400 VALIDATION_FAILED on a known role', async () => {
    const bad: unknown[] = [{ folder: 'nope', item_name: 'x' }, { folder: 'checkpoints', item_name: 'missing.safetensors' }, { folder: 'checkpoints' }, { ...secret, role: 'admin' }, { folder: '', item_name: 'x' }]
    for (const body of bad) {
      for (const method of ['POST', 'DELETE']) {
        const res = await roleGrants('intern', method, body)
        assert.equal(res.statusCode, 400, `${method} ${JSON.stringify(body)}: ${res.body}`)
        assert.equal(JSON.parse(res.body).code, 'VALIDATION_FAILED')
      }
    }
  })
})

describe('a principal without a user', () => {
  let w: World
  before(async () => {
    w = await world({ local_anonymous_role: 'intern' })
  })
  after(() => w.sc.close())

  it('an anonymous local client acting as a limited role has no grants: no model listed, none usable', async () => {
    const o = { path: '/models/checkpoints', pattern: '/models/{folder}', match_info: { folder: 'checkpoints' } }
    assert.equal((await filtered(w.sc, o, '["granted.safetensors", "secret.safetensors"]')).body, '[]')
    const d = assertPass(await decide(w.sc, { method: 'POST', path: '/prompt', pattern: '/prompt' }))
    const out = stepAnswer(await w.sc.handlers.body({ type: 'body', id: 1, ctx: d.need_body!.ctx }, Buffer.from(JSON.stringify({ prompt: { 1: node('CheckpointLoaderSimple', { ckpt_name: 'granted.safetensors' }) } }))))
    assert.equal(assertDenied(out, 'MODEL_NOT_ALLOWED').json.error, 'Model not allowed: checkpoints/granted.safetensors')
  })

  it('an anonymous local client acting as a role gets that role\'s grants', async () => {
    const res = await call(w.sc, { method: 'POST', url: '/authsvc/api/roles/intern/shared-items', bearer: w.adminJwt, body: { folder: 'checkpoints', item_name: 'secret.safetensors' } })
    assert.equal(res.statusCode, 200, res.body)
    const o = { path: '/models/checkpoints', pattern: '/models/{folder}', match_info: { folder: 'checkpoints' } }
    assert.equal((await filtered(w.sc, o, '["granted.safetensors", "secret.safetensors"]')).body, '["secret.safetensors"]')
  })
})

describe('option lists of an /object_info answer, found in one pass', () => {
  /** What a member-by-member reading of the parsed answer finds: class.input → options, upload flag, default. */
  function expected(text: string): Array<[string, unknown[], boolean, unknown]> {
    const out: Array<[string, unknown[], boolean, unknown]> = []
    for (const [cls, info] of Object.entries(JSON.parse(text) as Record<string, { input?: Record<string, Record<string, unknown>> }>)) {
      for (const section of Object.values(info.input ?? {})) {
        for (const [name, spec] of Object.entries(section)) {
          if (!Array.isArray(spec)) continue
          const config = (typeof spec[1] === 'object' && spec[1] !== null ? spec[1] : {}) as Record<string, unknown>
          const options = Array.isArray(spec[0]) ? spec[0] : spec[0] === 'COMBO' && Array.isArray(config.options) ? config.options : null
          if (options === null) continue
          const upload = Object.entries(config).some(([k, v]) => k.endsWith('_upload') && v === true)
          out.push([`${cls}.${name}`, options, upload, typeof config.default === 'string' ? config.default : undefined])
        }
      }
    }
    return out
  }

  it('finds every list, its entries, upload flag and default, through escapes, nesting and 64-bit numbers', async () => {
    const classes: string[] = []
    for (let i = 0; i < 300; i++) {
      classes.push(`"Node\\u00e9${i}": {"input": {"required": {"seed": ["INT", {"default": 0, "max": 18446744073709551615}], ` +
        `"name_${i}": [["a \\"quoted\\" ${i}.safetensors", "sub/b,${i}]}.ckpt", 7, null], {"tooltip": "x [y] {z}", "default": "sub/b,${i}]}.ckpt"}], ` +
        `"nested": [[["not", "a"], "list"]]}, "optional": {"img": [["p${i}.png"], {"image_upload": true}], ` +
        `"combo": ["COMBO", {"options": ["x${i}", "y\\\\z"], "default": "x${i}", "multiselect": false}]}, "hidden": {"h": "PROMPT"}}, ` +
        `"description": "an \\"input\\": [[\\"fake\\"]], {\\"input\\": 1}", "output": ["MODEL"], "input_order": {"required": ["seed"]}}`)
    }
    const text = `{${classes.join(', ')}, "Empty": {}, "NoInput": {"output": []}}`
    const found = (await optionListsOf(text)).map((l) => {
      assert.deepEqual(JSON.parse(text.slice(l.start, l.end)).map((v: unknown) => (typeof v === 'string' ? v : '')), l.entries.map((e) => e.name))
      assert.deepEqual(l.entries.map((e) => JSON.parse(e.raw)), JSON.parse(text.slice(l.start, l.end)))
      if (l.default) assert.equal(JSON.parse(text.slice(l.default.start, l.default.end)), l.default.name)
      return [`${l.cls}.${l.input}`, JSON.parse(text.slice(l.start, l.end)), l.upload, l.default?.name] as [string, unknown[], boolean, unknown]
    })
    assert.deepEqual(found, expected(text))
    assert.equal(found.length, 300 * 4)
  })
})

/** The store the services open with some of its methods replaced; every other one is its own (bound to it). */
function replacing(kv: KeyValueStore, replaced: Partial<KeyValueStore>): KeyValueStore {
  return new Proxy(kv, {
    get(target, prop) {
      if (Object.hasOwn(replaced, prop)) return replaced[prop as keyof KeyValueStore]
      const value = Reflect.get(target, prop, target) as unknown
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value
    },
  })
}

describe('a revocation the store refused once', () => {
  const rows: Array<[string, 'grant' | 'grantOnThisHost', string]> = [
    ['a shared grant', 'grant', 'model_grant'],
    ['a grant of this host only (a download\'s)', 'grantOnThisHost', 'model_host_grant'],
  ]
  for (const [label, give, kind] of rows) {
    it(`${label}: gone from memory at once, and its retried removal lands by the close, so a restart does not bring it back`, async () => {
      const dir = tempDir('as-grant-retry-')
      const refuse = { once: false }
      const wrap = (kv: KeyValueStore): KeyValueStore => replacing(kv, {
        async delete(key) {
          if (refuse.once && key.startsWith(`${kind}:`)) {
            refuse.once = false
            throw new Error('the store is busy')
          }
          return kv.delete(key)
        },
      })
      let sc = await openSidecar({ dir, wrapStore: wrap })
      const record = { user_id: 'u-1', folder: 'checkpoints', item_name: 'x.safetensors', granted_by: 'u', created_at_iso: new Date(sc.clock()).toISOString() }
      await sc.services.modelGrants[give](record)
      refuse.once = true
      await assert.rejects(sc.services.modelGrants.revoke('u-1', 'checkpoints', 'x.safetensors'), new RegExp(`refused a write of ${kind} records`))
      assert.deepEqual(sc.services.modelGrants.list('u-1'), [], 'memory first')
      await sc.close({ keepDir: true })
      sc = await openSidecar({ dir })
      try {
        assert.deepEqual(sc.services.modelGrants.list('u-1'), [], 'not back after a restart')
      } finally {
        await sc.close()
      }
    })
  }
})

describe('a download\'s shared grant moved to this host while an admin revokes it', () => {
  it('the revocation holds: the host\'s copy, stored while it came, goes too', async () => {
    let letGo: () => void = () => {}
    const held = new Promise<void>((resolve) => (letGo = resolve))
    let storing: () => void = () => {}
    const stored = new Promise<void>((resolve) => (storing = resolve))
    const wrap = (kv: KeyValueStore): KeyValueStore => replacing(kv, {
      async set(key, value) {
        if (key.startsWith('model_host_grant:')) {
          storing()
          await held
        }
        return kv.set(key, value)
      },
    })
    const sc = await openSidecar({ wrapStore: wrap })
    try {
      const grants = sc.services.modelGrants
      await grants.grant({ user_id: 'u-1', folder: 'checkpoints', item_name: 'x.safetensors', granted_by: 'bob', created_at_iso: new Date(sc.clock()).toISOString() })
      const adopting = grants.adoptDownloads([{ user_id: 'u-1', username: 'bob', folder: 'checkpoints', item: 'x.safetensors' }])
      await stored
      assert.equal(await grants.revoke('u-1', 'checkpoints', 'x.safetensors'), true, 'the admin revokes while this host\'s copy is being stored')
      letGo()
      assert.equal(await adopting, 0)
      assert.deepEqual(grants.list('u-1'), [])
      assert.deepEqual(grants.forUser('u-1').byFolder.get('checkpoints')?.has('x.safetensors') ?? false, false)
    } finally {
      letGo()
      await sc.close()
    }
  })
})
