/**
 * The body of a download read straight into the transfer's own buffers (issue 22, the speed and
 * memory lines; measurements in docs/decisions.md, "reading the body without Node's HTTP body
 * path").
 *
 * Node's HTTP client copies every body chunk of every socket read into a fresh buffer and runs
 * it through a Readable; for a 2 GB file that is about 1 s of CPU per GB more than the bytes
 * need, and the dead 64 KiB buffers pile up (tens of MB) until V8 collects them on its helper
 * threads, which run at the sidecar's own priority. So a transfer's connection is made here:
 *
 * - Until `takeOver`, every read is copied and handed to Node's HTTP parser as an ordinary
 *   'data' event: the request, the status line and headers, redirects, error answers, chunked or
 *   compressed bodies are all Node's, unchanged.
 * - `takeOver` is allowed only for a 200 or 206 whose framing is a plain Content-Length (no
 *   Transfer-Encoding, no Content-Encoding but identity); from then on the socket's reads land
 *   in a ring of fixed buffers (no allocation per read), the full buffers are written to the
 *   partial file and hashed by the ring's own thread (ring-hash-worker.ts) meanwhile, and the
 *   parser sees nothing more. A buffer is read into again only once it is written and hashed.
 *   Exactly Content-Length bytes are taken: a byte more is an error (nothing past the announced size is ever written),
 *   fewer (the connection ends) leaves the count short for the caller's check.
 *
 * TLS: the same for `https` (tls.connect reads into the same buffers after decryption),
 * certificates verified as Node's https does by default.
 */
import { createHash, type Hash } from 'node:crypto'
import { createReadStream, writeSync } from 'node:fs'
import type { ClientRequest, IncomingMessage } from 'node:http'
import net, { isIP, type LookupFunction } from 'node:net'
import tls from 'node:tls'
import { MessageChannel, type MessagePort, type Worker } from 'node:worker_threads'
import { startThread } from '../kernel/threads.js'
import { beforeDeadline } from '../kernel/deadline.js'
import { DROPPED, FILLED, HASHED, HOLD, LENGTHS, WAKE, type HasherData, type HasherOrder, type HasherReport } from './ring-hash-protocol.js'

// 256 KiB buffers, so one socket read can take up to 256 KiB; each is written in WRITE_PIECE writes
// (below); 32 of them make the 8 MiB ring (docs/decisions.md)
const SLOT = 256 * 1024
const SLOTS = 32
/**
 * A buffer goes to the file in writes of this size. Measured here (writeSync of 1 GB, each buffer
 * hashed just before, as a transfer does): 64 KiB writes cost 0.25 s of system time per GB at
 * 1.15-1.2 GB/s, 256 KiB writes of the same buffers 1.1-1.5 s/GB at 0.48-0.57 GB/s
 * (docs/decisions.md, "The downloads bench: the size of a write")
 */
const WRITE_PIECE = 64 * 1024
/** a read gets at least this much room: a slot with less left is written out first */
const MIN_READ = 64 * 1024
const HEAD_READ = 64 * 1024
/**
 * Bytes that come while every buffer waits for the disk or the hash are kept aside (copies), up to
 * this much: a paused TLS socket still hands over the records it already decrypted from its last
 * TCP read (a plain socket's reads stop at once)
 */
const ASIDE_MAX = 1024 * 1024
/** a source quiet this long has what came so far written out (progress counts bytes on disk: a resume starts there) */
const QUIET_MS = 50

/**
 * A buffer's write to the partial file, made in the transfer's own thread (`writeSync`), its
 * callback on the next tick. Not `fs.write`: that hands every write to the libuv pool, whose
 * threads run at the sidecar's priority, not the transfer's, and each write crosses threads
 * twice (a wake-up each way, an interrupt each on this two-core VM): during two downloads at 100
 * MB/s each, the decision loop then waited longer for its CPU and took about 25 µs more per
 * decision (docs/decisions.md, "The downloads bench: a download's writes and the loop").
 */
function writeHere(fd: number, buffer: Buffer, offset: number, length: number, position: null, callback: (err: NodeJS.ErrnoException | null, written: number) => void): void {
  let written = 0
  let error: NodeJS.ErrnoException | null = null
  try {
    while (written < length) {
      const piece = Math.min(WRITE_PIECE, length - written)
      const n = writeSync(fd, buffer, offset + written, piece, position)
      written += n
      if (n < piece) break // a short write, as the kernel gave it: the caller writes the rest
    }
  } catch (err) {
    // after some pieces: a short write (the caller's next write meets the error again)
    if (written === 0) error = err as NodeJS.ErrnoException
  }
  process.nextTick(callback, error, written)
}

/** The file writes: a test puts its own here to shape when each reaches the disk. */
export const disk: { write: typeof writeHere } = { write: writeHere }

/** the hashing thread is woken once this many full buffers wait for it (and always before the transfer waits for one) */
const WAKE_BATCH = 4

/** The first `bytes` of `path` into `hash` (a resumed partial: the hash state of a killed process is gone). */
export async function hashPrefix(hash: Hash, path: string, bytes: number, signal?: AbortSignal): Promise<void> {
  if (bytes === 0) return
  for await (const chunk of createReadStream(path, { start: 0, end: bytes - 1, highWaterMark: 1024 * 1024, signal })) hash.update(chunk as Buffer)
}

/** What a transfer ends with when `signal` has aborted it (the reason the canceller gave). */
const abortError = (signal: AbortSignal): Error => (signal.reason instanceof Error ? signal.reason : new Error('aborted'))

/** `Atomics.waitAsync` (Node 16+; not in the ES2022 library's types) */
const waitAsync = (Atomics as unknown as { waitAsync(a: Int32Array, index: number, value: number): { async: false; value: string } | { async: true; value: Promise<string> } }).waitAsync

/**
 * The hashing thread of a ring (ring-hash-worker.ts), as the transfer thread sees it: one run
 * (one transfer's hash) at a time. If the thread ends, every wait ends with `dead` set and the
 * ring gets a new one on its next transfer.
 */
class RingHasher {
  private readonly worker: Worker
  private readonly port: MessagePort
  private run = 0
  private filled = 0
  /** between a run's `begin` and its digest or drop */
  running = false
  private awaited: { run: number; type: HasherOrder['type']; resolve: (r: HasherReport) => void; reject: (e: Error) => void } | undefined
  dead: Error | undefined

  /** the order whose answer is awaited (a test's seam) */
  get asking(): HasherOrder['type'] | undefined {
    return this.awaited?.type
  }

  constructor(ring: SharedArrayBuffer, readonly ctl: Int32Array) {
    if (noNewThreads) throw new Error('no hashing thread may be made (a test\'s seam)')
    // the ring's words outlive a thread: a run the last thread dropped must not stop this one's
    // run of the same number (each thread counts its runs from 1)
    Atomics.store(ctl, DROPPED, 0)
    const { port1, port2 } = new MessageChannel()
    this.port = port1
    const data: HasherData = { ring, ctl: ctl.buffer as SharedArrayBuffer, slot: SLOT, slots: SLOTS, port: port2 }
    this.worker = startThread(import.meta.url, 'ring-hash-worker', { workerData: data, transferList: [port2] })
    this.worker.unref()
    const end = (err: Error) => {
      this.dead ??= err
      // a transfer waiting for a buffer to be hashed wakes and sees `dead`
      Atomics.notify(this.ctl, HASHED)
      const awaited = this.awaited
      this.awaited = undefined
      awaited?.reject(err)
    }
    this.worker.on('error', end)
    this.worker.once('exit', (code) => end(new Error(`the hashing thread ended (${code})`)))
    this.port.on('message', (report: HasherReport) => {
      const awaited = this.awaited
      if (awaited === undefined || report.run !== awaited.run) return
      this.awaited = undefined
      if (report.type === 'failed') awaited.reject(Object.assign(new Error(report.message), { code: report.code }))
      else awaited.resolve(report)
    })
    // a listener refs the port: it holds the loop only while an answer is awaited (begin, digest)
    this.port.unref()
  }

  private order(order: HasherOrder): void {
    this.port.postMessage(order)
    this.wake()
  }

  /**
   * Sends an order of this run and waits for its answer, or for `signal` (then the run is dropped:
   * the thread stops a prefix it hashes for it); the port holds the loop only meanwhile.
   */
  private async ask(order: HasherOrder, signal?: AbortSignal): Promise<HasherReport> {
    if (this.dead !== undefined) throw this.dead
    if (signal?.aborted) throw abortError(signal)
    const answer = new Promise<HasherReport>((resolve, reject) => (this.awaited = { run: this.run, type: order.type, resolve, reject }))
    const onAbort = () => {
      const awaited = this.awaited
      this.drop()
      awaited?.reject(abortError(signal!))
    }
    signal?.addEventListener('abort', onAbort, { once: true })
    this.order(order)
    this.port.ref()
    try {
      return await answer
    } finally {
      this.port.unref()
      signal?.removeEventListener('abort', onAbort)
    }
  }

  wake(): void {
    Atomics.add(this.ctl, WAKE, 1)
    Atomics.notify(this.ctl, WAKE)
  }

  /** A new run; the thread hashes the first `bytes` of `path` before it answers (a cancel meanwhile drops the run). */
  async begin(path: string, bytes: number, signal: AbortSignal): Promise<void> {
    this.run++
    this.filled = 0
    Atomics.store(this.ctl, FILLED, 0)
    await this.ask({ type: 'begin', run: this.run, path, bytes }, signal)
    this.running = true
  }

  /** Buffer `i` holds `n` bytes to hash; returns its number in this run (1, 2, ...). */
  publish(i: number, n: number): number {
    Atomics.store(this.ctl, LENGTHS + i, n)
    Atomics.store(this.ctl, FILLED, ++this.filled)
    if (this.filled - this.hashed() >= WAKE_BATCH) this.wake()
    return this.filled
  }

  hashed(): number {
    return Atomics.load(this.ctl, HASHED)
  }

  /**
   * Calls `then` once buffer number `seq` of this run is hashed (or the thread ended), unless
   * `live()` turns false first (the transfer ended: its own settle notifies HASHED to end the wait).
   */
  whenHashed(seq: number, live: () => boolean, then: () => void): void {
    if (!live()) return
    this.wake()
    const seen = this.hashed()
    if (seen >= seq || this.dead !== undefined) return void queueMicrotask(then)
    const wait = waitAsync(this.ctl, HASHED, seen)
    if (wait.async) void wait.value.then(() => this.whenHashed(seq, live, then))
    else queueMicrotask(() => this.whenHashed(seq, live, then))
  }

  /** The run's SHA-256 once every published buffer is hashed. */
  async digest(): Promise<string> {
    try {
      return ((await this.ask({ type: 'end', run: this.run })) as Extract<HasherReport, { type: 'digest' }>).sha256
    } finally {
      this.running = false
    }
  }

  /** Ends the thread (a stuck one; a test's seam for what a crash of it does). */
  async end(): Promise<void> {
    await this.worker.terminate()
  }

  /** The run is abandoned: nothing more of it is hashed, its prefix included. */
  drop(): void {
    this.running = false
    this.awaited = undefined
    Atomics.store(this.ctl, DROPPED, this.run)
    this.order({ type: 'drop', run: this.run })
  }
}

/**
 * The fixed buffers of one thread's transfers, made on first use and kept, shared with their
 * hashing thread; a second transfer at once in the same thread gets buffers of its own and hashes
 * them itself.
 */
interface Ring {
  slots: Buffer[]
  memory: SharedArrayBuffer
  ctl: Int32Array
  hasher: RingHasher | undefined
}
let ring: Ring | undefined
let ringInUse = false
function newRing(): Ring {
  const memory = new SharedArrayBuffer(SLOT * SLOTS)
  return {
    memory,
    slots: Array.from({ length: SLOTS }, (_, i) => Buffer.from(memory, i * SLOT, SLOT)),
    ctl: new Int32Array(new SharedArrayBuffer(4 * (LENGTHS + SLOTS))),
    hasher: undefined,
  }
}

let noNewThreads = false

/**
 * Tests' seams on this thread's shared ring: `hold` stops its hashing thread hashing (the reads go
 * on until every buffer waits for the hash; a resumed prefix waits before its first read); `endHashingThread` ends that thread as a crash would;
 * `refuseThreads` makes starting a new one fail.
 */
export const hashingSeams = {
  refuseThreads(on: boolean): void {
    noNewThreads = on
  },
  hold(on: boolean): void {
    ring ??= newRing()
    Atomics.store(ring.ctl, HOLD, on ? 1 : 0)
    ring.hasher?.wake()
  },
  async endHashingThread(): Promise<void> {
    await ring?.hasher?.end()
  },
  /** the order to the hashing thread whose answer is awaited: `begin` while it hashes a resumed prefix */
  asking(): string | undefined {
    return ring?.hasher?.asking
  },
  /** buffers of the run under way filled, and hashed (none when no run is) */
  counts(): { filled: number; hashed: number } {
    return ring?.hasher?.running ? { filled: Atomics.load(ring.ctl, FILLED), hashed: Atomics.load(ring.ctl, HASHED) } : { filled: 0, hashed: 0 }
  },
}

/** How takeOver hashes what it reads: the ring's thread, or (a ring of its own) itself, per read. */
type BodyHash =
  | { kind: 'thread'; hasher: RingHasher; seqOf: number[] }
  | { kind: 'here'; hash: Hash }

export class DirectConnection {
  readonly socket: net.Socket
  /** set by `takeOver`: where the next read lands, and what to do with it */
  private reader: { target: () => Buffer; onRead: (n: number, buf: Uint8Array) => void } | undefined
  private readonly scratch = Buffer.allocUnsafe(HEAD_READ)
  /** the request sent over this connection (set by hops.ts) */
  request: ClientRequest | undefined

  constructor(url: URL, lookup: LookupFunction | undefined) {
    const onread = {
      buffer: () => (this.reader === undefined ? this.scratch : this.reader.target()),
      callback: (n: number, buf: Uint8Array) => {
        if (this.reader !== undefined) this.reader.onRead(n, buf)
        else this.socket.emit('data', Buffer.from(buf.subarray(0, n)))
        return true
      },
    }
    const host = url.hostname.replace(/^\[|\]$/g, '')
    const port = Number(url.port || (url.protocol === 'https:' ? 443 : 80))
    const common = { host, port, onread, ...(lookup !== undefined ? { lookup } : {}) }
    this.socket = url.protocol === 'https:'
      ? tls.connect({ ...common, ...(isIP(host) === 0 ? { servername: host } : {}), ALPNProtocols: ['http/1.1'] })
      : net.connect(common)
  }

  /**
   * Reads the rest of `response`'s body (exactly `length` bytes from here) into the ring: written
   * to `fd` in order, `onWritten` told each byte count once it is on disk, and hashed after the
   * first `prefix.bytes` of `prefix.path` (what the partial file already holds). Resolves with
   * the bytes written and the SHA-256 of prefix and body when the last byte is on disk and hashed
   * or the connection ended; rejects on a write error, a connection error, a byte past the
   * announced size, `signal`, no read for `stallMs` (with `stallError()`), or a hash that could
   * not be computed.
   */
  async takeOver(response: IncomingMessage, fd: number, prefix: { path: string; bytes: number }, length: number, stallMs: number, onWritten: (bytes: number) => void, stallError: () => Error, signal: AbortSignal): Promise<{ bytes: number; sha256: string }> {
    const shared = !ringInUse
    const own = shared ? (ring ??= newRing()) : newRing()
    if (shared) ringInUse = true
    let body: BodyHash
    try {
      body = await this.hashing(own, shared, prefix, signal)
    } catch (err) {
      if (shared) ringInUse = false
      response.destroy()
      throw err
    }
    let bytes: number
    try {
      bytes = await this.readBody(response, fd, own.slots, body, length, stallMs, onWritten, stallError, signal)
    } catch (err) {
      if (body.kind === 'thread') body.hasher.drop()
      if (shared) ringInUse = false
      throw err
    }
    try {
      return { bytes, sha256: body.kind === 'thread' ? await this.digest(body.hasher, stallMs) : body.hash.digest('hex') }
    } finally {
      if (shared) ringInUse = false
    }
  }

  /**
   * The run's digest. Once the body is read, at most the ring (8 MiB) is left to hash: a thread that
   * has not answered within the stall time is stuck, so the transfer fails (retried) and the thread
   * is ended (the next transfer gets a new one).
   */
  private async digest(hasher: RingHasher, stallMs: number): Promise<string> {
    return beforeDeadline(hasher.digest(), stallMs, () => {
      hasher.drop()
      void hasher.end()
      return new Error(`the hash was not done ${Math.round(stallMs / 1000)} s after the last byte`)
    })
  }

  /** The shared ring's hashing thread, started if need be, begun on `prefix`; a ring of its own hashes here. */
  private async hashing(own: Ring, shared: boolean, prefix: { path: string; bytes: number }, signal: AbortSignal): Promise<BodyHash> {
    if (shared) {
      if (own.hasher?.dead !== undefined) own.hasher = undefined
      try {
        const hasher = (own.hasher ??= new RingHasher(own.memory, own.ctl))
        await hasher.begin(prefix.path, prefix.bytes, signal)
        return { kind: 'thread', hasher, seqOf: new Array<number>(SLOTS).fill(0) }
      } catch (err) {
        // a thread that could not be made, or ended: this transfer hashes here (the next tries a new thread)
        if (own.hasher !== undefined && own.hasher.dead === undefined) throw err
      }
    }
    const hash = createHash('sha256')
    await hashPrefix(hash, prefix.path, prefix.bytes, signal)
    return { kind: 'here', hash }
  }

  private readBody(response: IncomingMessage, fd: number, slots: Buffer[], body: BodyHash, length: number, stallMs: number, onWritten: (bytes: number) => void, stallError: () => Error, signal: AbortSignal): Promise<number> {
    const busy = new Array<boolean>(SLOTS).fill(false)
    // a buffer may be read into again once it is written and (on the ring's thread) hashed
    const free = body.kind === 'here'
      ? (i: number) => !busy[i]
      : (i: number) => !busy[i] && body.hasher.hashed() >= body.seqOf[i]
    const socket = this.socket
    // the parser's objects end when the socket is destroyed below: their errors are not ours
    response.on('error', () => {})
    this.request?.on('error', () => {})
    return new Promise<number>((resolve, reject) => {
      let cur = 0
      let fill = 0
      let received = 0
      let written = 0
      let pending = 0
      let ended = false
      let settled = false
      let waitingForSlot = false
      /** a wait for the ring's thread to hash the buffer `cur` is armed (one at a time) */
      let hashWaitArmed = false
      const aside: Buffer[] = []
      let asideBytes = 0
      let failure: Error | undefined
      // full buffers waiting for the disk, in order; one write at a time, so the file only ever
      // holds a prefix of the body (appends on the pool's threads may reach the kernel in any
      // order, and a resume starts from the file's size)
      const queued: Array<{ slot: number; n: number }> = []
      let writing = false
      // the ring is free, and the fd may be closed, only once no write from it is in flight
      const settle = () => {
        // an armed wait for the hash wakes and, seeing this settled, ends
        if (body.kind === 'thread') Atomics.notify(body.hasher.ctl, HASHED)
        if (pending > 0) return
        if (failure !== undefined) reject(failure)
        else resolve(written)
      }
      const stall = setTimeout(() => fail(stallError()), stallMs)
      const quiet = setTimeout(() => flush(), QUIET_MS)
      const finish = () => {
        if (settled) return
        settled = true
        clearTimeout(stall)
        clearTimeout(quiet)
        signal.removeEventListener('abort', onAbort)
        socket.destroy()
        settle()
      }
      const fail = (err: Error) => {
        if (settled) return
        settled = true
        clearTimeout(stall)
        clearTimeout(quiet)
        signal.removeEventListener('abort', onAbort)
        socket.destroy()
        failure = err
        settle()
      }
      const onAbort = () => fail(abortError(signal))
      signal.addEventListener('abort', onAbort, { once: true })
      // a cancel that came before the body was reached (while the prefix was hashed, the partial
      // opened): the listener above never fires for it, and nothing of the body is read
      if (signal.aborted) return onAbort()
      const maybeDone = () => {
        if (pending === 0 && queued.length === 0 && aside.length === 0 && (written === length || (ended && fill === 0))) finish()
      }
      const writeOut = (slot: Buffer, from: number, to: number, done: (err: Error | null) => void) => {
        disk.write(fd, slot, from, to - from, null, (err, n) => {
          if (err) return done(err)
          if (from + n < to) return writeOut(slot, from + n, to, done)
          done(null)
        })
      }
      const pump = () => {
        if (writing || settled || queued.length === 0) return
        const { slot: i, n } = queued.shift()!
        writing = true
        pending++
        writeOut(slots[i], 0, n, (err) => {
          writing = false
          busy[i] = false
          pending--
          if (settled) return settle()
          if (err) return fail(err)
          written += n
          onWritten(written)
          resumeIfFree()
          pump()
          maybeDone()
        })
      }
      /** What was kept aside, into the ring in order while a buffer is free; true once none is left. */
      const replay = (): boolean => {
        while (aside.length > 0 && !settled) {
          // a buffer filled while replaying: flush paused and armed the wait again
          if (!free(cur)) return false
          const chunk = aside[0]
          const n = Math.min(SLOT - fill, chunk.length)
          slots[cur].set(chunk.subarray(0, n), fill)
          if (n === chunk.length) aside.shift()
          else aside[0] = chunk.subarray(n)
          asideBytes -= n
          if (!took(n)) return false
        }
        return aside.length === 0
      }
      const resumeIfFree = () => {
        if (!waitingForSlot || settled) return
        if (free(cur)) {
          waitingForSlot = false
          if (!replay() || settled) return
          // the source ended while its last bytes were aside: nothing more will come to flush them
          if (ended) flush()
          socket.resume()
          maybeDone()
        } else if (!busy[cur] && body.kind === 'thread' && !hashWaitArmed) {
          // written, not yet hashed: on once the ring's thread is past it
          const { hasher } = body
          hashWaitArmed = true
          hasher.whenHashed(body.seqOf[cur], () => !settled, () => {
            hashWaitArmed = false
            if (hasher.dead !== undefined) fail(hasher.dead)
            else resumeIfFree()
          })
        }
      }
      /** Every buffer is on its way to the disk or the hash: the socket waits (backpressure). */
      const waitForSlot = () => {
        if (!waitingForSlot) {
          waitingForSlot = true
          socket.pause()
        }
        resumeIfFree()
      }
      const flush = () => {
        if (fill === 0 || settled) return
        const i = cur
        busy[i] = true
        if (body.kind === 'thread') body.seqOf[i] = body.hasher.publish(i, fill)
        queued.push({ slot: i, n: fill })
        pump()
        cur = (cur + 1) % SLOTS
        fill = 0
        if (!free(cur)) waitForSlot()
      }
      /** `n` new bytes at slots[cur][fill..] */
      const took = (n: number): boolean => {
        if (received + n > length) {
          fail(Object.assign(new Error('more bytes than announced'), { code: 'ETOOLONG' }))
          return false
        }
        if (body.kind === 'here') body.hash.update(slots[cur].subarray(fill, fill + n))
        fill += n
        received += n
        if (received === length || SLOT - fill < MIN_READ) flush()
        return true
      }

      /** bytes that are not where the next read was to land (the parser's, a read into the head buffer, or one that came while no buffer was free): copied in */
      const copyIn = (chunk: Uint8Array): boolean => {
        for (let at = 0; at < chunk.length;) {
          // every buffer is waiting for the disk or the hash and the socket was paused, yet bytes
          // came (TLS hands over what it already decrypted): never over a buffer not yet written
          // and hashed; kept aside until one is, in order; more than ASIDE_MAX ends the transfer
          // (retried, resumed from what is on disk)
          if (!free(cur) || aside.length > 0) {
            const rest = chunk.subarray(at)
            if (asideBytes + rest.length > ASIDE_MAX) {
              fail(Object.assign(new Error('more bytes came while every buffer was waiting for the disk or the hash than can be kept aside'), { code: 'EOVERRUN' }))
              return false
            }
            aside.push(Buffer.from(rest))
            asideBytes += rest.length
            waitForSlot()
            return true
          }
          const n = Math.min(SLOT - fill, chunk.length - at)
          slots[cur].set(chunk.subarray(at, at + n), fill)
          at += n
          if (!took(n)) return false
        }
        return true
      }
      // what the parser already took in with the head (the first read holds head and body)
      for (let chunk = response.read() as Buffer | null; chunk !== null; chunk = response.read() as Buffer | null) {
        if (!copyIn(chunk)) return
      }
      this.reader = {
        // a buffer still waiting for the disk or the hash is never read into: such a read lands in
        // the head buffer, and copyIn keeps it aside
        target: () => (!free(cur) || aside.length > 0 ? this.scratch : slots[cur].subarray(fill)),
        onRead: (n, buf) => {
          if (settled) return
          stall.refresh()
          quiet.refresh()
          // the read after this takeover was given the head buffer, before the ring was in use
          if (buf.buffer !== slots[cur].buffer || buf.byteOffset !== slots[cur].byteOffset + fill) copyIn(buf.subarray(0, n))
          else took(n)
        },
      }
      socket.on('end', () => {
        ended = true
        flush()
        maybeDone()
      })
      socket.on('close', () => {
        ended = true
        flush()
        maybeDone()
      })
      socket.on('error', (err) => fail(err))
      if (socket.destroyed) {
        ended = true
        flush()
      }
      socket.resume()
      maybeDone()
    })
  }
}

/** Whether `takeOver` may read this answer's body: a 200/206 framed by Content-Length alone. */
export function plainLength(response: IncomingMessage): number | undefined {
  const status = response.statusCode
  if (status !== 200 && status !== 206) return undefined
  const h = response.headers
  if (h['transfer-encoding'] !== undefined) return undefined
  const encoding = h['content-encoding']
  if (encoding !== undefined && encoding.trim().toLowerCase() !== 'identity') return undefined
  const length = h['content-length']
  if (length === undefined || !/^\d{1,15}$/.test(length)) return undefined
  if (response.complete || response.destroyed) return undefined
  return Number(length)
}
