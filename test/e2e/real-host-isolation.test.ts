/**
 * Per-user isolation inside the REAL ComfyUI 0.3.64 (issue 8, SPEC §6), on aiohttp 3.8 and
 * 3.11: two ordinary users (alice, bob) and an admin. Every leak and harm of the issue's
 * first paragraph is one row that bob is refused, next to the rows where alice still sees
 * and does everything with her own things and the admin sees everything. Also: a txt2img
 * graph with seed 2^64-1 validates on the host, a prompt body reaches the host byte for
 * byte apart from the stamped keys (recorded inside the host by the test node
 * fixtures/raw-prompt-recorder), and ownership survives a sidecar kill and a ComfyUI
 * restart.
 *
 * One ComfyUI start per aiohttp version (plus the restart row); the rows run in order and
 * share what earlier rows made (prompts, files, sockets). Waits are for events (WebSocket
 * messages, or polling with a deadline), never fixed sleeps. "No message on bob's socket"
 * is made sound by a marker: alice's prompt runs to completion first, then bob's own prompt
 * runs and its execution_success reaches bob; ComfyUI sends every socket's messages in the
 * order it queued them, so anything of alice's would have arrived before that marker.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { PNG_SIGNATURE, png } from '../helpers/png.js'
import { HOST_AIOHTTP, poll } from '../helpers/stack.js'
import { REAL_HOST_SKIP, destroyRealHost, running, startRealHost, type RealHost } from '../helpers/real-host.js'
import { WsClient, apiToken, bearer, login, promptEnded, promptEnding, register, registerUsers, wsUrl } from '../helpers/client.js'
import { hostRequests, queueIds } from '../helpers/host-requests.js'

const RECORDER = resolve(import.meta.dirname, 'fixtures', 'raw-prompt-recorder')
const CHECKPOINT = 'isolation-tiny.safetensors'
const SEED_MAX = '18446744073709551615' // 2^64 - 1, KSampler's max
const RUN_MS = 60_000


let colour = 1
/**
 * EmptyImage → `inverts` × ImageInvert → SaveImage/PreviewImage. A new colour each time,
 * so ComfyUI's cache never skips the work; each ImageInvert is a node boundary where an
 * interrupt takes effect, so a long chain is slow but stops at once when interrupted.
 */
function chainGraph(prefix: string, inverts: number, size: number, output: 'SaveImage' | 'PreviewImage' = 'SaveImage'): Record<string, unknown> {
  const graph: Record<string, unknown> = { '1': { class_type: 'EmptyImage', inputs: { width: size, height: size, batch_size: 1, color: colour++ } } }
  for (let i = 2; i < inverts + 2; i++) graph[String(i)] = { class_type: 'ImageInvert', inputs: { image: [String(i - 1), 0] } }
  const last = [String(inverts + 1), 0]
  graph.out = output === 'SaveImage'
    ? { class_type: 'SaveImage', inputs: { images: last, filename_prefix: prefix } }
    : { class_type: 'PreviewImage', inputs: { images: last } }
  return graph
}
const tiny = (prefix: string) => chainGraph(prefix, 0, 8)
/**
 * A slow prompt: one 2048×2048 EmptyImage saved by `saves` SaveImage nodes, each a few
 * hundred ms of PNG compression on this machine (no tensors pile up in the cache), with a
 * node boundary between them where an interrupt takes effect.
 */
function slow(prefix: string, saves: number): Record<string, unknown> {
  const graph: Record<string, unknown> = { '1': { class_type: 'EmptyImage', inputs: { width: 2048, height: 2048, batch_size: 1, color: colour++ } } }
  for (let i = 0; i < saves; i++) graph[`save${i}`] = { class_type: 'SaveImage', inputs: { images: ['1', 0], filename_prefix: `${prefix}-${i}` } }
  return graph
}

/** The txt2img graph of the issue as JSON text, with the seed and prompt text given as raw JSON. */
function txt2imgText(seedJson: string, textJson = '"a photo of a cat"'): string {
  const graph = {
    '4': { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: CHECKPOINT } },
    '6': { class_type: 'CLIPTextEncode', inputs: { text: '@TEXT@', clip: ['4', 1] } },
    '7': { class_type: 'CLIPTextEncode', inputs: { text: 'blurry', clip: ['4', 1] } },
    '5': { class_type: 'EmptyLatentImage', inputs: { width: 64, height: 64, batch_size: 1 } },
    '3': {
      class_type: 'KSampler',
      inputs: {
        seed: '@SEED@', steps: 1, cfg: 7.5, sampler_name: 'euler', scheduler: 'normal', denoise: 1,
        model: ['4', 0], positive: ['6', 0], negative: ['7', 0], latent_image: ['5', 0],
      },
    },
    '8': { class_type: 'VAEDecode', inputs: { samples: ['3', 0], vae: ['4', 2] } },
    '9': { class_type: 'SaveImage', inputs: { images: ['8', 0], filename_prefix: 'txt2img' } },
  }
  return JSON.stringify(graph, null, 1).replace('"@SEED@"', seedJson).replace('"@TEXT@"', textJson)
}

/**
 * `text` with each member `"key": <string|null|flat object>` removed once (with its comma);
 * throws when a key is not there exactly once.
 */
function withoutMembers(text: string, keys: string[]): string {
  const value = String.raw`(?:"(?:[^"\\]|\\.)*"|null|\{[^{}]*\})`
  let out = text
  for (const key of keys) {
    const after = new RegExp(String.raw`,\s*"${key}"\s*:\s*${value}`, 'g')
    const before = new RegExp(String.raw`"${key}"\s*:\s*${value}\s*,`, 'g')
    const found = [...out.matchAll(after)]
    if (found.length === 1) {
      out = out.replace(after, '')
      continue
    }
    const other = [...out.matchAll(before)]
    if (found.length === 0 && other.length === 1) {
      out = out.replace(before, '')
      continue
    }
    throw new Error(`"${key}" is not in the received body exactly once: ${text}`)
  }
  return out
}

/** The `{filename, subfolder, type}` of the first image a prompt's node reported on this socket. */
async function reportedImage(ws: WsClient, promptId: string): Promise<{ filename: string; subfolder: string; type: string }> {
  const executed = await ws.waitFor((m) => m.type === 'executed' && m.data.prompt_id === promptId && Array.isArray(m.data.output?.images), RUN_MS)
  return executed.data.output.images[0]
}

/** Resolves with the close code, its reason and when it came (Date.now()). */
function closed(ws: WsClient): Promise<{ code: number; reason: string; at: number }> {
  return new Promise((res) => ws.ws.once('close', (code, reason) => res({ code, reason: reason.toString(), at: Date.now() })))
}

/** Runs `act`, then expects `ws` to be closed with `code` within 1 s of the moment `act` was answered. */
async function closedBy(ws: WsClient, code: number, act: () => Promise<Response>): Promise<void> {
  const close = closed(ws)
  const res = await act()
  const answeredAt = Date.now()
  assert.ok(res.status >= 200 && res.status < 300, `${res.status} ${await res.text()}`)
  const result = await Promise.race([close, new Promise<null>((r) => setTimeout(() => r(null), 3000).unref())])
  assert.ok(result, 'the socket was not closed within 3 s')
  // the close may come before the answer: the change's push leaves the sidecar before its answer does
  const ms = Math.max(0, result.at - answeredAt)
  assert.equal(result.code, code, `close code ${result.code}, expected ${code} (reason ${JSON.stringify(result.reason)}, after ${ms} ms)`)
  assert.ok(ms <= 1000, `closed ${ms} ms after the answer`)
}

for (const aiohttp of [HOST_AIOHTTP]) {
  describe(`per-user isolation inside the real ComfyUI, aiohttp ${aiohttp}`, { skip: REAL_HOST_SKIP }, () => {
    let host: RealHost
    let rawDir: string
    let admin: string
    let alice: string
    let bob: string
    let A = '' // alice's own folder (issue 21)
    const aliceCid = randomUUID()
    const bobCid = randomUUID()
    const adminCid = randomUUID()
    let aliceWs: WsClient
    let bobWs: WsClient
    let adminWs: WsClient
    const sharedInput = `shared-${aiohttp}.png`
    // made by the rows, used by later ones
    const aliceIds: string[] = []
    const files: Record<string, { filename: string; subfolder: string; type: string }> = {}
    const ids: Record<string, string> = {}
    let a0 = ''
    let a1 = ''
    let b1 = ''

    const { get, post, upload, loadImageOptions, queuePrompt: run } = hostRequests(() => host.url)
    const view = async (token: string, params: Record<string, string>, path = '/view'): Promise<{ status: number; bytes: Buffer }> => {
      const res = await fetch(`${host.url}${path}?${new URLSearchParams(params)}`, { headers: bearer(token) })
      return { status: res.status, bytes: Buffer.from(await res.arrayBuffer()) }
    }
    const viewOf = (token: string, f: { filename: string; subfolder: string; type: string }) => view(token, { filename: f.filename, subfolder: f.subfolder, type: f.type })
    /** how a LoadImage list names an input file */
    const listed = (f: { filename: string; subfolder: string }) => (f.subfolder ? `${f.subfolder}/${f.filename}` : f.filename)
    /** Bob's (or anyone's) refusals of alice's file, under the spellings ComfyUI accepts for the same file. */
    const viewProbes = (f: { filename: string; subfolder: string; type: string }): Array<[string, Record<string, string>]> => [
      ['/view', { filename: f.filename, subfolder: f.subfolder, type: f.type }],
      ['/api/view', { filename: f.filename, subfolder: f.subfolder, type: f.type }],
      ['/view', { filename: `${f.filename} [${f.type}]`, subfolder: f.subfolder }],
      ['/view', { filename: f.subfolder ? `${f.subfolder}/${f.filename}` : `./${f.filename}`, subfolder: f.subfolder ? f.subfolder : '.', type: f.type }],
      ['/view', { filename: f.filename, subfolder: f.subfolder ? `./${f.subfolder}/` : './', type: f.type, preview: 'webp;50' }],
    ]
    const assertHidden = async (who: string, token: string, f: { filename: string; subfolder: string; type: string }) => {
      const wrong: string[] = []
      for (const [path, params] of viewProbes(f)) {
        const res = await view(token, params, path)
        let code: unknown
        try {
          code = JSON.parse(res.bytes.toString('utf8')).code
        } catch {
          code = res.bytes.subarray(0, 8).toString('hex')
        }
        if (res.status !== 404 || code !== 'NOT_FOUND') wrong.push(`${path}?${new URLSearchParams(params)}: ${res.status} ${String(code)}`)
      }
      assert.deepEqual(wrong, [], `${who} must get 404 NOT_FOUND for ${JSON.stringify(f)}`)
    }
    const assertViews = async (who: string, token: string, f: { filename: string; subfolder: string; type: string }) => {
      const res = await viewOf(token, f)
      assert.equal(res.status, 200, `${who} views ${JSON.stringify(f)}: ${res.bytes.toString('utf8').slice(0, 200)}`)
      assert.deepEqual(res.bytes.subarray(0, 8), PNG_SIGNATURE)
    }

    before(async () => {
      rawDir = mkdtempSync(join(tmpdir(), 'as-raw-prompts-'))
      host = await startRealHost({
        aiohttp,
        customNodes: [RECORDER],
        env: { AUTHSVC_TEST_RAW_PROMPTS: rawDir },
        models: [`checkpoints/${CHECKPOINT}`],
        files: { [`input/${sharedInput}`]: png(200) },
      })
      const jwt = await registerUsers(host, 'alice', 'bob')
      admin = jwt.root
      alice = jwt.alice
      bob = jwt.bob
      A = `u_${(await get('/authsvc/api/me', alice)).body.user_id}`
      aliceWs = await WsClient.open(wsUrl(host, aliceCid), bearer(alice))
      bobWs = await WsClient.open(wsUrl(host, bobCid), bearer(bob))
      adminWs = await WsClient.open(wsUrl(host, adminCid), bearer(admin))
    })
    after(async () => {
      for (const ws of [aliceWs, bobWs, adminWs]) ws?.close()
      if (host) await destroyRealHost(host)
      if (rawDir) rmSync(rawDir, { recursive: true, force: true })
    })

    it('alice\'s prompt without client_id sends no WebSocket message to bob\'s (or the admin\'s) socket', async () => {
      a0 = await run(alice, { prompt: tiny(`a0-${aiohttp}`) })
      aliceIds.push(a0)
      // alice's prompt ran to completion...
      assert.ok(await poll(async () => (await get(`/history/${a0}`, alice)).body?.[a0]?.status?.completed === true, RUN_MS), 'alice\'s prompt completed')
      // ...then the marker: bob's own prompt, to his own socket
      b1 = await run(bob, { prompt: tiny(`b1-${aiohttp}`), client_id: bobCid })
      assert.equal(await promptEnding(bobWs, b1, RUN_MS), 'execution_success')
      await bobWs.waitFor((m) => m.type === 'executing' && m.data.node === null && m.data.prompt_id === b1, RUN_MS)
      const leaked = bobWs.messages.filter((m) => m.data?.prompt_id === a0 || JSON.stringify(m.data ?? {}).includes(`a0-${aiohttp}`))
      assert.deepEqual(leaked, [], 'bob received messages of alice\'s prompt')
      assert.ok(bobWs.messages.some((m) => m.type === 'executed' && m.data.prompt_id === b1), 'the marker is bob\'s own executed event')
      // the same for the admin's socket, with a marker prompt of the admin's
      const marker = await run(admin, { prompt: tiny(`admin-marker-${aiohttp}`), client_id: adminCid })
      assert.equal(await promptEnding(adminWs, marker, RUN_MS), 'execution_success')
      assert.deepEqual(adminWs.messages.filter((m) => m.data?.prompt_id === a0 || m.data?.prompt_id === b1), [], 'the admin\'s socket received another user\'s prompt')
      assert.deepEqual(aliceWs.messages.filter((m) => m.data?.prompt_id === b1), [], 'alice received messages of bob\'s prompt')
      const out = (await get(`/history/${a0}`, alice)).body[a0].outputs.out.images[0]
      files.a0Output = out
    })

    it('a node\'s untargeted message while alice\'s prompt runs (GetImageSize\'s progress text) reaches her socket only, not bob\'s or the admin\'s', async () => {
      // ComfyUI sends this text with no target: to every open socket
      const sized = {
        1: { class_type: 'EmptyImage', inputs: { width: 123, height: 77, batch_size: 1, color: 0 } },
        2: { class_type: 'GetImageSize', inputs: { image: ['1', 0] } },
        3: { class_type: 'PreviewAny', inputs: { source: ['2', 0] } },
      }
      const TEXT = 3 // ComfyUI's binary event type of progress text
      const texts = (ws: WsClient) => ws.binary.filter((b) => b.readUInt32BE(0) === TEXT).map((b) => b.subarray(8 + b.readUInt32BE(4)).toString('utf8'))
      const before = { bob: texts(bobWs).length, admin: texts(adminWs).length }
      const mine = await run(alice, { prompt: sized, client_id: aliceCid })
      assert.equal(await promptEnding(aliceWs, mine, RUN_MS), 'execution_success')
      await aliceWs.waitFor((m) => m.type === 'executing' && m.data.node === null && m.data.prompt_id === mine, RUN_MS)
      assert.ok(texts(aliceWs).some((t) => t.includes('width: 123, height: 77')), `alice sees her node's text: ${JSON.stringify(texts(aliceWs))}`)
      // markers: bob's and the admin's own prompts, sent after hers, end on their own sockets after her text would have
      for (const [ws, token, cid, who] of [[bobWs, bob, bobCid, 'bob'], [adminWs, admin, adminCid, 'admin']] as const) {
        const marker = await run(token, { prompt: tiny(`size-marker-${who}-${aiohttp}`), client_id: cid })
        assert.equal(await promptEnding(ws, marker, RUN_MS), 'execution_success')
        await ws.waitFor((m) => m.type === 'executing' && m.data.node === null && m.data.prompt_id === marker, RUN_MS)
        assert.deepEqual(texts(ws).slice(before[who]), [], `${who}'s socket received alice's progress text`)
        // the later rows count each user's history: this row leaves none behind
        assert.equal((await post('/history', token, { delete: [marker] })).status, 200)
      }
      assert.equal((await post('/history', alice, { delete: [mine] })).status, 200)
    })

    it('bob cannot push his prompt\'s events into alice\'s tab: client_id, extra_data.client_id and /ws?clientId of hers are refused (403 CLIENT_ID_TAKEN)', async () => {
      const prefix = `hijack-${aiohttp}`
      const bodies = [
        { prompt: tiny(prefix), client_id: aliceCid },
        { prompt: tiny(prefix), extra_data: { client_id: aliceCid } },
        { prompt: tiny(prefix), client_id: bobCid, extra_data: { client_id: aliceCid } },
      ]
      for (const body of bodies) {
        for (const path of ['/prompt', '/api/prompt']) {
          const res = await post(path, bob, body)
          assert.equal(res.status, 403, `${path} ${JSON.stringify(body).slice(-120)}: ${res.text}`)
          assert.equal(res.body.code, 'CLIENT_ID_TAKEN')
        }
      }
      await assert.rejects(WsClient.open(wsUrl(host, aliceCid), bearer(bob)), /ws refused: 403/)
      // a query that starts with `?`: the host's yarl keeps it in the first key (`?clientId`), so the
      // host's clientId is the second one, hers; WHATWG's reading would have taken the first
      const ws = `${host.url.replace('http', 'ws')}/ws??clientId=${randomUUID()}&clientId=${aliceCid}`
      await assert.rejects(WsClient.open(ws, bearer(bob)), /ws refused: 403/, 'a ?? query took her clientId')
      // none of them reached the host
      const recorded = readdirSync(rawDir).map((f) => readFileSync(join(rawDir, f), 'utf8'))
      assert.ok(!recorded.some((text) => text.includes(prefix)), 'a refused prompt reached the host')
      // alice's socket still works and is hers: her own prompt's events reach it
      const own = await run(alice, { prompt: tiny(`a-own-${aiohttp}`), client_id: aliceCid })
      aliceIds.push(own)
      assert.equal(await promptEnding(aliceWs, own, RUN_MS), 'execution_success')
    })

    it('bob cannot see alice\'s queued prompts in /queue or /api/queue; she sees hers, the admin sees all (her comfy.org key only to her)', async () => {
      a1 = await run(alice, { prompt: slow(`a1-${aiohttp}`, 6), client_id: aliceCid })
      const a2 = await run(alice, { prompt: slow(`a2-${aiohttp}`, 30), client_id: aliceCid, extra_data: { api_key_comfy_org: 'alice-comfy-key' } })
      const a3 = await run(alice, { prompt: tiny(`a3-${aiohttp}`), client_id: aliceCid })
      const a5 = await run(alice, { prompt: slow(`a5-${aiohttp}`, 30), client_id: aliceCid })
      aliceIds.push(a1, a2, a3, a5)
      Object.assign(ids, { a2, a3, a5 })
      await aliceWs.waitFor((m) => m.type === 'execution_start' && m.data.prompt_id === a1, RUN_MS)
      for (const path of ['/queue', '/api/queue']) {
        const res = await get(path, bob)
        assert.equal(res.status, 200)
        assert.deepEqual(res.body, { queue_running: [], queue_pending: [] }, `bob's ${path}`)
      }
      const mine = await get('/queue', alice)
      for (const id of [a2, a3, a5]) assert.ok(queueIds(mine.body).includes(id), `alice's /queue has ${id}`)
      const a2Item = mine.body.queue_pending.find((item: any[]) => item[1] === a2)
      assert.equal(a2Item?.[3]?.api_key_comfy_org, 'alice-comfy-key', 'alice sees her own comfy.org key')
      const all = await get('/api/queue', admin)
      for (const id of [a2, a3, a5]) assert.ok(queueIds(all.body).includes(id), `the admin's /queue has ${id}`)
      const adminA2 = all.body.queue_pending.find((item: any[]) => item[1] === a2)
      assert.equal(adminA2[3].authsvc_user, 'alice', 'the owner stamp')
      assert.ok(!('api_key_comfy_org' in adminA2[3]), 'the admin does not see alice\'s comfy.org key')
      assert.ok(!all.text.includes('alice-comfy-key'))
      assert.ok(!promptEnded(aliceWs, a1), 'alice\'s first prompt is still running (the graph must be slower)')
    })

    it('bob cannot delete or clear alice\'s pending prompts (403 NOT_OWNER, nothing changes); she deletes her own', async () => {
      const { a2, a3, a5 } = ids
      for (const path of ['/queue', '/api/queue']) {
        const res = await post(path, bob, { delete: [a3] })
        assert.equal(res.status, 403, res.text)
        assert.equal(res.body.code, 'NOT_OWNER')
        const mixed = await post(path, bob, { delete: [b1, a5] })
        assert.equal(mixed.status, 403, mixed.text)
      }
      const clear = await post('/queue', bob, { clear: true })
      assert.equal(clear.status, 200, clear.text)
      const still = queueIds((await get('/queue', alice)).body)
      for (const id of [a2, a3, a5]) assert.ok(still.includes(id), `alice's ${id} is still queued after bob's delete and clear`)

      const own = await post('/queue', alice, { delete: [a3] })
      assert.equal(own.status, 200, own.text)
      const after = queueIds((await get('/queue', alice)).body)
      assert.ok(!after.includes(a3), 'alice deleted her pending prompt')
      for (const id of [a2, a5]) assert.ok(after.includes(id), `her other prompt ${id} is still queued`)
    })

    it('bob cannot interrupt alice\'s running prompt, with or without prompt_id (403 NOT_OWNER), and hers runs to success', async () => {
      assert.ok(!promptEnded(aliceWs, a1), 'alice\'s first prompt is still running (the graph must be slower)')
      for (const [path, body] of [['/interrupt', undefined], ['/interrupt', {}], ['/api/interrupt', { prompt_id: a1 }], ['/interrupt', { prompt_id: a1 }]] as const) {
        const res = await post(path, bob, body)
        assert.equal(res.status, 403, `${path} ${JSON.stringify(body)}: ${res.text}`)
        assert.equal(res.body.code, 'NOT_OWNER')
      }
      const running = (await get('/queue', alice)).body.queue_running.map((item: any[]) => item[1])
      assert.deepEqual(running, [a1], 'alice\'s first prompt was running when bob\'s interrupts were answered')
      assert.equal(await promptEnding(aliceWs, a1, RUN_MS), 'execution_success')
      files.a1Output = await reportedImage(aliceWs, a1)
    })

    it('alice interrupts her own running prompt with prompt_id, and without one', async () => {
      const { a2, a3, a5 } = ids
      await aliceWs.waitFor((m) => m.type === 'execution_start' && m.data.prompt_id === a2, RUN_MS)
      const withId = await post('/interrupt', alice, { prompt_id: a2 })
      assert.equal(withId.status, 200, withId.text)
      assert.equal(await promptEnding(aliceWs, a2, RUN_MS), 'execution_interrupted')
      await aliceWs.waitFor((m) => m.type === 'execution_start' && m.data.prompt_id === a5, RUN_MS)
      const withoutId = await post('/api/interrupt', alice)
      assert.equal(withoutId.status, 200, withoutId.text)
      assert.equal(await promptEnding(aliceWs, a5, RUN_MS), 'execution_interrupted')
      assert.ok(!aliceWs.messages.some((m) => m.data?.prompt_id === a3), 'the prompt she deleted never ran')
    })

    it('bob sees none of alice\'s history in /history, /api/history (max_items, offset) or /history/{id}; she sees hers, the admin sees all', async () => {
      const { a2, a5 } = ids
      for (const path of ['/history', '/api/history', '/history?max_items=10', '/history?max_items=1&offset=0', '/api/history?offset=-1&max_items=5']) {
        const res = await get(path, bob)
        assert.equal(res.status, 200, res.text)
        assert.deepEqual(Object.keys(res.body), [b1], `bob's ${path}`)
      }
      for (const id of [a0, a1, a2]) {
        for (const path of [`/history/${id}`, `/api/history/${id}`]) {
          const res = await get(path, bob)
          assert.equal(res.status, 200)
          assert.deepEqual(res.body, {}, `bob's ${path}`)
        }
      }
      const hers = await get('/history', alice)
      for (const id of [a0, a1, a2, a5]) assert.ok(id in hers.body, `alice's /history has ${id}`)
      assert.ok(!(b1 in hers.body), 'alice does not see bob\'s entry')
      const two = await get('/history?max_items=2', alice)
      assert.equal(Object.keys(two.body).length, 2)
      assert.ok(Object.keys(two.body).every((id) => aliceIds.includes(id)))
      const entry = await get(`/api/history/${a1}`, alice)
      const images = Object.values(entry.body[a1].outputs).flatMap((o: any) => o.images)
      assert.ok(images.some((i: any) => i.filename === files.a1Output.filename && i.type === 'output'), `alice's /history/${a1} names its outputs`)
      const all = await get('/history', admin)
      for (const id of [a0, a1, a2, a5, b1]) assert.ok(id in all.body, `the admin's /history has ${id}`)
    })

    it('bob cannot delete or clear alice\'s history entries (403 NOT_OWNER, nothing changes); she deletes her own', async () => {
      const { a2 } = ids
      for (const path of ['/history', '/api/history']) {
        const res = await post(path, bob, { delete: [a1] })
        assert.equal(res.status, 403, res.text)
        assert.equal(res.body.code, 'NOT_OWNER')
      }
      const clear = await post('/history', bob, { clear: true })
      assert.equal(clear.status, 200, clear.text)
      assert.deepEqual((await get('/history', bob)).body, {}, 'bob cleared his own history')
      const hers = await get('/history', alice)
      for (const id of [a0, a1, a2]) assert.ok(id in hers.body, `alice's ${id} survives bob's delete and clear`)
      const own = await post('/history', alice, { delete: [a2] })
      assert.equal(own.status, 200, own.text)
      assert.deepEqual((await get(`/history/${a2}`, alice)).body, {})
      const all = await get('/history', admin)
      assert.ok(!(a2 in all.body) && a1 in all.body, 'only the entry she deleted is gone')
    })

    it('bob cannot /view alice\'s outputs or temp previews (404 NOT_FOUND); she and the admin can', async () => {
      const preview = await run(alice, { prompt: chainGraph('unused', 1, 16, 'PreviewImage'), client_id: aliceCid })
      aliceIds.push(preview)
      files.aliceTemp = await reportedImage(aliceWs, preview)
      assert.equal(files.aliceTemp.type, 'temp')
      assert.equal(await promptEnding(aliceWs, preview, RUN_MS), 'execution_success')
      for (const key of ['a0Output', 'a1Output', 'aliceTemp']) {
        const f = files[key]
        assert.ok(f, `${key} was made by an earlier row`)
        await assertViews('alice', alice, f)
        await assertViews('the admin', admin, f)
        await assertHidden('bob', bob, f)
      }
    })

    it('alice uploads (top level and a subfolder) and views her uploads; bob cannot view them (404) nor see them in /object_info LoadImage/LoadImageMask; shared inputs stay visible', async () => {
      const top = await upload(alice, `alice-up-${aiohttp}.png`, png(1))
      assert.equal(top.status, 200, top.text)
      files.aliceUpload = { filename: top.body.name, subfolder: top.body.subfolder, type: top.body.type }
      const sub = await upload(alice, `alice-sub-${aiohttp}.png`, png(2), { subfolder: `alice-dir-${aiohttp}` })
      assert.equal(sub.status, 200, sub.text)
      files.aliceSubUpload = { filename: sub.body.name, subfolder: sub.body.subfolder, type: sub.body.type }
      assert.equal(files.aliceUpload.subfolder, A, 'an upload lands in her own folder')
      assert.equal(files.aliceSubUpload.subfolder, `${A}/alice-dir-${aiohttp}`)
      for (const key of ['aliceUpload', 'aliceSubUpload']) {
        await assertViews('alice', alice, files[key])
        await assertViews('the admin', admin, files[key])
        await assertHidden('bob', bob, files[key])
      }
      const shared = { filename: sharedInput, subfolder: '', type: 'input' }
      await assertViews('bob (shared input)', bob, shared)
      await assertViews('alice (shared input)', alice, shared)

      for (const cls of ['LoadImage', 'LoadImageMask']) {
        const forBob = await loadImageOptions(bob, cls)
        assert.ok(!forBob.includes(listed(files.aliceUpload)), `bob's ${cls} lists alice's upload: ${JSON.stringify(forBob)}`)
        assert.ok(forBob.includes(sharedInput), `bob's ${cls} lists the shared input`)
        const forAlice = await loadImageOptions(alice, cls)
        assert.ok(forAlice.includes(listed(files.aliceUpload)) && forAlice.includes(sharedInput), `alice's ${cls}: ${JSON.stringify(forAlice)}`)
        const forAdmin = await loadImageOptions(admin, cls)
        // the admin's lists are the host's own: the top of input/ (a user's uploads are in their folder)
        assert.ok(forAdmin.includes(sharedInput), `the admin's ${cls}: ${JSON.stringify(forAdmin)}`)
      }
      const whole = await get('/object_info', bob)
      assert.ok(!whole.text.includes(files.aliceUpload.filename), 'bob\'s whole /object_info names alice\'s upload')
      assert.ok(!whole.text.includes(A), 'nor her folder')
    })

    // issue 21: the host unwraps {"__value__": x} before LoadImage opens it, and takes any truthy front
    it('bob cannot read alice\'s upload through a {"__value__"} input (403 NOT_OWNER) nor jump the queue with front 1 or "yes" (403); the host takes the wrapped name from her', async () => {
      const f = files.aliceUpload
      assert.ok(f, 'made by the upload row')
      const graph = (image: unknown) => ({ 1: { class_type: 'LoadImage', inputs: { image } }, 2: { class_type: 'PreviewImage', inputs: { images: ['1', 0] } } })
      for (const image of [{ __value__: listed(f) }, { __value__: { __value__: listed(f) } }]) {
        const res = await post('/prompt', bob, { prompt: graph(image) })
        assert.equal(res.status, 403, `${JSON.stringify(image)}: ${res.text}`)
        assert.equal(res.body.code, 'NOT_OWNER')
      }
      // what makes the wrapper a hole: the real host validates and queues her wrapped name
      const hers = await post('/prompt', alice, { prompt: graph({ __value__: listed(f) }) })
      assert.equal(hers.status, 200, hers.text)
      for (const front of [1, 'yes', [0]]) {
        const res = await post('/prompt', bob, { prompt: tiny(`bob-front-${aiohttp}`), front })
        assert.equal(res.status, 403, `front ${JSON.stringify(front)}: ${res.text}`)
        assert.equal(res.body.code, 'PERMISSION_DENIED')
      }
      assert.equal((await post('/prompt', bob, { prompt: tiny(`bob-front0-${aiohttp}`), front: 0 })).status, 200, 'front 0 is no jump')
    })

    it('bob cannot overwrite alice\'s upload (his lands in his own folder) nor compose a mask over it (403 NOT_OWNER); her own mask upload is hers', async () => {
      const f = files.aliceUpload
      assert.ok(f, 'made by the upload row')
      const herPath = join(host.inputDir, f.subfolder, f.filename)
      const before = readFileSync(herPath)
      const overwrite = await upload(bob, f.filename, png(99), { overwrite: 'true', subfolder: f.subfolder })
      assert.equal(overwrite.status, 200, overwrite.text)
      assert.notEqual(overwrite.body.subfolder, f.subfolder, 'his own folder')
      assert.deepEqual(readFileSync(herPath), before, 'her file is unchanged')
      const ref = JSON.stringify({ filename: f.filename, subfolder: f.subfolder, type: 'input' })
      const mask = await upload(bob, `bob-mask-${aiohttp}.png`, png(98), { original_ref: ref, type: 'input', subfolder: 'clipspace' }, '/upload/mask')
      assert.equal(mask.status, 403, mask.text)
      assert.equal(mask.body.code, 'NOT_OWNER')

      const hers = await upload(alice, `alice-mask-${aiohttp}.png`, png(97), { original_ref: ref, type: 'input', subfolder: 'clipspace' }, '/upload/mask')
      assert.equal(hers.status, 200, hers.text)
      assert.equal(hers.body.subfolder, `${A}/clipspace`)
      files.aliceMask = { filename: hers.body.name, subfolder: hers.body.subfolder, type: hers.body.type }
      await assertViews('alice', alice, files.aliceMask)
      await assertHidden('bob', bob, files.aliceMask)
      const again = await upload(alice, f.filename, png(96), { overwrite: 'true', subfolder: f.subfolder })
      assert.equal(again.status, 200, `alice overwrites her own upload: ${again.text}`)
      assert.deepEqual(readFileSync(herPath), png(96))
    })

    it('logging out closes that session\'s open WebSocket with 4401 within 1 s, and no other socket', async () => {
      const second = (await login(host, 'alice')).jwt
      const ws = await WsClient.open(wsUrl(host, randomUUID()), bearer(second))
      await closedBy(ws, 4401, () => fetch(`${host.url}/logout`, { method: 'POST', headers: { Accept: 'application/json', ...bearer(second) } }))
      for (const [who, other] of [['alice\'s other session', aliceWs], ['bob', bobWs], ['the admin', adminWs]] as const) {
        assert.equal(other.ws.readyState, other.ws.OPEN, `${who}'s socket stays open`)
      }
      assert.equal((await get('/queue', second)).status, 401)
    })

    it('a revoked API token, a role change, a disabled and a deleted user close exactly those sockets (4401 / 4403) within 1 s', async () => {
      const adminSend = (method: string, path: string, body?: unknown) => fetch(host.url + path, {
        method,
        headers: { Accept: 'application/json', ...(body === undefined ? {} : { 'Content-Type': 'application/json' }), ...bearer(admin) },
        body: body === undefined ? undefined : JSON.stringify(body),
      })
      for (const name of ['carol', 'dave']) assert.equal((await register(host, name, { bearer: admin })).status, 201)
      const carolSession = (await login(host, 'carol')).jwt
      const carolToken = await apiToken(host, 'carol')
      const byToken = await WsClient.open(wsUrl(host, randomUUID()), bearer(carolToken))
      const bySession = await WsClient.open(wsUrl(host, randomUUID()), bearer(carolSession))
      const [listed] = (await get('/authsvc/api/tokens', carolSession)).body.tokens
      await closedBy(byToken, 4401, () => fetch(`${host.url}/authsvc/api/tokens`, {
        method: 'DELETE', headers: { 'Content-Type': 'application/json', ...bearer(carolSession) }, body: JSON.stringify({ token_hash_prefix: listed.token_hash_prefix }),
      }))
      assert.equal(bySession.ws.readyState, bySession.ws.OPEN, 'her session\'s socket stays open when her token is revoked')
      // a role change revokes the user's sessions (their sockets: 4401) and keeps her API tokens with
      // the new role's rights (their sockets: 4403), docs/decisions.md
      const byNewToken = await WsClient.open(wsUrl(host, randomUUID()), bearer(await apiToken(host, 'carol')))
      let roleChangedAt = 0
      const tokenClosed = closed(byNewToken)
      await closedBy(bySession, 4401, async () => {
        const res = await adminSend('PUT', '/authsvc/api/users/carol', { role: 'guest' })
        roleChangedAt = Date.now()
        return res
      })
      const tokenClose = await Promise.race([tokenClosed, new Promise<null>((r) => setTimeout(() => r(null), 3000).unref())])
      assert.equal(tokenClose?.code, 4403, 'her token\'s socket: access changed')
      const tokenMs = Math.max(0, tokenClose!.at - roleChangedAt) // it may come before the answer
      assert.ok(tokenMs <= 1000, `closed ${tokenMs} ms after the role change`)

      const again = await WsClient.open(wsUrl(host, randomUUID()), bearer((await login(host, 'carol')).jwt))
      await closedBy(again, 4401, () => adminSend('PUT', '/authsvc/api/users/carol', { disabled: true }))
      const dave = await WsClient.open(wsUrl(host, randomUUID()), bearer((await login(host, 'dave')).jwt))
      await closedBy(dave, 4401, () => adminSend('DELETE', '/authsvc/api/users/dave'))
      for (const [who, other] of [['alice', aliceWs], ['bob', bobWs], ['the admin', adminWs]] as const) {
        assert.equal(other.ws.readyState, other.ws.OPEN, `${who}'s socket stays open`)
      }
    })

    it(`a txt2img graph with seed ${SEED_MAX} passes the gate and validates on the real host`, async () => {
      const body = `{"prompt": ${txt2imgText(SEED_MAX)}, "client_id": "${aliceCid}"}`
      const res = await post('/prompt', alice, body)
      assert.equal(res.status, 200, `the host refused the prompt: ${res.text}`)
      assert.equal(typeof res.body.prompt_id, 'string')
      assert.deepEqual(res.body.node_errors, {})
      aliceIds.push(res.body.prompt_id)
      // what a JSON round trip would have sent: the host refuses it, so the row above would catch one
      const rounded = await post('/prompt', alice, `{"prompt": ${txt2imgText(String(Number(SEED_MAX)))}, "client_id": "${aliceCid}"}`)
      assert.equal(rounded.status, 400, rounded.text)
      assert.match(rounded.text, /bigger than max/)
      // sampling cannot run here (stubs): it ends, whichever way, before the next rows
      await promptEnding(aliceWs, res.body.prompt_id, RUN_MS)
    })

    it('a prompt body reaches the host byte for byte apart from the stamped keys: big integers, 1e400, \\u escapes, key order, spacing', async () => {
      const id = `alice-bytes-${randomUUID()}`
      const text = String.raw`"caf\u00e9 \ud83d\ude00 \"q\" \u2028 \/ \u0000end"`
      const sent = String.raw`{
  "client_id" :"${aliceCid}",
  "prompt":${txt2imgText('18446744073709551614', text)},
  "extra_data": {"z_last_first": 1, "big": 123456789012345678901234567890, "neg": -9223372036854775809, "float": 1.50E+10,
                 "esc": "\u00e9\ud83d\ude00\u005c\u0022", "nested": {"b": 0.1000000000000000055511151231257827, "a": -0.0}},
  "prompt_id": "${id}",
  "zz_unknown": [1e400, -1e400, 1e-400, 18446744073709551616, 1E+2]
}`
      assert.doesNotThrow(() => JSON.parse(sent))
      const res = await post('/prompt', alice, sent)
      assert.equal(res.status, 200, res.text)
      assert.equal(res.body.prompt_id, id, 'the client\'s prompt_id is kept')
      aliceIds.push(id)
      const received = readFileSync(join(rawDir, `${id}.json`), 'utf8')
      const stamped = JSON.parse(received)
      assert.equal(stamped.extra_data.authsvc_user, 'alice')
      assert.equal(typeof stamped.extra_data.authsvc_user_id, 'string')
      assert.equal(stamped.extra_data.authsvc_folder, A)
      // per-user folders (issue 21): the prefix is placed under her folder, and every node but the
      // model loader gets her cache scope; nothing else changes
      assert.equal((received.match(new RegExp(`,"authsvc_scope":"${A}"`, 'g')) ?? []).length, 6, 'every node but CheckpointLoaderSimple')
      assert.equal(stamped.prompt['4'].inputs.authsvc_scope, undefined, 'the model loader stays shared')
      assert.equal(stamped.prompt['9'].inputs.filename_prefix, `${A}/txt2img`)
      const own = received.replaceAll(`,"authsvc_scope":"${A}"`, '').replace(`"${A}/txt2img"`, '"txt2img"')
      assert.equal(withoutMembers(own, ['authsvc_user', 'authsvc_user_id', 'authsvc_folder', 'authsvc_models']), sent)
      await promptEnding(aliceWs, id, RUN_MS)

      // a body without prompt_id, client_id or extra_data: the gate adds exactly those
      const minimal = `{"prompt":${txt2imgText(SEED_MAX)},"zz":[1e400,12345678901234567890123,"\\ud83d\\ude00"]}`
      const second = await post('/api/prompt', alice, minimal)
      assert.equal(second.status, 200, second.text)
      const added = readFileSync(join(rawDir, `${second.body.prompt_id}.json`), 'utf8')
      const parsed = JSON.parse(added)
      assert.equal(parsed.prompt_id, second.body.prompt_id)
      assert.match(parsed.client_id, /^authsvc-/, 'a fresh client_id of the owner\'s')
      assert.equal(parsed.extra_data.authsvc_user, 'alice')
      const ownAdded = added.replaceAll(`,"authsvc_scope":"${A}"`, '').replace(`"${A}/txt2img"`, '"txt2img"')
      assert.equal(withoutMembers(ownAdded, ['prompt_id', 'client_id', 'extra_data']), minimal)
      aliceIds.push(second.body.prompt_id)
      assert.ok(await poll(async () => (await get(`/history/${second.body.prompt_id}`, alice)).body?.[second.body.prompt_id]?.status !== undefined, RUN_MS), 'the minimal prompt ended')
    })

    let beforeKill: { ws: WsClient; session: string } | undefined
    it('ownership survives a sidecar kill: queue, running prompt, history and files are still only alice\'s', async () => {
      // a socket opened before the kill, for the next row
      const session = (await login(host, 'alice')).jwt
      beforeKill = { ws: await WsClient.open(wsUrl(host, randomUUID()), bearer(session)), session }
      const p = await run(alice, { prompt: slow(`p-${aiohttp}`, 80), client_id: aliceCid })
      const q = await run(alice, { prompt: tiny(`q-${aiohttp}`), client_id: aliceCid })
      aliceIds.push(p, q)
      await aliceWs.waitFor((m) => m.type === 'execution_start' && m.data.prompt_id === p, RUN_MS)
      const oldPid = host.sidecarPid()
      process.kill(oldPid, 'SIGKILL')
      assert.ok(await poll(async () => {
        if (!existsSync(join(host.dataDir, 'sidecar.pid')) || host.sidecarPid() === oldPid || !running(host.sidecarPid())) return false
        try {
          return (await fetch(`${host.url}/authsvc/health`)).status === 200
        } catch {
          return false
        }
      }, 20_000), 'a new sidecar answers /authsvc/health')
      assert.ok(!promptEnded(aliceWs, p), 'alice\'s prompt still runs after the sidecar restart (the graph must be slower)')

      assert.deepEqual((await get('/queue', bob)).body, { queue_running: [], queue_pending: [] }, 'bob\'s /queue')
      assert.deepEqual(queueIds((await get('/queue', alice)).body), [p, q], 'alice\'s /queue')
      for (const body of [undefined, { prompt_id: p }]) {
        const res = await post('/interrupt', bob, body)
        assert.equal(res.status, 403, `bob's interrupt ${JSON.stringify(body)}: ${res.text}`)
      }
      const del = await post('/queue', bob, { delete: [q] })
      assert.equal(del.status, 403, del.text)
      const bobsOwn = await post('/prompt', bob, { prompt: tiny(`bob-after-kill-${aiohttp}`), client_id: bobCid })
      assert.equal(bobsOwn.status, 200, `bob may still use his own client_id: ${bobsOwn.text}`)
      const bobAfter = bobsOwn.body.prompt_id
      // alice interrupts her running prompt, known to the new sidecar from the plugin's hello
      const stop = await post('/interrupt', alice)
      assert.equal(stop.status, 200, stop.text)
      assert.equal(await promptEnding(aliceWs, p, RUN_MS), 'execution_interrupted')
      assert.equal(await promptEnding(aliceWs, q, RUN_MS), 'execution_success')
      files.qOutput = await reportedImage(aliceWs, q)
      assert.equal(await promptEnding(bobWs, bobAfter, RUN_MS), 'execution_success')

      assert.deepEqual((await get(`/history/${a1}`, bob)).body, {})
      assert.ok(!Object.keys((await get('/history', bob)).body).some((id) => aliceIds.includes(id)), 'bob\'s /history after the restart')
      assert.ok(a1 in (await get(`/history/${a1}`, alice)).body)
      for (const key of ['a0Output', 'a1Output', 'aliceTemp', 'aliceUpload', 'aliceSubUpload', 'aliceMask', 'qOutput']) {
        const f = files[key]
        assert.ok(f, `${key} was made by an earlier row`)
        await assertViews('alice', alice, f)
        await assertHidden('bob', bob, f)
      }
      assert.ok(!(await loadImageOptions(bob)).includes(listed(files.aliceUpload)), 'bob\'s LoadImage after the sidecar restart')
      assert.ok((await loadImageOptions(alice)).includes(listed(files.aliceUpload)), 'alice\'s LoadImage after the sidecar restart')
    })

    it('a WebSocket opened before a sidecar restart is still closed (4401) within 1 s when its session logs out', async () => {
      assert.ok(beforeKill, 'made by the sidecar-kill row')
      const { ws, session } = beforeKill
      assert.equal(ws.ws.readyState, ws.ws.OPEN, 'the socket outlived the sidecar restart')
      try {
        await closedBy(ws, 4401, () => fetch(`${host.url}/logout`, { method: 'POST', headers: { Accept: 'application/json', ...bearer(session) } }))
      } finally {
        ws.close()
      }
    })

    it('ownership survives a ComfyUI restart: alice\'s outputs and uploads are still only hers on /view and in LoadImage', async () => {
      for (const ws of [aliceWs, bobWs, adminWs]) ws.close()
      await host.restart()
      assert.deepEqual((await get('/history', alice)).body, {}, 'the real host forgets its history on restart')
      for (const key of ['a0Output', 'a1Output', 'qOutput', 'aliceUpload', 'aliceSubUpload', 'aliceMask']) {
        const f = files[key]
        assert.ok(f, `${key} was made by an earlier row`)
        await assertViews('alice', alice, f)
        await assertViews('the admin', admin, f)
        await assertHidden('bob', bob, f)
      }
      await assertViews('bob (shared input)', bob, { filename: sharedInput, subfolder: '', type: 'input' })
      const forBob = await loadImageOptions(bob)
      assert.ok(!forBob.includes(listed(files.aliceUpload)) && forBob.includes(sharedInput), `bob's LoadImage after the restart: ${JSON.stringify(forBob)}`)
      assert.ok((await loadImageOptions(alice)).includes(listed(files.aliceUpload)), 'alice\'s LoadImage after the restart')
      const overwrite = await upload(bob, files.aliceUpload.filename, png(95), { overwrite: 'true', subfolder: files.aliceUpload.subfolder })
      assert.equal(overwrite.status, 200, overwrite.text)
      assert.notEqual(overwrite.body.subfolder, files.aliceUpload.subfolder, 'his overwrite lands in his own folder')
      assert.deepEqual(readFileSync(join(host.inputDir, files.aliceUpload.subfolder, files.aliceUpload.filename)), png(96), 'hers is unchanged')
      // a prompt id of hers is still hers: bob cannot take it over
      const takeover = await post('/prompt', bob, { prompt: tiny(`takeover-${aiohttp}`), prompt_id: a1 })
      assert.equal(takeover.status, 409, takeover.text)
      assert.equal(takeover.body.code, 'PROMPT_ID_TAKEN')
    })
  })
}
