/**
 * The gate inside the REAL ComfyUI 0.3.64 (../shared/real-comfyui or COMFYUI_DIR),
 * on aiohttp 3.8 and 3.11: anonymous clients are refused on representative host
 * routes (and a refused prompt never runs), a user with an API token reads
 * /object_info, runs a tiny graph for real (WebSocket events for its prompt_id)
 * and views the PNG it wrote. Stopping ComfyUI ends the sidecar with it.
 * One ComfyUI start per aiohttp version.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import WebSocket from 'ws'
import { HOST_AIOHTTP } from '../helpers/stack.js'
import { PNG_SIGNATURE } from '../helpers/png.js'
import { REAL_HOST_SKIP, destroyRealHost, processGroup, running, startRealHost, tinySafetensors, type RealHost } from '../helpers/real-host.js'
import { WsClient, apiToken, bearer, login, register, tinyGraph, wsUrl } from '../helpers/client.js'
import { hostRequests } from '../helpers/host-requests.js'

const API = { Accept: 'application/json' }
const NAVIGATE = { Accept: 'text/html,application/xhtml+xml', 'Sec-Fetch-Mode': 'navigate' }

/** The status of a WebSocket upgrade that the server refuses, or 101 when it accepts. */
function upgradeStatus(url: string, headers: Record<string, string> = {}): Promise<number> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers })
    ws.on('open', () => {
      ws.close()
      resolve(101)
    })
    ws.on('unexpected-response', (_req, res) => {
      res.resume()
      resolve(res.statusCode ?? 0)
    })
    ws.on('error', reject)
  })
}

for (const aiohttp of [HOST_AIOHTTP]) {
  describe(`the gate inside the real ComfyUI, aiohttp ${aiohttp}`, { skip: REAL_HOST_SKIP }, () => {
    let host: RealHost
    let token: string
    let admin: string
    let extraDir: string
    const { get, queuePrompt } = hostRequests(() => host.url)

    before(async () => {
      const extra = mkdtempSync(join(tmpdir(), 'as-real-extra-'))
      extraDir = extra
      mkdirSync(join(extra, 'ckpts'))
      writeFileSync(join(extra, 'ckpts', 'elsewhere.safetensors'), tinySafetensors({ title: 'elsewhere' }))
      host = await startRealHost({
        aiohttp,
        models: ['checkpoints/tiny.safetensors'],
        extraModelPaths: `authsvc_test:\n  base_path: ${extra}\n  checkpoints: ckpts\n`,
      })
      assert.equal((await register(host, 'root')).status, 201)
      admin = (await login(host, 'root')).jwt
      assert.equal((await register(host, 'alice', { bearer: admin })).status, 201)
      token = await apiToken(host, 'alice')
    })
    after(async () => {
      if (host) await destroyRealHost(host)
      rmSync(extraDir, { recursive: true, force: true })
    })

    it(`is the real ComfyUI on aiohttp ${aiohttp}`, async () => {
      const res = await get('/system_stats', admin)
      assert.equal(res.status, 200)
      assert.match(res.headers.get('server') ?? '', new RegExp(`aiohttp/${aiohttp.replace('.', '\\.')}\\.`))
      assert.equal(res.body.system.comfyui_version, '0.3.64')
    })

    it('refuses anonymous clients on representative host routes', async () => {
      const rows: Array<[string, string, Record<string, string>, number]> = [
        ['GET', '/', NAVIGATE, 302],
        ['GET', '/', API, 401],
        ['GET', '/prompt', API, 401],
        ['GET', '/object_info', API, 401],
        ['GET', '/view?filename=example.png&type=input', API, 401],
        ['GET', '/api/queue', API, 401],
        ['GET', '/internal/logs', API, 401],
        ['POST', '/interrupt', API, 401],
      ]
      const wrong: string[] = []
      for (const [method, path, headers, want] of rows) {
        const res = await fetch(host.url + path, { method, headers, redirect: 'manual' })
        const body = await res.text()
        if (res.status !== want) wrong.push(`${method} ${path}: ${res.status} ${body.slice(0, 120)}`)
        else if (want === 401 && JSON.parse(body).code !== 'AUTH_REQUIRED') wrong.push(`${method} ${path}: ${body}`)
        else if (want === 302 && !(res.headers.get('location') ?? '').startsWith('/login')) wrong.push(`${method} ${path}: to ${res.headers.get('location')}`)
      }
      assert.deepEqual(wrong, [])
      assert.equal(await upgradeStatus(wsUrl(host, randomUUID())), 401, '/ws')
    })

    it('an anonymous prompt is refused and never queued', async () => {
      const res = await fetch(`${host.url}/prompt`, {
        method: 'POST',
        headers: { ...API, 'Content-Type': 'application/json' },
        body: JSON.stringify({ prompt: tinyGraph('anonymous') }),
      })
      assert.equal(res.status, 401)
      const history = (await get('/history', admin)).body
      const queue = (await get('/queue', admin)).body
      const prefixes = [...Object.values(history).map((h: any) => h.prompt[2]), ...queue.queue_running.map((q: any) => q[2]), ...queue.queue_pending.map((q: any) => q[2])]
        .map((graph: any) => graph?.['2']?.inputs?.filename_prefix)
      assert.ok(!prefixes.includes('anonymous'), JSON.stringify(prefixes))
    })

    it('a user with an API token reads /object_info from the real host', async () => {
      const res = await get('/object_info', token)
      assert.equal(res.status, 200)
      const info = res.body
      assert.ok(Object.keys(info).length > 300, `${Object.keys(info).length} node classes`)
      assert.equal(info.SaveImage.output_node, true)
      // the harness's model files: one under models/, one from extra_model_paths.yaml
      assert.deepEqual(info.CheckpointLoaderSimple.input.required.ckpt_name[0], ['elsewhere.safetensors', 'tiny.safetensors'])
      const metadata = await get('/view_metadata/checkpoints?filename=tiny.safetensors', admin)
      assert.equal(metadata.status, 200)
      assert.deepEqual(metadata.body, { 'modelspec.title': 'authsvc test model' })
    })

    it('a user with an API token runs a tiny graph and views the PNG it wrote', async () => {
      const clientId = randomUUID()
      const ws = await WsClient.open(wsUrl(host, clientId), bearer(token))
      try {
        const promptId = await queuePrompt(token, { prompt: tinyGraph(`real-${aiohttp}`), client_id: clientId })
        // the worker's last message for a prompt: `executing` with node null (after execution_success)
        await ws.waitFor((m) => m.type === 'executing' && m.data.node === null && m.data.prompt_id === promptId, 30_000)
        const success = ws.messages.find((m) => m.type === 'execution_success' && m.data.prompt_id === promptId)
        assert.ok(success, `execution_success for ${promptId}: ${JSON.stringify(ws.messages.map((m) => m.type))}`)
        const executed = ws.messages.find((m) => m.type === 'executed' && m.data.prompt_id === promptId)
        const image = executed?.data.output.images[0]
        // the user's own output folder (issue 21): the prefix was placed under it
        const me = (await get('/authsvc/api/me', token)).body
        assert.deepEqual({ subfolder: image?.subfolder, type: image?.type }, { subfolder: `u_${me.user_id}`, type: 'output' })
        assert.match(image.filename, new RegExp(`^real-${aiohttp.replace('.', '\\.')}_\\d{5}_\\.png$`))
        assert.ok(existsSync(join(host.outputDir, image.subfolder, image.filename)), 'written to the user\'s folder in the host\'s output folder')

        const view = await fetch(`${host.url}/view?${new URLSearchParams({ filename: image.filename, type: 'output', subfolder: image.subfolder })}`, { headers: bearer(token) })
        assert.equal(view.status, 200)
        assert.equal(view.headers.get('content-type'), 'image/png')
        const bytes = Buffer.from(await view.arrayBuffer())
        assert.deepEqual(bytes.subarray(0, 8), PNG_SIGNATURE)
      } finally {
        ws.close()
      }
    })

    it('stopping ComfyUI ends the sidecar it spawned: no process is left', async () => {
      const comfy = host.host.pid!
      const sidecar = host.sidecarPid()
      assert.ok(running(sidecar))
      assert.equal(processGroup(sidecar), comfy, 'the sidecar is in ComfyUI\'s process group')
      const { leftovers } = await host.stop()
      assert.deepEqual(leftovers, [], 'every process of the tree ended by itself after ComfyUI')
      assert.equal(running(comfy), false)
      assert.equal(running(sidecar), false)
    })
  })
}
