/**
 * The classifier behind its interface (sidecar/src/nsfw/): the metadata tag rows, the pool's
 * guarantees (deadline, bounded queue, a path queued once, urgent work first) with the
 * deterministic test engine in a real worker thread, and the real engine (nsfwjs) when its
 * optional packages are installed (CI installs them: there a missing install fails).
 */
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { pngTag, looksLikeImage } from '../../sidecar/src/nsfw/png-tag.js'
import { ClassifierPool } from '../../sidecar/src/nsfw/pool.js'
import { ClassifyError, isNsfw, reachesThreshold } from '../../sidecar/src/nsfw/classifier.js'
import { ANIMATION_FRAMES_MAX, classifierModulesDir, nsfwjsEngine } from '../../sidecar/src/nsfw/engines.js'
import { animatedPng, cleanPng, corruptPng, nsfwPng, oggBos, oggPage, safetensorsHead, slowPng, testPng } from '../helpers/nsfw-images.js'
import { notVisual } from '../../sidecar/src/nsfw/kinds.js'
import { scratchDir } from '../helpers/temp-dir.js'

const dir = scratchDir('nsfw-unit-')
const file = (name: string, bytes: Buffer): string => {
  const path = join(dir, name)
  writeFileSync(path, bytes)
  return path
}

describe('the metadata tag (authsvc:nsfw in a PNG text chunk)', () => {
  const rows: Array<[string, Buffer, boolean | null]> = [
    ['tEXt true', testPng(1, { text: { 'authsvc:nsfw': 'true' } }), true],
    ['tEXt false: never clears (the prompt author writes the chunks): the detector decides', testPng(1, { text: { 'authsvc:nsfw': 'false' } }), null],
    ['tEXt "false" as SaveImage writes extra_pnginfo (JSON)', testPng(1, { text: { 'authsvc:nsfw': '"false"' } }), null],
    ['tEXt sfw', testPng(1, { text: { 'authsvc:nsfw': 'sfw' } }), null],
    ['tEXt "true" as SaveImage writes extra_pnginfo (JSON)', testPng(1, { text: { 'authsvc:nsfw': '"true"' } }), true],
    ['tEXt NSFW (any case)', testPng(1, { text: { 'authsvc:nsfw': 'NSFW' } }), true],
    ['tEXt 0', testPng(1, { text: { 'authsvc:nsfw': '0' } }), null],
    ['tEXt with another value', testPng(1, { text: { 'authsvc:nsfw': 'maybe' } }), null],
    ['iTXt true', testPng(1, { itxt: { 'authsvc:nsfw': 'true' } }), true],
    ['another keyword', testPng(1, { text: { parameters: 'authsvc:nsfw true' } }), null],
    ['after the pixels (not read)', testPng(1, { textAfter: { 'authsvc:nsfw': 'true' } }), null],
    ['no text', testPng(1), null],
    ['not a PNG', corruptPng(), null],
    ['a truncated PNG', testPng(1, { text: { 'authsvc:nsfw': 'true' } }).subarray(0, 30), null],
  ]
  for (const [name, bytes, expected] of rows) {
    it(name, () => assert.equal(pngTag(bytes), expected))
  }
  it('knows PNG, JPEG and WebP by their first bytes', () => {
    assert.equal(looksLikeImage(testPng(2)), true)
    assert.equal(looksLikeImage(Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0, 0])), true)
    assert.equal(looksLikeImage(Buffer.from('RIFF\0\0\0\0WEBPVP8 ', 'latin1')), true)
    assert.equal(looksLikeImage(corruptPng()), false)
  })
})

describe('what kind of file a view serves, by its first bytes (kinds.ts): only plain audio and tensor files are left out of the policy', () => {
  const opus = Buffer.concat([Buffer.from('OpusHead', 'latin1'), Buffer.from([1, 2, 0, 0, 0x80, 0xbb, 0, 0, 0, 0, 0])])
  const theora = Buffer.concat([Buffer.from([0x80]), Buffer.from('theora', 'latin1'), Buffer.alloc(35)])
  const rows: Array<[string, Buffer, boolean]> = [
    ['FLAC', Buffer.concat([Buffer.from('fLaC', 'latin1'), Buffer.alloc(60)]), true],
    ['MP3 behind an ID3 tag', Buffer.concat([Buffer.from('ID3', 'latin1'), Buffer.from([4, 0, 0]), Buffer.alloc(60)]), true],
    ['an MPEG audio frame', Buffer.from([0xff, 0xfb, 0x90, 0x64, 0, 0, 0, 0]), true],
    ['WAV', Buffer.concat([Buffer.from('RIFF', 'latin1'), Buffer.alloc(4), Buffer.from('WAVEfmt ', 'latin1')]), true],
    ['Ogg Opus (SaveAudioOpus), its one stream named before the next page', Buffer.concat([oggBos(opus), oggPage(Buffer.from('OpusTags', 'latin1'))]), true],
    ['a saved latent (safetensors)', safetensorsHead(), true],
    ['PNG', testPng(1), false],
    ['JPEG', Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0, 0x10]), false],
    ['WebP', Buffer.concat([Buffer.from('RIFF', 'latin1'), Buffer.alloc(4), Buffer.from('WEBPVP8 ', 'latin1')]), false],
    ['GIF', Buffer.from('GIF89a', 'latin1'), false],
    ['Ogg Opus with a Theora video stream beside it', Buffer.concat([oggBos(opus, 1), oggBos(theora, 2), oggPage(Buffer.from('OpusTags', 'latin1'))]), false],
    ['Ogg whose streams are not all named within the bytes read', oggBos(opus), false],
    ['Ogg Theora', Buffer.concat([oggBos(theora), oggPage(Buffer.alloc(10))]), false],
    ['MP4 (even one branded as audio: it may carry video)', Buffer.concat([Buffer.alloc(4), Buffer.from('ftypM4A ', 'latin1')]), false],
    ['WebM / Matroska', Buffer.from([0x1a, 0x45, 0xdf, 0xa3, 0, 0]), false],
    ['SVG', Buffer.from('<svg xmlns="http://www.w3.org/2000/svg">', 'latin1'), false],
    ['plain text', Buffer.from('a prompt saved as text', 'latin1'), false],
    ['a 3D model (glTF binary, its textures are pictures)', Buffer.from('glTF\x02\x00\x00\x00', 'latin1'), false],
    ['a safetensors-like length with no JSON after it', Buffer.concat([Buffer.from([16, 0, 0, 0, 0, 0, 0, 0]), Buffer.from('xx')]), false],
    ['nothing', Buffer.alloc(0), false],
    // polyglots: bytes that start like an allowed kind and still open as a picture (a browser sniffs
    // them, or Pillow opens them for /view's preview and channel conversions)
    ['a BMP whose header reads as a safetensors length and "{"', (() => {
      const bmp = Buffer.alloc(54 + 16 * 3)
      bmp.write('BM', 0, 'latin1') // size 0 and reserved 0: bytes 0-7 read as the length 19778
      bmp.write('{"', 8, 'latin1') // the second reserved field
      bmp.writeUInt32LE(54, 10) // where the pixels start
      bmp.writeUInt32LE(40, 14)
      bmp.writeInt32LE(4, 18)
      bmp.writeInt32LE(4, 22)
      bmp.writeUInt16LE(1, 26)
      bmp.writeUInt16LE(24, 28)
      return bmp
    })(), false],
    ['an SVG in UTF-16 (its byte-order mark FF FE has the MPEG sync bits)', Buffer.from('\ufeff <svg xmlns="http://www.w3.org/2000/svg"><image href="data:image/png;base64,AAAA"/></svg>', 'utf16le'), false],
    ['an MPEG Layer I header (not what an MP3 is)', Buffer.from([0xff, 0xff, 0x90, 0x64]), false],
    ['an ID3 header with an impossible version', Buffer.concat([Buffer.from('ID3', 'latin1'), Buffer.from([9, 0, 0, 0, 0, 0, 0]), Buffer.alloc(20)]), false],
    ['a safetensors length with binary bytes in its "JSON"', Buffer.concat([Buffer.from([40, 0, 0, 0, 0, 0, 0, 0]), Buffer.from('{"a":', 'latin1'), Buffer.from([0, 1, 2]), Buffer.alloc(40, 0x41)]), false],
    ['a safetensors length of 64 KiB or more', Buffer.concat([Buffer.from([0, 0, 1, 0, 0, 0, 0, 0]), Buffer.from('{"a":1}', 'latin1')]), false],
  ]
  for (const [name, head, expected] of rows) it(name, () => assert.equal(notVisual(head), expected))
})

describe('thresholds', () => {
  const scores = { Drawing: 0, Hentai: 0.1, Neutral: 0.2, Porn: 0.65, Sexy: 0.05 }
  it('an image is NSFW when any class reaches its threshold', () => {
    assert.equal(reachesThreshold(scores, { Porn: 0.6 }), true)
    assert.equal(reachesThreshold(scores, { Porn: 0.7, Sexy: 0.05 }), true)
    assert.equal(reachesThreshold(scores, { Porn: 0.7, Hentai: 0.5 }), false)
    assert.equal(reachesThreshold(scores, {}), false)
  })
  it('a metadata tag says it itself', () => {
    assert.equal(isNsfw({ source: 'metadata', is_nsfw: true }, {}), true)
    assert.equal(isNsfw({ source: 'metadata', is_nsfw: false }, { Porn: 0 }), false)
  })
})

describe('the pool, with the deterministic engine in its worker thread', () => {
  const pool = new ClassifierPool('test', 3)
  after(() => pool.close())

  it('answers scores, a metadata tag, and the file\'s size and mtime', async () => {
    const nsfw = await pool.classify({ path: file('n.png', nsfwPng(1)) })
    assert.equal(nsfw.source, 'detector')
    assert.ok(nsfw.source === 'detector' && nsfw.scores.Porn > 0.9)
    assert.equal(nsfw.size, nsfwPng(1).length)
    assert.equal(typeof nsfw.mtime_ms, 'number')
    const clean = await pool.classify({ path: file('c.png', cleanPng(1)) })
    assert.ok(clean.source === 'detector' && clean.scores.Neutral > 0.9)
    const tagged = await pool.classify({ path: file('t.png', testPng(1, { text: { 'authsvc:nsfw': 'true' } })) })
    assert.deepEqual({ source: tagged.source, is_nsfw: tagged.source === 'metadata' && tagged.is_nsfw }, { source: 'metadata', is_nsfw: true })
    const bytes = await pool.classify({ bytes: nsfwPng(2) })
    assert.ok(bytes.source === 'detector' && bytes.scores.Porn > 0.9)
  })

  it('rejects what it cannot classify: not an image, an APNG (its frames are not decoded here), a missing file, a deadline passed', async () => {
    await assert.rejects(pool.classify({ path: file('bad.png', corruptPng()) }), (e: unknown) => e instanceof ClassifyError && e.reason === 'not_an_image')
    await assert.rejects(pool.classify({ path: file('anim.png', animatedPng(1)) }), (e: unknown) => e instanceof ClassifyError && e.reason === 'not_an_image' && /animated PNG/.test(e.message))
    // an APNG that tags itself NSFW is NSFW all the same
    assert.deepEqual(await pool.classify({ bytes: testPng(1, { animated: true, text: { 'authsvc:nsfw': 'true' } }) }), { source: 'metadata', is_nsfw: true })
    await assert.rejects(pool.classify({ path: join(dir, 'missing.png') }), (e: unknown) => e instanceof ClassifyError && e.reason === 'unreadable')
    await assert.rejects(pool.classify({ path: file('slow.png', slowPng(1)) }, { deadlineMs: 200 }), (e: unknown) => e instanceof ClassifyError && e.reason === 'timeout')
  })

  it('a classification nobody waits for any more stops: two that missed their deadlines do not hold the worker from the next one', async () => {
    await pool.classify({ path: file('warm.png', cleanPng(14)) }) // the worker is up: the next two reach it
    // the pool sends at most two jobs to its worker at once; both of these miss their deadlines
    // (without the stop each would hold its place for 60 s, and the next job would miss its own)
    await Promise.all([1, 2].map((i) => assert.rejects(pool.classify({ path: file(`slow-${i}.png`, slowPng(10 + i)) }, { deadlineMs: 200 }), (e: unknown) => e instanceof ClassifyError && e.reason === 'timeout')))
    const next = await pool.classify({ path: file('after-slow.png', cleanPng(13)) }, { deadlineMs: 5000 })
    assert.equal(next.source, 'detector')
    // a new request for a file whose job was stopped starts one of its own (and it answers, here late)
    await assert.rejects(pool.classify({ path: join(dir, 'slow-1.png') }, { deadlineMs: 200 }), (e: unknown) => e instanceof ClassifyError && e.reason === 'timeout')
  })

  it('holds a bounded queue: background work beyond it is refused, urgent work is not', async () => {
    const small = new ClassifierPool('test', 2)
    try {
      await small.warm()
      // two slow ones fill the worker, two more wait in the queue, the fifth finds it full
      const slow = (i: number) => small.classify({ path: file(`s${i}.png`, slowPng(i)) }, { deadlineMs: 1500 }).catch(() => 'gone')
      const held = [slow(1), slow(2)]
      await new Promise((resolve) => setImmediate(resolve))
      held.push(slow(3), slow(4))
      assert.equal(small.pending, 4)
      await assert.rejects(small.classify({ path: file('c2.png', cleanPng(2)) }), (e: unknown) => e instanceof ClassifyError && e.reason === 'queue_full')
      const urgent = small.classify({ path: file('c3.png', cleanPng(3)) }, { urgent: true, deadlineMs: 1000 })
      await assert.rejects(urgent, (e: unknown) => e instanceof ClassifyError && e.reason === 'timeout') // queued, not refused: the worker is busy
      await Promise.all(held)
    } finally {
      await small.close()
    }
  })

  it('while the host runs a prompt background work waits and urgent work does not', async () => {
    pool.hold(true)
    try {
      let done = false
      const background = pool.classify({ path: file('bg.png', cleanPng(21)) }).then((r) => ((done = true), r))
      const urgent = await pool.classify({ path: file('ur.png', nsfwPng(22)) }, { urgent: true })
      assert.ok(urgent.source === 'detector' && urgent.scores.Porn > 0.9)
      assert.equal(done, false, 'the background job waited')
      pool.hold(false)
      assert.equal((await background).source, 'detector')
    } finally {
      pool.hold(false)
    }
  })

  it('a path asked twice at once is classified once', async () => {
    const before = pool.answered
    const path = file('twice.png', cleanPng(9))
    const [a, b] = await Promise.all([pool.classify({ path }), pool.classify({ path }, { urgent: true })])
    assert.deepEqual(a, b)
    assert.equal(pool.answered - before, 1)
  })
})

const installed = existsSync(join(classifierModulesDir(), 'node_modules', 'nsfwjs', 'package.json'))
describe('the real engine (nsfwjs, MobileNetV2 on the wasm backend)', { skip: !installed && !process.env.CI ? 'the optional packages are not installed (sidecar/nsfw-classifier)' : false }, () => {
  it('classifies PNGs offline into the five classes, the same bytes the same way, in the worker as directly', async () => {
    const engine = await nsfwjsEngine()
    const bytes = testPng(7, { size: 64 })
    const direct = await engine.scores(bytes)
    assert.deepEqual(Object.keys(direct).sort(), ['Drawing', 'Hentai', 'Neutral', 'Porn', 'Sexy'])
    const sum = Object.values(direct).reduce((a, b) => a + b, 0)
    assert.ok(Math.abs(sum - 1) < 0.01, `scores sum to 1 (${sum})`)
    assert.deepEqual(await engine.scores(bytes), direct)
    const pool = new ClassifierPool('nsfwjs', 10)
    try {
      const viaWorker = await pool.classify({ path: file('real.png', bytes) })
      assert.ok(viaWorker.source === 'detector')
      assert.deepEqual(viaWorker.scores, direct)
      await assert.rejects(pool.classify({ path: file('real-bad.png', Buffer.concat([testPng(1).subarray(0, 40), Buffer.alloc(100)])) }), (e: unknown) => e instanceof ClassifyError && e.reason === 'not_an_image')
    } finally {
      await pool.close()
    }
  })

  it('an animation is judged by every frame: its scores are each class\'s worst over all frames, an odd frame in the middle included', { timeout: 120_000 }, async () => {
    const engine = await nsfwjsEngine()
    const sharp = createRequire(join(classifierModulesDir(), 'package.json'))('sharp') as (input: unknown, options?: unknown) => { webp(o: unknown): { toBuffer(): Promise<Buffer> } }
    // frame 5 is another picture: a sample of first, last and evenly between (0, 2, 4, 7) never sees it
    const frames = Array.from({ length: 8 }, (_, i) => testPng(i === 5 ? 200 : i, { size: 64 })) // all different: the encoder merges equal frames
    const still = await Promise.all(frames.map(async (f) => engine.scores(await sharp(f).webp({ lossless: true }).toBuffer())))
    const animation = await engine.scores(await sharp(frames, { join: { animated: true } }).webp({ lossless: true }).toBuffer())
    const classes = Object.keys(still[0]) as Array<keyof (typeof still)[0]>
    const sampled = [0, 2, 4, 7]
    const missedBySample = classes.filter((k) => Math.max(...still.map((s) => s[k])) > Math.max(...sampled.map((i) => still[i][k])) + 1e-3)
    assert.ok(missedBySample.length > 0, 'a frame outside the old sample holds the worst score of some class (else the row could not fail)')
    for (const k of classes) assert.ok(Math.abs(animation[k] - Math.max(...still.map((s) => s[k]))) < 1e-4, `${k}: ${animation[k]} against the frames' worst`)
    await assert.rejects(engine.scores(await sharp(Array.from({ length: ANIMATION_FRAMES_MAX + 1 }, (_, i) => testPng(i, { size: 16 })), { join: { animated: true } }).webp({ lossless: true }).toBuffer()), (e: unknown) => e instanceof ClassifyError && e.reason === 'not_an_image')
  })
})
