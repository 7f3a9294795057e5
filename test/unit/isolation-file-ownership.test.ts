/**
 * Who owns which file: an upgraded data dir keeps every file's readers,
 * concurrent owner changes are all kept, and the host-folder watcher (real
 * files, real inotify) lets a run claim the files it writes.
 *
 * Part of per-user isolation through the real decider and its later steps
 * (body, form, filter, host events), with the real services and sqlite file;
 * the shared world is isolation-world.ts. End to end on the real ComfyUI:
 * test/e2e/real-host-isolation.test.ts.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { PROTOCOL_VERSION } from '../../sidecar/src/kernel/protocol.js'
import { userFolder } from '../../sidecar/src/isolation/user-folders.js'
import { bearer, addUser, assertPass, decide, openSidecar, sessionJwt, stepAnswer } from './fixtures.js'
import { event, ownPrompt, world } from './isolation-world.js'

describe('an upgrade of a populated data dir (issue 21, item 7): every file visible to exactly the same people', () => {
  it('files owned in the layout before per-user folders keep their readers after a restart on the new code', async () => {
    const first = await world()
    const dir = first.sc.dir
    const hostDir = join(dir, 'host')
    const put = (rel: string) => {
      mkdirSync(join(hostDir, rel, '..'), { recursive: true })
      writeFileSync(join(hostDir, rel), 'x')
    }
    // the old layout: uploads and outputs beside everyone else's, owners in the table
    const owned: Array<[string, string[]]> = [
      ['input/cat.png', [first.alice.user_id]], ['input/pets/dog.png', [first.alice.user_id, first.bob.user_id]],
      ['output/ComfyUI_00001_.png', [first.alice.user_id]], ['output/ComfyUI_00002_.png', [first.bob.user_id]], ['temp/ComfyUI_temp_abcde_00001_.png', [first.alice.user_id]],
    ]
    for (const [key, owners] of owned) {
      put(key)
      for (const o of owners) await first.sc.services.ownership.addFileOwner(key, o, undefined, new Date())
    }
    put('input/shared.png')
    put('output/unowned_00001_.png')
    await first.sc.services.flush()
    const ids = { alice: first.alice.user_id, bob: first.bob.user_id }
    await first.sc.close({ keepDir: true })

    const sc = await openSidecar({ dir })
    try {
      const jwt = async (name: 'alice' | 'bob' | 'admin') => {
        const user = sc.services.users.list().find((u) => u.username === name)!
        return sessionJwt(sc, user)
      }
      sc.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 't', host: { output_dir: join(hostDir, 'output'), input_dir: join(hostDir, 'input'), temp_dir: join(hostDir, 'temp') } })
      const tokens = { alice: await jwt('alice'), bob: await jwt('bob'), admin: await jwt('admin') }
      const viewQuery: Record<string, string> = {
        'input/cat.png': 'filename=cat.png&type=input', 'input/pets/dog.png': 'filename=dog.png&type=input&subfolder=pets',
        'output/ComfyUI_00001_.png': 'filename=ComfyUI_00001_.png&type=output', 'output/ComfyUI_00002_.png': 'filename=ComfyUI_00002_.png&type=output',
        'temp/ComfyUI_temp_abcde_00001_.png': 'filename=ComfyUI_temp_abcde_00001_.png&type=temp', 'input/shared.png': 'filename=shared.png&type=input',
        'output/unowned_00001_.png': 'filename=unowned_00001_.png&type=output',
      }
      const readers: Record<string, string[]> = {
        'input/cat.png': ['alice', 'admin'], 'input/pets/dog.png': ['alice', 'bob', 'admin'], 'output/ComfyUI_00001_.png': ['alice', 'admin'],
        'output/ComfyUI_00002_.png': ['bob', 'admin'], 'temp/ComfyUI_temp_abcde_00001_.png': ['alice', 'admin'],
        'input/shared.png': ['alice', 'bob', 'admin'], 'output/unowned_00001_.png': ['admin'],
      }
      for (const [key, who] of Object.entries(readers)) {
        for (const name of ['alice', 'bob', 'admin'] as const) {
          const d = await decide(sc, { path: '/view', pattern: '/view', query: viewQuery[key], headers: bearer(tokens[name]) })
          assert.equal(d.action, who.includes(name) ? 'pass' : 'respond', `${name} on ${key}`)
        }
      }
      // the same readers for a prompt naming the input files
      const prompt = (image: string) => JSON.stringify({ prompt: { 1: { class_type: 'LoadImage', inputs: { image } } } })
      for (const [image, who] of [['cat.png', ['alice', 'admin']], ['pets/dog.png', ['alice', 'bob', 'admin']], ['shared.png', ['alice', 'bob', 'admin']]] as Array<[string, string[]]>) {
        for (const name of ['alice', 'bob', 'admin'] as const) {
          const d = assertPass(await decide(sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: bearer(tokens[name]) }))
          const out = stepAnswer(await sc.handlers.body({ type: 'body', id: 1, ctx: d.need_body!.ctx }, Buffer.from(prompt(image))))
          assert.equal(out.action, who.includes(name) ? 'pass' : 'respond', `${name} prompts ${image}`)
        }
      }
      assert.ok(ids.alice && ids.bob)
    } finally {
      await sc.close()
    }
  })
})

describe('file ownership under concurrent changes', () => {
  it('two owners added to one file at once are both kept (a store write takes time)', async () => {
    const sc = await openSidecar()
    try {
      const at = new Date(sc.clock())
      await Promise.all([
        sc.services.ownership.addFileOwner('input/same.png', 'alice-id', undefined, at),
        sc.services.ownership.addFileOwner('input/same.png', 'bob-id', undefined, at),
        sc.services.ownership.addFileOwner('input/same.png', 'carol-id', undefined, at),
      ])
      assert.deepEqual(sc.services.ownership.file('input/same.png')?.owners, ['alice-id', 'bob-id', 'carol-id'])
    } finally {
      await sc.close()
    }
  })
})

describe('the host-folder watcher (real files, real inotify)', () => {
  const until = async (check: () => boolean, what: string): Promise<void> => {
    const deadline = Date.now() + 5000
    while (!check()) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
      await new Promise((r) => setTimeout(r, 20))
    }
  }

  it('a run claims the files it writes; an administrator\'s upload during that run stays hers; a removed file is forgotten', async () => {
    const { writeFileSync: write, rmSync } = await import('node:fs')
    const sc = await openSidecar()
    try {
      const admin = await addUser(sc, 'admin', 'admin-password-1', 'admin')
      const alice = await addUser(sc, 'alice', 'alice-password-1')
      const bob = await addUser(sc, 'bob', 'bob-password-12')
      const dirs = Object.fromEntries(['output', 'input', 'temp'].map((d) => [d, join(sc.dir, 'host', d)]))
      for (const d of Object.values(dirs)) mkdirSync(d, { recursive: true })
      sc.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 't', host: { output_dir: dirs.output, input_dir: dirs.input, temp_dir: dirs.temp } })
      await sc.built.hostFiles.ready()
      const bobPrompt = await ownPrompt(sc, await sessionJwt(sc, bob))
      const own = sc.services.ownership
      event(sc, 'execution_start', { prompt_id: bobPrompt })
      // the administrator uploads where she asks (a user's upload lands in their own folder: owned by its path)
      const aliceJwt = await sessionJwt(sc, alice)
      const adminJwt = await sessionJwt(sc, admin)
      const d = assertPass(await decide(sc, { method: 'POST', path: '/upload/image', pattern: '/upload/image', headers: bearer(adminJwt) }))
      const f = assertPass(await sc.handlers.form({ type: 'form', id: 1, ctx: d.need_form!.ctx, fields: {}, files: { image: 'hers.png' } }))
      write(join(dirs.input, 'hers.png'), 'x')
      write(join(dirs.output, 'bobs_00001_.png'), 'x')
      await until(() => own.file('output/bobs_00001_.png') !== undefined, 'the run\'s output to be claimed')
      await sc.handlers.filter({ type: 'filter', id: 1, name: f.filter!.name, ctx: f.filter!.ctx, status: 200, content_type: 'application/json' }, Buffer.from('{"name":"hers.png","subfolder":"","type":"input"}'))
      event(sc, 'execution_end', { prompt_id: bobPrompt, status: 'success' })
      assert.deepEqual(own.file('output/bobs_00001_.png')?.owners, [bob.user_id])
      assert.deepEqual(own.file('input/hers.png')?.owners, [admin.user_id], 'bob\'s run did not claim her upload')
      // a cached node re-reports bob's file for alice's identical prompt: alice is not added
      const alicePrompt = await ownPrompt(sc, aliceJwt)
      event(sc, 'execution_start', { prompt_id: alicePrompt })
      event(sc, 'executed', { prompt_id: alicePrompt, output: { images: [{ filename: 'bobs_00001_.png', subfolder: '', type: 'output' }] } })
      event(sc, 'execution_end', { prompt_id: alicePrompt, status: 'success' })
      assert.deepEqual(own.file('output/bobs_00001_.png')?.owners, [bob.user_id])
      rmSync(join(dirs.output, 'bobs_00001_.png'))
      await until(() => own.file('output/bobs_00001_.png') === undefined, 'the removed file to be forgotten')
      // files in per-user folders are their owners' by their path: a run claims none of them
      mkdirSync(join(dirs.output, userFolder(bob.user_id)))
      const third = await ownPrompt(sc, aliceJwt)
      event(sc, 'execution_start', { prompt_id: third })
      write(join(dirs.output, userFolder(bob.user_id), 'b_00001_.png'), 'x')
      write(join(dirs.output, 'marker_00001_.png'), 'x')
      await until(() => own.file('output/marker_00001_.png') !== undefined, 'the run\'s root output to be claimed')
      event(sc, 'execution_end', { prompt_id: third, status: 'success' })
      assert.equal(own.file(`output/${userFolder(bob.user_id)}/b_00001_.png`), undefined)
    } finally {
      await sc.close()
    }
  })

  it('in a folder of thousands: files there before the watch stay unowned; a run claims its files, in new subfolders and renamed too', async () => {
    const { writeFileSync: write, renameSync, rmSync } = await import('node:fs')
    const sc = await openSidecar()
    try {
      const alice = await addUser(sc, 'alice', 'alice-password-1')
      const dirs = Object.fromEntries(['output', 'input', 'temp'].map((d) => [d, join(sc.dir, 'host', d)]))
      for (const d of Object.values(dirs)) mkdirSync(d, { recursive: true })
      const alicePrompt = await ownPrompt(sc, await sessionJwt(sc, alice))
      // running while these files are made and the watch starts (a restarted sidecar): by their
      // time they would be the run's, but they were there before the watch, so they are not news
      event(sc, 'execution_start', { prompt_id: alicePrompt }, Date.now() / 1000 - 1)
      for (let i = 0; i < 3000; i++) write(join(dirs.output, `old_${String(i).padStart(5, '0')}_.png`), 'x')
      mkdirSync(join(dirs.output, 'olddir'))
      write(join(dirs.output, 'olddir', 'inside.png'), 'x')
      sc.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 't', host: { output_dir: dirs.output, input_dir: dirs.input, temp_dir: dirs.temp } })
      await sc.built.hostFiles.ready()
      const own = sc.services.ownership
      write(join(dirs.output, 'new_00001_.png'), 'x')
      mkdirSync(join(dirs.output, 'sub', 'deeper'), { recursive: true }) // SaveImage with filename_prefix "sub/deeper/x"
      write(join(dirs.output, 'sub', 'deeper', 'x_00001_.png'), 'x')
      write(join(dirs.output, 'olddir', 'later.png'), 'x')
      write(join(dirs.temp, 'preview_00001_.png'), 'x')
      for (const key of ['output/new_00001_.png', 'output/sub/deeper/x_00001_.png', 'output/olddir/later.png', 'temp/preview_00001_.png']) {
        await until(() => own.file(key) !== undefined, `${key} to be claimed`)
        assert.deepEqual(own.file(key)?.owners, [alice.user_id], key)
      }
      renameSync(join(dirs.output, 'new_00001_.png'), join(dirs.output, 'renamed_00001_.png'))
      await until(() => own.file('output/renamed_00001_.png') !== undefined && own.file('output/new_00001_.png') === undefined, 'the rename to be seen')
      rmSync(join(dirs.output, 'sub'), { recursive: true })
      await until(() => own.file('output/sub/deeper/x_00001_.png') === undefined, 'a removed folder\'s files to be forgotten')
      event(sc, 'execution_end', { prompt_id: alicePrompt, status: 'success' })
      for (const key of ['output/old_00000_.png', 'output/old_02999_.png', 'output/olddir/inside.png']) {
        assert.equal(own.file(key), undefined, `${key} was there before: not claimed by the run`)
      }
    } finally {
      await sc.close()
    }
  })
})
