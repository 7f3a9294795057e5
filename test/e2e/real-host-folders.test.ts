/**
 * Issue 21 on the REAL ComfyUI 0.3.64, aiohttp 3.8 and 3.11: per-user folders and decisions on
 * the path the host resolves. Two ordinary users (alice, bob) and an admin; every example of the
 * issue is a row bob is refused (exact status and code) while alice's file stays byte for byte
 * what it was, next to the rows where alice still does everything with her own files: upload,
 * overwrite, mask, view, prompt with her file, the output in her history. Existence rows compare
 * bob's answer for a name alice has with his answer for a name nobody has.
 *
 * The frontend's own flow is the API flow it makes (upload → the answer's subfolder/name into
 * LoadImage → queue → the output named by the history → /view); the real frontend package is
 * not installable here.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { existsSync, readFileSync, readdirSync, writeFileSync, mkdirSync, symlinkSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { PNG_SIGNATURE, png } from '../helpers/png.js'
import { HOST_AIOHTTP } from '../helpers/stack.js'
import { REAL_HOST_SKIP, destroyRealHost, startRealHost, type RealHost } from '../helpers/real-host.js'
import { WsClient, bearer, promptFinished, registerUsers, wsUrl } from '../helpers/client.js'
import { assertRefused, hostRequests, queueIds } from '../helpers/host-requests.js'

const RUN_MS = 60_000


type FileRef = { filename: string; subfolder: string; type: string }

for (const aiohttp of [HOST_AIOHTTP]) {
  describe(`per-user folders inside the real ComfyUI, aiohttp ${aiohttp}`, { skip: REAL_HOST_SKIP, concurrency: false }, () => {
    let host: RealHost
    let admin: string
    let alice: string
    let bob: string
    let A: string // alice's folder
    let B: string // bob's folder
    const aliceCid = randomUUID()
    const bobCid = randomUUID()
    let aliceWs: WsClient
    let bobWs: WsClient
    let upload0: { name: string; subfolder: string; type: string }
    let output0: FileRef
    let preview0: FileRef
    let graph0: Record<string, unknown>
    const alicePng = png(11)

    const { get, post, upload, queuePrompt } = hostRequests(() => host.url)
    const view = (token: string, query: string, path = '/view') => get(`${path}?${query}`, token)
    const queue = (token: string, prompt: Record<string, unknown>, clientId: string) => queuePrompt(token, { prompt, client_id: clientId })
    const outputsOf = async (token: string, promptId: string): Promise<Record<string, { images?: FileRef[] }>> => {
      const res = await get(`/history/${promptId}`, token)
      assert.equal(res.status, 200, res.text)
      return res.body[promptId].outputs
    }
    const onDisk = (type: string, subfolder: string, name: string) => join(type === 'input' ? host.inputDir : type === 'output' ? host.outputDir : host.tempDir, subfolder, name)
    const imageGraph = (image: unknown, prefix = 'uses') => ({
      '1': { class_type: 'LoadImage', inputs: { image } },
      '2': { class_type: 'SaveImage', inputs: { images: ['1', 0], filename_prefix: prefix } },
    })

    before(async () => {
      host = await startRealHost({ aiohttp, files: { 'input/shared-in.png': png(200) }, customNodes: [resolve(import.meta.dirname, 'fixtures', 'file-reader')] })
      const jwt = await registerUsers(host, 'alice', 'bob')
      admin = jwt.root
      alice = jwt.alice
      bob = jwt.bob
      A = `u_${(await get('/authsvc/api/me', alice)).body.user_id}`
      B = `u_${(await get('/authsvc/api/me', bob)).body.user_id}`
      aliceWs = await WsClient.open(wsUrl(host, aliceCid), bearer(alice))
      bobWs = await WsClient.open(wsUrl(host, bobCid), bearer(bob))
    })
    after(async () => {
      for (const ws of [aliceWs, bobWs]) ws?.close()
      if (host) await destroyRealHost(host)
    })

    it('the frontend\'s flow for alice: upload into her folder, LoadImage it, queue, the output and preview in her folder and history, open them', async () => {
      const up = await upload(alice, 'photo.png', alicePng, { subfolder: 'pets' })
      assert.equal(up.status, 200, up.text)
      assert.deepEqual(up.body, { name: 'photo.png', subfolder: `${A}/pets`, type: 'input' }, 'the host\'s own answer names her folder')
      upload0 = up.body
      assert.deepEqual(readFileSync(onDisk('input', upload0.subfolder, 'photo.png')), alicePng)
      assert.ok((await get('/object_info/LoadImage', alice)).body.LoadImage.input.required.image[0].includes(`${A}/pets/photo.png`))
      graph0 = { ...imageGraph(`${upload0.subfolder}/${upload0.name}`, 'ComfyUI'), '3': { class_type: 'PreviewImage', inputs: { images: ['1', 0] } } }
      const id = await queue(alice, graph0, aliceCid)
      assert.equal(await promptFinished(aliceWs, id, RUN_MS), 'execution_success')
      const outputs = await outputsOf(alice, id)
      output0 = outputs['2'].images![0]
      preview0 = outputs['3'].images![0]
      assert.equal(output0.subfolder, A, 'SaveImage wrote into her output folder')
      assert.ok(existsSync(onDisk('output', A, output0.filename)))
      for (const f of [output0, preview0]) {
        const res = await view(alice, new URLSearchParams(f).toString())
        assert.equal(res.status, 200, res.text.slice(0, 200))
        assert.deepEqual(res.bytes.subarray(0, 8), PNG_SIGNATURE)
      }
    })

    it('bob: every spelling of her output, preview and upload on /view and /api/view answers 404 NOT_FOUND, as a name nobody has does', async () => {
      const nobody = await view(bob, `filename=nobody-has-this.png&type=output&subfolder=${A}`)
      assertRefused(nobody, 404, 'NOT_FOUND', 'a name nobody has')
      const queries = [
        `filename=${output0.filename}&type=output&subfolder=${A}`, `filename=${output0.filename}&type=output&subfolder=../output/${A}`,
        `filename=${output0.filename}&type=output&subfolder=x/../${A}`, `filename=${output0.filename}%20[output]&subfolder=${A}`,
        `filename=${output0.filename}&type=output&subfolder=%2E%2E%2Foutput%2F${A}`, `filename=${output0.filename}&type=output&subfolder=./${A}//`,
        `filename=${preview0.filename}&type=temp&subfolder=${preview0.subfolder}`, `filename=${preview0.filename}%20[temp]`,
        `filename=photo.png&type=input&subfolder=${A}/pets`, `filename=photo.png&type=input&subfolder=../input/${A}/pets`, `filename=photo.png%20[input]&subfolder=${A}/pets`,
      ]
      for (const path of ['/view', '/api/view']) {
        for (const q of queries) {
          const res = await view(bob, q, path)
          assert.equal(res.status, nobody.status, `${path}?${q}: ${res.text.slice(0, 200)}`)
          assert.equal(res.text, nobody.text, `${path}?${q}`)
        }
      }
      // the issue's example: subfolder=../output once named the folder's root, where outputs were
      assertRefused(await view(bob, `filename=${output0.filename}&type=output&subfolder=../output`), 404, 'NOT_FOUND', '../output')
      // a symlink an operator made inside a folder is followed to where it leads
      symlinkSync(join(host.outputDir, A), join(host.outputDir, 'gallery-link'))
      assert.equal((await view(bob, `filename=${output0.filename}&type=output&subfolder=gallery-link`)).text, nobody.text, 'through a symlink')
      assert.equal((await view(alice, `filename=${output0.filename}&type=output&subfolder=gallery-link`)).status, 200, 'hers through the symlink')
      // look-alikes name other folders: nothing there
      for (const look of [A.replace('u_', 'U_'), A.replace('u_', 'ｕ_'), A.toUpperCase(), `${A}\u200b`, A.normalize('NFKD').replace('_', '＿')]) {
        assert.equal((await view(bob, `filename=${output0.filename}&type=output&subfolder=${encodeURIComponent(look)}`)).text, nobody.text, look)
      }
      // what the host cannot read at all is the gate's 400, never the host's 500
      assertRefused(await view(bob, `filename=${output0.filename}%00&type=output&subfolder=${A}`), 400, 'VALIDATION_FAILED', 'NUL')
      assertRefused(await view(bob, `filename=${output0.filename}&type=output&subfolder=../../../etc`), 403, 'PERMISSION_DENIED', 'out of the folder')
    })

    it('bob\'s uploads: ../ and absolute subfolders or names are refused (400 VALIDATION_FAILED); everything else lands in his folder; her bytes never change', async () => {
      const herFile = onDisk('input', upload0.subfolder, 'photo.png')
      const bobPng = png(99)
      for (const [fields, name] of [
        [{ subfolder: '../input', overwrite: 'true' }, 'photo.png'], [{ subfolder: `x/../../input/${A}/pets`, overwrite: 'true' }, 'photo.png'],
        [{ subfolder: `/${host.inputDir}/${A}/pets`, overwrite: 'true' }, 'photo.png'], [{ overwrite: 'true' }, `../${A}/pets/photo.png`],
        [{ subfolder: '..', overwrite: 'true' }, 'shared-in.png'], [{ type: 'nope' }, 'x.png'],
      ] as Array<[Record<string, string>, string]>) {
        assertRefused(await upload(bob, name, bobPng, fields), 400, 'VALIDATION_FAILED', `${JSON.stringify(fields)} ${name}`)
      }
      const over = await upload(bob, 'photo.png', bobPng, { subfolder: `${A}/pets`, overwrite: 'true' })
      assert.equal(over.status, 200, over.text)
      assert.deepEqual(over.body, { name: 'photo.png', subfolder: `${B}/${A}/pets`, type: 'input' })
      const slash = await upload(bob, `face\\${output0.filename}`, bobPng)
      assert.equal(slash.status, 200, slash.text)
      assert.equal(slash.body.subfolder, B, 'a backslash is a character of the name: still his folder')
      const same = await upload(bob, 'photo.png', alicePng, { subfolder: 'pets' })
      assert.deepEqual(same.body, { name: 'photo.png', subfolder: `${B}/pets`, type: 'input' }, 'her very bytes under her name: a file of his own, not a share of hers')
      assertRefused(await view(bob, `filename=photo.png&type=input&subfolder=${A}/pets`), 404, 'NOT_FOUND', 'no co-ownership by equal bytes')
      assert.deepEqual(readFileSync(herFile), alicePng, 'her upload is byte for byte hers')
      assert.ok(existsSync(onDisk('input', '', 'shared-in.png')))
    })

    it('existence: an upload with her name answers as one with a free name (overwrite or not: no 403, no renaming)', async () => {
      for (const fields of [{ overwrite: 'true' }, {}] as Array<Record<string, string>>) {
        const hers = await upload(bob, 'photo.png', png(5), { subfolder: `${A}/pets/again`, ...fields })
        const free = await upload(bob, 'free-name.png', png(5), { subfolder: `${A}/pets/again`, ...fields })
        assert.equal(hers.status, 200)
        assert.equal(free.status, 200)
        assert.deepEqual({ ...hers.body, name: 'x' }, { ...free.body, name: 'x' })
        assert.equal(hers.body.name, 'photo.png', 'not renamed: her file is not in his folder')
      }
    })

    it('a mask\'s original_ref of hers, in any spelling, and one that does not exist: 403 NOT_OWNER; her image unchanged; alice masks her own', async () => {
      const refs = [
        { filename: output0.filename, subfolder: A, type: 'output' }, { filename: output0.filename, subfolder: `../output/${A}`, type: 'output' },
        { filename: `${A}/${output0.filename}`, type: 'output' }, { filename: 'photo.png', subfolder: `${A}/pets`, type: 'input' },
        { filename: `${output0.filename} [output]`, subfolder: A }, { filename: 'nobody-has-this.png', type: 'output' },
      ]
      const before = readFileSync(onDisk('output', A, output0.filename))
      for (const ref of refs) {
        assertRefused(await upload(bob, 'mask.png', png(1), { original_ref: JSON.stringify(ref) }, '/upload/mask'), 403, 'NOT_OWNER', JSON.stringify(ref))
      }
      // a part without a file name and of another content type: aiohttp gives the handler bytes, which
      // ComfyUI's json.loads takes; a text part of the same name after it is not the one the host reads
      const hers = JSON.stringify({ filename: output0.filename, subfolder: A, type: 'output' })
      const rawMask = async (parts: Array<{ name: string; value: string | Buffer; type?: string; filename?: string }>) => {
        const boundary = `authsvc-${randomUUID()}`
        const chunks: Buffer[] = []
        for (const p of parts) {
          chunks.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${p.name}"${p.filename ? `; filename="${p.filename}"` : ''}\r\n${p.type ? `Content-Type: ${p.type}\r\n` : ''}\r\n`))
          chunks.push(Buffer.from(p.value))
          chunks.push(Buffer.from('\r\n'))
        }
        chunks.push(Buffer.from(`--${boundary}--\r\n`))
        const res = await fetch(`${host.url}/upload/mask`, { method: 'POST', headers: { 'Content-Type': `multipart/form-data; boundary=${boundary}`, Accept: 'application/json', ...bearer(bob) }, body: Buffer.concat(chunks) })
        const text = await res.text()
        return { status: res.status, text, body: JSON.parse(text) }
      }
      const image = { name: 'image', value: png(3), type: 'image/png', filename: 'raw-mask.png' }
      assertRefused(await rawMask([image, { name: 'original_ref', value: hers, type: 'application/json' }]), 403, 'NOT_OWNER', 'original_ref as a JSON part')
      assertRefused(await rawMask([image, { name: 'original_ref', value: hers, type: 'application/octet-stream' }, { name: 'original_ref', value: JSON.stringify({ filename: 'shared-in.png', type: 'input' }) }]), 403, 'NOT_OWNER', 'a bytes part first, a harmless text part after')
      assert.ok(!existsSync(onDisk('input', B, 'raw-mask.png')), 'nothing was written for him')
      assert.deepEqual(readFileSync(onDisk('output', A, output0.filename)), before)
      const own = await upload(alice, 'mask.png', png(1), { original_ref: JSON.stringify({ filename: output0.filename, subfolder: A, type: 'output' }), subfolder: 'clipspace' }, '/upload/mask')
      assert.equal(own.status, 200, own.text)
      assert.equal(own.body.subfolder, `${A}/clipspace`)
      assert.ok(existsSync(onDisk('input', `${A}/clipspace`, 'mask.png')))
    })

    it('a prompt of bob\'s reads none of her files: names, wrappers, long and odd names, folder loaders, absolute paths (403 NOT_OWNER, nothing queued)', async () => {
      mkdirSync(onDisk('input', A, ''), { recursive: true })
      writeFileSync(onDisk('input', A, 'odd\nname.png'), alicePng)
      const before = (await get('/queue', admin)).body
      const tries: Array<[string, Record<string, unknown>]> = [
        ['her upload', imageGraph(`${A}/pets/photo.png`)],
        ['her output, annotated', imageGraph(`${A}/${output0.filename} [output]`)],
        ['her preview, annotated', imageGraph(`${preview0.subfolder ? `${preview0.subfolder}/` : ''}${preview0.filename} [temp]`)],
        ['../output', imageGraph(`../output/${A}/${output0.filename}`)],
        ['__value__', imageGraph({ __value__: `${A}/pets/photo.png` })],
        ['__value__ twice', imageGraph({ __value__: { __value__: `${A}/pets/photo.png` } })],
        ['over 1,024 characters', imageGraph(`${'./'.repeat(600)}${A}/pets/photo.png`)],
        ['a newline in the name', imageGraph(`${A}/odd\nname.png`)],
        ['absolute', imageGraph(onDisk('input', `${A}/pets`, 'photo.png'))],
        ['her folder, LoadImageSetFromFolderNode', { '1': { class_type: 'LoadImageSetFromFolderNode', inputs: { folder: `${A}/pets`, resize_method: 'None' } }, '2': { class_type: 'PreviewImage', inputs: { images: ['1', 0] } } }],
        ['her whole folder', { '1': { class_type: 'LoadImageSetFromFolderNode', inputs: { folder: A, resize_method: 'None' } }, '2': { class_type: 'PreviewImage', inputs: { images: ['1', 0] } } }],
      ]
      const reader = (path: string) => ({ '1': { class_type: 'AuthsvcTestReadFile', inputs: { path } } })
      tries.push(['another package\'s node that opens paths its own way', reader(`${A}/${output0.filename}`)], ['the same through ../', reader(`../output/${A}/${output0.filename}`)])
      for (const [what, prompt] of tries) assertRefused(await post('/prompt', bob, { prompt, client_id: bobCid }), 403, 'NOT_OWNER', what)
      // existence: a name in her folder that nothing answers gets the very answer one of her files gets
      const hers = await post('/prompt', bob, { prompt: imageGraph(`${A}/pets/photo.png`), client_id: bobCid })
      for (const missing of [imageGraph(`${A}/pets/never.png`), imageGraph(`${A}/never_00001_.png [output]`), reader(`${A}/never.png`), reader(`../output/${A}/never.png`)]) {
        const res = await post('/prompt', bob, { prompt: missing, client_id: bobCid })
        assert.deepEqual([res.status, res.text], [hers.status, hers.text], JSON.stringify(missing))
      }
      // that node really reads what it is given: alice reads her own output with it
      const own = await queue(alice, reader(`${A}/${output0.filename}`), aliceCid)
      assert.equal(await promptFinished(aliceWs, own, RUN_MS), 'execution_success')
      assert.deepEqual((await outputsOf(alice, own))['1'], { size: [readFileSync(onDisk('output', A, output0.filename)).length] })
      // the host's own validation error lists a combo's options: every subfolder of input/, hers too
      const listed = await post('/prompt', bob, { prompt: { '1': { class_type: 'LoadImageSetFromFolderNode', inputs: { folder: 'no-such-folder', resize_method: 'None' } }, '2': { class_type: 'PreviewImage', inputs: { images: ['1', 0] } } }, client_id: bobCid })
      assert.equal(listed.status, 400, listed.text.slice(0, 300))
      assert.ok(!listed.text.includes(A.slice(2)), `her folder is named nowhere in his error: ${listed.text}`)
      const after = (await get('/queue', admin)).body
      assert.equal(after.queue_pending.length + after.queue_running.length, before.queue_pending.length + before.queue_running.length, 'nothing was queued')
    })

    it('a name computed while the prompt runs (a text node linked into another package\'s node) reaches none of her files: the node fails, her folder is unchanged; alice and the admin use the same graph on her file', async () => {
      // "u_" and "<id>/<file>" name nothing of hers on their own: only the run joins them
      const computed = (folder: string, name: string) => ({ class_type: 'StringConcatenate', inputs: { string_a: folder.slice(0, 2), string_b: `${folder.slice(2)}/${name}`, delimiter: '' } })
      const readGraph = (folder: string) => ({ '1': computed(folder, output0.filename), '2': { class_type: 'AuthsvcTestReadFile', inputs: { path: ['1', 0] } } })
      const writeGraph = (folder: string) => ({ '1': computed(folder, 'planted.txt'), '2': { class_type: 'AuthsvcTestWriteFile', inputs: { path: ['1', 0], text: 'bob was here' } } })
      const hers = readFileSync(onDisk('output', A, output0.filename))
      const herFiles = readdirSync(onDisk('output', A, '')).sort()
      for (const [what, prompt] of [['read', readGraph(A)], ['write', writeGraph(A)]] as const) {
        const id = await queue(bob, prompt, bobCid)
        assert.equal(await promptFinished(bobWs, id, RUN_MS), 'execution_error', what)
        const error = bobWs.messages.find((m) => m.type === 'execution_error' && m.data.prompt_id === id)!
        assert.equal(error.data.node_id, '2', what)
        assert.match(String(error.data.exception_message), /authsvc: this prompt may not use another user's files/, what)
      }
      assert.deepEqual(readFileSync(onDisk('output', A, output0.filename)), hers)
      assert.deepEqual(readdirSync(onDisk('output', A, '')).sort(), herFiles, 'nothing was planted in her folder')
      const own = await queue(alice, readGraph(A), aliceCid)
      assert.equal(await promptFinished(aliceWs, own, RUN_MS), 'execution_success')
      assert.deepEqual((await outputsOf(alice, own))['2'], { size: [hers.length] })
      const adminCid = randomUUID()
      const adminWs = await WsClient.open(wsUrl(host, adminCid), bearer(admin))
      try {
        const theirs = await queue(admin, readGraph(A), adminCid)
        assert.equal(await promptFinished(adminWs, theirs, RUN_MS), 'execution_success', 'the admin sees everything')
      } finally {
        adminWs.close()
      }
      // bob's own folder, the same way: his own run is not refused
      mkdirSync(onDisk('output', B, ''), { recursive: true })
      writeFileSync(onDisk('output', B, output0.filename), hers)
      const his = await queue(bob, readGraph(B), bobCid)
      assert.equal(await promptFinished(bobWs, his, RUN_MS), 'execution_success')
    })

    it('authsvc\'s own files (the store, the signing secret) are no prompt\'s to read, and the custom nodes folder no prompt\'s to change, through another package\'s node: the node fails; an admin\'s prompt is not judged', async () => {
      const store = join(host.dataDir, 'authsvc.sqlite')
      assert.ok(existsSync(store), 'the store is where the gate keeps it')
      const planted = join(host.baseDir, 'custom_nodes', 'authsvc_planted.py')
      // a literal path outside the host's folders is refused when the prompt is queued (NOT_OWNER); one
      // computed while the prompt runs (here "|" turned into "/") is judged when it is touched
      assertRefused(await post('/prompt', bob, { prompt: { '1': { class_type: 'AuthsvcTestReadFile', inputs: { path: store } } }, client_id: bobCid }), 403, 'NOT_OWNER', 'a literal path')
      const computed = (path: string) => ({ class_type: 'StringReplace', inputs: { string: path.replaceAll('/', '|'), find: '|', replace: '/' } })
      const rows: Array<[string, Record<string, unknown>, RegExp]> = [
        ['read the store', { '1': computed(store), '2': { class_type: 'AuthsvcTestReadFile', inputs: { path: ['1', 0] } } }, /authsvc: this prompt may not use authsvc's own files/],
        ['plant a custom node', { '1': computed(planted), '2': { class_type: 'AuthsvcTestWriteFile', inputs: { path: ['1', 0], text: 'import os' } } }, /authsvc: this prompt may not change the host's custom nodes/],
      ]
      for (const [what, prompt, message] of rows) {
        const id = await queue(bob, prompt, bobCid)
        assert.equal(await promptFinished(bobWs, id, RUN_MS), 'execution_error', what)
        const error = bobWs.messages.find((m) => m.type === 'execution_error' && m.data.prompt_id === id)!
        assert.match(String(error.data.exception_message), message, what)
      }
      assert.ok(!existsSync(planted), 'nothing was planted')
      const adminCid = randomUUID()
      const adminWs = await WsClient.open(wsUrl(host, adminCid), bearer(admin))
      try {
        const theirs = await queue(admin, { '1': computed(store), '2': { class_type: 'AuthsvcTestReadFile', inputs: { path: ['1', 0] } } }, adminCid)
        assert.equal(await promptFinished(adminWs, theirs, RUN_MS), 'execution_success', 'an administrator\'s prompt is not judged')
      } finally {
        adminWs.close()
      }
    })

    it('bob\'s prompt writes into his own folder; ../ and absolute prefixes are refused (400 VALIDATION_FAILED)', async () => {
      for (const prefix of ['../ComfyUI', `x/../../output/${A}/ComfyUI`, '/tmp/evil', `${B}/../${A}/x`]) {
        assertRefused(await post('/prompt', bob, { prompt: imageGraph('shared-in.png', prefix), client_id: bobCid }), 400, 'VALIDATION_FAILED', prefix)
      }
      // ComfyUI's own SaveLoRANode names its file by `prefix` (learnt from the host: an output node's *prefix text input)
      for (const prefix of [`../${A}/x`, '../../models/loras/x']) {
        assertRefused(await post('/prompt', bob, { prompt: { '7': { class_type: 'SaveLoRANode', inputs: { lora: ['6', 0], prefix, steps: 1 } } }, client_id: bobCid }), 400, 'VALIDATION_FAILED', `SaveLoRANode ${prefix}`)
      }
      const id = await queue(bob, imageGraph('shared-in.png', `${A}/ComfyUI`), bobCid)
      assert.equal(await promptFinished(bobWs, id, RUN_MS), 'execution_success')
      const out = (await outputsOf(bob, id))['2'].images![0]
      assert.equal(out.subfolder, `${B}/${A}`, 'her folder\'s name is only a name inside his')
      assert.ok(existsSync(onDisk('output', out.subfolder, out.filename)))
      assert.ok(!readdirSync(onDisk('output', A, '')).some((n) => n !== output0.filename), 'nothing new in her folder')
    })

    it('a cache replay: bob queues exactly the graph alice just ran; nothing of hers answers it, his history names only his files', async () => {
      const graph = {
        '1': { class_type: 'EmptyImage', inputs: { width: 8, height: 8, batch_size: 1, color: 4242 } },
        '2': { class_type: 'SaveImage', inputs: { images: ['1', 0], filename_prefix: 'replay' } },
        '3': { class_type: 'PreviewImage', inputs: { images: ['1', 0] } },
      }
      const cachedOf = (ws: WsClient, id: string): string[] => ws.messages.find((m) => m.type === 'execution_cached' && m.data.prompt_id === id)?.data.nodes ?? []
      const first = await queue(alice, graph, aliceCid)
      assert.equal(await promptFinished(aliceWs, first, RUN_MS), 'execution_success')
      const again = await queue(alice, graph, aliceCid)
      assert.equal(await promptFinished(aliceWs, again, RUN_MS), 'execution_success')
      assert.deepEqual(cachedOf(aliceWs, again).sort(), ['1', '2', '3'], 'her own repeat is answered by the cache: the cache is on')
      const herPreview = (await outputsOf(alice, again))['3'].images![0]
      const his = await queue(bob, graph, bobCid)
      assert.equal(await promptFinished(bobWs, his, RUN_MS), 'execution_success')
      assert.deepEqual(cachedOf(bobWs, his), [], 'none of her cached results answered his prompt')
      const outputs = await outputsOf(bob, his)
      assert.equal(outputs['2'].images![0].subfolder, B)
      assert.notEqual(outputs['3'].images![0].filename, herPreview.filename, 'his own preview, not hers')
      assertRefused(await view(bob, new URLSearchParams(herPreview).toString()), 404, 'NOT_FOUND', 'her preview')
    })

    it('existence: queue_remaining (GET /prompt and the socket\'s status) counts only bob\'s own prompts, whatever alice has queued', async () => {
      const remaining = async (token: string) => (await get('/prompt', token)).text
      const statusOf = (ws: WsClient) => ws.messages.filter((m) => m.type === 'status').at(-1)?.data.status.exec_info.queue_remaining
      const idle = await remaining(bob)
      assert.equal(idle, '{"exec_info": {"queue_remaining": 0}}')
      // an admin's long prompt runs; alice queues three behind it
      const slow = { '1': { class_type: 'EmptyImage', inputs: { width: 2048, height: 2048, batch_size: 1, color: 77 } } } as Record<string, unknown>
      for (let i = 0; i < 6; i++) slow[`s${i}`] = { class_type: 'SaveImage', inputs: { images: ['1', 0], filename_prefix: `slow-${i}` } }
      const statuses = (ws: WsClient) => ws.messages.filter((m) => m.type === 'status')
      const mark = { alice: statuses(aliceWs).length, bob: statuses(bobWs).length }
      const blocker = await queue(admin, slow, randomUUID())
      const hers: string[] = []
      for (let i = 0; i < 3; i++) hers.push(await queue(alice, { '1': { class_type: 'EmptyImage', inputs: { width: 8, height: 8, batch_size: 1, color: 900 + i } }, '2': { class_type: 'PreviewImage', inputs: { images: ['1', 0] } } }, aliceCid))
      const queued = (await get('/queue', admin)).body
      const waiting = queueIds(queued)
      assert.ok(hers.every((id) => waiting.includes(id)), 'her prompts are still waiting (the admin\'s runs)')
      assert.equal(await remaining(bob), idle, 'bob\'s GET /prompt is what it was with an empty queue')
      assert.equal(await remaining(alice), '{"exec_info": {"queue_remaining": 3}}')
      await aliceWs.waitFor(() => statusOf(aliceWs) === 3, RUN_MS)
      // the host broadcasts each status to every socket: bob has had every frame alice had by now
      const seen = statuses(aliceWs).length - mark.alice
      await bobWs.waitFor(() => statuses(bobWs).length - mark.bob >= seen, RUN_MS)
      assert.deepEqual(statuses(bobWs).slice(mark.bob).map((m) => m.data.status.exec_info.queue_remaining), Array(statuses(bobWs).length - mark.bob).fill(0), 'his socket\'s status counts none of hers')
      assert.equal((await post('/interrupt', admin, { prompt_id: blocker })).status, 200)
      for (const id of hers) assert.equal(await promptFinished(aliceWs, id, RUN_MS), 'execution_success')
    })

    it('/object_info lists bob his own files and the shared inputs, nothing of hers', async () => {
      const list: string[] = (await get('/object_info/LoadImage', bob)).body.LoadImage.input.required.image[0]
      assert.ok(list.includes('shared-in.png'))
      assert.ok(list.includes(`${B}/pets/photo.png`))
      assert.deepEqual(list.filter((n) => n.includes(A.slice(2)) && !n.startsWith(`${B}/`)), [])
      const info = (await get('/object_info', bob)).text
      assert.ok(!info.includes(`"${A}`), 'her folder appears in no list of bob\'s /object_info')
      // the admin gets the host's own lists (the top of input/) and may use anyone's file
      const adminGraph = { '1': { class_type: 'LoadImage', inputs: { image: `${A}/pets/photo.png` } }, '2': { class_type: 'PreviewImage', inputs: { images: ['1', 0] } } }
      assert.equal((await post('/prompt', admin, { prompt: adminGraph })).status, 200, 'the admin may use her file')
    })
  })
}
