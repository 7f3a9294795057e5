/**
 * Where the per-owner edits of large host answers run: inline below
 * INLINE_BYTES (a worker round trip costs more than the edit), in one worker
 * thread above it, so filtering a history of thousands of entries for one user
 * never stalls another user's decision. The worker starts on first use and is
 * replaced if it dies (the jobs in flight then fail: their requests are refused).
 */
import { fileURLToPath, pathToFileURL } from 'node:url'
import { Worker } from 'node:worker_threads'
import { filterHistory, filterQueue } from './host-json-filters.js'

export const INLINE_BYTES = 64 * 1024

const FROM_SOURCES = import.meta.url.endsWith('.ts')
const WORKER = fileURLToPath(new URL(FROM_SOURCES ? './filter-worker.ts' : './filter-worker.js', import.meta.url))

type Job =
  | { kind: 'history'; own: string[]; maxItems: number | null; offset: number }
  | { kind: 'queue'; own: string[]; seesAll: boolean }

/** From the TypeScript sources (tests): the worker registers tsx first, then loads its module. */
function sourceWorker(): Worker {
  const code = `const { register } = await import(${JSON.stringify(import.meta.resolve('tsx/esm/api'))}); register(); await import(${JSON.stringify(pathToFileURL(WORKER).href)})`
  return new Worker(new URL(`data:text/javascript,${encodeURIComponent(code)}`))
}

export type FilterJob = Job & { id: number; body: ArrayBuffer }
export type FilterJobResult = { id: number; bytes?: ArrayBuffer; error?: string }

export class FilterPool {
  private worker: Worker | null = null
  private nextId = 1
  private readonly waiting = new Map<number, { resolve: (r: FilterJobResult) => void; reject: (e: Error) => void }>()

  constructor(private readonly inlineBytes = INLINE_BYTES) {}

  /** The caller's own /history entries, as the bytes of the new answer. */
  async history(body: Buffer, own: ReadonlySet<string>, maxItems: number | null, offset: number): Promise<Buffer> {
    if (body.length < this.inlineBytes) return Buffer.from(filterHistory(body.toString('utf8'), own, maxItems, offset), 'utf8')
    return this.bytes(await this.send({ kind: 'history', own: [...own], maxItems, offset }, body))
  }

  /** The /queue the caller may see, as the bytes of the new answer. */
  async queue(body: Buffer, own: ReadonlySet<string>, seesAll: boolean): Promise<Buffer> {
    if (body.length < this.inlineBytes) return Buffer.from(filterQueue(body.toString('utf8'), own, seesAll), 'utf8')
    return this.bytes(await this.send({ kind: 'queue', own: [...own], seesAll }, body))
  }

  private bytes(result: FilterJobResult): Buffer {
    if (result.bytes === undefined) throw new Error(result.error ?? 'filter worker answered nothing')
    return Buffer.from(result.bytes)
  }

  private send(job: Job, body: Buffer): Promise<FilterJobResult> {
    const worker = this.start()
    const id = this.nextId++
    // a copy the worker owns: the payload's memory may be a slice of a larger frame buffer
    const copy = new Uint8Array(body.length)
    copy.set(body)
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject })
      worker.postMessage({ ...job, id, body: copy.buffer } satisfies FilterJob, [copy.buffer])
    })
  }

  private start(): Worker {
    if (this.worker) return this.worker
    const worker = FROM_SOURCES ? sourceWorker() : new Worker(WORKER)
    worker.unref()
    worker.on('message', (result: FilterJobResult) => {
      const entry = this.waiting.get(result.id)
      this.waiting.delete(result.id)
      entry?.resolve(result)
    })
    const fail = (err: Error): void => {
      if (this.worker === worker) this.worker = null
      for (const entry of this.waiting.values()) entry.reject(err)
      this.waiting.clear()
    }
    worker.on('error', fail)
    worker.on('exit', (code) => fail(new Error(`filter worker exited (${code})`)))
    this.worker = worker
    return worker
  }

  async close(): Promise<void> {
    const worker = this.worker
    this.worker = null
    if (worker) await worker.terminate()
  }
}
