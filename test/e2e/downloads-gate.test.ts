/**
 * Model downloads through the real gate in front of the stand-in host (the real plugin and
 * sidecar processes), against the download stand-ins: a cancel mid-way and a wrong published
 * hash leave nothing in the folder, an archived model is a failed job in words, a role without
 * can_download_models is refused, and the job routes answer under both prefixes. The fuller
 * rows (every source error, SSRF, full disk, limits) run against an in-process sidecar in
 * test/integration/downloads.test.ts; the real ComfyUI rows in real-host-downloads.test.ts.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { once } from 'node:events'
import { readdirSync } from 'node:fs'
import { join } from 'node:path'
import { HOST_AIOHTTP, destroyStack, poll, startStack, type Stack } from '../helpers/stack.js'
import { apiToken, bearer, json, register } from '../helpers/client.js'
import { startDownloadStandins, type DownloadStandins } from '../helpers/download-sources.js'

for (const aiohttp of [HOST_AIOHTTP]) {
  describe(`model downloads through the gate, aiohttp ${aiohttp}`, () => {
    let stack: Stack
    let src: DownloadStandins
    let alice: string
    let bob: string
    const call = async (method: string, path: string, token: string, body?: unknown) => {
      const res = await fetch(`${stack.url}${path}`, { method, headers: { ...bearer(token), accept: 'application/json', ...(body ? { 'content-type': 'application/json' } : {}) }, body: body ? JSON.stringify(body) : undefined })
      return { status: res.status, body: await json(res) }
    }
    const finished = async (jobId: string): Promise<any> => {
      let job: any
      assert.ok(await poll(async () => {
        job = (await call('GET', `/authsvc/api/model-download/jobs/${jobId}`, alice)).body.job
        return ['completed', 'failed', 'cancelled'].includes(job?.status)
      }, 30_000), JSON.stringify(job))
      return job
    }
    /** every name under the folder, the staging directory's partial files included */
    const folder = () => readdirSync(join(stack.baseDir, 'models', 'checkpoints'), { recursive: true }) as string[]

    before(async () => {
      src = await startDownloadStandins()
      stack = await startStack({ aiohttp, config: { model_download: { civitai_base_url: src.civitaiUrl, huggingface_base_url: src.huggingfaceUrl, allow_private_hosts: true, max_retries: 0 } } })
      assert.equal((await register(stack, 'root')).status, 201)
      const root = await apiToken(stack, 'root')
      const groups = (await call('GET', '/authsvc/api/groups', root)).body.groups
      assert.equal((await call('PUT', '/authsvc/api/groups', root, { groups: { ...groups, downloader: { ...groups.user, can_download_models: true } } })).status, 200)
      assert.equal((await register(stack, 'alice', { bearer: root, role: 'downloader' })).status, 201)
      assert.equal((await register(stack, 'bob', { bearer: root })).status, 201)
      alice = await apiToken(stack, 'alice')
      bob = await apiToken(stack, 'bob')
    })
    after(async () => {
      if (stack) await destroyStack(stack)
      await src?.close()
    })

    it('a cancel mid-way stops the transfer and leaves no file', async () => {
      src.civitai.set(1, [{ id: 1, name: 'cancel-me.safetensors', size: 4 * 1024 * 1024, seed: 1, pauseAt: 2 * 1024 * 1024 }])
      const paused = once(src.events, 'paused')
      const started = await call('POST', '/api/authsvc/api/model-download/download', alice, { source: 'civitai', model_version_id: 1 })
      assert.equal(started.status, 202, JSON.stringify(started.body))
      await paused
      assert.ok(await poll(async () => (await call('GET', `/authsvc/api/model-download/jobs/${started.body.job_id}`, alice)).body.job.bytes_done > 0, 10_000))
      assert.ok(folder().some((n) => n.startsWith('.authsvc-partial/cancel-me.safetensors.')), 'the partial file is in the staging directory')
      const cancel = await call('POST', `/authsvc/api/model-download/jobs/${started.body.job_id}/cancel`, alice)
      assert.equal(cancel.status, 200, JSON.stringify(cancel.body))
      assert.equal(cancel.body.job.status, 'cancelled')
      assert.deepEqual(folder().filter((n) => n.includes('cancel-me')), [])
      assert.ok(!folder().includes('.authsvc-partial'), 'nor the staging directory')
    })

    it('a wrong published SHA-256 fails the job and leaves no file', async () => {
      src.civitai.set(2, [{ id: 2, name: 'wrong.safetensors', size: 300 * 1024, seed: 2, wrongHash: true }])
      const started = await call('POST', '/authsvc/api/model-download/download', alice, { source: 'civitai', model_version_id: 2 })
      const job = await finished(started.body.job_id)
      assert.equal(job.status, 'failed')
      assert.match(job.error, /SHA-256 is [0-9a-f]{64}, not the [0-9a-f]{64} the source published/)
      assert.deepEqual(folder().filter((n) => n.includes('wrong')), [])
      assert.ok(!folder().includes('.authsvc-partial'), 'nor the staging directory')
    })

    it('an archived model is a failed job that says so', async () => {
      src.civitai.set(3, [{ id: 3, name: 'old.safetensors', size: 1000, seed: 3, error: { status: 410 } }])
      const started = await call('POST', '/authsvc/api/model-download/download', alice, { source: 'civitai', model_version_id: 3 })
      const job = await finished(started.body.job_id)
      assert.equal(job.status, 'failed')
      assert.match(job.error, /archived/)
    })

    it('a role without can_download_models is refused; its jobs list too', async () => {
      const post = await call('POST', '/authsvc/api/model-download/download', bob, { source: 'civitai', model_version_id: 1 })
      assert.deepEqual([post.status, post.body.code], [403, 'PERMISSION_DENIED'])
      const list = await call('GET', '/authsvc/api/model-download/jobs', bob)
      assert.equal(list.status, 403)
      const anonymous = await fetch(`${stack.url}/authsvc/api/model-download/jobs`, { headers: { accept: 'application/json' } })
      assert.equal(anonymous.status, 401)
    })
  })
}
