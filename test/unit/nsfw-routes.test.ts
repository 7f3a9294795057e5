/**
 * The content-safety routes through the sidecar's real app and store (issue 23): mark-nsfw's
 * attack table (names that leave their folder, links out of it, what is not an image, malformed
 * bodies: each a 4xx with a stable code, never a 500 and never a tag), who may mark what, and
 * nsfw-management (admin only; list, clear, scan with and without force_rescan; 409 while the
 * policy is off). The classifier is the deterministic test one (a worker thread, as in production).
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { PROTOCOL_VERSION } from '../../sidecar/src/kernel/protocol.js'
import type { NsfwFeature } from '../../sidecar/src/nsfw/feature.js'
import { poll } from '../helpers/stack.js'
import { cleanPng, nsfwPng, oggBos, oggPage, safetensorsHead } from '../helpers/nsfw-images.js'
import { addUser, assertDenied, assertError, assertPass, bootstrapAdmin, call, decide, openSidecar, sessionJwt, stepAnswer, tempDir, type Sidecar, type Stepped } from './fixtures.js'
import { userFolder } from '../../sidecar/src/isolation/user-folders.js'
import { CLOSE_ACCESS_CHANGED } from '../../sidecar/src/isolation/credential-state.js'

process.env.AUTHSVC_NSFW_TEST_CLASSIFIER = '1'

describe('mark-nsfw and nsfw-management', () => {
  let sc: Sidecar
  let admin: string
  let alice: string
  let bob: string
  let aliceId: string
  const outside = tempDir('nsfw-outside-')
  const host = () => join(sc.dir, 'host')
  const nsfw = () => (sc.built.features.find((f) => f.name === 'nsfw') as NsfwFeature).bound()!

  before(async () => {
    sc = await openSidecar({ host: true, config: { nsfw: { enabled: true, classifier: 'test' } } })
    sc.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 'test', host: { output_dir: join(host(), 'output'), input_dir: join(host(), 'input'), temp_dir: join(host(), 'temp') } })
    admin = (await bootstrapAdmin(sc)).jwt
    const a = await addUser(sc, 'alice', 'alice-password-1')
    aliceId = a.user_id
    alice = await sessionJwt(sc, a)
    bob = await sessionJwt(sc, await addUser(sc, 'bob', 'bob-password-11'))
    writeFileSync(join(host(), 'input', 'shared.png'), cleanPng(1))
    writeFileSync(join(host(), 'input', 'notes.txt'), 'text')
    mkdirSync(join(host(), 'input', 'dir.png'))
    writeFileSync(join(outside, 'secret.png'), cleanPng(2))
    symlinkSync(join(outside, 'secret.png'), join(host(), 'input', 'link.png'))
    mkdirSync(join(host(), 'output', userFolder(aliceId)), { recursive: true })
    writeFileSync(join(host(), 'output', userFolder(aliceId), 'mine.png'), cleanPng(3))
    writeFileSync(join(host(), 'output', 'flagged.png'), nsfwPng(4))
    await nsfw().loaded
  })
  after(async () => {
    await sc?.close()
  })

  const mark = (token: string | undefined, body: unknown) => call(sc, { method: 'POST', url: '/authsvc-gallery/mark-nsfw', ...(token ? { bearer: token } : {}), body })
  const manage = (token: string, body: unknown) => call(sc, { method: 'POST', url: '/authsvc/api/nsfw-management', bearer: token, body })

  it('a model preview image (not an output the policy classified) is refused to an sfw_check user, served to one without', async () => {
    const preview = (token: string) =>
      decide(sc, {
        path: '/experiment/models/preview/checkpoints/0/any.safetensors',
        pattern: '/experiment/models/preview/{folder}/{path_index}/{filename}',
        match_info: { folder: 'checkpoints', path_index: '0', filename: 'any.safetensors' },
        headers: { authorization: `Bearer ${token}` },
      })
    const refused = await preview(alice)
    assert.equal(refused.action, 'respond')
    assert.equal((refused as { status: number }).status, 403)
    assert.equal((refused as { body_text?: string }).body_text, 'NSFW content blocked for this user.')
    const bobUser = sc.services.users.byUsername('bob')!
    await sc.services.users.update(bobUser.user_id, { sfw_check: false })
    assert.equal((await preview(bob)).action, 'pass')
  })

  it('a socket opened without the preview check closes when the user\'s sfw_check is turned on', async () => {
    const bobUser = sc.services.users.byUsername('bob')!
    await sc.services.users.update(bobUser.user_id, { sfw_check: false })
    const closed: Array<{ tags: string[]; code: number }> = []
    sc.built.setPush((m) => {
      if (m.type === 'close_ws') closed.push({ tags: m.tags, code: m.code })
    })
    const opened = await decide(sc, { path: '/ws', pattern: '/ws', headers: { authorization: `Bearer ${bob}` } })
    assert.equal(opened.action, 'pass')
    const tag = (opened as { ws_tag?: string }).ws_tag!
    assert.equal((opened as { ws_preview_check?: boolean }).ws_preview_check, undefined, 'no check for a user without sfw_check')
    assert.equal(sc.built.liveSockets.sweep(), 0)
    await sc.services.users.update(bobUser.user_id, { sfw_check: true })
    assert.equal(sc.built.liveSockets.sweep(), 1)
    assert.deepEqual(closed.pop(), { tags: [tag], code: CLOSE_ACCESS_CHANGED })
    const reopened = await decide(sc, { path: '/ws', pattern: '/ws', headers: { authorization: `Bearer ${bob}` } })
    assert.equal((reopened as { ws_preview_check?: boolean }).ws_preview_check, true, 'it comes back with the check')
  })

  it('refuses every name that leaves its folder or is not an image, and every malformed body, with a stable 4xx', async () => {
    const rows: Array<[string, unknown, number, string]> = [
      ['a subfolder climbing out', { filename: 'x.png', subfolder: '../output', type: 'input', is_nsfw: true }, 400, 'VALIDATION_FAILED'],
      ['a subfolder climbing out deeper', { filename: 'x.png', subfolder: 'a/../../..', type: 'input', is_nsfw: true }, 400, 'VALIDATION_FAILED'],
      ['a file name climbing out', { filename: '../../etc/passwd.png', type: 'input', is_nsfw: true }, 400, 'VALIDATION_FAILED'],
      ['backslashes climbing out', { filename: '..\\..\\x.png', type: 'input', is_nsfw: true }, 400, 'VALIDATION_FAILED'],
      ['an absolute name (stays inside: no such file)', { filename: '/etc/x.png', type: 'input', is_nsfw: true }, 404, 'NOT_FOUND'],
      ['a link leading out of the folder', { filename: 'link.png', type: 'input', is_nsfw: true }, 404, 'NOT_FOUND'],
      ['a folder named like an image', { filename: 'dir.png', type: 'input', is_nsfw: true }, 404, 'NOT_FOUND'],
      ['a NUL in the name', { filename: 'sha\u0000red.png', type: 'input', is_nsfw: true }, 404, 'NOT_FOUND'],
      ['not an image', { filename: 'notes.txt', type: 'input', is_nsfw: true }, 400, 'VALIDATION_FAILED'],
      ['an unknown folder type', { filename: 'shared.png', type: 'models', is_nsfw: true }, 400, 'VALIDATION_FAILED'],
      ['no is_nsfw', { filename: 'shared.png', type: 'input' }, 400, 'VALIDATION_FAILED'],
      ['is_nsfw not a boolean', { filename: 'shared.png', type: 'input', is_nsfw: 'yes' }, 400, 'VALIDATION_FAILED'],
      ['an unknown key', { filename: 'shared.png', type: 'input', is_nsfw: true, path: '/etc/passwd' }, 400, 'VALIDATION_FAILED'],
      ['an empty name', { filename: '', type: 'input', is_nsfw: true }, 400, 'VALIDATION_FAILED'],
      ['a subfolder too long', { filename: 'shared.png', subfolder: 'a/'.repeat(3000), type: 'input', is_nsfw: true }, 400, 'VALIDATION_FAILED'],
    ]
    for (const [name, body, status, code] of rows) assertError(await mark(admin, body), status, code, name)
    const notJson = await call(sc, { method: 'POST', url: '/authsvc-gallery/mark-nsfw', bearer: admin, headers: { 'content-type': 'application/json' }, body: '{"filename":' })
    assertError(notJson, 400, 'VALIDATION_FAILED', 'not JSON')
    assert.equal(nsfw().tags.size, 0, 'no row left a tag')
  })

  it('who may mark: nobody without a credential, an admin anything, the owner their own, another user nothing', async () => {
    assertError(await mark(undefined, { filename: 'shared.png', type: 'input', is_nsfw: true }), 401, 'AUTH_REQUIRED')
    const own = { filename: 'mine.png', subfolder: userFolder(aliceId), type: 'output', is_nsfw: true }
    assertError(await mark(bob, own), 404, 'NOT_FOUND', 'bob may not even read alice\'s file')
    assertError(await mark(bob, { filename: 'shared.png', type: 'input', is_nsfw: true }), 403, 'PERMISSION_DENIED', 'a shared input bob reads but does not own')
    assertError(await mark(alice, { filename: 'flagged.png', type: 'output', is_nsfw: false }), 404, 'NOT_FOUND', 'an admin-only output')
    const res = await mark(alice, own)
    assert.equal(res.statusCode, 200, res.body)
    assert.deepEqual(JSON.parse(res.body), { status: 'ok', filename: 'mine.png', is_nsfw: true })
    const tag = nsfw().tags.get(join(host(), 'output', userFolder(aliceId), 'mine.png'))
    assert.deepEqual([tag?.source, tag?.is_nsfw, tag?.by, tag?.type, tag?.subfolder], ['manual', true, 'alice', 'output', userFolder(aliceId)])
    assert.equal((await mark(admin, { filename: 'shared.png', type: 'input', is_nsfw: false })).statusCode, 200)
  })

  it('nsfw-management: admins only; list_tags, scan_all (force_rescan classifies again), clear_all_tags keeps manual tags', async () => {
    assertError(await manage(alice, { action: 'list_tags' }), 403, 'ADMIN_REQUIRED')
    assertError(await manage(admin, { action: 'drop_tables' }), 400, 'VALIDATION_FAILED')
    const started = await manage(admin, { action: 'scan_all' })
    assert.equal(started.statusCode, 200, started.body)
    assert.equal(JSON.parse(started.body).status, 'ok')
    await nsfw().scanner.settled()
    let listed = JSON.parse((await manage(admin, { action: 'list_tags' })).body)
    // shared.png, mine.png (manual), flagged.png; link.png's target is outside: not scanned as its own; dir.png is a folder
    assert.deepEqual(listed.stats.scan.running, false)
    const files = listed.tags.map((t: { type: string; subfolder: string; filename: string; source: string; is_nsfw: boolean }) => [t.type, t.filename, t.source, t.is_nsfw])
    assert.deepEqual(files, [['input', 'shared.png', 'manual', false], ['output', 'flagged.png', 'detector', true], ['output', 'mine.png', 'manual', true]])
    assert.equal(listed.stats.tags_nsfw, 2)
    // without force nothing is classified again; with it everything is
    const before = nsfw().pool.answered
    await manage(admin, { action: 'scan_all' })
    await nsfw().scanner.settled()
    assert.equal(nsfw().pool.answered, before)
    await manage(admin, { action: 'scan_all', force_rescan: true })
    await nsfw().scanner.settled()
    assert.ok(nsfw().pool.answered - before >= 3, `classified again: ${nsfw().pool.answered - before}`)
    const cleared = JSON.parse((await manage(admin, { action: 'clear_all_tags' })).body)
    assert.equal(cleared.stats.cleared, 1)
    listed = JSON.parse((await manage(admin, { action: 'list_tags' })).body)
    assert.deepEqual(listed.tags.map((t: { source: string }) => t.source), ['manual', 'manual'])
    assert.equal(JSON.parse((await manage(admin, { action: 'clear_all_tags', include_manual: true })).body).stats.cleared, 2)
  })

  it('tags are stored: a restarted sidecar has them', async () => {
    assert.equal((await mark(admin, { filename: 'flagged.png', type: 'output', is_nsfw: true })).statusCode, 200)
    const dir = sc.dir
    await sc.close({ keepDir: true })
    sc = await openSidecar({ dir, config: { nsfw: { enabled: true, classifier: 'test' } } })
    await nsfw().loaded
    assert.ok(await poll(async () => nsfw().tags.size === 1, 5000))
    assert.equal(nsfw().tags.all()[0].filename, 'flagged.png')
  })

  it('every tag change pushes forget before its answer (a kept /view read the tag); listing the tags does not', async () => {
    // the sidecar restarted above: the host names its folders again
    sc.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 'test', host: { output_dir: join(host(), 'output'), input_dir: join(host(), 'input'), temp_dir: join(host(), 'temp') } })
    const pushed: number[] = []
    sc.built.setPush((m) => {
      if (m.type === 'forget') pushed.push(m.epoch)
    })
    writeFileSync(join(host(), 'input', 'epoch.png'), cleanPng(30))
    const changes: Array<[string, () => Promise<{ statusCode: number }>]> = [
      ['a manual tag set', () => mark(admin, { filename: 'epoch.png', subfolder: '', type: 'input', is_nsfw: true })],
      ['a manual tag changed', () => mark(admin, { filename: 'epoch.png', subfolder: '', type: 'input', is_nsfw: false })],
      ['every tag cleared', () => call(sc, { method: 'POST', url: '/authsvc/api/nsfw-management', bearer: admin, body: { action: 'clear_all_tags', include_manual: true } })],
    ]
    for (const [label, change] of changes) {
      const before = sc.services.accessEpoch.value
      pushed.length = 0
      const res = await change()
      assert.equal(res.statusCode, 200, label)
      assert.ok(sc.services.accessEpoch.value > before, `${label}: the epoch moved`)
      assert.ok(pushed.length > 0 && pushed.at(-1) === sc.services.accessEpoch.value, `${label}: forget pushed before the answer`)
    }
    const before = sc.services.accessEpoch.value
    assert.equal((await call(sc, { method: 'POST', url: '/authsvc/api/nsfw-management', bearer: admin, body: { action: 'list_tags' } })).statusCode, 200)
    assert.equal(sc.services.accessEpoch.value, before, 'listing the tags changes nothing')
  })

  it('an owner lifts only their own mark: an administrator\'s mark on their image stays, and it still blocks them', async () => {
    writeFileSync(join(host(), 'output', userFolder(aliceId), 'missed.png'), cleanPng(5))
    const image = { filename: 'missed.png', subfolder: userFolder(aliceId), type: 'output' }
    const path = join(host(), 'output', userFolder(aliceId), 'missed.png')
    const view = () => decide(sc, { path: '/view', pattern: '/view', query: `filename=missed.png&type=output&subfolder=${userFolder(aliceId)}`, headers: { authorization: `Bearer ${alice}` } })
    assert.equal((await view()).action, 'pass', 'the detector finds it clean')
    // the detector missed it: an administrator marks it
    assert.equal((await mark(admin, { ...image, is_nsfw: true })).statusCode, 200)
    assert.equal((await view() as { status?: number }).status, 403)
    assertError(await mark(alice, { ...image, is_nsfw: false }), 403, 'PERMISSION_DENIED', 'the owner may not lift the admin\'s mark')
    assert.deepEqual([nsfw().tags.get(path)?.source, nsfw().tags.get(path)?.is_nsfw, nsfw().tags.get(path)?.by], ['manual', true, 'root-admin'])
    assert.equal((await view() as { status?: number }).status, 403, 'still blocked for its owner')
    // her own mark over the admin's does not make it hers (two requests would lift it otherwise)
    assert.equal((await mark(alice, { ...image, is_nsfw: true })).statusCode, 200)
    assert.equal(nsfw().tags.get(path)?.by, 'root-admin')
    assertError(await mark(alice, { ...image, is_nsfw: false }), 403, 'PERMISSION_DENIED')
    assert.equal((await view() as { status?: number }).status, 403)
    // an administrator lifts anyone's mark ("clean" by hand)
    assert.equal((await mark(admin, { ...image, is_nsfw: false })).statusCode, 200)
    assert.deepEqual([nsfw().tags.get(path)?.source, nsfw().tags.get(path)?.is_nsfw], ['manual', false])
    // her own mark, over the admin's "clean", is hers to lift: the detector decides again
    assert.equal((await mark(alice, { ...image, is_nsfw: true })).statusCode, 200)
    assert.equal(nsfw().tags.get(path)?.by, 'alice')
    assert.equal((await mark(alice, { ...image, is_nsfw: false })).statusCode, 200)
    assert.equal(nsfw().tags.get(path), undefined)
    assert.equal((await view()).action, 'pass', 'the detector decides again')
  })

  it('an SFW user\'s view of a file no browser shows as a picture (audio, a latent) is not the policy\'s; told by its bytes, never by its name', async () => {
    const folder = join(host(), 'output', userFolder(aliceId))
    const opus = oggBos(Buffer.concat([Buffer.from('OpusHead', 'latin1'), Buffer.alloc(11)]))
    const files: Array<[string, Buffer, 'pass' | 403]> = [
      ['song.flac', Buffer.concat([Buffer.from('fLaC', 'latin1'), Buffer.alloc(2000)]), 'pass'],
      ['voice.opus', Buffer.concat([opus, oggPage(Buffer.from('OpusTags', 'latin1')), Buffer.alloc(500)]), 'pass'],
      ['take.latent', safetensorsHead(), 'pass'],
      // a picture named as audio is still a picture to a browser's <img>: judged (and detected) as one
      ['trick.flac', nsfwPng(40), 403],
      ['clip.ogv', Buffer.concat([oggBos(Buffer.concat([Buffer.from([0x80]), Buffer.from('theora', 'latin1'), Buffer.alloc(35)])), oggPage(Buffer.alloc(10))]), 403],
      ['notes.txt', Buffer.from('text the classifier cannot judge'), 403],
    ]
    for (const [name, bytes, expected] of files) {
      writeFileSync(join(folder, name), bytes)
      const got = await decide(sc, { path: '/view', pattern: '/view', query: `filename=${name}&type=output&subfolder=${userFolder(aliceId)}`, headers: { authorization: `Bearer ${alice}` } })
      assert.equal(got.action === 'pass' ? 'pass' : (got as { status?: number }).status, expected, name)
    }
  })
})

describe('with the policy off', () => {
  it('both routes answer 409 CONFLICT, and nothing is classified', async () => {
    const sc = await openSidecar()
    try {
      const { jwt } = await bootstrapAdmin(sc)
      assertError(await call(sc, { method: 'POST', url: '/authsvc/api/nsfw-management', bearer: jwt, body: { action: 'list_tags' } }), 409, 'CONFLICT')
      assertError(await call(sc, { method: 'POST', url: '/authsvc-gallery/mark-nsfw', bearer: jwt, body: { filename: 'x.png', is_nsfw: true } }), 409, 'CONFLICT')
      assert.equal((sc.built.features.find((f) => f.name === 'nsfw') as NsfwFeature).bound(), null)
    } finally {
      await sc.close()
    }
  })
})

describe('a marked image is not copied past its mark by an SFW user (a prompt that reads it, a mask made from it)', () => {
  for (const seperate_users of [true, false]) {
    describe(seperate_users ? 'users kept apart' : 'users not kept apart (everyone sees every file)', () => {
      let sc: Sidecar
      let admin: string
      let alice: string
      let aliceId: string
      const host = () => join(sc.dir, 'host')
      before(async () => {
        sc = await openSidecar({ host: true, config: { seperate_users, nsfw: { enabled: true, classifier: 'test' } } })
        sc.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 'test', host: { output_dir: join(host(), 'output'), input_dir: join(host(), 'input'), temp_dir: join(host(), 'temp') } })
        const root = await bootstrapAdmin(sc)
        admin = root.jwt
        await sc.services.users.update(root.user.user_id, { sfw_check: false })
        const a = await addUser(sc, 'alice', 'alice-password-1')
        aliceId = a.user_id
        alice = await sessionJwt(sc, a)
        mkdirSync(join(host(), 'input', userFolder(aliceId)), { recursive: true })
        writeFileSync(join(host(), 'input', userFolder(aliceId), 'missed.png'), cleanPng(61))
        writeFileSync(join(host(), 'input', userFolder(aliceId), 'fine.png'), cleanPng(62))
        const nsfw = (sc.built.features.find((f) => f.name === 'nsfw') as NsfwFeature).bound()!
        await nsfw.loaded
        // the detector misses it; an administrator marks it
        const marked = await call(sc, { method: 'POST', url: '/authsvc-gallery/mark-nsfw', bearer: admin, body: { filename: 'missed.png', subfolder: userFolder(aliceId), type: 'input', is_nsfw: true } })
        assert.equal(marked.statusCode, 200, marked.body)
      })
      after(async () => {
        await sc?.close()
      })

      const prompt = async (jwt: string, image: string): Promise<Stepped> => {
        const d = assertPass(await decide(sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: { authorization: `Bearer ${jwt}` } }))
        const body = JSON.stringify({ prompt: { 1: { class_type: 'LoadImage', inputs: { image } }, 2: { class_type: 'SaveImage', inputs: { images: ['1', 0], filename_prefix: 'copy' } } } })
        return stepAnswer(await sc.handlers.body({ type: 'body', id: 1, ctx: d.need_body!.ctx }, Buffer.from(body)))
      }
      const mask = async (jwt: string, filename: string, extra: Record<string, unknown> = {}): Promise<Stepped> => {
        const d = assertPass(await decide(sc, { method: 'POST', path: '/upload/mask', pattern: '/upload/mask', headers: { authorization: `Bearer ${jwt}` } }))
        const fields = { subfolder: 'clipspace', original_ref: JSON.stringify({ ...extra, filename, type: 'input', subfolder: userFolder(aliceId) }) }
        return stepAnswer(await sc.handlers.form({ type: 'form', id: 1, ctx: d.need_form!.ctx, fields, files: { image: 'copy.png' } }, sc.host))
      }

      it('an SFW user\'s prompt and mask are refused for the marked image, and allowed for a clean one', async () => {
        const name = `${userFolder(aliceId)}/missed.png`
        for (const spelled of [name, `${name} [input]`, `  "${name}"  `, `${userFolder(aliceId)}/./missed.png`]) {
          assertDenied(await prompt(alice, spelled), 'PERMISSION_DENIED', spelled)
        }
        assert.equal((await prompt(alice, `${userFolder(aliceId)}/fine.png`)).action, 'pass')
        assertDenied(await mask(alice, 'missed.png'), 'PERMISSION_DENIED')
        // a reference whose own keys look like a decision is still only a reference
        assertDenied(await mask(alice, 'missed.png', { action: 'pass', set_fields: {} }), 'PERMISSION_DENIED')
        assert.equal((await mask(alice, 'fine.png')).action, 'pass')
      })

      it('a user without the SFW check (here the administrator, with it turned off) may use it', async () => {
        assert.equal((await prompt(admin, `${userFolder(aliceId)}/missed.png`)).action, 'pass')
        assert.equal((await mask(admin, 'missed.png')).action, 'pass')
      })
    })
  }
})
