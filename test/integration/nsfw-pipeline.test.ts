/**
 * The content-safety pipeline with the REAL classifier (nsfwjs's MobileNetV2 on the wasm backend,
 * in the sidecar's worker thread), on a real sqlite file (issue 23):
 *
 * - the tag stored for a new output (the host's `executed` event) and for a scanned image equals
 *   what the classifier says when called directly on that file;
 * - a scan of 200 images completes, survives a sidecar restart half-way (its progress and the
 *   tags made so far are stored; the restarted sidecar resumes once the host names its folders
 *   and does not classify again what was tagged), and tags them all.
 *
 * Needs the optional packages (sidecar/nsfw-classifier, installed by install.py when
 * nsfw.enabled; CI installs them and there their absence fails).
 */
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { PROTOCOL_VERSION } from '../../sidecar/src/kernel/protocol.js'
import { classifierModulesDir, nsfwjsEngine } from '../../sidecar/src/nsfw/engines.js'
import type { NsfwFeature } from '../../sidecar/src/nsfw/feature.js'
import { poll } from '../helpers/stack.js'
import { testPng } from '../helpers/nsfw-images.js'
import { openSidecar, tempDir, type Sidecar } from '../unit/fixtures.js'

const installed = existsSync(join(classifierModulesDir(), 'node_modules', 'nsfwjs', 'package.json'))
const SKIP = !installed && !process.env.CI ? 'the optional classifier packages are not installed (sidecar/nsfw-classifier)' : false
const IMAGES = 200

const nsfwOf = (sc: Sidecar) => {
  const feature = sc.built.features.find((f) => f.name === 'nsfw') as NsfwFeature
  const bound = feature.bound()
  assert.ok(bound, 'the policy is on')
  return bound
}

/** The plugin's hello: it names the host's folders. */
function hello(sc: Sidecar, dir: string): void {
  sc.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 'test', host: { output_dir: join(dir, 'output'), input_dir: join(dir, 'input'), temp_dir: join(dir, 'temp') } })
}

describe('the NSFW pipeline with the real classifier', { skip: SKIP }, () => {
  const dir = tempDir('authsvc-nsfw-')
  const hostDir = join(dir, 'host')
  for (const d of ['input', 'output', 'temp']) mkdirSync(join(hostDir, d), { recursive: true })
  let sc: Sidecar | undefined
  after(async () => {
    await sc?.close()
  })
  const open = async () => openSidecar({ dir, config: { nsfw: { enabled: true } } })

  it('a new output reported by the host is tagged with what the classifier says of that file', async () => {
    sc = await open()
    hello(sc, hostDir)
    const bytes = testPng(999, { size: 48 })
    writeFileSync(join(hostDir, 'output', 'fresh.png'), bytes)
    sc.handlers.event({ type: 'event', name: 'executed', t: Date.now() / 1000, data: { prompt_id: 'p1', output: { images: [{ filename: 'fresh.png', subfolder: '', type: 'output' }] } } })
    const { tags } = nsfwOf(sc)
    assert.ok(await poll(async () => tags.get(join(hostDir, 'output', 'fresh.png')) !== undefined, 60_000), 'tagged')
    const tag = tags.get(join(hostDir, 'output', 'fresh.png'))!
    const direct = await (await nsfwjsEngine()).scores(readFileSync(join(hostDir, 'output', 'fresh.png')))
    assert.equal(tag.source, 'detector')
    assert.deepEqual(tag.scores, direct)
    assert.deepEqual([tag.type, tag.subfolder, tag.filename, tag.size], ['output', '', 'fresh.png', bytes.length])
  })

  it(`a scan of ${IMAGES} images survives a restart half-way and tags them all, each as the classifier says`, async () => {
    for (let i = 0; i < IMAGES; i++) {
      const sub = join(hostDir, 'output', `batch${i % 4}`)
      mkdirSync(sub, { recursive: true })
      writeFileSync(join(sub, `img${String(i).padStart(3, '0')}.png`), testPng(i, { size: 24 }))
    }
    if (sc === undefined) {
      sc = await open()
      hello(sc, hostDir)
    }
    const total = IMAGES + (existsSync(join(hostDir, 'output', 'fresh.png')) ? 1 : 0) // and the output of the row before
    const first = nsfwOf(sc)
    const started = await sc!.app.inject({ method: 'POST', url: '/authsvc/api/nsfw-management', payload: { action: 'scan_all' } })
    assert.equal(started.statusCode, 401) // not without an admin: checked here once, the rest drives the feature
    await first.scanner.start(false)
    assert.ok(await poll(async () => first.scanner.status().done >= total / 2, 120_000), 'half-way')
    await sc!.close({ keepDir: true })
    sc = undefined
    const taggedBefore = first.tags.size

    sc = await open()
    const second = nsfwOf(sc)
    await second.loaded
    assert.equal(second.tags.size >= taggedBefore, true)
    // the job's start restores the stored state: a scan runs, waiting for the host's folders
    assert.ok(await poll(async () => second.scanner.status().running, 10_000), 'the stored state says a scan runs')
    hello(sc, hostDir) // the host names its folders: the scan goes on
    assert.ok(await poll(async () => !second.scanner.status().running, 180_000), 'the scan finished')
    const status = second.scanner.status()
    assert.deepEqual([status.total, status.done, status.failed], [total, total, 0])
    assert.equal(second.tags.size, total)
    // what was tagged before the restart was not classified again
    assert.ok(second.pool.answered <= total - taggedBefore + 2, `classified after the restart: ${second.pool.answered}, tagged before: ${taggedBefore}`)
    const engine = await nsfwjsEngine()
    for (const i of [0, 57, 123, 199]) {
      const path = join(hostDir, 'output', `batch${i % 4}`, `img${String(i).padStart(3, '0')}.png`)
      const tag = second.tags.get(path)
      assert.ok(tag, path)
      assert.deepEqual(tag.scores, await engine.scores(readFileSync(path)))
    }
  })
})
