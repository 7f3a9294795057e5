/**
 * A user's own storage (sidecar/src/user-env/user-storage.ts) on a real temp file system laid
 * out as a host's: what status counts, and an attack table for the purge. Each row builds a
 * shape next to (or inside) alice's folders and asserts that after her purge her folders are
 * empty and every byte outside them is exactly as before: siblings whose names share her id as
 * a prefix, the shared `default/` set and the shared areas of input/output/temp, another user's
 * folders, symlinks inside hers that point out (to a folder, a file, another user's folder, the
 * host folder itself), her folder itself a symlink out, a file where her folder should be, host
 * folders that are themselves symlinks; and names that are not user ids (`..`, `default`, a
 * path) are refused before anything is looked at.
 */
import { describe, it, beforeEach, afterEach } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import type { HostFacts } from '../../sidecar/src/kernel/protocol.js'
import { folderName, MAX_ENTRIES, UserStorage } from '../../sidecar/src/user-env/user-storage.js'
import { tempDir } from './fixtures.js'

/** Every entry under `root` (links as their target text, files as their content), for before/after comparisons. */
function tree(root: string): Record<string, string> {
  const out: Record<string, string> = {}
  const visit = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const full = join(dir, name)
      const rel = relative(root, full)
      const st = lstatSync(full)
      if (st.isSymbolicLink()) out[rel] = `-> ${readlinkSync(full)}`
      else if (st.isDirectory()) {
        out[`${rel}/`] = ''
        visit(full)
      } else out[rel] = readFileSync(full, 'utf8')
    }
  }
  visit(root)
  return out
}

const put = (path: string, text = 'x') => {
  mkdirSync(dirname(path), { recursive: true })
  writeFileSync(path, text)
}

describe('user storage', () => {
  let root: string
  let host: string
  let outside: string
  let facts: HostFacts
  const alice = randomUUID()
  const bob = randomUUID()

  beforeEach(() => {
    root = tempDir('authsvc-userenv-')
    host = join(root, 'host')
    outside = join(root, 'outside')
    for (const d of ['user', 'input', 'output', 'temp']) mkdirSync(join(host, d), { recursive: true })
    put(join(outside, 'precious.txt'), 'keep me')
    put(join(outside, 'sub', 'deep.txt'), 'keep me too')
    facts = { user_dir: join(host, 'user'), input_dir: join(host, 'input'), output_dir: join(host, 'output'), temp_dir: join(host, 'temp') }
    // alice's own
    put(join(host, 'user', alice, 'workflows', 'a.json'), '{"a":1}')
    put(join(host, 'user', alice, 'workflows', 'sub', 'b.json'), '{"b":22}')
    put(join(host, 'user', alice, 'workflows', '.hidden.json'), '{}')
    put(join(host, 'user', alice, 'comfy.settings.json'), '{"s":1}')
    put(join(host, 'input', `u_${alice}`, 'in.png'), 'png')
    put(join(host, 'output', `u_${alice}`, 'deep', 'er', 'out.png'), 'output!')
    put(join(host, 'temp', `u_${alice}`, 'preview.png'), 'tmp')
    // everyone else's
    put(join(host, 'user', 'default', 'workflows', 'shared.json'), '{"shared":1}')
    put(join(host, 'user', bob, 'workflows', 'bob.json'), '{"bob":1}')
    put(join(host, 'output', `u_${bob}`, 'bob.png'), 'bob')
    put(join(host, 'output', 'shared.png'), 'shared output')
    put(join(host, 'input', 'shared-input.png'), 'shared input')
  })
  afterEach(() => rmSync(root, { recursive: true, force: true }))

  const storage = () => new UserStorage(() => facts)
  const aliceEmpty = () => {
    for (const path of [join(host, 'user', alice), ...['input', 'output', 'temp'].map((d) => join(host, d, `u_${alice}`))]) {
      if (existsSync(path)) assert.deepEqual(readdirSync(path), [], `${relative(host, path)} is empty`)
    }
  }
  /** Everything but alice's four folders, as it is now. */
  const othersNow = () => Object.fromEntries(Object.entries(tree(root)).filter(([rel]) => !rel.split('/').some((seg) => seg === alice || seg === `u_${alice}`)))

  it('status: per folder files and bytes, workflows as ComfyUI lists them (hidden left out), relative paths', async () => {
    const status = await storage().status(alice)
    assert.deepEqual(status.folders.map((f) => [f.kind, f.label, f.state, f.files, f.bytes]), [
      ['userdata', `user/${alice}`, 'folder', 4, 7 + 8 + 2 + 7],
      ['input', `input/u_${alice}`, 'folder', 1, 3],
      ['output', `output/u_${alice}`, 'folder', 1, 7],
      ['temp', `temp/u_${alice}`, 'folder', 1, 3],
    ])
    assert.deepEqual(status.workflows, { count: 2, bytes: 15 })
    assert.equal(status.truncated, false)
    assert.equal(status.folders[0].path, join(host, 'user', alice))
  })

  it('status of a user with nothing yet, and of a host that named no folders', async () => {
    const carol = randomUUID()
    const status = await storage().status(carol)
    assert.deepEqual(status.folders.map((f) => [f.state, f.files]), [['none', 0], ['none', 0], ['none', 0], ['none', 0]])
    facts = {}
    assert.deepEqual((await storage().status(alice)).folders.map((f) => [f.state, f.path]), [['unknown', null], ['unknown', null], ['unknown', null], ['unknown', null]])
  })

  it('a purge empties her four folders, keeps them, reports what was there, and touches nothing else', async () => {
    const others = othersNow()
    const report = await storage().purge(alice)
    assert.equal(report.files, 7)
    assert.equal(report.bytes, 24 + 3 + 7 + 3)
    assert.deepEqual(report.workflows, { count: 2, bytes: 15 })
    assert.ok(report.folders.every((f) => f.failed === undefined))
    aliceEmpty()
    for (const d of ['input', 'output', 'temp']) assert.ok(lstatSync(join(host, d, `u_${alice}`)).isDirectory())
    assert.deepEqual(othersNow(), others)
    assert.deepEqual((await storage().status(alice)).folders.map((f) => f.files), [0, 0, 0, 0])
  })

  const shapes: Array<[string, () => void]> = [
    ['siblings whose names start with her id or folder name', () => {
      put(join(host, 'user', `${alice}2`, 'workflows', 'x.json'))
      put(join(host, 'user', `${alice}-old`, 'x'))
      put(join(host, 'output', `u_${alice}2`, 'x.png'))
      put(join(host, 'output', `u_${alice}.bak`, 'x.png'))
      put(join(host, 'output', `U_${alice.toUpperCase()}x`, 'x.png'))
    }],
    ['a symlink in her folder to a folder outside', () => symlinkSync(outside, join(host, 'output', `u_${alice}`, 'link-out'))],
    ['a symlink in her folder to a file outside', () => symlinkSync(join(outside, 'precious.txt'), join(host, 'user', alice, 'workflows', 'precious.json'))],
    ['a symlink in her folder to another user\'s folder', () => symlinkSync(join(host, 'output', `u_${bob}`), join(host, 'output', `u_${alice}`, 'bobs'))],
    ['a symlink in her folder to the shared set', () => symlinkSync(join(host, 'user', 'default'), join(host, 'user', alice, 'workflows', 'shared'))],
    ['a symlink in her folder to the host folder itself', () => symlinkSync(join(host, 'output'), join(host, 'temp', `u_${alice}`, 'all-outputs'))],
    ['a relative symlink with .. in her folder', () => symlinkSync('../../../outside', join(host, 'input', `u_${alice}`, 'up'))],
    ['her output folder is itself a symlink out', () => {
      rmSync(join(host, 'output', `u_${alice}`), { recursive: true })
      symlinkSync(outside, join(host, 'output', `u_${alice}`))
    }],
    ['her userdata folder is a symlink to the shared set', () => {
      rmSync(join(host, 'user', alice), { recursive: true })
      symlinkSync(join(host, 'user', 'default'), join(host, 'user', alice))
    }],
    ['a file where her temp folder should be', () => {
      rmSync(join(host, 'temp', `u_${alice}`), { recursive: true })
      put(join(host, 'temp', `u_${alice}`), 'not a folder')
    }],
    ['a host folder that is a symlink to a folder elsewhere', () => {
      const real = join(root, 'real-output')
      mkdirSync(real)
      put(join(real, `u_${alice}`, 'mine.png'))
      put(join(real, 'shared.png'), 'shared elsewhere')
      put(join(real, `u_${bob}`, 'his.png'))
      facts = { ...facts, output_dir: join(root, 'output-link') }
      symlinkSync(real, join(root, 'output-link'))
    }],
  ]
  for (const [name, shape] of shapes) {
    it(`purge row: ${name}`, async () => {
      shape()
      const others = othersNow()
      const report = await storage().purge(alice)
      assert.deepEqual(othersNow(), others, 'nothing outside her folders changed')
      for (const folder of report.folders) {
        if (folder.state !== 'folder' || folder.path === null) continue
        assert.deepEqual(readdirSync(folder.path), [], `${folder.label} emptied`)
      }
    })
  }

  it('a folder of hers that is a link or a file is reported not_own and left as it is', async () => {
    rmSync(join(host, 'output', `u_${alice}`), { recursive: true })
    symlinkSync(outside, join(host, 'output', `u_${alice}`))
    const before = tree(outside)
    const report = await storage().purge(alice)
    const output = report.folders.find((f) => f.kind === 'output')!
    assert.equal(output.state, 'not_own')
    assert.equal(output.files, 0)
    assert.equal(readlinkSync(join(host, 'output', `u_${alice}`)), outside)
    assert.deepEqual(tree(outside), before)
  })

  const notIds = ['', '..', '.', 'default', '../default', `${alice}/..`, `../${bob}`, `u_${alice}`, `${alice}/x`, alice.toUpperCase(), `${alice} `, '/etc', 'authsvc-anonymous']
  for (const bad of notIds) {
    it(`a name that is not a user id is refused before any look: ${JSON.stringify(bad)}`, async () => {
      const before = tree(root)
      assert.throws(() => folderName('userdata', bad), /UUID/)
      await assert.rejects(storage().purge(bad), /UUID/)
      await assert.rejects(storage().status(bad), /UUID/)
      assert.deepEqual(tree(root), before)
    })
  }

  it('a walk stops after its bound of entries and says so; a purge still empties everything', async () => {
    assert.ok(MAX_ENTRIES >= 100_000)
    // alice has 11 entries (7 files, 4 folders) over her four folders
    assert.equal((await new UserStorage(() => facts, 11).status(alice)).truncated, false)
    assert.equal((await new UserStorage(() => facts, 10).status(alice)).truncated, true)
    const bounded = new UserStorage(() => facts, 4)
    const status = await bounded.status(alice)
    assert.equal(status.truncated, true)
    assert.ok(status.folders.reduce((n, f) => n + f.files, 0) < 7)
    const report = await bounded.purge(alice)
    assert.equal(report.truncated, true)
    aliceEmpty()
  })
})
