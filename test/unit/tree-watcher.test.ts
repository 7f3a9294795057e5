/**
 * The directory watcher under the model cache and the host-folder watcher (real folders, real
 * inotify): every file that appears or goes is reported once, whatever the folder holds and
 * however the change is made (a burst, a new subfolder, a renamed folder, the root itself moved
 * away or deleted and made again); writes into a known file are nothing; what a folder held when
 * a quiet watch began is not news. "Nothing was reported" is always checked behind a marker file
 * created afterwards: batches run in order, so once the marker is seen, the earlier change was
 * looked at.
 */
import assert from 'node:assert/strict'
import { appendFileSync, mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, beforeEach, describe, it } from 'node:test'
import { TreeWatcher } from '../../sidecar/src/isolation/tree-watcher.js'

const silent = { warn() {} }

describe('TreeWatcher', () => {
  let base: string
  let root: string
  let seen: Array<[string, boolean]>
  let watcher: TreeWatcher
  beforeEach(() => {
    base = mkdtempSync(join(tmpdir(), 'authsvc-tree-'))
    root = join(base, 'output')
    mkdirSync(root)
    seen = []
    watcher = new TreeWatcher((abs, present) => seen.push([abs.slice(base.length + 1), present]), silent, 'test folder')
  })
  afterEach(() => {
    watcher.close()
    rmSync(base, { recursive: true, force: true })
  })

  const count = (what: string, present: boolean) => seen.filter(([p, s]) => p === what && s === present).length
  /** Waits (bounded) until `what` has been reported with `present`, `times` times in all. */
  async function reported(what: string, present = true, times = 1): Promise<void> {
    const deadline = Date.now() + 5000
    while (count(what, present) < times) {
      if (Date.now() > deadline) throw new Error(`not reported ${present ? 'present' : 'gone'}: ${what}; seen ${JSON.stringify(seen.slice(-10))}`)
      await new Promise((r) => setTimeout(r, 10))
    }
  }
  let markers = 0
  /** A new file in `dir`, waited for: every change made before it has been looked at. */
  async function marker(dir = root): Promise<void> {
    const name = `marker-${++markers}.png`
    writeFileSync(join(dir, name), 'm')
    await reported(join(dir, name).slice(base.length + 1))
  }

  it('a quiet watch reports nothing that was there; each later file once, its removal once', async () => {
    writeFileSync(join(root, 'old.png'), 'x')
    mkdirSync(join(root, 'olddir'))
    writeFileSync(join(root, 'olddir', 'inside.png'), 'x')
    await watcher.add(root, { quiet: true })
    writeFileSync(join(root, 'new.png'), 'x')
    await reported('output/new.png')
    rmSync(join(root, 'new.png'))
    await reported('output/new.png', false)
    writeFileSync(join(root, 'olddir', 'later.png'), 'x')
    await reported('output/olddir/later.png')
    await marker()
    assert.deepEqual(seen.filter(([p]) => p.includes('old.png') || p.includes('inside.png')), [], 'what was there is not news')
    assert.equal(count('output/new.png', true), 1)
  })

  it('a watch that is not quiet reports what the folder holds (the model cache)', async () => {
    writeFileSync(join(root, 'a.safetensors'), 'x')
    mkdirSync(join(root, 'sub'))
    writeFileSync(join(root, 'sub', 'b.safetensors'), 'x')
    await watcher.add(root)
    assert.deepEqual(seen.sort(), [['output/a.safetensors', true], ['output/sub/b.safetensors', true]])
  })

  it('writes into a known file are nothing; a burst of 300 new files is each reported once', async () => {
    await watcher.add(root, { quiet: true })
    writeFileSync(join(root, 'big.png'), 'x')
    await reported('output/big.png')
    for (let i = 0; i < 20; i++) appendFileSync(join(root, 'big.png'), Buffer.alloc(64 * 1024))
    for (let i = 0; i < 300; i++) writeFileSync(join(root, `burst_${i}.png`), 'x') // more names than one batch looks at one by one
    await marker()
    for (let i = 0; i < 300; i++) assert.equal(count(`output/burst_${i}.png`, true), 1, `burst_${i}`)
    assert.equal(seen.filter(([p]) => p === 'output/big.png').length, 1, 'written into, never reported again')
  })

  it('a new subfolder with files written at once, and a folder renamed or removed', async () => {
    await watcher.add(root, { quiet: true })
    mkdirSync(join(root, 'sub', 'deeper'), { recursive: true })
    writeFileSync(join(root, 'sub', 'deeper', 'x.png'), 'x') // before the new folder's watch can exist
    await reported('output/sub/deeper/x.png')
    renameSync(join(root, 'sub'), join(root, 'moved'))
    await reported('output/sub/deeper/x.png', false)
    await reported('output/moved/deeper/x.png')
    writeFileSync(join(root, 'moved', 'deeper', 'y.png'), 'y')
    await reported('output/moved/deeper/y.png')
    rmSync(join(root, 'moved'), { recursive: true })
    await reported('output/moved/deeper/x.png', false)
    await reported('output/moved/deeper/y.png', false)
  })

  it('the root moved away and made again: its files go, the new root is watched, the old one no longer', async () => {
    await watcher.add(root, { quiet: true })
    writeFileSync(join(root, 'a.png'), 'x')
    await reported('output/a.png')
    renameSync(root, join(base, 'output.old'))
    await reported('output/a.png', false)
    mkdirSync(root)
    writeFileSync(join(root, 'a.png'), 'new')
    await reported('output/a.png', true, 2) // the second time: the new root's own file
    writeFileSync(join(base, 'output.old', 'stray.png'), 'x')
    await marker()
    assert.deepEqual(seen.filter(([p]) => p.includes('stray')), [], 'the moved folder is not watched as the root')
  })

  it('the root deleted and made again is watched again', async () => {
    await watcher.add(root, { quiet: true })
    writeFileSync(join(root, 'a.png'), 'x')
    await reported('output/a.png')
    rmSync(root, { recursive: true })
    await reported('output/a.png', false)
    mkdirSync(root)
    writeFileSync(join(root, 'b.png'), 'x')
    await reported('output/b.png')
  })

  it('a root that does not exist yet is watched once it appears', async () => {
    const later = join(base, 'later', 'models')
    await watcher.add(later, { quiet: true })
    mkdirSync(later, { recursive: true })
    writeFileSync(join(later, 'm.safetensors'), 'x')
    await reported('later/models/m.safetensors')
  })

  it('images written into the parent of roots waited for cost one look each, not one per root (ComfyUI\'s output/checkpoints, output/loras, ...)', async () => {
    const missing = ['checkpoints', 'clip', 'vae', 'diffusion_models', 'loras']
    await watcher.add(root, { quiet: true })
    for (const name of missing) await watcher.add(join(root, name), { quiet: true })
    const before = watcher.looks
    for (let i = 0; i < 20; i++) {
      const file = join(root, `img_${i}.png`)
      writeFileSync(file, 'x')
      for (let k = 0; k < 5; k++) appendFileSync(file, 'more') // an image being written: 'change' events
    }
    await marker()
    for (let i = 0; i < 20; i++) assert.equal(count(`output/img_${i}.png`, true), 1)
    // one stat per new file (and the marker); a wait re-armed on every event would add about 3 per root per event
    assert.ok(watcher.looks - before <= 21, `${watcher.looks - before} stats for 21 new files`)
    // and a root waited for is still seen when it appears
    mkdirSync(join(root, 'loras'))
    writeFileSync(join(root, 'loras', 'style.safetensors'), 'x')
    await reported('output/loras/style.safetensors')
  })

  it('a symlink loop is entered once; a symlinked file counts as a file', async () => {
    mkdirSync(join(root, 'a'))
    symlinkSync(join(root, 'a'), join(root, 'a', 'loop'))
    writeFileSync(join(base, 'target.png'), 'x')
    symlinkSync(join(base, 'target.png'), join(root, 'a', 'link.png'))
    await watcher.add(root)
    assert.deepEqual(seen, [['output/a/link.png', true]])
  })

  it('a directory it is told never to enter (the download staging directory) is not: nothing in it is reported, at the start or later', async () => {
    watcher.close()
    watcher = new TreeWatcher((abs, present) => seen.push([abs.slice(base.length + 1), present]), silent, 'model directory', new Set(['.git', '.authsvc-partial']))
    mkdirSync(join(root, '.authsvc-partial'))
    writeFileSync(join(root, '.authsvc-partial', 'old.safetensors.1.authsvc-partial'), 'x')
    mkdirSync(join(root, 'sub', '.authsvc-partial'), { recursive: true })
    await watcher.add(root)
    assert.equal(seen.length, 0, `not entered at the start, at any depth: ${JSON.stringify(seen)}`)
    writeFileSync(join(root, '.authsvc-partial', 'new.safetensors.2.authsvc-partial'), 'x')
    for (let i = 0; i < 20; i++) appendFileSync(join(root, '.authsvc-partial', 'new.safetensors.2.authsvc-partial'), 'more')
    writeFileSync(join(root, 'sub', '.authsvc-partial', 'deep.authsvc-partial'), 'x')
    mkdirSync(join(root, 'later', '.authsvc-partial'), { recursive: true })
    writeFileSync(join(root, 'later', '.authsvc-partial', 'made-after.authsvc-partial'), 'x')
    renameSync(join(root, '.authsvc-partial', 'new.safetensors.2.authsvc-partial'), join(root, 'placed.safetensors'))
    await reported('output/placed.safetensors')
    await marker(join(root, 'later'))
    await marker()
    assert.deepEqual(seen.filter(([p]) => p.includes('.authsvc-partial')), [], 'never anything inside it')
    assert.equal(count('output/placed.safetensors', true), 1, 'a file moved out of it into the folder is reported')
  })

  it('after close nothing is reported', async () => {
    await watcher.add(root, { quiet: true })
    watcher.close()
    writeFileSync(join(root, 'late.png'), 'x')
    const other = new TreeWatcher((abs, present) => seen.push([abs.slice(base.length + 1), present]), silent)
    try {
      await other.add(join(base, 'output'), { quiet: true })
      writeFileSync(join(root, 'marker.png'), 'x')
      await reported('output/marker.png')
      assert.equal(count('output/marker.png', true), 1, 'reported by the open watcher only')
      assert.equal(count('output/late.png', true), 0)
    } finally {
      other.close()
    }
  })
})
