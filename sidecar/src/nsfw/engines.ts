/**
 * What runs inside the classifier's worker thread (worker.ts): an engine turns image bytes into
 * scores. Two engines:
 *
 * - `nsfwjs`: nsfwjs's bundled MobileNetV2 on TensorFlow.js's WebAssembly backend, images decoded
 *   and resized to 224×224 by sharp. Its packages are optional and live in their own folder
 *   (sidecar/nsfw-classifier/, `AUTHSVC_NSFW_MODULES` to name another); they are loaded through
 *   ESM `import` (through `require()` the model takes 13 s to load instead of about one).
 * - `test`: deterministic, for the test suites only (config `nsfw.classifier: "test"`, refused
 *   without AUTHSVC_NSFW_TEST_CLASSIFIER=1). It decides by a marker in the image's bytes, which a
 *   test writes into a PNG text chunk: `AUTHSVC-TEST:nsfw` scores Porn 0.97;
 *   `AUTHSVC-TEST:slow` answers only after 60 s (a classification that misses every deadline);
 *   bytes that are not a PNG, JPEG or WebP are unclassifiable; anything else is Neutral 0.98.
 */
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { ClassifyError, scoresOf, type Scores } from './classifier.js'
import { looksLikeImage } from './png-tag.js'

export type EngineName = 'nsfwjs' | 'test'

export interface Engine {
  /** `live()` turning false: nobody wants the answer any more; the engine stops where it can (ClassifyError `timeout`) */
  scores(bytes: Uint8Array, live?: () => boolean): Promise<Scores>
}

const stopped = (): ClassifyError => new ClassifyError('timeout', 'nobody waits for it any more')

/** Where the optional packages are installed (install.py, scripts/start.mjs install them there). */
export function classifierModulesDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.AUTHSVC_NSFW_MODULES) return env.AUTHSVC_NSFW_MODULES
  // src/nsfw/ and dist/nsfw/ are both two levels below sidecar/
  return join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'nsfw-classifier')
}

export const TEST_MARKERS = { nsfw: 'AUTHSVC-TEST:nsfw', slow: 'AUTHSVC-TEST:slow' } as const

export function testEngine(): Engine {
  return {
    async scores(bytes, live = () => true) {
      if (!looksLikeImage(bytes)) throw new ClassifyError('not_an_image', 'not a PNG, JPEG or WebP image')
      const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('latin1')
      if (text.includes(TEST_MARKERS.slow)) {
        // 60 s, in steps, as a long animation's frames are: it stops once nobody waits for it
        for (let waited = 0; waited < 60_000; waited += 50) {
          if (!live()) throw stopped()
          await new Promise((resolve) => setTimeout(resolve, 50))
        }
      }
      if (text.includes(TEST_MARKERS.nsfw)) return { Drawing: 0, Hentai: 0.01, Neutral: 0.02, Porn: 0.97, Sexy: 0 }
      return { Drawing: 0.01, Hentai: 0, Neutral: 0.98, Porn: 0.01, Sexy: 0 }
    },
  }
}

interface Tensor { dispose(): void }
interface Tf {
  setBackend(name: string): Promise<boolean>
  ready(): Promise<void>
  tensor3d(values: Uint8Array, shape: [number, number, number], dtype: 'int32'): Tensor
}
interface Model { classify(img: Tensor, topk?: number): Promise<Array<{ className: string; probability: number }>> }
interface Sharp {
  metadata(): Promise<{ pages?: number; width?: number; height?: number; pageHeight?: number }>
  removeAlpha(): Sharp
  resize(w: number, h: number, o: { fit: 'fill' }): Sharp
  raw(): Sharp
  toBuffer(o: { resolveWithObject: true }): Promise<{ data: Buffer; info: { width: number; height: number; channels: number } }>
}
type SharpFn = ((input: Uint8Array, options?: { limitInputPixels?: number; failOn?: string; page?: number; pages?: number; raw?: { width: number; height: number; channels: number } }) => Sharp) & { concurrency?(threads: number): number }

const SIDE = 224
/**
 * An animation (WebP) is judged by every frame, the worst counting: frames left out are
 * exactly where a harmless first frame would carry the rest past the policy. Its frames are
 * decoded once, together (libvips decodes frame n of an animated WebP by replaying the frames
 * before it: one frame at a time cost quadratic time, a minute for 100 frames of 512×512), then
 * each is scaled and classified (about 80 ms a frame on this machine). More frames, or more
 * pixels in all, than these: unclassifiable.
 */
export const ANIMATION_FRAMES_MAX = 100
const ANIMATION_PIXELS_MAX = 32 * 1024 * 1024

/** The packages, or a clear error saying how to install them. */
export async function nsfwjsEngine(dir = classifierModulesDir()): Promise<Engine> {
  const req = createRequire(join(dir, 'package.json'))
  const load = async <T>(name: string): Promise<T> => {
    let path: string
    try {
      path = req.resolve(name)
    } catch {
      throw new Error(`the NSFW classifier's packages are not installed in ${dir} (run install.py, or npm install in that folder)`)
    }
    return (await import(pathToFileURL(path).href)) as T
  }
  const tf = await load<Tf>('@tensorflow/tfjs')
  await load<object>('@tensorflow/tfjs-backend-wasm')
  await tf.setBackend('wasm')
  await tf.ready()
  // nsfwjs's own ESM entry (its package's `import` export); require.resolve would name the CJS one
  const nsfwjs = (await import(pathToFileURL(join(dir, 'node_modules', 'nsfwjs', 'dist', 'esm', 'index.js')).href)) as { load(name: string): Promise<Model> }
  const sharp = (await load<{ default: SharpFn }>('sharp')).default
  sharp.concurrency?.(1) // one libvips thread: the host's prompts keep the rest of the machine
  // nsfwjs prints a hint about hosting the model on every load: not a line for the host's console
  const quiet = console.info
  console.info = () => {}
  let model: Model
  try {
    model = await nsfwjs.load('MobileNetV2')
  } finally {
    console.info = quiet
  }
  return {
    async scores(bytes, live = () => true) {
      if (!looksLikeImage(bytes)) throw new ClassifyError('not_an_image', 'not a PNG, JPEG or WebP image')
      // An animated WebP is judged by all its frames (ANIMATION_FRAMES_MAX); an APNG, whose
      // frames libvips does not decode, never reaches here (worker.ts)
      const undecodable = (err: unknown) => new ClassifyError('not_an_image', `the image could not be decoded: ${(err as Error).message}`)
      let meta: { pages?: number; width?: number; height?: number; pageHeight?: number }
      try {
        meta = await sharp(bytes, { limitInputPixels: 64 * 1024 * 1024 }).metadata()
      } catch (err) {
        throw undecodable(err)
      }
      const pages = Math.max(1, meta.pages ?? 1)
      if (pages > ANIMATION_FRAMES_MAX) throw new ClassifyError('not_an_image', `an animation of ${pages} frames (more than ${ANIMATION_FRAMES_MAX} are not classified)`)
      // every frame as raw pixels: one decode for a still image, one for all frames of an animation
      const frames: Array<() => Sharp> = []
      if (pages === 1) {
        frames.push(() => sharp(bytes, { limitInputPixels: 64 * 1024 * 1024 }))
      } else {
        const width = meta.width ?? 0
        const height = meta.pageHeight ?? meta.height ?? 0
        if (width * height * pages > ANIMATION_PIXELS_MAX || width === 0 || height === 0) throw new ClassifyError('not_an_image', `an animation of ${pages} frames of ${width}×${height} (too many pixels to classify)`)
        let all: { data: Buffer; info: { width: number; height: number; channels: number } }
        try {
          all = await sharp(bytes, { limitInputPixels: ANIMATION_PIXELS_MAX, pages: -1 }).raw().toBuffer({ resolveWithObject: true })
        } catch (err) {
          throw undecodable(err)
        }
        const channels = all.info.channels
        const frameBytes = width * height * channels
        if (all.info.width !== width || all.data.length < frameBytes * pages) throw new ClassifyError('not_an_image', 'the animation\'s frames could not be decoded')
        for (let i = 0; i < pages; i++) {
          const frame = all.data.subarray(i * frameBytes, (i + 1) * frameBytes)
          frames.push(() => sharp(frame, { raw: { width, height, channels } }))
        }
      }
      let worst: Record<string, number> | null = null
      for (const frame of frames) {
        if (!live()) throw stopped()
        let decoded: { data: Buffer; info: { width: number; height: number } }
        try {
          decoded = await frame().removeAlpha().resize(SIDE, SIDE, { fit: 'fill' }).raw().toBuffer({ resolveWithObject: true })
        } catch (err) {
          throw undecodable(err)
        }
        const img = tf.tensor3d(new Uint8Array(decoded.data), [decoded.info.height, decoded.info.width, 3], 'int32')
        let scores: Record<string, number>
        try {
          scores = scoresOf(await model.classify(img, 5)) as Record<string, number>
        } finally {
          img.dispose()
        }
        worst = worst === null ? scores : Object.fromEntries(Object.keys(scores).map((k) => [k, Math.max(scores[k], worst![k] ?? 0)]))
      }
      return worst as ReturnType<typeof scoresOf>
    },
  }
}
