/**
 * Where the per-owner edits of large host answers run: inline below
 * INLINE_BYTES (a worker round trip costs more than the edit), in worker threads
 * above it, so filtering a history of thousands of entries for one user never
 * stalls another user's decision, nor (while fewer than MAX_WORKERS edits run)
 * another user's filtered read. Threads start on demand; one that dies is
 * replaced (the jobs it had then fail: their requests are refused).
 */
import type { Worker } from 'node:worker_threads'
import { startThread } from '../kernel/threads.js'
import { filterHistory, filterQueue } from './host-json-filters.js'

export const INLINE_BYTES = 64 * 1024

type Job =
  | { kind: 'history'; own: string[]; maxItems: number | null; offset: number }
  | { kind: 'queue'; own: string[]; seesAll: boolean }

export type FilterJob = Job & { id: number; body: ArrayBuffer }
export type FilterJobResult = { id: number; bytes?: ArrayBuffer; error?: string }

interface Slot {
  worker: Worker
  /** jobs sent to it and not answered yet */
  inFlight: number
  idleTimer: NodeJS.Timeout | null
}

/** At most this many worker threads at once; a thread beyond the first ends after IDLE_MS unused. */
const MAX_WORKERS = 4
const IDLE_MS = 30_000

export class FilterPool {
  private readonly slots: Slot[] = []
  private nextId = 1
  private readonly waiting = new Map<number, { slot: Slot; resolve: (r: FilterJobResult) => void; reject: (e: Error) => void }>()

  constructor(private readonly inlineBytes = INLINE_BYTES, private readonly maxWorkers = MAX_WORKERS) {}

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

  /** Worker threads running now (tests). */
  get size(): number {
    return this.slots.length
  }

  private bytes(result: FilterJobResult): Buffer {
    if (result.bytes === undefined) throw new Error(result.error ?? 'filter worker answered nothing')
    return Buffer.from(result.bytes)
  }

  /**
   * A job goes to an idle thread, else to a new one (up to `maxWorkers`), else to the least busy:
   * one slow edit (a huge history) never holds up another request's, while threads are free.
   */
  private pick(): Slot {
    const idle = this.slots.find((s) => s.inFlight === 0)
    if (idle) return idle
    if (this.slots.length < this.maxWorkers) return this.start()
    return this.slots.reduce((a, b) => (b.inFlight < a.inFlight ? b : a))
  }

  private send(job: Job, body: Buffer): Promise<FilterJobResult> {
    const slot = this.pick()
    if (slot.idleTimer) clearTimeout(slot.idleTimer)
    slot.idleTimer = null
    slot.inFlight++
    const id = this.nextId++
    // a copy the worker owns: the payload's memory may be a slice of a larger frame buffer
    const copy = new Uint8Array(body.length)
    copy.set(body)
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { slot, resolve, reject })
      slot.worker.postMessage({ ...job, id, body: copy.buffer } satisfies FilterJob, [copy.buffer])
    })
  }

  private start(): Slot {
    const worker = startThread(import.meta.url, 'filter-worker')
    worker.unref()
    const slot: Slot = { worker, inFlight: 0, idleTimer: null }
    worker.on('message', (result: FilterJobResult) => {
      const entry = this.waiting.get(result.id)
      this.waiting.delete(result.id)
      if (entry === undefined) return
      entry.resolve(result)
      if (--slot.inFlight === 0 && this.slots.indexOf(slot) > 0) {
        slot.idleTimer = setTimeout(() => this.retire(slot), IDLE_MS)
        slot.idleTimer.unref()
      }
    })
    const fail = (err: Error): void => {
      this.remove(slot)
      for (const [id, entry] of this.waiting) {
        if (entry.slot !== slot) continue
        this.waiting.delete(id)
        entry.reject(err)
      }
    }
    worker.on('error', fail)
    worker.on('exit', (code) => fail(new Error(`filter worker exited (${code})`)))
    this.slots.push(slot)
    return slot
  }

  private remove(slot: Slot): void {
    const i = this.slots.indexOf(slot)
    if (i >= 0) this.slots.splice(i, 1)
    if (slot.idleTimer) clearTimeout(slot.idleTimer)
  }

  private retire(slot: Slot): void {
    if (slot.inFlight > 0) return
    this.remove(slot)
    void slot.worker.terminate()
  }

  async close(): Promise<void> {
    const slots = this.slots.splice(0)
    await Promise.all(slots.map((s) => {
      if (s.idleTimer) clearTimeout(s.idleTimer)
      return s.worker.terminate()
    }))
  }
}
