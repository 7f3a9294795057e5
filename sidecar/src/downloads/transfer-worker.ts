/**
 * One transfer, in its own thread (so neither the hashing nor the copying ever runs on the
 * sidecar's event loop, where every user's decisions are made): GET the URL under the rules of
 * hops.ts, read the body into the partial file while the SHA-256 is fed the same bytes, and
 * report. A body framed by a plain Content-Length is read straight into a ring of fixed buffers
 * (direct-body.ts: no allocation per read, no stream); any other goes through stream.pipeline
 * into a sink that hashes and writes each chunk. Either way a slow disk slows the socket
 * (backpressure, bounded memory).
 *
 * Resume: with `resumeFrom` > 0 and the validator the partial was started under, the request
 * carries `Range: bytes=N-` and `If-Range: <validator>`; a 206 whose Content-Range starts at N
 * and whose total is the one known appends (the partial's first N bytes are read once to bring
 * the hash up to date: the hash state of a killed process is gone); anything else (200, another
 * validator or size) starts again from byte 0, truncating the partial.
 *
 * Checks: the body must be exactly as long as announced (Content-Length / Content-Range, and
 * X-Linked-Size on a Hugging Face redirect); no chunk for `stallMs` aborts the transfer
 * (retryable); ENOSPC is "the disk is full" (not retryable).
 */
import { createHash, type Hash } from 'node:crypto'
import { mkdir, open, stat, truncate, type FileHandle } from 'node:fs/promises'
import { dirname } from 'node:path'
import { Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { parentPort } from 'node:worker_threads'
import { hashPrefix, plainLength } from './direct-body.js'
import { lowerOwnPriority } from './priority.js'
import { openFollowing, SourceError, type HopPolicy } from './hops.js'
import { answerError } from './sources.js'
import type { SourceName } from './store.js'

export interface TransferOrder {
  source: SourceName
  url: string
  policy: HopPolicy
  partialPath: string
  /** bytes already in the partial under `validator`, 0 for a fresh start */
  resumeFrom: number
  validator: string
  /** the total known from an earlier start (a resume must see the same), 0 when none */
  knownTotal: number
  stallMs: number
}

export type TransferReport =
  | { type: 'started'; total: number; validator: string; linkedSha256: string; resumed: boolean }
  | { type: 'progress'; bytes: number }
  | { type: 'done'; sha256: string; bytes: number }
  | { type: 'error'; message: string; retryable: boolean; restart: boolean }

const PROGRESS_MS = 250

class StallError extends Error {}

/**
 * Progress reports: at most every PROGRESS_MS, and once more after the last update of a burst.
 */
class Progress {
  private lastReport = 0
  private trailing: NodeJS.Timeout | undefined
  private bytes = 0
  constructor(private readonly report: (bytes: number) => void) {}
  update(bytes: number): void {
    this.bytes = bytes
    const now = Date.now()
    if (now - this.lastReport >= PROGRESS_MS) {
      this.lastReport = now
      this.report(bytes)
      return
    }
    if (this.trailing === undefined) {
      this.trailing = setTimeout(() => {
        this.trailing = undefined
        this.lastReport = Date.now()
        this.report(this.bytes)
      }, PROGRESS_MS)
    }
  }
  stop(): void {
    clearTimeout(this.trailing)
  }
}

/**
 * The end of the pipeline (a body that is not a plain Content-Length): feeds each chunk to the
 * hash and writes it to the partial file, and counts a byte only once it is written (so a
 * reported count is on disk: a resume after a kill starts from what the file holds). No chunk
 * for `stallMs` calls `onStall`.
 */
class Sink extends Writable {
  bytes: number
  private readonly timer: NodeJS.Timeout
  /** `limit`: the file's announced size; a byte past it fails the write (ETOOLONG), none of it written */
  constructor(private readonly file: FileHandle, private readonly hash: Hash, start: number, private readonly limit: number, stallMs: number, private readonly progress: Progress, onStall: () => void) {
    super({ highWaterMark: 1024 * 1024 })
    this.bytes = start
    this.timer = setTimeout(onStall, stallMs)
  }
  override _writev(chunks: Array<{ chunk: Buffer }>, done: (error?: Error | null) => void): void {
    this.timer.refresh()
    const buffers = chunks.map((c) => c.chunk)
    // a body framed by chunks or by the connection's end (a 206 may come without Content-Length)
    // has no length of its own: it stops at the size the source announced, not at a full disk
    if (buffers.reduce((sum, b) => sum + b.length, this.bytes) > this.limit) {
      return done(Object.assign(new Error('the source sent more bytes than it announced'), { code: 'ETOOLONG' }))
    }
    for (const b of buffers) this.hash.update(b)
    this.writeAll(buffers).then(() => {
      this.progress.update(this.bytes)
      done()
    }, done)
  }
  private async writeAll(buffers: Buffer[]): Promise<void> {
    let left = buffers
    while (left.length > 0) {
      const { bytesWritten } = await this.file.writev(left)
      this.bytes += bytesWritten
      let skip = bytesWritten
      const rest: Buffer[] = []
      for (const b of left) {
        if (skip >= b.length) skip -= b.length
        else {
          rest.push(skip > 0 ? b.subarray(skip) : b)
          skip = 0
        }
      }
      left = rest
    }
  }
  override _final(done: (error?: Error | null) => void): void {
    clearTimeout(this.timer)
    done()
  }
  override _destroy(err: Error | null, done: (error: Error | null) => void): void {
    clearTimeout(this.timer)
    done(err)
  }
}

const header = (value: string | string[] | undefined): string => (Array.isArray(value) ? value[0] : value) ?? ''
const unquote = (etag: string): string => etag.replace(/^W\//, '').replace(/^"|"$/g, '')

/**
 * Creates the empty partial file and its staging directory. Another job's end removes that
 * directory once it is empty, so it can go between the mkdir and the open: then both again.
 */
async function createPartial(path: string): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    await mkdir(dirname(path), { recursive: true, mode: 0o755 })
    try {
      await (await open(path, 'w', 0o644)).close()
      return
    } catch (err) {
      if ((err as { code?: string }).code !== 'ENOENT' || attempt === 3) throw err
    }
  }
}

/** A file system's error in words, not to be retried; undefined for anything else (a connection's error). */
function writeError(err: unknown): SourceError | undefined {
  const code = (err as { code?: string }).code
  if (code === 'ENOSPC') return new SourceError('The disk is full', false)
  if (code === 'EDQUOT') return new SourceError('The disk quota is used up', false)
  if (code === 'ENAMETOOLONG') return new SourceError('The file name is too long for the model folder\'s file system', false)
  if (code !== undefined && /^E[A-Z]+$/.test(code) && (err as { syscall?: string }).syscall !== undefined && !['ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'ECONNREFUSED'].includes(code)) {
    return new SourceError(`The file could not be written (${code})`, false)
  }
  return undefined
}

export async function transfer(order: TransferOrder, post: (report: TransferReport) => void, signal: AbortSignal): Promise<void> {
  const resumeFrom = order.resumeFrom > 0 && order.validator !== '' ? order.resumeFrom : 0
  const headers: Record<string, string> = resumeFrom > 0 ? { range: `bytes=${resumeFrom}-`, 'if-range': `"${order.validator}"` } : {}
  const stall = new AbortController()
  const both = AbortSignal.any([signal, stall.signal])
  // the stall timer also covers the wait for the first headers
  const headerTimer = setTimeout(() => stall.abort(new StallError()), order.stallMs)
  let opened
  try {
    opened = await openFollowing(order.url, order.policy, headers, both, true)
  } catch (err) {
    if (stall.signal.aborted && !signal.aborted) throw new SourceError(`No answer from the source for ${Math.round(order.stallMs / 1000)} s`, true)
    throw err
  } finally {
    clearTimeout(headerTimer)
  }
  const { response, hops, connection } = opened
  const status = response.statusCode ?? 0
  if (status === 416 && resumeFrom > 0) {
    // RFC 9110: a range from the end of the file on is not satisfiable. The partial already holds
    // every byte (a stop between its last write and its placing): hashed and done, not fetched
    // again. Any other 416: the source no longer serves those bytes, so the next try starts at 0.
    const whole = /^bytes \*\/(\d+)$/.exec(header(response.headers['content-range']))
    response.destroy()
    const total = whole ? Number(whole[1]) : NaN
    if (total === resumeFrom && (order.knownTotal === 0 || order.knownTotal === total) && (await stat(order.partialPath)).size === total) {
      post({ type: 'started', total, validator: order.validator, linkedSha256: '', resumed: true })
      const hash = createHash('sha256')
      await hashPrefix(hash, order.partialPath, total, signal)
      post({ type: 'progress', bytes: total })
      post({ type: 'done', sha256: hash.digest('hex'), bytes: total })
      return
    }
    throw Object.assign(new SourceError('The source cannot serve the rest of the file; starting again', true), { restart: true })
  }
  if (status !== 200 && status !== 206) {
    // the error's body is read within the stall time too (a body that never ends is cut: the status says enough)
    const bodyTimer = setTimeout(() => stall.abort(new StallError()), order.stallMs)
    try {
      throw await answerError(order.source, response)
    } finally {
      clearTimeout(bodyTimer)
    }
  }

  // what the source published about the bytes: Hugging Face puts it on its redirect
  const linked = hops.find((h) => h.headers['x-linked-etag'] !== undefined || h.headers['x-linked-size'] !== undefined)
  const linkedSha = unquote(header(linked?.headers['x-linked-etag'])).toLowerCase()
  const linkedSha256 = /^[0-9a-f]{64}$/.test(linkedSha) ? linkedSha : ''
  const linkedSize = Number(header(linked?.headers['x-linked-size']) || NaN)
  const validator = linkedSha256 || unquote(header(response.headers.etag))

  let start = 0
  let total: number
  const length = Number(header(response.headers['content-length']) || NaN)
  if (status === 206) {
    const range = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(header(response.headers['content-range']))
    if (!range || Number(range[1]) !== resumeFrom || (order.knownTotal > 0 && Number(range[3]) !== order.knownTotal) || (validator !== '' && validator !== order.validator)) {
      response.destroy()
      throw Object.assign(new SourceError('The source now serves other bytes; starting again', true), { restart: true })
    }
    start = resumeFrom
    total = Number(range[3])
    if (Number.isFinite(length) && length !== total - start) {
      response.destroy()
      throw new SourceError('The source announced a part of another size than its range', false)
    }
  } else {
    total = length
  }
  if (!Number.isFinite(total)) {
    response.destroy()
    throw new SourceError('The source did not announce the file size', false)
  }
  if (Number.isFinite(linkedSize) && linkedSize !== total) {
    response.destroy()
    throw new SourceError(`The source announced ${linkedSize} bytes but serves ${total}`, false)
  }
  post({ type: 'started', total, validator, linkedSha256, resumed: start > 0 })

  // the body straight into fixed buffers when its framing is a plain Content-Length
  // (direct-body.ts, hashed on a thread of its own, the partial's prefix too); anything else
  // through Node's stream, as ever, hashed here
  const plain = connection !== undefined ? plainLength(response) : undefined
  const here = connection === undefined || plain === undefined ? createHash('sha256') : undefined
  try {
    if (start > 0) {
      await truncate(order.partialPath, start)
    } else {
      // a fresh start: an empty partial (0644: the host reads it as a model file once placed)
      await createPartial(order.partialPath)
    }
  } catch (err) {
    // the partial cannot be made (a name too long for the file system, no permission, a full
    // disk): trying again would meet the same; nothing of the answer is read
    response.destroy()
    if (signal.aborted) throw err
    throw writeError(err) ?? err
  }
  if (here !== undefined) await hashPrefix(here, order.partialPath, start, signal)
  const file = await open(order.partialPath, 'a')
  const report = new Progress((bytes) => post({ type: 'progress', bytes }))
  let bytes = start
  let sha256: string
  try {
    if (connection !== undefined && plain !== undefined) {
      const body = await connection.takeOver(response, file.fd, { path: order.partialPath, bytes: start }, plain, order.stallMs, (n) => report.update(start + n), () => new StallError(), signal)
      bytes += body.bytes
      sha256 = body.sha256
    } else {
      const hash = here!
      const sink = new Sink(file, hash, start, total, order.stallMs, report, () => sink.destroy(new StallError()))
      try {
        await pipeline(response, sink, { signal })
      } finally {
        bytes = sink.bytes
      }
      sha256 = hash.digest('hex')
    }
  } catch (err) {
    if (signal.aborted) throw err
    if (err instanceof StallError) throw new SourceError(`The transfer stalled: nothing arrived for ${Math.round(order.stallMs / 1000)} s`, true)
    const code = (err as { code?: string }).code
    if (code === 'ETOOLONG') throw new SourceError('The source sent more bytes than it announced', false)
    const written = writeError(err)
    if (written !== undefined) throw written
    throw new SourceError(`The transfer broke off (${code ?? (err as Error).message})`, true)
  } finally {
    report.stop()
    await file.close().catch(() => {})
  }
  const written = (await stat(order.partialPath)).size
  if (bytes !== total || written !== total) throw new SourceError(`The source sent ${bytes} bytes of the ${total} it announced`, true)
  post({ type: 'progress', bytes })
  post({ type: 'done', sha256, bytes })
}

// as a worker thread: orders in (one at a time), reports out tagged with the order's id; an
// 'abort' message stops the order running; the thread stays for the next order
if (parentPort !== null) {
  const port = parentPort
  lowerOwnPriority()
  let current: { id: number; aborter: AbortController } | undefined
  port.on('message', (message: { type: 'start'; id: number; order: TransferOrder } | { type: 'abort'; id: number }) => {
    if (message.type === 'abort') {
      if (current?.id === message.id) current.aborter.abort()
      return
    }
    const mine = { id: message.id, aborter: new AbortController() }
    current = mine
    const post = (report: TransferReport) => port.postMessage({ ...report, id: mine.id })
    transfer(message.order, post, mine.aborter.signal)
      .catch((err: unknown) => {
        if (mine.aborter.signal.aborted) return post({ type: 'error', message: 'cancelled', retryable: false, restart: false })
        const known = err instanceof SourceError
        post({
          type: 'error',
          message: known ? err.message : `The transfer failed (${(err as { code?: string }).code ?? (err as Error).message})`,
          retryable: known ? err.retryable : true,
          restart: (err as { restart?: boolean }).restart === true,
        })
      })
      .finally(() => {
        if (current === mine) current = undefined
      })
  })
}
