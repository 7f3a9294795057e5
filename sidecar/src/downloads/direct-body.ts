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
 *   in a ring of fixed buffers (no allocation per read), each read is hashed and the full buffers
 *   are written to the partial file, and the parser sees nothing more. Exactly Content-Length
 *   bytes are taken: a byte more is an error (nothing past the announced size is ever written),
 *   fewer (the connection ends) leaves the count short for the caller's check.
 *
 * TLS: the same for `https` (tls.connect reads into the same buffers after decryption),
 * certificates verified as Node's https does by default.
 */
import type { Hash } from 'node:crypto'
import { writeSync } from 'node:fs'
import type { ClientRequest, IncomingMessage } from 'node:http'
import net, { isIP, type LookupFunction } from 'node:net'
import tls from 'node:tls'

// 256 KiB buffers: on this machine a 1 MiB write into the page cache costs 3-6x the CPU of four
// 256 KiB ones (fs.write of 2 GB: 3.3-6.3 s against 1.0 s), and 64 KiB writes pay the pool's round
// trips instead (2.3-2.5 s); 32 of them hold what eight 1 MiB ones did (docs/decisions.md)
const SLOT = 256 * 1024
const SLOTS = 32
/** a read gets at least this much room: a slot with less left is written out first */
const MIN_READ = 64 * 1024
const HEAD_READ = 64 * 1024
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
    written = writeSync(fd, buffer, offset, length, position)
  } catch (err) {
    error = err as NodeJS.ErrnoException
  }
  process.nextTick(callback, error, written)
}

/** The file writes: a test puts its own here to shape when each reaches the disk. */
export const disk: { write: typeof writeHere } = { write: writeHere }

/** The fixed buffers of one thread's transfers, made on first use and kept; a second transfer at once in the same thread gets its own. */
let ring: Buffer[] | undefined
let ringInUse = false
const newRing = () => Array.from({ length: SLOTS }, () => Buffer.allocUnsafeSlow(SLOT))

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
   * Reads the rest of `response`'s body (exactly `total - start` bytes from here) into the ring:
   * hashed, written to `fd` in order, `onWritten` told each byte count once it is on disk.
   * Resolves with the bytes written when the last is on disk or the connection ended; rejects on
   * a write error, a connection error, a byte past the announced size, `signal`, or no read for
   * `stallMs` (with `stallError()`).
   */
  takeOver(response: IncomingMessage, fd: number, hash: Hash, length: number, stallMs: number, onWritten: (bytes: number) => void, stallError: () => Error, signal: AbortSignal): Promise<number> {
    const shared = !ringInUse
    const slots = shared ? (ring ??= newRing()) : newRing()
    if (shared) ringInUse = true
    const busy = new Array<boolean>(SLOTS).fill(false)
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
      let failure: Error | undefined
      // full buffers waiting for the disk, in order; one write at a time, so the file only ever
      // holds a prefix of the body (appends on the pool's threads may reach the kernel in any
      // order, and a resume starts from the file's size)
      const queued: Array<{ slot: number; n: number }> = []
      let writing = false
      // the ring is free, and the fd may be closed, only once no write from it is in flight
      const settle = () => {
        if (pending > 0) return
        if (shared) ringInUse = false
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
      const onAbort = () => fail(signal.reason instanceof Error ? signal.reason : new Error('aborted'))
      signal.addEventListener('abort', onAbort, { once: true })
      const maybeDone = () => {
        if (pending === 0 && queued.length === 0 && (written === length || (ended && fill === 0))) finish()
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
          if (waitingForSlot && !busy[cur]) {
            waitingForSlot = false
            socket.resume()
          }
          pump()
          maybeDone()
        })
      }
      const flush = () => {
        if (fill === 0 || settled) return
        const i = cur
        busy[i] = true
        queued.push({ slot: i, n: fill })
        pump()
        cur = (cur + 1) % SLOTS
        fill = 0
        if (busy[cur]) {
          // every buffer is on its way to the disk: the socket waits (backpressure)
          waitingForSlot = true
          socket.pause()
        }
      }
      /** `n` new bytes at slots[cur][fill..] */
      const took = (n: number): boolean => {
        if (received + n > length) {
          fail(Object.assign(new Error('more bytes than announced'), { code: 'ETOOLONG' }))
          return false
        }
        hash.update(slots[cur].subarray(fill, fill + n))
        fill += n
        received += n
        if (received === length || SLOT - fill < MIN_READ) flush()
        return true
      }

      /** bytes that are not where the next read was to land (the parser's, or a read into the head buffer): copied in */
      const copyIn = (chunk: Uint8Array): boolean => {
        for (let at = 0; at < chunk.length;) {
          // every buffer is waiting for the disk and the socket was paused, yet bytes came (a read
          // already under way): never over a buffer not yet written; the transfer ends (retried,
          // resumed from what is on disk)
          if (busy[cur]) {
            fail(Object.assign(new Error('bytes came while every buffer was waiting for the disk'), { code: 'EOVERRUN' }))
            return false
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
        // a buffer still waiting for the disk is never read into: such a read lands aside (copyIn ends the transfer)
        target: () => (busy[cur] ? this.scratch : slots[cur].subarray(fill)),
        onRead: (n, buf) => {
          if (settled) return
          stall.refresh()
          quiet.refresh()
          // the read after this takeover was given the head buffer, before the ring was in use
          if (buf.buffer !== slots[cur].buffer || buf.byteOffset !== fill) copyIn(buf.subarray(0, n))
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
