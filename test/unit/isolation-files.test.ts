/**
 * Files in per-user folders, decided on the path the host resolves: views,
 * uploads, masks and prompts never reach another owner's file in any spelling
 * and give no existence oracle; outputs land in the owner's folder; option
 * lists show each user their own and the shared entries.
 *
 * Part of per-user isolation through the real decider and its later steps
 * (body, form, filter, host events), with the real services and sqlite file;
 * the shared world is isolation-world.ts. End to end on the real ComfyUI:
 * test/e2e/real-host-isolation.test.ts.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { mkdirSync, statSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { PROTOCOL_VERSION } from '../../sidecar/src/kernel/protocol.js'
import { userFolder } from '../../sidecar/src/isolation/user-folders.js'
import { bearer, assertDenied, assertPass, decide, stepAnswer, type Stepped } from './fixtures.js'
import { filtered, postPrompt, world, type World } from './isolation-world.js'

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

  it('a pass on a file may be kept while the path the host opens names that file unchanged (cache.file); others are decided every time', async () => {
    const stampOf = (path: string): string => {
      const st = statSync(path, { bigint: true })
      return `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`
    }
    const rows: Array<[string, string, string]> = [
      ['her own output', `filename=a_00001_.png&type=output&subfolder=${A}`, join(hostDir, 'output', A, 'a_00001_.png')],
      ['through an operator\'s link: the path opened, not the real one', 'filename=a_00001_.png&type=output&subfolder=link', join(hostDir, 'output', 'link', 'a_00001_.png')],
      ['a legacy file the table gives her', 'filename=legacy_00001_.png&type=output', join(hostDir, 'output', 'legacy_00001_.png')],
    ]
    for (const [label, q, opened] of rows) {
      const pass = assertPass(await view(w.aliceJwt, q), label)
      assert.deepEqual(pass.cache, { ms: 1000, epoch: w.sc.services.accessEpoch.value, file: { path: opened, stamp: stampOf(opened) } }, label)
      assert.equal('keep_while' in pass, false, `${label}: the behaviour's word never leaves the sidecar`)
    }
    const shared = assertPass(await view(w.bobJwt, 'filename=shared.png&type=input'))
    assert.equal(shared.cache?.file?.path, join(hostDir, 'input', 'shared.png'), 'a shared input')
    for (const [label, q] of [['no file named (the host\'s 404)', ''], ['a missing file in her folder', `filename=none.png&type=output&subfolder=${A}`], ['a folder', `filename=pets&type=input&subfolder=${A}`]]) {
      const d = await view(w.aliceJwt, q)
      assert.equal(d.action === 'pass' ? d.cache : undefined, undefined, label)
    }
    assert.equal((await view(w.bobJwt, `filename=a_00001_.png&type=output&subfolder=${A}`) as { cache?: unknown }).cache, undefined, 'a refusal is never kept')
  })

  it('the admin (sees every file, not checked): a pass decided on the principal alone, kept as a plain route\'s, whatever the file', async () => {
    for (const [label, q] of [['her output', `filename=a_00001_.png&type=output&subfolder=${A}`], ['a file nobody has', 'filename=never.png&type=output'], ['no file named', '']]) {
      const pass = assertPass(await view(w.adminJwt, q), label)
      assert.deepEqual(pass.cache, { ms: 1000, epoch: w.sc.services.accessEpoch.value }, label)
      assert.equal('keep_plain' in pass, false, `${label}: the behaviour's word never leaves the sidecar`)
    }
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
      // each answer opens a step of its own (its id differs); everything else is the same
      const shape = (d: Stepped): unknown => JSON.parse(JSON.stringify(d).replace(/"step":"[^"]+"/g, '"step":"-"'))
      const onHers = await upload(w.bobJwt, { subfolder: `${A}/pets`, ...overwrite }, 'cat.png')
      assert.deepEqual(shape(await upload(w.bobJwt, { subfolder: `${A}/pets`, ...overwrite }, 'free-name.png')), shape(onHers))
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
      // nodes that tidy a pasted path (surrounding spaces and quotes) before they open it
      ` ${A}/pets/cat.png`, `"${A}/pets/cat.png"`, `'${A}/pets/cat.png' `,
    ]
    for (const t of tries) assertDenied(await postPrompt(w.sc, w.bobJwt, graph(t)), 'NOT_OWNER', JSON.stringify(t))
    for (const folder of [A, `${A}/pets`, 'old', `../input/${A}`, 'old/x/..']) {
      assertDenied(await postPrompt(w.sc, w.bobJwt, graph(folder, 'LoadImageSetFromFolderNode', 'folder')), 'NOT_OWNER', folder)
    }
  })

  it('a prompt naming a place in her folder gets one answer whether or not a file is there (no existence oracle)', async () => {
    const hersExisting = await postPrompt(w.sc, w.bobJwt, graph(`${A}/pets/cat.png`))
    assertDenied(hersExisting, 'NOT_OWNER')
    for (const t of [`${A}/pets/never.png`, `${A}/never.png`, `${A}/nofolder/x.png`, `${A}/never.png [output]`, `${A}/never.png [temp]`, `../output/${A}/never.png`,
      { __value__: `${A}/never.png` }, `${A.toUpperCase()}/never.png`, `o_0123456789abcdef/never.png`, `${A}`,
      // through her folder and out again: the host's kernel walks u_<id>/x, so its answer would say whether x exists
      `${A}/pets/../../shared.png`, `${A}/nope/../../shared.png`, `${A}/../shared.png`, `${B}/../${A}/nope/../../${B}/mine.png`, `x/../${A}/pets/../../shared.png`]) {
      assert.deepEqual(await postPrompt(w.sc, w.bobJwt, graph(t)), hersExisting, JSON.stringify(t))
    }
    for (const t of [`${B}/never.png`, `${B}/never.png [output]`, 'never.png', 'never.png [temp]', `${B}/x/../mine.png`, `old/../shared.png`]) {
      assert.equal((await postPrompt(w.sc, w.bobJwt, graph(t))).action, 'pass', `${JSON.stringify(t)}: his own or the shared area, nothing there`)
    }
  })

  it('a prompt reads the shared inputs, his own files, and texts; alice reads hers; the admin anything', async () => {
    // a name of 4096 bytes or more is the kernel's to refuse (and resolving 120 KB of path parts once held the host's loop for 40 s)
    for (const t of ['shared.png', `${B}/mine.png`, { __value__: 'shared.png' }, 'not-a-file.png', 'a prompt text', '', '.', 'x'.repeat(5000), 'a/'.repeat(60000) + 'x.png']) {
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
    const hostAnswer = JSON.stringify({ error: { type: 'prompt_outputs_failed_validation' }, node_errors: { 1: { errors: [{ type: 'value_not_in_list', details: `folder: 'zzz' not in ['${A}', '${A}/pets', '${A}/clients acme/2025', '${B}', '${B}/mine', '${A.toUpperCase()}', 'old']`, extra_info: { input_config: [[A, `${A}/pets`, `${A}\\clients acme`, B, `${B}/mine`, 'old']] } }] } } })
    const filteredAnswer: { action: string; body_text?: string } = stepAnswer(await w.sc.handlers.filter({ type: 'filter', id: 1, name: spec.name, ctx: spec.ctx, status: 400, content_type: 'application/json' }, Buffer.from(hostAnswer)))
    assert.equal(filteredAnswer.action, 'replace')
    assert.ok(!filteredAnswer.body_text!.toLowerCase().includes(A.slice(2)), 'her id appears nowhere')
    assert.ok(filteredAnswer.body_text!.includes(B), 'his own folder stays')
    assert.ok(!/pets|clients|acme|2025/.test(filteredAnswer.body_text!), `nothing inside her folder is named: ${filteredAnswer.body_text}`)
    const error = JSON.parse(filteredAnswer.body_text!).node_errors['1'].errors[0]
    assert.deepEqual(error.extra_info.input_config, [['u_hidden', 'u_hidden', 'u_hidden', B, `${B}/mine`, 'old']])
    assert.equal(error.details, `folder: 'zzz' not in ['u_hidden', 'u_hidden', 'u_hidden', '${B}', '${B}/mine', 'u_hidden', 'old']`)
    // the step ran: the plugin sends one filter per answer, and the same ctx again is refused (503)
    assertDenied(stepAnswer(await w.sc.handlers.filter({ type: 'filter', id: 1, name: spec.name, ctx: spec.ctx, status: 400, content_type: 'application/json' }, Buffer.from(hostAnswer))), 'AUTHSVC_UNAVAILABLE')
    const again = assertPass(await decide(w.sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: bearer(w.bobJwt) }))
    const next = await w.sc.handlers.body({ type: 'body', id: 1, ctx: again.need_body!.ctx }, Buffer.from(graph('zzz', 'LoadImageSetFromFolderNode', 'folder'))) as { answer: { filter?: { name: string; ctx: unknown } } }
    const ok = stepAnswer(await w.sc.handlers.filter({ type: 'filter', id: 1, name: next.answer.filter!.name, ctx: next.answer.filter!.ctx, status: 200, content_type: 'application/json' }, Buffer.from(`{"prompt_id": "x", "number": 1, "node_errors": {}}`)))
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
