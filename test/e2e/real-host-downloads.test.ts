/**
 * Model downloads through the real gate inside the REAL ComfyUI 0.3.64 (issue 22), against the
 * local stand-ins of Civitai and Hugging Face (test/helpers/download-sources.ts): a Civitai
 * version and a Hugging Face file land in their folders with the right SHA-256 and are usable in
 * a prompt by the requester only (a role without can_view_all_comfyui_items: the grant is what
 * lets them see it); a sidecar killed (SIGKILL) at 50 % of a transfer comes back, resumes with
 * Range from the partial file and finishes with the right hash; a model put in a staging
 * directory by hand, which ComfyUI lists and loads, is an admin's only, in a list the host did not
 * report too (a node that walks the folder: test/e2e/fixtures/authsvc-listing-node). One aiohttp (that of real
 * installs, HOST_AIOHTTP): the feature is the sidecar's, the host only forwards.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { once } from 'node:events'
import { createHash } from 'node:crypto'
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { HOST_AIOHTTP, ROOT, poll } from '../helpers/stack.js'
import { REAL_HOST_SKIP, destroyRealHost, startRealHost, tinySafetensors, type RealHost } from '../helpers/real-host.js'
import { login, register } from '../helpers/client.js'
import { hostRequests } from '../helpers/host-requests.js'
import { startDownloadStandins, type DownloadStandins } from '../helpers/download-sources.js'

const aiohttp = HOST_AIOHTTP
/** a node that lists checkpoints by walking the folder (a list the host does not report: the gate keeps the names its cache does not know) */
const WALKING_LISTER = resolve(ROOT, 'test', 'e2e', 'fixtures', 'authsvc-listing-node')

describe(`model downloads on the real ComfyUI, aiohttp ${aiohttp}`, { skip: REAL_HOST_SKIP }, () => {
  let host: RealHost
  let src: DownloadStandins
  let intern: string
  let carol: string
  let admin: string
  const { request, get, post } = hostRequests(() => host.url)
  const sha = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex')

  /** The job once it is final, read through the gate (the sidecar may be restarting meanwhile). */
  const finished = async (jobId: string, token: string, timeoutMs = 60_000): Promise<any> => {
    let job: any
    const ok = await poll(async () => {
      try {
        const res = await get(`/authsvc/api/model-download/jobs/${jobId}`, token)
        job = res.status === 200 ? res.body.job : job
        return job !== undefined && ['completed', 'failed', 'cancelled'].includes(job.status)
      } catch {
        return false
      }
    }, timeoutMs)
    assert.ok(ok, `the job ended: ${JSON.stringify(job)}`)
    return job
  }

  before(async () => {
    src = await startDownloadStandins()
    host = await startRealHost({
      aiohttp,
      models: ['checkpoints/other.safetensors'],
      customNodes: [WALKING_LISTER],
      config: { model_download: { civitai_base_url: src.civitaiUrl, huggingface_base_url: src.huggingfaceUrl, allow_private_hosts: true } },
    })
    assert.equal((await register(host, 'root')).status, 201)
    admin = (await login(host, 'root')).jwt
    const groups = (await get('/authsvc/api/groups', admin)).body.groups
    const narrow = { ...groups.user, can_view_all_comfyui_items: false }
    const put = await request('PUT', '/authsvc/api/groups', admin, { groups: { ...groups, intern: { ...narrow, can_download_models: true }, narrow } })
    assert.equal(put.status, 200, put.text)
    assert.equal((await register(host, 'intern', { bearer: admin, role: 'intern' })).status, 201)
    assert.equal((await register(host, 'carol', { bearer: admin, role: 'narrow' })).status, 201)
    intern = (await login(host, 'intern')).jwt
    carol = (await login(host, 'carol')).jwt
  })
  after(async () => {
    if (host) await destroyRealHost(host)
    await src?.close()
  })

  it('a Civitai version lands in checkpoints with its SHA-256 and is in the requester\'s lists and prompts only', async () => {
    const model = tinySafetensors({ 'modelspec.title': 'downloaded by intern' })
    const f = { id: 1, name: 'downloaded.safetensors', size: model.length, seed: 1, content: model }
    src.civitai.set(11, [f])
    const started = await post('/authsvc/api/model-download/download', intern, { url: `${src.civitaiUrl}/models/5?modelVersionId=11`, folder_type: 'checkpoints' })
    assert.equal(started.status, 202, started.text)
    const job = await finished(started.body.job_id, intern)
    assert.equal(job.status, 'completed', job.error)
    assert.equal(job.sha256, src.trueSha256(f))
    assert.equal(sha(join(host.modelsDir, 'checkpoints', f.name)), src.trueSha256(f))

    const ckpts = async (token: string) => (await get('/object_info/CheckpointLoaderSimple', token)).body.CheckpointLoaderSimple.input.required.ckpt_name[0] as string[]
    assert.deepEqual(await ckpts(intern), ['downloaded.safetensors'])
    assert.deepEqual(await ckpts(carol), [])
    assert.deepEqual((await get('/models/checkpoints', intern)).body, ['downloaded.safetensors'])
    const graph = { 1: { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'downloaded.safetensors' } }, 2: { class_type: 'PreviewAny', inputs: { source: ['1', 2] } } }
    const mine = await post('/prompt', intern, { prompt: graph })
    // the host takes it (a validation error would be 400 from the host itself)
    assert.equal(mine.status, 200, mine.text)
    const theirs = await post('/prompt', carol, { prompt: graph })
    assert.equal(theirs.status, 403, theirs.text)
    assert.equal(theirs.body.code, 'MODEL_NOT_ALLOWED')
  })

  it('a Hugging Face file lands in loras with the X-Linked-Etag SHA-256, in the requester\'s LoRA list only', async () => {
    const lora = tinySafetensors({ 'modelspec.title': 'a lora' })
    src.repos.add('org/loras')
    src.huggingface.set('org/loras@main/style/my_lora.safetensors', { id: 2, name: 'my_lora.safetensors', size: lora.length, seed: 2, content: lora })
    const started = await post('/authsvc/api/model-download/download', intern, { source: 'huggingface', repo_id: 'org/loras', filename: 'my_lora.safetensors', subfolder: 'style', folder_type: 'loras' })
    assert.equal(started.status, 202, started.text)
    const job = await finished(started.body.job_id, intern)
    assert.equal(job.status, 'completed', job.error)
    assert.equal(job.expected_sha256, createHash('sha256').update(lora).digest('hex'))
    assert.deepEqual((await get('/models/loras', intern)).body, ['my_lora.safetensors'])
    assert.deepEqual((await get('/models/loras', carol)).body, [])
  })

  it('a sidecar killed at 50 % comes back, resumes with Range and finishes with the right hash; no partial file was ever listed', async () => {
    const size = 8 * 1024 * 1024
    const f = { id: 3, name: 'big.safetensors', size, seed: 3, pauseAt: size / 2 }
    src.civitai.set(33, [f])
    const paused = once(src.events, 'paused')
    const started = await post('/authsvc/api/model-download/download', intern, { source: 'civitai', model_version_id: 33, folder_type: 'checkpoints' })
    assert.equal(started.status, 202, started.text)
    await paused
    // wait until the sidecar reports the half on disk (counted once written)
    assert.ok(await poll(async () => (await get(`/authsvc/api/model-download/jobs/${started.body.job_id}`, intern)).body.job?.bytes_done === size / 2, 20_000), 'half written')
    assert.ok(readdirSync(join(host.modelsDir, 'checkpoints', '.authsvc-partial')).some((n) => n.startsWith('big.safetensors.') && n.endsWith('.authsvc-partial')), 'the partial file is in the staging directory')
    assert.ok(!(await get('/models/checkpoints', admin)).body.some((n: string) => n.includes('big')), 'ComfyUI never lists a partial file')
    const before = host.sidecarPid()
    process.kill(before, 'SIGKILL')
    const job = await finished(started.body.job_id, intern, 90_000)
    assert.notEqual(host.sidecarPid(), before, 'another sidecar finished it')
    assert.equal(job.status, 'completed', job.error)
    assert.equal(sha(join(host.modelsDir, 'checkpoints', f.name)), src.trueSha256(f))
    const cdn = src.seen.filter((s) => s.server === 'cdn' && s.path.startsWith('/files/3/'))
    assert.equal(cdn.length, 2)
    assert.equal(cdn[1].range, `bytes=${size / 2}-`)
    assert.ok(!existsSync(join(host.modelsDir, 'checkpoints', '.authsvc-partial')), 'the staging directory went with the partial file')
    assert.ok(existsSync(join(host.modelsDir, 'checkpoints', 'big.safetensors')))
  })

  it('a model in a download staging directory (put there by hand): ComfyUI lists and loads it, a user limited to grants neither sees nor names it however spelled', async () => {
    const staging = join(host.modelsDir, 'checkpoints', '.authsvc-partial')
    mkdirSync(staging, { recursive: true })
    writeFileSync(join(staging, 'planted.safetensors'), tinySafetensors({ 'modelspec.title': 'planted' }))
    // not a model file (no model extension): the gate's cache does not know it
    const notes = join(host.modelsDir, 'checkpoints', 'notes.txt')
    writeFileSync(notes, 'not a model')
    try {
      const ckpts = async (token: string) => (await get('/object_info/CheckpointLoaderSimple', token)).body.CheckpointLoaderSimple.input.required.ckpt_name[0] as string[]
      // the host itself lists it (it skips only .git), so the rows below are about the gate
      assert.ok((await ckpts(admin)).includes('.authsvc-partial/planted.safetensors'), 'ComfyUI lists the staging directory')
      for (const token of [intern, carol]) assert.ok(!(await ckpts(token)).some((n) => n.includes('authsvc-partial')), 'not in a limited user\'s list')
      const graph = (name: unknown) => ({ 1: { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: name } }, 2: { class_type: 'PreviewAny', inputs: { source: ['1', 2] } } })
      const admins = await post('/prompt', admin, { prompt: graph('.authsvc-partial/planted.safetensors') })
      assert.equal(admins.status, 200, `the host takes it from an admin: ${admins.text}`)
      for (const name of ['.authsvc-partial/planted.safetensors', 'sub/../.authsvc-partial/planted.safetensors', './.authsvc-partial/planted.safetensors', { __value__: '.authsvc-partial/planted.safetensors' }]) {
        const res = await post('/prompt', intern, { prompt: graph(name) })
        assert.equal(res.status, 403, `${JSON.stringify(name)}: ${res.text}`)
        assert.equal(res.body.code, 'MODEL_NOT_ALLOWED', JSON.stringify(name))
      }

      // a list the host did not report keeps the names the gate's cache does not know, but never
      // one in a staging directory; and no node's text may name one (the rule of
      // ModelAccess.inStaging, which grants alone do not give here)
      const walked = async (token: string) => (await get('/object_info/AuthsvcWalkingLister', token)).body.AuthsvcWalkingLister.input.required.walked_file[0] as string[]
      assert.ok((await walked(admin)).includes('.authsvc-partial/planted.safetensors'), 'the node lists it for an admin')
      const theirs = await walked(intern)
      const granted = (await get('/models/checkpoints', intern)).body as string[]
      assert.deepEqual(theirs, [...granted, 'notes.txt'].sort(), 'their models and a name the gate does not know stay; a model not granted and a name in a staging directory do not')
      const named = await post('/prompt', intern, { prompt: { 1: { class_type: 'AuthsvcWalkingLister', inputs: { walked_file: '.authsvc-partial/planted.safetensors' } } } })
      assert.equal(named.status, 403, named.text)
      assert.equal(named.body.code, 'MODEL_NOT_ALLOWED')
    } finally {
      rmSync(staging, { recursive: true, force: true })
      rmSync(notes, { force: true })
    }
  })
})
