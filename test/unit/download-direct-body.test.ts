/**
 * A transfer's body read straight into its buffers (sidecar/src/downloads/direct-body.ts), against
 * sources written byte by byte on real sockets: every way a body can differ from what its head
 * announced is a row, and so is each way the body must leave the direct path (chunked, already
 * complete with the head), a redirect, a stall, and TLS (a certificate that does not verify is
 * refused; one that does, in a child process trusting it, downloads the right bytes).
 */
import assert from 'node:assert/strict'
import { execFile, execFileSync } from 'node:child_process'
import { promisify } from 'node:util'
import { createHash, randomBytes } from 'node:crypto'
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { once } from 'node:events'
import net, { type AddressInfo, type Socket } from 'node:net'
import tls from 'node:tls'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { transfer, type TransferReport } from '../../sidecar/src/downloads/transfer-worker.js'
import { disk, hashingSeams } from '../../sidecar/src/downloads/direct-body.js'
import { SourceError } from '../../sidecar/src/downloads/hops.js'
import { resolveRequest } from '../../sidecar/src/downloads/sources.js'

const dir = mkdtempSync(join(tmpdir(), 'as-direct-'))
after(() => rmSync(dir, { recursive: true, force: true }))

const BODY = randomBytes(3 * 1024 * 1024 + 12345)
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex')

/** A server that answers every connection with `answer(socket)` (raw bytes), on 127.0.0.1. */
async function rawServer(answer: (socket: Socket) => void, secure?: { key: string; cert: string }): Promise<{ url: string; close: () => void }> {
  const onConnection = (socket: Socket) => {
    socket.on('error', () => {})
    let head = ''
    socket.on('data', (d: Buffer) => {
      if (head.includes('\r\n\r\n')) return
      head += d.toString('latin1')
      if (head.includes('\r\n\r\n')) answer(socket)
    })
  }
  const server = secure ? tls.createServer(secure, onConnection) : net.createServer(onConnection)
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const sockets = new Set<Socket>()
  server.on(secure ? 'secureConnection' : 'connection', (s: Socket) => sockets.add(s))
  return {
    url: `${secure ? 'https' : 'http'}://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => {
      for (const s of sockets) s.destroy()
      server.close()
    },
  }
}

/** Writes `data` in pieces of `piece` bytes, each after the last drained, then calls `end`. */
function sendSlowly(socket: Socket, data: Buffer, piece: number, end: () => void): void {
  let at = 0
  const next = () => {
    if (socket.destroyed) return
    if (at >= data.length) return end()
    const part = data.subarray(at, at + piece)
    at += piece
    if (socket.write(part)) setImmediate(next)
    else socket.once('drain', next)
  }
  next()
}

/** A source answering a resume from `at` with the rest of BODY; counts its connections closed. */
const resumable = (at: number) => {
  const sent = { closed: 0 }
  const server = rawServer((socket) => {
    socket.on('close', () => sent.closed++)
    socket.write(head(['HTTP/1.1 206 Partial Content', `Content-Length: ${BODY.length - at}`, `Content-Range: bytes ${at}-${BODY.length - 1}/${BODY.length}`, 'ETag: "v1"', 'Connection: close']))
    sendSlowly(socket, BODY.subarray(at), 65536, () => socket.end())
  })
  return { server, sent }
}

/** A server that answers with `body` whole, as fast as the socket takes it. */
const atOnce = (body: Buffer, secure?: { key: string; cert: string }) => rawServer((socket) => {
  socket.write(ok(body.length))
  socket.end(body)
}, secure)

const head = (lines: string[]) => Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1')
const ok = (length: number, extra: string[] = []) => head(['HTTP/1.1 200 OK', `Content-Length: ${length}`, 'Connection: close', ...extra])

let n = 0
async function run(url: string, stallMs = 5000, onReport: (r: TransferReport) => void = () => {}, resume?: { prefix: Buffer; validator: string; total: number }): Promise<{ result?: { sha256: string; bytes: number }; error?: SourceError; partial: string; reports: TransferReport[] }> {
  const partial = join(dir, `p${n++}.part`)
  if (resume) writeFileSync(partial, resume.prefix)
  const reports: TransferReport[] = []
  try {
    await transfer({ source: 'civitai', url, policy: { base: new URL(url).origin, allowPrivate: true }, partialPath: partial, resumeFrom: resume?.prefix.length ?? 0, validator: resume?.validator ?? '', knownTotal: resume?.total ?? 0, stallMs }, (r) => {
      reports.push(r)
      onReport(r)
    }, new AbortController().signal)
  } catch (err) {
    assert.ok(err instanceof SourceError, String(err))
    return { error: err, partial, reports }
  }
  const done = reports.find((r) => r.type === 'done')
  assert.ok(done && done.type === 'done')
  return { result: { sha256: done.sha256, bytes: done.bytes }, partial, reports }
}

describe('a body read into the transfer\'s buffers: exactly what the head announced', () => {
  it('a Content-Length body in many small writes: every byte, the right hash, progress ends at the size', async () => {
    const s = await rawServer((socket) => {
      socket.write(ok(BODY.length))
      sendSlowly(socket, BODY, 7000, () => socket.end())
    })
    try {
      const { result, partial, reports } = await run(`${s.url}/f`)
      assert.deepEqual(result, { sha256: sha(BODY), bytes: BODY.length })
      assert.ok(readFileSync(partial).equals(BODY))
      assert.deepEqual(reports.filter((r) => r.type === 'progress').at(-1), { type: 'progress', bytes: BODY.length })
    } finally {
      s.close()
    }
  })

  it('head and the start of the body in one write, the rest later: the bytes the parser took first are not lost', async () => {
    const s = await rawServer((socket) => {
      socket.write(Buffer.concat([ok(BODY.length), BODY.subarray(0, 1000)]))
      setImmediate(() => sendSlowly(socket, BODY.subarray(1000), 65536, () => socket.end()))
    })
    try {
      const { result, partial } = await run(`${s.url}/f`)
      assert.equal(result?.sha256, sha(BODY))
      assert.ok(readFileSync(partial).equals(BODY))
    } finally {
      s.close()
    }
  })

  it('a short body (the source closes early): failed, retryable, and the partial holds only what came', async () => {
    const s = await rawServer((socket) => {
      socket.write(ok(BODY.length))
      sendSlowly(socket, BODY.subarray(0, 2 * 1024 * 1024), 65536, () => socket.end())
    })
    try {
      const { error, partial } = await run(`${s.url}/f`)
      assert.match(error!.message, /^The source sent \d+ bytes of the 3158073 it announced$/)
      assert.equal(error!.retryable, true)
      assert.ok(statSync(partial).size <= 2 * 1024 * 1024)
      assert.ok(readFileSync(partial).equals(BODY.subarray(0, statSync(partial).size)))
    } finally {
      s.close()
    }
  })

  it('a body past its Content-Length: failed, not retried, and nothing past the announced size is written', async () => {
    const long = Buffer.concat([BODY, randomBytes(100_000)])
    const s = await rawServer((socket) => {
      socket.write(ok(BODY.length))
      sendSlowly(socket, long, 65536, () => socket.end())
    })
    try {
      const { error, partial } = await run(`${s.url}/f`)
      assert.equal(error!.message, 'The source sent more bytes than it announced')
      assert.equal(error!.retryable, false)
      assert.ok(statSync(partial).size <= BODY.length)
    } finally {
      s.close()
    }
  })

  it('a source that stalls mid-body: the stall timer ends it (retryable), not a hang', async () => {
    const s = await rawServer((socket) => {
      socket.write(ok(BODY.length))
      sendSlowly(socket, BODY.subarray(0, 1024 * 1024), 65536, () => {}) // then nothing, connection open
    })
    try {
      const { error } = await run(`${s.url}/f`, 400)
      assert.equal(error!.message, 'The transfer stalled: nothing arrived for 0 s')
      assert.equal(error!.retryable, true)
    } finally {
      s.close()
    }
  })

  it('a source that pauses mid-body: what came is on disk and reported before the rest arrives (a resume starts there)', { timeout: 20_000 }, async () => {
    const first = 1536 * 1024 + 1000
    let release = () => {}
    const s = await rawServer((socket) => {
      socket.write(ok(BODY.length))
      sendSlowly(socket, BODY.subarray(0, first), 65536, () => {
        release = () => sendSlowly(socket, BODY.subarray(first), 65536, () => socket.end())
      })
    })
    try {
      const { result } = await run(`${s.url}/f`, 5000, (r) => {
        if (r.type === 'progress' && r.bytes === first) release()
      })
      assert.equal(result?.sha256, sha(BODY))
    } finally {
      s.close()
    }
  })

  it('a redirect: its body is dropped, the target\'s body is the file', async () => {
    const target = await rawServer((socket) => {
      socket.write(ok(BODY.length))
      sendSlowly(socket, BODY, 65536, () => socket.end())
    })
    const first = await rawServer((socket) => {
      const junk = 'x'.repeat(5000)
      socket.end(Buffer.concat([head(['HTTP/1.1 302 Found', `Location: ${target.url}/cdn`, `Content-Length: ${junk.length}`, 'Connection: close']), Buffer.from(junk)]))
    })
    try {
      const { result, partial } = await run(`${first.url}/f`)
      assert.equal(result?.sha256, sha(BODY))
      assert.equal(statSync(partial).size, BODY.length)
    } finally {
      first.close()
      target.close()
    }
  })
})

describe('two transfers and a cancel', () => {
  it('two transfers at once in one thread: each gets its own bytes', async () => {
    const other = randomBytes(2 * 1024 * 1024 + 77)
    const a = await rawServer((socket) => {
      socket.write(ok(BODY.length))
      sendSlowly(socket, BODY, 65536, () => socket.end())
    })
    const b = await rawServer((socket) => {
      socket.write(ok(other.length))
      sendSlowly(socket, other, 65536, () => socket.end())
    })
    try {
      const [ra, rb] = await Promise.all([run(`${a.url}/f`), run(`${b.url}/f`)])
      assert.equal(ra.error?.message, undefined)
      assert.equal(rb.error?.message, undefined)
      assert.equal(ra.result?.sha256, sha(BODY))
      assert.equal(rb.result?.sha256, sha(other))
      assert.ok(readFileSync(ra.partial).equals(BODY))
      assert.ok(readFileSync(rb.partial).equals(other))
    } finally {
      a.close()
      b.close()
    }
  })

  it('four fast transfers at once, several buffers each on their way to the disk: every file holds its body in order', { timeout: 60_000 }, async () => {
    // the pool runs up to four writes at once; appends of one file taken by two of its threads
    // reached the kernel out of order (4 of 24 files, hash of the stream still right) before a
    // transfer's writes went one at a time
    const big = randomBytes(32 * 1024 * 1024)
    const s = await atOnce(big)
    try {
      for (let round = 0; round < 4; round++) {
        const results = await Promise.all([0, 1, 2, 3].map(() => run(`${s.url}/f`)))
        for (const r of results) {
          assert.equal(r.error?.message, undefined)
          assert.equal(r.result?.sha256, sha(big))
          assert.equal(sha(readFileSync(r.partial)), sha(big), 'the bytes on disk are the body, in order')
          rmSync(r.partial)
        }
      }
    } finally {
      s.close()
    }
  })

  it('a disk that answers some writes late: one write at a time, so none overtakes another and the file is the body in order', async () => {
    // the deterministic form of the row above: every other write reaches the disk a moment late;
    // a write issued while another was in flight would land before it
    const big = randomBytes(12 * 1024 * 1024 + 777)
    const real = disk.write
    let inFlight = 0
    let most = 0
    let calls = 0
    disk.write = ((fd: number, buffer: Buffer, offset: number, length: number, position: null, done: (err: NodeJS.ErrnoException | null, n: number) => void) => {
      inFlight++
      most = Math.max(most, inFlight)
      const go = () => real(fd, buffer, offset, length, position, (err, n) => {
        inFlight--
        done(err, n)
      })
      if (calls++ % 2 === 0) setTimeout(go, 5)
      else go()
    }) as typeof disk.write
    const s = await atOnce(big)
    try {
      const r = await run(`${s.url}/f`)
      assert.equal(r.error?.message, undefined)
      assert.ok(calls >= 12, `the body went to the disk in ${calls} writes`)
      assert.equal(most, 1, 'never two writes of a transfer in flight')
      assert.equal(sha(readFileSync(r.partial)), sha(big), 'the bytes on disk are the body, in order')
      rmSync(r.partial)
    } finally {
      disk.write = real
      s.close()
    }
  })

  it('a cancel mid-body ends the transfer with the cancel; the partial holds what came, and no more is written', async () => {
    const first = 1024 * 1024 + 4321
    const s = await rawServer((socket) => {
      socket.write(ok(BODY.length))
      sendSlowly(socket, BODY.subarray(0, first), 65536, () => {}) // then holds the connection
    })
    try {
      const partial = join(dir, 'cancelled.part')
      const aborter = new AbortController()
      const cancelled = transfer({ source: 'civitai', url: `${s.url}/f`, policy: { base: s.url, allowPrivate: true }, partialPath: partial, resumeFrom: 0, validator: '', knownTotal: 0, stallMs: 5000 }, (r) => {
        if (r.type === 'progress' && r.bytes === first) aborter.abort(new Error('cancelled by the test'))
      }, aborter.signal)
      await assert.rejects(cancelled, /cancelled by the test/)
      assert.ok(readFileSync(partial).equals(BODY.subarray(0, first)))
    } finally {
      s.close()
    }
  })
})

/** Resolves once `ready()` holds, looked at after every turn of the loop (the transfer runs on this thread too). */
async function until(ready: () => boolean, what: string, ms = 20_000): Promise<void> {
  const end = Date.now() + ms
  while (!ready()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setImmediate(r))
  }
}

// the ring: 32 buffers (direct-body.ts); hashed on a thread of its own, read into again only once
// written and hashed
const RING_BUFFERS = 32

describe('the hash on a thread of its own', () => {
  it('a body eight times the ring, sent as fast as loopback goes: every byte, the right hash', { timeout: 60_000 }, async () => {
    const big = randomBytes(64 * 1024 * 1024 + 4321)
    const s = await atOnce(big)
    try {
      const { result, partial } = await run(`${s.url}/f`)
      assert.deepEqual(result, { sha256: sha(big), bytes: big.length })
      assert.ok(readFileSync(partial).equals(big))
    } finally {
      s.close()
    }
  })

  it('the hash held back: reading stops once every buffer waits for it, and the hash is right once it goes on', { timeout: 60_000 }, async () => {
    const big = randomBytes(20 * 1024 * 1024 + 99)
    const s = await atOnce(big)
    hashingSeams.hold(true)
    try {
      const running = run(`${s.url}/f`)
      // every buffer filled and written, none hashed: a buffer read into again now would be
      // hashed after it was overwritten
      await until(() => hashingSeams.counts().filled >= RING_BUFFERS, 'the ring to fill')
      const held = hashingSeams.counts()
      assert.deepEqual(held, { filled: RING_BUFFERS, hashed: 0 })
      hashingSeams.hold(false)
      const { result, partial } = await running
      assert.deepEqual(result, { sha256: sha(big), bytes: big.length })
      assert.ok(readFileSync(partial).equals(big))
    } finally {
      hashingSeams.hold(false)
      s.close()
    }
  })

  it('a transfer that fails while its buffers wait for the hash: the next transfer\'s hash is its own bytes\' alone', { timeout: 60_000 }, async () => {
    // a byte past the announced size fails the transfer at once, its buffers not hashed
    const s = await rawServer((socket) => {
      socket.write(ok(BODY.length))
      socket.end(Buffer.concat([BODY, Buffer.from('extra')]))
    })
    const good = await atOnce(BODY)
    hashingSeams.hold(true)
    try {
      let seen = { filled: 0, hashed: 0 }
      const failed = await run(`${s.url}/f`, 5000, (r) => {
        if (r.type === 'progress' && seen.filled === 0) seen = hashingSeams.counts()
      })
      assert.match(failed.error?.message ?? '', /more bytes than it announced/)
      assert.ok(seen.filled > 0 && seen.hashed === 0, `buffers were left unhashed: ${JSON.stringify(seen)}`)
      hashingSeams.hold(false)
      const { result } = await run(`${good.url}/f`)
      assert.equal(result?.sha256, sha(BODY))
    } finally {
      hashingSeams.hold(false)
      s.close()
      good.close()
    }
  })

  it('the hashing thread ends mid-transfer: the transfer fails and may be retried; the next one gets a new thread and the right hash', { timeout: 60_000 }, async () => {
    const big = randomBytes(20 * 1024 * 1024 + 5)
    const s = await atOnce(big)
    hashingSeams.hold(true)
    try {
      const running = run(`${s.url}/f`)
      await until(() => hashingSeams.counts().filled >= RING_BUFFERS, 'the ring to fill')
      await hashingSeams.endHashingThread()
      const { error } = await running
      assert.equal(error?.retryable, true)
      assert.match(error?.message ?? '', /hashing thread ended/)
      hashingSeams.hold(false)
      const again = await run(`${s.url}/f`)
      assert.deepEqual(again.result, { sha256: sha(big), bytes: big.length })
    } finally {
      hashingSeams.hold(false)
      s.close()
    }
  })

  it('a hashing thread that does not answer once the body is read: the transfer fails (retried) after the stall time, and the next one gets a new thread', { timeout: 60_000 }, async () => {
    const s = await atOnce(BODY)
    hashingSeams.hold(true)
    try {
      // the body (less than the ring) is read and written; its digest is held back past the stall time
      const { error } = await run(`${s.url}/f`, 1000)
      assert.equal(error?.retryable, true)
      assert.equal(error?.message, 'The transfer broke off (the hash was not done 1 s after the last byte)')
      hashingSeams.hold(false)
      const { result } = await run(`${s.url}/f`)
      assert.deepEqual(result, { sha256: sha(BODY), bytes: BODY.length })
    } finally {
      hashingSeams.hold(false)
      s.close()
    }
  })

  it('no hashing thread can be made: the transfer hashes in its own thread, the right hash', async () => {
    const s = await atOnce(BODY)
    await hashingSeams.endHashingThread()
    hashingSeams.refuseThreads(true)
    try {
      const { result } = await run(`${s.url}/f`)
      assert.deepEqual(result, { sha256: sha(BODY), bytes: BODY.length })
    } finally {
      hashingSeams.refuseThreads(false)
      s.close()
    }
  })

  it('a resumed transfer: the thread hashes what the partial already holds, then the rest', async () => {
    const at = 1024 * 1024 + 17
    const s = await resumable(at).server
    try {
      const { result, partial } = await run(`${s.url}/f`, 5000, () => {}, { prefix: BODY.subarray(0, at), validator: 'v1', total: BODY.length })
      assert.deepEqual(result, { sha256: sha(BODY), bytes: BODY.length })
      assert.ok(readFileSync(partial).equals(BODY))
    } finally {
      s.close()
    }
  })
})

describe('answers that never finish: each within the stall time', () => {
  it('an error status whose body never ends: the status\'s error after the stall time, not a hang', { timeout: 20_000 }, async () => {
    const s = await rawServer((socket) => {
      socket.write(head(['HTTP/1.1 429 Too Many Requests', 'Content-Type: application/json', 'Content-Length: 1000']))
      socket.write('{"error":') // and nothing more: the connection stays open
    })
    try {
      const { error } = await run(`${s.url}/f`, 1000)
      assert.match(error?.message ?? '', /rate limiting/)
      assert.equal(error?.retryable, true)
    } finally {
      s.close()
    }
  })

  it('Civitai\'s metadata: no answer at all, or a head whose body never ends: failed (retryable) after the stall time, not a job that holds its slot for ever', { timeout: 20_000 }, async () => {
    const silent = await rawServer(() => {}) // reads the request, answers nothing
    const unfinished = await rawServer((socket) => {
      socket.write(head(['HTTP/1.1 200 OK', 'Content-Type: application/json', 'Content-Length: 1000']))
      socket.write('{"files":[')
    })
    try {
      for (const s of [silent, unfinished]) {
        const asked = resolveRequest({ source: 'civitai', model_version_id: 1 }, { base: s.url, allowPrivate: true }, new AbortController().signal, 1000)
        await assert.rejects(asked, (err: unknown) => err instanceof SourceError && err.retryable && err.message === 'Civitai did not answer within 1 s')
      }
      // a cancel meanwhile is the cancel, not a source error
      const aborter = new AbortController()
      const cancelled = resolveRequest({ source: 'civitai', model_version_id: 1 }, { base: silent.url, allowPrivate: true }, aborter.signal, 60_000)
      aborter.abort(new Error('cancelled by the test'))
      await assert.rejects(cancelled, (err: unknown) => !(err instanceof SourceError))
    } finally {
      silent.close()
      unfinished.close()
    }
  })

})

describe('a partial that cannot be made', () => {
  it('a name too long for the file system: failed once, not retried, and the source\'s connection closed', async () => {
    let closed = 0
    const s = await rawServer((socket) => {
      socket.on('close', () => closed++)
      socket.write(ok(BODY.length))
      sendSlowly(socket, BODY, 65536, () => {}) // holds the connection open
    })
    try {
      const reports: TransferReport[] = []
      const partial = join(dir, `${'n'.repeat(300)}.part`)
      await assert.rejects(
        transfer({ source: 'civitai', url: `${s.url}/f`, policy: { base: s.url, allowPrivate: true }, partialPath: partial, resumeFrom: 0, validator: '', knownTotal: 0, stallMs: 5000 }, (r) => reports.push(r), new AbortController().signal),
        (err: unknown) => err instanceof SourceError && !err.retryable && err.message === 'The file name is too long for the model folder\'s file system',
      )
      await until(() => closed === 1, 'the source\'s connection to close')
    } finally {
      s.close()
    }
  })
})

describe('a resume the source cannot satisfy (416)', () => {
  const unsatisfiable = (total: number) => rawServer((socket) => socket.end(head(['HTTP/1.1 416 Range Not Satisfiable', `Content-Range: bytes */${total}`, 'Content-Length: 0', 'Connection: close'])))

  it('the partial already holds every byte (a stop before it was placed): hashed and done, nothing fetched again', async () => {
    const s = await unsatisfiable(BODY.length)
    try {
      const { result, reports, partial } = await run(`${s.url}/f`, 5000, () => {}, { prefix: BODY, validator: 'v1', total: BODY.length })
      assert.deepEqual(result, { sha256: sha(BODY), bytes: BODY.length })
      assert.ok(readFileSync(partial).equals(BODY))
      assert.deepEqual(reports.map((r) => r.type), ['started', 'progress', 'done'])
    } finally {
      s.close()
    }
  })

  it('any other 416 (the file is now shorter, or another size than recorded): tried again from byte 0', async () => {
    for (const [prefix, total] of [[BODY, BODY.length - 10], [BODY.subarray(0, 1000), BODY.length]] as const) {
      const s = await unsatisfiable(total)
      try {
        const { error } = await run(`${s.url}/f`, 5000, () => {}, { prefix, validator: 'v1', total: BODY.length })
        assert.equal(error?.message, 'The source cannot serve the rest of the file; starting again')
        assert.equal(error?.retryable, true)
        assert.equal((error as { restart?: boolean } | undefined)?.restart, true)
      } finally {
        s.close()
      }
    }
  })
})

describe('a cancel before the body is reached', () => {
  const order = (url: string, partial: string, at: number) => ({ source: 'civitai' as const, url, policy: { base: url, allowPrivate: true }, partialPath: partial, resumeFrom: at, validator: 'v1', knownTotal: BODY.length, stallMs: 5000 })

  it('a cancel while the hashing thread hashes a resumed prefix: the transfer ends with the cancel, no body byte is written, and the thread drops that prefix at once', { timeout: 60_000 }, async () => {
    const at = 2 * 1024 * 1024 + 3
    const { server, sent } = resumable(at)
    const s = await server
    const fresh = await atOnce(BODY)
    const partial = join(dir, 'cancel-in-prefix.part')
    writeFileSync(partial, BODY.subarray(0, at))
    // held: the thread waits before the prefix's first read, so the cancel lands while `begin` is awaited
    hashingSeams.hold(true)
    try {
      const aborter = new AbortController()
      const cancelled = transfer(order(`${s.url}/f`, partial, at), () => {}, aborter.signal)
      await until(() => hashingSeams.asking() === 'begin', 'the transfer to wait for its prefix\'s hash')
      aborter.abort(new Error('cancelled by the test'))
      await assert.rejects(cancelled, /cancelled by the test/)
      assert.ok(readFileSync(partial).equals(BODY.subarray(0, at)), 'the partial holds its prefix and nothing of the body')
      await until(() => sent.closed === 1, 'the source\'s connection to be closed')
      // still held: the next transfer's own begin is answered only if the thread left the dropped
      // prefix (it would wait for the hold there otherwise); its body then fills buffers
      const next = run(`${fresh.url}/f`)
      await until(() => hashingSeams.counts().filled > 0, 'the next transfer to get past its begin while the hold lasts')
      hashingSeams.hold(false)
      const { result } = await next
      assert.deepEqual(result, { sha256: sha(BODY), bytes: BODY.length })
    } finally {
      hashingSeams.hold(false)
      s.close()
      fresh.close()
    }
  })
  it('a run dropped by a cancel does not stop the run of the same number on the next hashing thread', { timeout: 60_000 }, async () => {
    const at = 1024 * 1024 + 9
    const first = resumable(at)
    const s = await first.server
    const again = resumable(at)
    const s2 = await again.server
    try {
      // a fresh thread: its first run is number 1; a cancel drops it while its prefix is held
      await hashingSeams.endHashingThread()
      const partial = join(dir, 'dropped-run.part')
      writeFileSync(partial, BODY.subarray(0, at))
      hashingSeams.hold(true)
      const aborter = new AbortController()
      const cancelled = transfer(order(`${s.url}/f`, partial, at), () => {}, aborter.signal)
      await until(() => hashingSeams.asking() === 'begin', 'the transfer to wait for its prefix\'s hash')
      aborter.abort(new Error('cancelled by the test'))
      await assert.rejects(cancelled, /cancelled by the test/)
      hashingSeams.hold(false)
      // the thread ends (a crash, a stuck digest); the next one's first run is number 1 again
      await hashingSeams.endHashingThread()
      const { result } = await run(`${s2.url}/f`, 5000, () => {}, { prefix: BODY.subarray(0, at), validator: 'v1', total: BODY.length })
      assert.deepEqual(result, { sha256: sha(BODY), bytes: BODY.length })
    } finally {
      hashingSeams.hold(false)
      s.close()
      s2.close()
    }
  })
})

describe('bodies the direct path leaves to Node\'s parser', () => {
  it('chunked (no Content-Length): refused as before, the size was never announced', async () => {
    const s = await rawServer((socket) => {
      socket.end(Buffer.concat([head(['HTTP/1.1 200 OK', 'Transfer-Encoding: chunked', 'Connection: close']), Buffer.from('5\r\nhello\r\n0\r\n\r\n')]))
    })
    try {
      const { error } = await run(`${s.url}/f`)
      assert.equal(error!.message, 'The source did not announce the file size')
    } finally {
      s.close()
    }
  })

  it('a 206 without Content-Length (chunked, or ended by the connection), sending past its Content-Range: stopped at the announced size, not retried', async () => {
    const piece = Buffer.alloc(64 * 1024, 7)
    const chunked = await rawServer((socket) => {
      socket.write(head(['HTTP/1.1 206 Partial Content', 'Content-Range: bytes 0-999/1000', 'Transfer-Encoding: chunked', 'Connection: close']))
      let sent = 0
      const next = () => {
        if (socket.destroyed) return
        if (sent >= 80) return void socket.end('0\r\n\r\n') // 5 MB for an announced 1000 bytes
        sent++
        if (socket.write(Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n')]))) setImmediate(next)
        else socket.once('drain', next)
      }
      next()
    })
    const closeDelimited = await rawServer((socket) => {
      socket.write(head(['HTTP/1.1 206 Partial Content', 'Content-Range: bytes 0-999/1000', 'Connection: close']))
      sendSlowly(socket, Buffer.alloc(5 * 1024 * 1024, 9), 65536, () => socket.end())
    })
    try {
      for (const s of [chunked, closeDelimited]) {
        const { error, partial } = await run(`${s.url}/f`)
        assert.equal(error?.message, 'The source sent more bytes than it announced')
        assert.equal(error?.retryable, false)
        assert.ok(statSync(partial).size <= 1000, `the partial holds ${statSync(partial).size} bytes`)
      }
    } finally {
      chunked.close()
      closeDelimited.close()
    }
  })

  it('Content-Length and Transfer-Encoding together: Node\'s parser refuses the answer', async () => {
    const s = await rawServer((socket) => {
      socket.end(Buffer.concat([head(['HTTP/1.1 200 OK', 'Content-Length: 5', 'Transfer-Encoding: chunked', 'Connection: close']), Buffer.from('5\r\nhello\r\n0\r\n\r\n')]))
    })
    try {
      const { error } = await run(`${s.url}/f`)
      assert.match(error!.message, /^127\.0\.0\.1:\d+ could not be reached \(HPE_INVALID_TRANSFER_ENCODING\)$/)
      assert.equal(existsSync(join(dir, `p${n - 1}.part`)), false)
    } finally {
      s.close()
    }
  })

  it('a small file complete with its head (one write): the ordinary path, the right bytes', async () => {
    const small = randomBytes(2000)
    const s = await rawServer((socket) => socket.end(Buffer.concat([ok(small.length), small])))
    try {
      const { result, partial } = await run(`${s.url}/f`)
      assert.deepEqual(result, { sha256: sha(small), bytes: small.length })
      assert.ok(readFileSync(partial).equals(small))
    } finally {
      s.close()
    }
  })
})

describe('TLS', () => {
  const key = join(dir, 'key.pem')
  const cert = join(dir, 'cert.pem')
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', key, '-out', cert], { stdio: 'ignore' })
  const secure = { key: readFileSync(key, 'utf8'), cert: readFileSync(cert, 'utf8') }
  const serve = () => rawServer((socket) => {
    socket.write(ok(BODY.length))
    sendSlowly(socket, BODY, 65536, () => socket.end())
  }, secure)

  it('a certificate that does not verify is refused before any byte is written', async () => {
    const s = await serve()
    try {
      const { error, partial } = await run(`${s.url}/f`)
      assert.match(error!.message, /^127\.0\.0\.1:\d+ could not be reached \(DEPTH_ZERO_SELF_SIGNED_CERT\)$/)
      assert.equal(existsSync(partial), false)
    } finally {
      s.close()
    }
  })

  it('a trusted certificate: the body read after decryption is every byte, with the right hash', async () => {
    const s = await serve()
    try {
      const partial = join(dir, 'tls.part')
      const script = join(dir, 'tls-child.mts')
      writeFileSync(script, `
import { transfer } from ${JSON.stringify(new URL('../../sidecar/src/downloads/transfer-worker.ts', import.meta.url).href)}
const reports = []
await transfer({ source: 'civitai', url: ${JSON.stringify(`${s.url}/f`)}, policy: { base: ${JSON.stringify(s.url)}, allowPrivate: true }, partialPath: ${JSON.stringify(partial)}, resumeFrom: 0, validator: '', knownTotal: 0, stallMs: 5000 }, (r) => reports.push(r), new AbortController().signal)
console.log(JSON.stringify(reports.find((r) => r.type === 'done')))
`)
      // the server is in this process: the child runs asynchronously
      const child = await promisify(execFile)(process.execPath, ['--import', 'tsx', script], { env: { ...process.env, NODE_EXTRA_CA_CERTS: cert }, encoding: 'utf8' })
      assert.deepEqual(JSON.parse(child.stdout.trim()), { type: 'done', sha256: sha(BODY), bytes: BODY.length })
      assert.ok(readFileSync(partial).equals(BODY))
    } finally {
      s.close()
    }
  })

  it('the hash held back until every buffer waits for it, five times in one body: what TLS decrypted after the pause is kept, every byte, the right hash', { timeout: 60_000 }, async () => {
    // a paused TLS socket still hands over the records it already decrypted from the last TCP
    // read; with every buffer waiting for the hash they have nowhere to go in the ring
    const big = randomBytes(64 * 1024 * 1024 + 3)
    const s = await atOnce(big, secure)
    try {
      const partial = join(dir, 'tls-held.part')
      const script = join(dir, 'tls-held-child.mts')
      writeFileSync(script, `
import { transfer } from ${JSON.stringify(new URL('../../sidecar/src/downloads/transfer-worker.ts', import.meta.url).href)}
import { hashingSeams } from ${JSON.stringify(new URL('../../sidecar/src/downloads/direct-body.ts', import.meta.url).href)}
const reports = []
let ended = false
const until = async (ready) => { while (!ready() && !ended) await new Promise((r) => setImmediate(r)) }
hashingSeams.hold(true)
const running = transfer({ source: 'civitai', url: ${JSON.stringify(`${s.url}/f`)}, policy: { base: ${JSON.stringify(s.url)}, allowPrivate: true }, partialPath: ${JSON.stringify(partial)}, resumeFrom: 0, validator: '', knownTotal: 0, stallMs: 5000 }, (r) => reports.push(r), new AbortController().signal)
  .then(() => null, (err) => err.message)
  .finally(() => (ended = true))
for (let i = 0; i < 5; i++) {
  hashingSeams.hold(true)
  // every buffer waiting for the hash, or the whole body read and written (the last buffers then
  // wait for a hash that is held: released below)
  await until(() => { const c = hashingSeams.counts(); return c.filled - c.hashed >= ${RING_BUFFERS} || reports.some((r) => r.type === 'progress' && r.bytes === ${big.length}) })
  hashingSeams.hold(false)
  await until(() => { const c = hashingSeams.counts(); return c.hashed > 0 && c.filled - c.hashed < ${RING_BUFFERS} })
}
hashingSeams.hold(false)
const failed = await running
console.log(JSON.stringify(failed === null ? reports.find((r) => r.type === 'done') : { failed }))
`)
      const child = await promisify(execFile)(process.execPath, ['--import', 'tsx', script], { env: { ...process.env, NODE_EXTRA_CA_CERTS: cert }, encoding: 'utf8' })
      assert.deepEqual(JSON.parse(child.stdout.trim()), { type: 'done', sha256: sha(big), bytes: big.length })
      assert.ok(readFileSync(partial).equals(big))
    } finally {
      s.close()
    }
  })
})
