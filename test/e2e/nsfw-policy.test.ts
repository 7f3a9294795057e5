/**
 * The content-safety policy inside the REAL ComfyUI 0.3.64 (issue 23, SPEC §11), with the
 * deterministic test classifier (nsfw/engines.ts): which images are "NSFW" is fixed by the test
 * (a marker in a PNG text chunk, or the `authsvc:nsfw` metadata tag). alice has sfw_check (every
 * new user has it); bob has not; root is the admin.
 *
 * Rows: tagged (metadata, manual), detected, unclassifiable (a corrupt file, a classification that
 * misses the deadline) and clean images on /view and /api/view, for alice and for bob; preview
 * frames of running prompts on the socket (a custom node sends them as ComfyUI sends its own,
 * fixtures/nsfw-images); mark-nsfw by the owner, by the admin, by another user; the background
 * classification of a new output; nsfw_block events in the audit log.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { resolve } from 'node:path'
import { HOST_AIOHTTP, poll } from '../helpers/stack.js'
import { REAL_HOST_SKIP, destroyRealHost, startRealHost, type RealHost } from '../helpers/real-host.js'
import { WsClient, bearer, promptEnding, registerUsers, wsUrl } from '../helpers/client.js'
import { cleanPng, corruptPng, nsfwPng, slowPng, testPng } from '../helpers/nsfw-images.js'

const FIXTURE = resolve(import.meta.dirname, 'fixtures', 'nsfw-images')
const RUN_MS = 60_000
const VIEW_DEADLINE_MS = 1000
const BLOCKED_TEXT = 'NSFW content blocked for this user.'

const inputs: Record<string, Buffer> = {
  'clean.png': cleanPng(1),
  'detected.png': nsfwPng(2),
  'meta-nsfw.png': testPng(3, { text: { 'authsvc:nsfw': 'true' } }),
  // the image's own word wins over the detector
  'meta-safe.png': testPng(4, { text: { 'authsvc:nsfw': 'false', Comment: 'AUTHSVC-TEST:nsfw' } }),
  'corrupt.png': corruptPng(),
  'slow.png': slowPng(5),
  'to-mark.png': cleanPng(6),
  'to-unmark.png': nsfwPng(7),
  // an audio output (no browser shows it as a picture), and a detected picture named as audio
  'song.flac': Buffer.concat([Buffer.from('fLaC', 'latin1'), Buffer.alloc(4000, 7)]),
  'trick.flac': nsfwPng(8),
}

for (const aiohttp of [HOST_AIOHTTP]) {
  describe(`NSFW policy on the real ComfyUI (aiohttp ${aiohttp})`, { skip: REAL_HOST_SKIP }, () => {
    let host: RealHost
    let admin: string
    let alice: string
    let bob: string

    const view = async (token: string, filename: string, type = 'input', twin = '', subfolder = '') => {
      const res = await fetch(`${host.url}${twin}/view?filename=${encodeURIComponent(filename)}&type=${type}&subfolder=${encodeURIComponent(subfolder)}`, { headers: bearer(token) })
      return { status: res.status, type: res.headers.get('content-type') ?? '', body: Buffer.from(await res.arrayBuffer()) }
    }
    const post = async (path: string, token: string | null, body: unknown) => {
      const res = await fetch(`${host.url}${path}`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', ...(token ? bearer(token) : {}) },
        body: JSON.stringify(body),
      })
      return { status: res.status, body: await res.json() as any }
    }
    const mark = (token: string | null, filename: string, is_nsfw: boolean, type = 'input', subfolder = '') => post('/authsvc-gallery/mark-nsfw', token, { filename, subfolder, type, is_nsfw })
    const tags = async () => (await post('/authsvc/api/nsfw-management', admin, { action: 'list_tags' })).body.tags as Array<Record<string, any>>
    const run = async (token: string, prompt: Record<string, unknown>, clientId: string): Promise<string> => {
      const res = await post('/prompt', token, { prompt, client_id: clientId })
      assert.equal(res.status, 200, JSON.stringify(res.body))
      return res.body.prompt_id
    }
    const marked = (output: 'nsfw' | 'clean', preview: 'nsfw' | 'clean', seed: number, prefix: string) => ({
      '1': { class_type: 'AuthsvcTestMarkedImage', inputs: { output, preview, seed, prefix } },
    })
    /** the binary frames a socket receives, as they come */
    const binaryFrames = (ws: WsClient): Buffer[] => {
      const frames: Buffer[] = []
      ws.ws.on('message', (data, isBinary) => {
        if (isBinary) frames.push(Buffer.from(data as Buffer))
      })
      return frames
    }
    const hasMarker = (frame: Buffer) => frame.includes(Buffer.from('AUTHSVC-TEST:nsfw', 'latin1'))

    before(async () => {
      host = await startRealHost({
        aiohttp,
        customNodes: [FIXTURE],
        env: { AUTHSVC_NSFW_TEST_CLASSIFIER: '1' },
        config: { nsfw: { enabled: true, classifier: 'test', view_deadline_ms: VIEW_DEADLINE_MS, preview_deadline_ms: 2000 } },
        files: Object.fromEntries(Object.entries(inputs).map(([name, bytes]) => [`input/${name}`, bytes])),
      })
      const jwt = await registerUsers(host, 'alice', 'bob')
      admin = jwt.root
      alice = jwt.alice
      bob = jwt.bob
      const res = await fetch(`${host.url}/authsvc/api/users/bob`, { method: 'PUT', headers: { 'Content-Type': 'application/json', ...bearer(admin) }, body: JSON.stringify({ sfw_check: false }) })
      assert.equal(res.status, 200, await res.text())
    })
    after(async () => {
      if (host) await destroyRealHost(host)
    })

    it('a clean image: served to alice (sfw_check) and bob alike', async () => {
      for (const token of [alice, bob]) {
        const got = await view(token, 'clean.png')
        assert.equal(got.status, 200)
        assert.deepEqual(got.body, inputs['clean.png'])
      }
    })

    it('a file no browser shows as a picture is served to alice, told by its first bytes (which the host reads): a picture named as audio is still judged', async () => {
      const song = await view(alice, 'song.flac')
      assert.equal(song.status, 200)
      assert.deepEqual(song.body, inputs['song.flac'])
      assert.equal((await view(alice, 'trick.flac')).status, 403)
      assert.equal((await view(bob, 'trick.flac')).status, 200)
    })

    it('a detected image: 403 text/plain "NSFW content blocked" for alice on /view and /api/view; bob gets the image', async () => {
      for (const twin of ['', '/api']) {
        const got = await view(alice, 'detected.png', 'input', twin)
        assert.equal(got.status, 403)
        assert.match(got.type, /^text\/plain/)
        assert.equal(got.body.toString(), BLOCKED_TEXT)
        const bobs = await view(bob, 'detected.png', 'input', twin)
        assert.equal(bobs.status, 200)
        assert.deepEqual(bobs.body, inputs['detected.png'])
      }
      const tag = (await tags()).find((t) => t.filename === 'detected.png')
      assert.equal(tag?.source, 'detector')
      assert.equal(tag?.is_nsfw, true)
      assert.ok(tag?.scores.Porn > 0.9)
    })

    it('a tag in the image\'s metadata is read: authsvc:nsfw true blocks alice; a "false" never clears (the detector decides)', async () => {
      assert.equal((await view(alice, 'meta-nsfw.png')).status, 403)
      assert.equal((await view(bob, 'meta-nsfw.png')).status, 200)
      // whoever runs a prompt writes its PNG chunks (extra_pnginfo): a "safe" tag must not switch the detector off
      const claimedSafe = await view(alice, 'meta-safe.png')
      assert.equal(claimedSafe.status, 403)
      const listed = await tags()
      assert.deepEqual(listed.filter((t) => t.filename.startsWith('meta-')).map((t) => [t.filename, t.source, t.is_nsfw]), [['meta-nsfw.png', 'metadata', true], ['meta-safe.png', 'detector', true]])
    })

    it('unclassifiable, fail safe: a corrupt file and one that misses the deadline are blocked for alice, served to bob without waiting', async () => {
      assert.equal((await view(alice, 'corrupt.png')).status, 403)
      const corrupt = await view(bob, 'corrupt.png')
      assert.equal(corrupt.status, 200)
      assert.deepEqual(corrupt.body, inputs['corrupt.png'])
      const started = Date.now()
      const slow = await view(alice, 'slow.png')
      const took = Date.now() - started
      assert.equal(slow.status, 403)
      assert.ok(took >= VIEW_DEADLINE_MS - 50 && took < VIEW_DEADLINE_MS + 3000, `blocked after the deadline (${took} ms)`)
      const bobStarted = Date.now()
      assert.equal((await view(bob, 'slow.png')).status, 200)
      assert.ok(Date.now() - bobStarted < VIEW_DEADLINE_MS, 'bob does not wait for the classifier')
      // nothing is tagged from a failure: the next view tries again
      assert.equal((await tags()).some((t) => t.filename === 'corrupt.png' || t.filename === 'slow.png'), false)
    })

    it('mark-nsfw by the admin: a manual tag wins over the detector both ways', async () => {
      assert.equal((await view(alice, 'to-mark.png')).status, 200)
      assert.deepEqual((await mark(admin, 'to-mark.png', true)).body, { status: 'ok', filename: 'to-mark.png', is_nsfw: true })
      assert.equal((await view(alice, 'to-mark.png')).status, 403)
      assert.equal((await view(bob, 'to-mark.png')).status, 200)
      assert.equal((await view(alice, 'to-unmark.png')).status, 403)
      assert.equal((await mark(admin, 'to-unmark.png', false)).status, 200)
      assert.equal((await view(alice, 'to-unmark.png')).status, 200)
      const manual = (await tags()).filter((t) => t.source === 'manual').map((t) => [t.filename, t.is_nsfw, t.marked_by])
      assert.deepEqual(manual, [['to-mark.png', true, 'root'], ['to-unmark.png', false, 'root']])
    })

    it('alice\'s new output is classified as it appears; she may mark her own image, bob may not (404: not his to read), and a shared input is refused to him (403)', async () => {
      const cid = randomUUID()
      const ws = await WsClient.open(wsUrl(host, cid), bearer(alice))
      try {
        const id = await run(alice, marked('clean', 'clean', 11, 'alice-own'), cid)
        const ending = await promptEnding(ws, id, RUN_MS)
        assert.equal(ending, "execution_success", JSON.stringify(ws.messages.filter((m) => m.type === "execution_error")))
      } finally {
        ws.close()
      }
      const name = 'alice-own_11.png'
      assert.ok(await poll(async () => (await tags()).some((t) => t.filename === name && t.source === 'detector'), 10_000), 'the new output was tagged in the background')
      // her own folder (the gate put the node's prefix there)
      const sub = (await tags()).find((t) => t.filename === name)!.subfolder as string
      assert.match(sub, /^u_[0-9a-f-]{36}$/)
      assert.equal((await view(alice, name, 'output', '', sub)).status, 200)
      assert.equal((await mark(bob, name, true, 'output', sub)).status, 404)
      assert.equal((await mark(bob, 'clean.png', true)).status, 403)
      assert.equal((await mark(null, name, true, 'output', sub)).status, 401)
      assert.equal((await mark(alice, name, true, 'output', sub)).status, 200)
      assert.equal((await view(alice, name, 'output', '', sub)).status, 403)
      // her unmark removes only her manual tag: the detector decides again (clean here)
      assert.equal((await mark(alice, name, false, 'output', sub)).status, 200)
      assert.equal((await view(alice, name, 'output', '', sub)).status, 200)
      // an owner's "safe" cannot clear the way to an image the detector blocks
      const cid2 = randomUUID()
      const ws2 = await WsClient.open(wsUrl(host, cid2), bearer(alice))
      try {
        const id = await run(alice, marked('nsfw', 'clean', 12, 'alice-own'), cid2)
        assert.equal(await promptEnding(ws2, id, RUN_MS), 'execution_success')
      } finally {
        ws2.close()
      }
      assert.equal((await mark(alice, 'alice-own_12.png', false, 'output', sub)).status, 200)
      assert.equal((await view(alice, 'alice-own_12.png', 'output', '', sub)).status, 403)
    })

    it('previews: alice\'s NSFW preview frame is withheld (her clean one after it arrives); bob gets both of his', async () => {
      const aliceCid = randomUUID()
      const bobCid = randomUUID()
      const aliceWs = await WsClient.open(wsUrl(host, aliceCid), bearer(alice))
      const bobWs = await WsClient.open(wsUrl(host, bobCid), bearer(bob))
      const aliceFrames = binaryFrames(aliceWs)
      const bobFrames = binaryFrames(bobWs)
      try {
        const a = await run(alice, marked('clean', 'nsfw', 21, 'prev-a'), aliceCid)
        assert.equal(await promptEnding(aliceWs, a, RUN_MS), 'execution_success')
        const b = await run(bob, marked('clean', 'nsfw', 23, 'prev-b'), bobCid)
        assert.equal(await promptEnding(bobWs, b, RUN_MS), 'execution_success')
        // alice's sentinel (the clean frame sent after the NSFW one) arrives once checked
        assert.ok(await poll(async () => aliceFrames.length >= 1, 10_000), 'alice\'s clean preview arrived')
        assert.ok(await poll(async () => bobFrames.length >= 2, 10_000), 'bob\'s previews arrived')
        assert.deepEqual(aliceFrames.map(hasMarker), [false], 'alice got only the clean frame')
        assert.deepEqual(bobFrames.map(hasMarker), [true, false], 'bob got both, in order, unchanged')
        // a clean preview reaches alice too
        const c = await run(alice, marked('clean', 'clean', 25, 'prev-c'), aliceCid)
        assert.equal(await promptEnding(aliceWs, c, RUN_MS), 'execution_success')
        assert.ok(await poll(async () => aliceFrames.length >= 3, 10_000), 'both clean previews arrived')
        assert.deepEqual(aliceFrames.map(hasMarker), [false, false, false])
      } finally {
        aliceWs.close()
        bobWs.close()
      }
    })

    it('blocks are nsfw_block events in the audit log, one per user and image however often it is asked for', async () => {
      for (let i = 0; i < 3; i++) assert.equal((await view(alice, 'detected.png')).status, 403)
      const res = await fetch(`${host.url}/authsvc/api/audit?kind=nsfw_block&limit=100`, { headers: bearer(admin) })
      assert.equal(res.status, 200)
      const events = (await res.json() as { events: Array<Record<string, unknown>> }).events
      const detected = events.filter((e) => JSON.stringify(e).includes('detected.png'))
      assert.equal(detected.length, 1, JSON.stringify(events))
      assert.equal(detected[0].subject, 'alice')
      assert.equal(events.some((e) => e.subject === 'bob'), false)
    })
  })
}
