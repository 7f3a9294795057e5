/**
 * Model grants on the REAL ComfyUI 0.3.64 (issue 11), on aiohttp 3.8 and 3.11,
 * one ComfyUI start per version: models in checkpoints, loras, vae, embeddings,
 * an extra_model_paths.yaml folder, and a test custom node that registers its
 * own model folder and loader (test/e2e/fixtures/authsvc-model-loader, imported
 * after the gate). An intern (a role without can_view_all_comfyui_items)
 * granted one checkpoint and one LoRA sees exactly those in every list and in
 * /object_info, queues a prompt with them that the host validates, and gets
 * MODEL_NOT_ALLOWED for every other item, which the host never sees; a user who
 * sees every model gets the host's answers byte for byte; a file copied into a
 * watched folder is in the admin lists within 2 s; a grant and a revocation
 * change the next answer. Grants by role (issue 26): a user of the role with no
 * grant of their own sees the role's items in the lists and /object_info, and
 * loses them when the role's grant goes or their role changes.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { copyFileSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { HOST_AIOHTTP, ROOT, poll } from '../helpers/stack.js'
import { REAL_HOST_SKIP, destroyRealHost, startRealHost, tinySafetensors, type RealHost } from '../helpers/real-host.js'
import { login, register } from '../helpers/client.js'
import { hostRequests } from '../helpers/host-requests.js'
import { png } from '../helpers/png.js'

const FIXTURE = resolve(ROOT, 'test', 'e2e', 'fixtures', 'authsvc-model-loader')
const GRANTED = { checkpoints: 'granted.safetensors', loras: 'style.safetensors' }
/** Every model file on this host that the intern is not granted (names are unique across folders here). */
const NOT_GRANTED = new Set(['secret.safetensors', 'extra_ckpt.safetensors', 'other.safetensors', 'plain_vae.safetensors', 'emb.safetensors', 'theirs.safetensors'])

/** Every item not granted, with a graph that uses it through its loader. */
const REFUSED: Array<[string, Record<string, unknown>]> = [
  ['checkpoints/secret.safetensors', { 1: { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'secret.safetensors' } } }],
  ['checkpoints/extra_ckpt.safetensors', { 1: { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'extra_ckpt.safetensors' } } }],
  ['loras/other.safetensors', {
    1: { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: GRANTED.checkpoints } },
    2: { class_type: 'LoraLoader', inputs: { model: ['1', 0], clip: ['1', 1], lora_name: 'other.safetensors', strength_model: 1, strength_clip: 1 } },
  }],
  ['vae/plain_vae.safetensors', { 1: { class_type: 'VAELoader', inputs: { vae_name: 'plain_vae.safetensors' } } }],
  ['embeddings/emb.safetensors', { 1: { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: GRANTED.checkpoints } }, 2: { class_type: 'CLIPTextEncode', inputs: { text: 'a cat, embedding:emb', clip: ['1', 1] } } }],
  ['authsvc_test_models/theirs.safetensors', { 1: { class_type: 'AuthsvcTestLoader', inputs: { model_file: 'theirs.safetensors' } } }],
  // only the host's report says this input is a model list: a link's value is unknown until it runs
  ['authsvc_test_models/<linked from node 2.model_file>', { 1: { class_type: 'PrimitiveString', inputs: { value: 'x' } }, 2: { class_type: 'AuthsvcTestLoader', inputs: { model_file: ['1', 0] } } }],
]

/** A graph the host validates, using the granted checkpoint and LoRA (it fails later, loading a tiny file: never reached by the check). */
function grantedGraph(prefix: string): Record<string, unknown> {
  return {
    1: { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: GRANTED.checkpoints } },
    2: { class_type: 'LoraLoader', inputs: { model: ['1', 0], clip: ['1', 1], lora_name: GRANTED.loras, strength_model: 1, strength_clip: 1 } },
    3: { class_type: 'CLIPTextEncode', inputs: { text: 'a cat', clip: ['2', 1] } },
    4: { class_type: 'EmptyLatentImage', inputs: { width: 64, height: 64, batch_size: 1 } },
    5: { class_type: 'KSampler', inputs: { model: ['2', 0], positive: ['3', 0], negative: ['3', 0], latent_image: ['4', 0], seed: 1, steps: 1, cfg: 1, sampler_name: 'euler', scheduler: 'normal', denoise: 1 } },
    6: { class_type: 'VAEDecode', inputs: { samples: ['5', 0], vae: ['1', 2] } },
    7: { class_type: 'SaveImage', inputs: { images: ['6', 0], filename_prefix: prefix } },
  }
}

for (const aiohttp of [HOST_AIOHTTP]) {
  describe(`model grants on the real ComfyUI, aiohttp ${aiohttp}`, { skip: REAL_HOST_SKIP }, () => {
    let host: RealHost
    let admin: string
    let intern: string
    let carol: string
    let extraDir: string

    const { request, get, post } = hostRequests(() => host.url)
    const getJson = async (path: string, token: string) => {
      const res = await get(path, token)
      assert.equal(res.status, 200, `${path}: ${res.status}`)
      return res.body
    }
    const postPrompt = (token: string, prompt: unknown) => post('/prompt', token, { prompt })
    const grant = (method: 'POST' | 'DELETE', folder: string, item_name: string) =>
      request(method, '/authsvc/api/users/intern/shared-items', admin, { folder, item_name })
    const cacheItems = async (folder: string): Promise<string[]> => (await getJson(`/authsvc/api/model-cache/folders/${folder}/items`, admin)).items

    before(async () => {
      const dir = mkdtempSync(join(tmpdir(), 'as-models-'))
      extraDir = join(dir, 'extra')
      mkdirSync(join(extraDir, 'ckpts'), { recursive: true })
      writeFileSync(join(extraDir, 'ckpts', 'extra_ckpt.safetensors'), tinySafetensors())
      host = await startRealHost({
        aiohttp,
        dir,
        models: [
          'checkpoints/granted.safetensors', 'checkpoints/secret.safetensors',
          'loras/style.safetensors', 'loras/other.safetensors',
          'vae/plain_vae.safetensors', 'embeddings/emb.safetensors',
          'authsvc_test_models/theirs.safetensors',
        ],
        extraModelPaths: `authsvc_extra:\n    base_path: ${extraDir}\n    checkpoints: ckpts\n`,
        customNodes: [FIXTURE],
      })
      assert.equal((await register(host, 'root')).status, 201)
      admin = (await login(host, 'root')).jwt
      const groups = (await getJson('/authsvc/api/groups', admin)).groups
      const put = await request('PUT', '/authsvc/api/groups', admin, { groups: { ...groups, intern: { ...groups.user, can_view_all_comfyui_items: false } } })
      assert.equal(put.status, 200, put.text)
      assert.equal((await register(host, 'intern', { bearer: admin, role: 'intern' })).status, 201)
      assert.equal((await register(host, 'carol', { bearer: admin })).status, 201)
      intern = (await login(host, 'intern')).jwt
      carol = (await login(host, 'carol')).jwt
      // the facts read once every custom node loaded reach the sidecar as an event after start
      assert.ok(await poll(async () => (await getJson('/authsvc/api/model-cache/folders', admin)).folders.includes('authsvc_test_models'), 15_000), 'the custom folder reached the cache')
      for (const [folder, item] of Object.entries(GRANTED)) assert.equal((await grant('POST', folder, item)).status, 200)
    })
    after(async () => {
      if (host) await destroyRealHost(host)
    })

    it('the admin lists have the host folders, the extra_model_paths.yaml items and the custom node\'s folder', async () => {
      const live = (await getJson('/authsvc/api/available-model-folders', admin)).folders as string[]
      for (const f of ['checkpoints', 'loras', 'vae', 'embeddings', 'authsvc_test_models']) assert.ok(live.includes(f), f)
      assert.ok(!live.includes('custom_nodes'))
      const want = ['extra_ckpt.safetensors', 'granted.safetensors', 'secret.safetensors']
      assert.deepEqual((await getJson('/authsvc/api/available-models/checkpoints', admin)).items, want)
      assert.deepEqual(await cacheItems('checkpoints'), want)
      assert.deepEqual(await cacheItems('authsvc_test_models'), ['theirs.safetensors'])
    })

    it('the intern sees exactly the granted checkpoint and LoRA in every list', async () => {
      const rows: Array<[string, unknown]> = [
        ['/models/checkpoints', [GRANTED.checkpoints]],
        ['/api/models/loras', [GRANTED.loras]],
        ['/models/vae', []],
        ['/models/authsvc_test_models', []],
        ['/embeddings', []],
      ]
      for (const [path, want] of rows) assert.deepEqual(await getJson(path, intern), want, path)
      assert.deepEqual((await getJson('/experiment/models/checkpoints', intern)).map((m: { name: string }) => m.name), [GRANTED.checkpoints])
      assert.deepEqual((await getJson('/experiment/models/loras', intern)).map((m: { name: string }) => m.name), [GRANTED.loras])
    })

    it('/object_info: the model lists hold only granted items (and non-file options); everything else is the host\'s answer', async () => {
      const mine = await getJson('/object_info', intern)
      const all = await getJson('/object_info', admin)
      const lists: Array<[string, string, unknown]> = [
        ['CheckpointLoaderSimple', 'ckpt_name', [GRANTED.checkpoints]],
        ['LoraLoader', 'lora_name', [GRANTED.loras]],
        ['LoraLoaderModelOnly', 'lora_name', [GRANTED.loras]],
        ['VAELoader', 'vae_name', ['pixel_space']],
        ['AuthsvcTestLoader', 'model_file', []],
      ]
      for (const [cls, input, want] of lists) assert.deepEqual(mine[cls].input.required[input][0], want, `${cls}.${input}`)
      // the host's answer with every model file not granted taken out of every option list is the intern's, whole
      const expected = JSON.parse(JSON.stringify(all), (_key, value: unknown) =>
        Array.isArray(value) && value.length > 0 && value.every((v) => typeof v === 'string') ? value.filter((v) => !NOT_GRANTED.has(v)) : value)
      const differing = Object.keys(expected).filter((cls) => JSON.stringify(expected[cls]) !== JSON.stringify(mine[cls]))
      assert.deepEqual(differing, [])
      assert.deepEqual(Object.keys(mine), Object.keys(all))
      const one = await getJson('/object_info/AuthsvcTestLoader', intern)
      assert.deepEqual(one.AuthsvcTestLoader.input.required.model_file[0], [])
    })

    it('/view_metadata of an item not granted answers as a missing one does', async () => {
      const ok = await get(`/view_metadata/checkpoints?filename=${GRANTED.checkpoints}`, intern)
      assert.equal(ok.status, 200)
      assert.equal(ok.body['modelspec.title'], 'authsvc test model')
      for (const filename of ['secret.safetensors', 'sub/../secret.safetensors', 'missing.safetensors']) {
        const res = await get(`/view_metadata/checkpoints?filename=${encodeURIComponent(filename)}`, intern)
        assert.equal(res.status, 404, filename)
        assert.equal(res.text, '', filename)
      }
      assert.equal((await get('/view_metadata/checkpoints?filename=secret.safetensors', carol)).status, 200, 'a user who sees every model')
      // the host's own answer for a file that does not exist, header for header that a client reads
      const hidden = await get('/view_metadata/checkpoints?filename=secret.safetensors', intern)
      const missing = await get('/view_metadata/checkpoints?filename=missing.safetensors', carol)
      assert.deepEqual([hidden.status, hidden.headers.get('content-type'), hidden.headers.get('content-length')], [missing.status, missing.headers.get('content-type'), missing.headers.get('content-length')])
    })

    it('a model preview never reaches past its folder, whatever models the caller sees (the host joins the name as it is: any image on the disk)', async () => {
      // a secret image outside every model folder (another user's output, say), and a real preview beside a model
      writeFileSync(join(host.outputDir, 'their_secret_00001_.png'), png(7, 16))
      writeFileSync(join(host.modelsDir, 'checkpoints', 'granted.preview.png'), png(8, 16))
      const secret = join(host.outputDir, 'their_secret_00001_')
      const control = await get(`/experiment/models/preview/checkpoints/0/${GRANTED.checkpoints}`, carol)
      assert.equal(control.status, 200, 'the preview beside the model')
      assert.equal(control.headers.get('content-type'), 'image/webp')
      const rows: Array<[string, string]> = [
        ['../ to the output folder', `..%2F..%2Foutput%2Ftheir_secret_00001_.png`],
        ['an absolute name', encodeURIComponent(`${secret}.png`)],
        ['an absolute name with no extension (the host globs <stem>.*)', encodeURIComponent(secret)],
        ['../ after a real subfolder', `sub%2F..%2F..%2F..%2Foutput%2Ftheir_secret_00001_.png`],
      ]
      for (const [label, name] of rows) {
        for (const prefix of ['', '/api']) {
          for (const [who, token] of [['carol (sees every model)', carol], ['the intern', intern], ['the admin', admin]] as const) {
            const res = await get(`${prefix}/experiment/models/preview/checkpoints/0/${name}`, token)
            assert.equal(res.status, 404, `${label}${prefix ? ' (api twin)' : ''} for ${who}: ${res.status} ${res.headers.get('content-type')}`)
          }
        }
      }
    })

    it('a user who sees every model gets the host\'s answers byte for byte', async () => {
      for (const path of ['/object_info', '/models/checkpoints', '/embeddings', '/experiment/models/loras']) {
        const a = (await get(path, carol)).text
        const b = (await get(path, admin)).text
        assert.equal(a, b, path)
      }
      assert.deepEqual(await getJson('/models/checkpoints', carol), ['extra_ckpt.safetensors', 'granted.safetensors', 'secret.safetensors'])
      assert.deepEqual(await getJson('/embeddings', carol), ['emb'])
    })

    it('the intern queues a prompt with the granted models (the host validates it); every other item is MODEL_NOT_ALLOWED and never reaches the host', async () => {
      const first = await postPrompt(intern, grantedGraph('granted-1'))
      const firstBody = first.body
      assert.equal(first.status, 200, JSON.stringify(firstBody))
      assert.deepEqual(firstBody.node_errors, {})
      for (const [named, graph] of REFUSED) {
        const res = await postPrompt(intern, graph)
        const body = res.body
        assert.equal(res.status, 403, named)
        assert.deepEqual(body, { error: `Model not allowed: ${named}`, code: 'MODEL_NOT_ALLOWED', statusCode: 403 })
      }
      // ComfyUI numbers every POST it sees, refused ones included: the next number shows none arrived
      const next = (await postPrompt(intern, grantedGraph('granted-2'))).body
      assert.equal(next.number, firstBody.number + 1)
      const checked = await postPrompt(carol, REFUSED[0][1])
      assert.notEqual(checked.status, 403, 'a user who sees every model is not checked')
    })

    it('a model copied into a watched folder (extra path, custom node folder) is in the admin lists within 2 s', async () => {
      const start = Date.now()
      copyFileSync(join(extraDir, 'ckpts', 'extra_ckpt.safetensors'), join(extraDir, 'ckpts', 'copied.safetensors'))
      copyFileSync(join(extraDir, 'ckpts', 'extra_ckpt.safetensors'), join(host.modelsDir, 'authsvc_test_models', 'copied.safetensors'))
      assert.ok(await poll(async () => (await cacheItems('checkpoints')).includes('copied.safetensors') && (await cacheItems('authsvc_test_models')).includes('copied.safetensors'), 2000), `not seen after ${Date.now() - start} ms`)
    })

    it('a grant and a revocation change the next answer', async () => {
      assert.deepEqual(await getJson('/models/loras', intern), [GRANTED.loras])
      assert.equal((await grant('POST', 'loras', 'other.safetensors')).status, 200)
      assert.deepEqual(await getJson('/models/loras', intern), ['other.safetensors', GRANTED.loras])
      const withOther = (await getJson('/object_info/LoraLoader', intern)).LoraLoader.input.required.lora_name[0]
      assert.deepEqual(withOther, ['other.safetensors', GRANTED.loras])
      assert.equal((await grant('DELETE', 'loras', 'other.safetensors')).status, 200)
      assert.deepEqual(await getJson('/models/loras', intern), [GRANTED.loras])
      const res = await postPrompt(intern, REFUSED[2][1])
      assert.equal(res.status, 403)
    })

    it('a name computed while the prompt runs (string nodes into a node that takes a name as text) finds only granted models, the host\'s own way: get_full_path and load_embed say "missing"', async () => {
      // the halves name nothing on their own: only the run joins them, so the check of literal names passes the prompt
      const joined = (a: string, b: string) => ({ class_type: 'StringConcatenate', inputs: { string_a: a, string_b: b, delimiter: '' } })
      const byName = (folder: string, a: string, b: string) => ({ 1: joined(a, b), 2: { class_type: 'AuthsvcTestModelByName', inputs: { folder, name: ['1', 0] } } })
      const embedding = (a: string, b: string) => ({ 1: joined(a, b), 2: { class_type: 'AuthsvcTestEmbedding', inputs: { name: ['1', 0] } } })
      const outputOf = async (token: string, prompt: Record<string, unknown>): Promise<Record<string, unknown[]>> => {
        const res = await postPrompt(token, prompt)
        assert.equal(res.status, 200, res.text)
        const id = res.body.prompt_id as string
        let entry: any
        assert.ok(await poll(async () => (entry = (await get(`/history/${id}`, token)).body[id]) !== undefined, 30_000), `prompt ${id} ran`)
        assert.equal(entry.status.status_str, 'success', JSON.stringify(entry.status))
        return entry.outputs['2']
      }
      const size = tinySafetensors().length
      // each graph differs (the split of the name), so no result comes from the host's execution cache
      assert.deepEqual(await outputOf(intern, byName('checkpoints', 'secr', 'et.safetensors')), { size: [-1] }, 'a checkpoint not granted')
      assert.deepEqual(await outputOf(intern, byName('checkpoints', 'gran', 'ted.safetensors')), { size: [size] }, 'the granted checkpoint')
      assert.deepEqual(await outputOf(intern, byName('authsvc_test_models', 'the', 'irs.safetensors')), { size: [-1] }, 'a custom folder\'s model')
      assert.deepEqual(await outputOf(intern, embedding('e', 'mb')), { found: [false] }, 'an embedding not granted')
      assert.deepEqual(await outputOf(carol, byName('checkpoints', 'sec', 'ret.safetensors')), { size: [size] }, 'carol sees every model')
      assert.deepEqual(await outputOf(carol, embedding('em', 'b')), { found: [true] }, 'carol sees every model')
      // the grant is read when the prompt is queued: granted, found; revoked, missing again
      assert.equal((await grant('POST', 'embeddings', 'emb.safetensors')).status, 200)
      assert.deepEqual(await outputOf(intern, embedding('em', 'b')), { found: [true] }, 'granted')
      assert.equal((await grant('DELETE', 'embeddings', 'emb.safetensors')).status, 200)
      assert.deepEqual(await outputOf(intern, embedding('', 'emb')), { found: [false] }, 'revoked')
    })

    it('grants by role: a user with no grant of their own sees an item through their role\'s grant, and loses it when the grant goes or their role changes', async () => {
      const groups = (await getJson('/authsvc/api/groups', admin)).groups
      assert.equal((await request('PUT', '/authsvc/api/groups', admin, { groups: { ...groups, trainee: { ...groups.intern } } })).status, 200)
      assert.equal((await register(host, 'rolie', { bearer: admin, role: 'intern' })).status, 201)
      let rolie = (await login(host, 'rolie')).jwt
      const roleGrant = (method: 'GET' | 'POST' | 'DELETE', role: string, body?: unknown, token = admin) => request(method, `/authsvc/api/roles/${role}/shared-items`, token, body)
      const secret = { folder: 'checkpoints', item_name: 'secret.safetensors' }
      const ckptList = async (token: string) => (await getJson('/object_info/CheckpointLoaderSimple', token)).CheckpointLoaderSimple.input.required.ckpt_name[0]
      const sees = async (token: string, want: string[]) => {
        assert.deepEqual(await getJson('/models/checkpoints', token), want, '/models/checkpoints')
        assert.deepEqual(await ckptList(token), want, '/object_info')
      }
      await sees(rolie, [])

      const granted = await roleGrant('POST', 'intern', secret)
      assert.equal(granted.status, 200, granted.text)
      assert.deepEqual(granted.body.items.map((i: { folder: string; item_name: string }) => `${i.folder}/${i.item_name}`), ['checkpoints/secret.safetensors'])
      await sees(rolie, ['secret.safetensors'])
      await sees(intern, [GRANTED.checkpoints, 'secret.safetensors']) // their own grant and the role's
      assert.equal((await get('/view_metadata/checkpoints?filename=secret.safetensors', rolie)).status, 200)

      assert.equal((await roleGrant('DELETE', 'intern', secret)).status, 200)
      await sees(rolie, [])
      await sees(intern, [GRANTED.checkpoints])
      assert.equal((await get('/view_metadata/checkpoints?filename=secret.safetensors', rolie)).status, 404)

      // the role's grants follow a role change (which signs the user out: the next sign-in acts as the new role)
      assert.equal((await roleGrant('POST', 'intern', secret)).status, 200)
      await sees(rolie, ['secret.safetensors'])
      assert.equal((await request('PUT', '/authsvc/api/users/rolie', admin, { role: 'trainee' })).status, 200)
      assert.equal((await get('/models/checkpoints', rolie)).status, 401, 'the role change ended the session')
      rolie = (await login(host, 'rolie')).jwt
      await sees(rolie, [])
      assert.equal((await request('PUT', '/authsvc/api/users/rolie', admin, { role: 'intern' })).status, 200)
      rolie = (await login(host, 'rolie')).jwt
      await sees(rolie, ['secret.safetensors'])
      assert.equal((await roleGrant('DELETE', 'intern', secret)).status, 200)
      await sees(rolie, [])

      // a deleted role's grants go with it
      assert.equal((await roleGrant('POST', 'trainee', secret)).status, 200)
      const now = (await getJson('/authsvc/api/groups', admin)).groups
      delete now.trainee
      assert.equal((await request('PUT', '/authsvc/api/groups', admin, { groups: now })).status, 200)
      const gone = await roleGrant('GET', 'trainee')
      assert.deepEqual([gone.status, gone.body.code], [404, 'NOT_FOUND'])
      assert.equal((await request('PUT', '/authsvc/api/groups', admin, { groups: { ...now, trainee: { ...now.intern } } })).status, 200)
      assert.deepEqual((await roleGrant('GET', 'trainee')).body, { role: 'trainee', items: [] }, 'a role made again starts with no grant')
    })

    it('the role grant routes: odd role names are 404 NOT_FOUND, and no one but an admin may use them', async () => {
      const secret = { folder: 'checkpoints', item_name: 'secret.safetensors' }
      for (const role of ['__proto__', 'constructor', 'Intern', 'intern%20', 'intern%00', '..%2Fadmin', '%2e%2e', '%C3%AFntern', '%3Cscript%3E', "intern'--"]) {
        for (const method of ['GET', 'POST', 'DELETE'] as const) {
          const res = await request(method, `/authsvc/api/roles/${role}/shared-items`, admin, method === 'GET' ? undefined : secret)
          assert.equal(res.status, 404, `${method} ${role}: ${res.text}`)
          assert.equal(res.body.code, 'NOT_FOUND', `${method} ${role}`)
        }
      }
      for (const [who, token, status, code] of [['a limited user', intern, 403, 'ADMIN_REQUIRED'], ['a user who sees every model', carol, 403, 'ADMIN_REQUIRED']] as const) {
        for (const method of ['GET', 'POST', 'DELETE'] as const) {
          const res = await request(method, '/authsvc/api/roles/intern/shared-items', token, method === 'GET' ? undefined : secret)
          assert.deepEqual([res.status, res.body.code], [status, code], `${who} ${method}`)
        }
      }
      assert.deepEqual((await request('GET', '/authsvc/api/roles/intern/shared-items', admin)).body, { role: 'intern', items: [] })
      assert.deepEqual(await getJson('/models/checkpoints', intern), [GRANTED.checkpoints], 'nothing was granted by the refused calls')
    })
  })
}
