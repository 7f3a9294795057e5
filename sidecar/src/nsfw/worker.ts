/**
 * The classifier's worker thread: reads the file (or takes the bytes), answers the tag the image
 * carries itself (png-tag.ts) or the engine's scores. One image at a time; the pool (pool.ts)
 * keeps the queue. Everything here is off the sidecar's event loop, so no decision waits for a
 * model load, a decode or an inference of somebody else's image.
 */
import { readlinkSync } from 'node:fs'
import { open } from 'node:fs/promises'
import { setPriority } from 'node:os'
import { parentPort, workerData } from 'node:worker_threads'
import { ClassifyError, type Classified } from './classifier.js'
import { nsfwjsEngine, testEngine, type Engine, type EngineName } from './engines.js'
import { isAnimatedPng, pngTag } from './png-tag.js'

/** A job; or `cancel`: the job with this id is no one's any more (it stops where it can, answering `timeout`). */
export interface WorkerJob { id: number; path?: string; bytes?: ArrayBuffer; cancel?: true }
export type WorkerAnswer =
  | { id: number; ok: Classified }
  | { id: number; error: { reason: ClassifyError['reason']; message: string } }
  | { id: 0; ready: true }
  | { id: 0; failed: string }

/** The largest file read (a bigger one is unclassifiable: blocked for sfw_check users). */
const MAX_BYTES = 64 * 1024 * 1024

async function readFileAndFacts(path: string): Promise<{ bytes: Uint8Array; size: number; mtime_ms: number }> {
  let handle
  try {
    handle = await open(path, 'r')
  } catch (err) {
    throw new ClassifyError('unreadable', `cannot open the file: ${(err as NodeJS.ErrnoException).code ?? 'error'}`)
  }
  try {
    const s = await handle.stat({ bigint: true })
    if (!s.isFile()) throw new ClassifyError('unreadable', 'not a file')
    if (s.size > BigInt(MAX_BYTES)) throw new ClassifyError('unreadable', 'the file is too large to classify')
    const bytes = await handle.readFile()
    return { bytes, size: Number(s.size), mtime_ms: Number(s.mtimeNs / 1_000_000n) }
  } finally {
    await handle.close()
  }
}

/**
 * This thread (and the threads it starts: libvips's) runs at the lowest priority: on a machine the
 * host's prompts keep busy, classification takes what they leave (Linux: a thread's nice value is
 * its own, set through its thread id). Best effort: elsewhere it runs at the process's priority.
 */
function lowPriority(): void {
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/').pop())
    if (Number.isInteger(tid) && tid > 0) setPriority(tid, 19)
  } catch {
    // not Linux, or not allowed: the normal priority
  }
}

async function main(): Promise<void> {
  const port = parentPort
  if (port === null) return
  lowPriority()
  const name = (workerData as { engine: EngineName }).engine
  let engine: Engine
  try {
    engine = name === 'test' ? testEngine() : await nsfwjsEngine()
  } catch (err) {
    port.postMessage({ id: 0, failed: (err as Error).message } satisfies WorkerAnswer)
    return
  }
  port.postMessage({ id: 0, ready: true } satisfies WorkerAnswer)
  // the model runs one image at a time; the test engine answers each at once (its slow marker must not hold up the rest)
  const serial = name !== 'test'
  let chain = Promise.resolve()
  // jobs here (received, not answered), and those the pool no longer wants (everyone waiting for
  // them timed out): looked at between steps; a cancel that crossed the answer is dropped
  const here = new Set<number>()
  const cancelled = new Set<number>()
  port.on('message', (job: WorkerJob) => {
    if (job.cancel === true) {
      if (here.has(job.id)) cancelled.add(job.id)
      return
    }
    here.add(job.id)
    const live = () => !cancelled.has(job.id)
    const run = async (): Promise<void> => {
      try {
        if (!live()) throw new ClassifyError('timeout', 'nobody waits for it any more')
        let bytes: Uint8Array
        let facts: { size?: number; mtime_ms?: number } = {}
        if (job.path !== undefined) {
          const read = await readFileAndFacts(job.path)
          bytes = read.bytes
          facts = { size: read.size, mtime_ms: read.mtime_ms }
        } else {
          bytes = new Uint8Array(job.bytes ?? new ArrayBuffer(0))
        }
        const tagged = pngTag(bytes)
        if (tagged === null && isAnimatedPng(bytes)) throw new ClassifyError('not_an_image', 'an animated PNG: its frames cannot be decoded here')
        const ok: Classified = tagged !== null ? { source: 'metadata', is_nsfw: tagged, ...facts } : { source: 'detector', scores: await engine.scores(bytes, live), ...facts }
        port.postMessage({ id: job.id, ok } satisfies WorkerAnswer)
      } catch (err) {
        const reason = err instanceof ClassifyError ? err.reason : 'failed'
        port.postMessage({ id: job.id, error: { reason, message: (err as Error).message } } satisfies WorkerAnswer)
      } finally {
        here.delete(job.id)
        cancelled.delete(job.id)
      }
    }
    if (serial) chain = chain.then(run)
    else void run()
  })
}

void main()
