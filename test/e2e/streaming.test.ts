/**
 * DESIGN §2.5 end to end: a 95 MB upload (just under ComfyUI's 100 MB
 * client_max_size, which the host enforces while the gate parses the form for
 * it with `request.post()`, spooled to disk) through the gate arrives intact
 * (sha256) while the host process (which runs the plugin) and the sidecar
 * grow by less than 50 MB, so nothing buffered it; and the same file comes
 * back through the gate from /view just as flat. Run on aiohttp 3.8 and 3.11.
 *
 * Memory: VmHWM (the peak RSS) is reset right before the transfer by writing
 * `5` to /proc/<pid>/clear_refs: the argon2 hashes of registration and token
 * creation already raised the sidecar's peak far above its resting size,
 * which would hide a buffered body under the old peak. VmRSS is also
 * sampled every 20 ms during the transfer. Growth = the higher of the two
 * peaks minus VmRSS at the reset.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { createReadStream, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { AIOHTTP_VERSIONS, destroyStack, startStack, type Stack } from '../helpers/stack.js'
import { apiToken, register } from '../helpers/client.js'

const MB = 1024 * 1024
const SIZE = 95 * MB

function statusMb(pid: number, field: 'VmHWM' | 'VmRSS'): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  return Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)![1]) / 1024
}

/** Watches one process's memory from now on: resets its peak, then samples its RSS until `growthMb()`. */
class MemoryWatch {
  private readonly baseline: number
  private sampledPeak: number
  private readonly timer: NodeJS.Timeout

  constructor(readonly name: string, private readonly pid: number) {
    writeFileSync(`/proc/${pid}/clear_refs`, '5') // VmHWM := current RSS
    this.baseline = statusMb(pid, 'VmRSS')
    this.sampledPeak = this.baseline
    assert.ok(statusMb(pid, 'VmHWM') - this.baseline < 5, `${name}: VmHWM was not reset`)
    this.timer = setInterval(() => {
      this.sampledPeak = Math.max(this.sampledPeak, statusMb(pid, 'VmRSS'))
    }, 20)
  }

  growthMb(): number {
    clearInterval(this.timer)
    const peak = Math.max(this.sampledPeak, statusMb(this.pid, 'VmHWM'), statusMb(this.pid, 'VmRSS'))
    return peak - this.baseline
  }
}

function multipartStream(filename: string, size: number, hash: ReturnType<typeof createHash>): ReadableStream<Uint8Array> {
  const boundary = 'authsvc-boundary-7d1f'
  const head = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="image"; filename="${filename}"\r\nContent-Type: application/octet-stream\r\n\r\n`)
  const tail = Buffer.from(`\r\n--${boundary}\r\nContent-Disposition: form-data; name="type"\r\n\r\ninput\r\n--${boundary}--\r\n`)
  let sent = 0
  let stage = 0
  const chunk = Buffer.alloc(MB)
  return new ReadableStream({
    pull(controller) {
      if (stage === 0) {
        stage = 1
        controller.enqueue(head)
        return
      }
      if (sent < size) {
        const n = Math.min(MB, size - sent)
        chunk.writeUInt32BE(sent / MB, 0) // every MB differs, so a dropped or repeated chunk changes the hash
        const piece = Buffer.from(chunk.subarray(0, n))
        hash.update(piece)
        sent += n
        controller.enqueue(piece)
        return
      }
      controller.enqueue(tail)
      controller.close()
    },
  })
}

for (const aiohttp of AIOHTTP_VERSIONS) {
  describe(`streaming through the gate, aiohttp ${aiohttp}`, { concurrency: false }, () => {
    let stack: Stack
    let token: string
    let stored = ''
    let sentDigest = ''
    before(async () => {
      stack = await startStack({ aiohttp })
      assert.equal((await register(stack, 'uploader')).status, 201)
      token = await apiToken(stack, 'uploader')
    })
    after(async () => {
      await destroyStack(stack)
    })

    it('a 95 MB upload arrives intact and neither process buffers it', async (t) => {
      const sent = createHash('sha256')
      const host = new MemoryWatch('host (plugin)', stack.host.pid!)
      const sidecar = new MemoryWatch('sidecar', stack.sidecarPid())
      const res = await fetch(`${stack.url}/upload/image`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'multipart/form-data; boundary=authsvc-boundary-7d1f' },
        body: multipartStream('big.bin', SIZE, sent),
        duplex: 'half',
      } as RequestInit)
      const text = await res.text()
      const hostGrowth = host.growthMb()
      const sidecarGrowth = sidecar.growthMb()
      t.diagnostic(`growth: host ${hostGrowth.toFixed(1)} MB, sidecar ${sidecarGrowth.toFixed(1)} MB`)
      assert.equal(res.status, 200, text)
      const answer = JSON.parse(text)
      stored = join(stack.baseDir, 'input', answer.subfolder ?? '', answer.name)
      const received = createHash('sha256')
      for await (const piece of createReadStream(stored)) received.update(piece as Buffer)
      sentDigest = sent.digest('hex')
      assert.equal(received.digest('hex'), sentDigest)
      assert.ok(hostGrowth < 50, `host (plugin) grew ${hostGrowth.toFixed(1)} MB`)
      assert.ok(sidecarGrowth < 50, `sidecar grew ${sidecarGrowth.toFixed(1)} MB`)
    })

    it('the 95 MB file comes back through the gate from /view, intact and streamed', async (t) => {
      assert.ok(stored, 'the upload test ran first')
      const host = new MemoryWatch('host (plugin)', stack.host.pid!)
      const sidecar = new MemoryWatch('sidecar', stack.sidecarPid())
      const res = await fetch(`${stack.url}/view?filename=${encodeURIComponent(stored.split('/').pop()!)}&type=input`, {
        headers: { Authorization: `Bearer ${token}` },
      })
      assert.equal(res.status, 200)
      const received = createHash('sha256')
      let length = 0
      for await (const piece of res.body as unknown as AsyncIterable<Uint8Array>) {
        received.update(piece)
        length += piece.length
      }
      const hostGrowth = host.growthMb()
      const sidecarGrowth = sidecar.growthMb()
      t.diagnostic(`growth: host ${hostGrowth.toFixed(1)} MB, sidecar ${sidecarGrowth.toFixed(1)} MB`)
      assert.equal(length, SIZE)
      assert.equal(received.digest('hex'), sentDigest)
      assert.ok(hostGrowth < 50, `host (plugin) grew ${hostGrowth.toFixed(1)} MB`)
      assert.ok(sidecarGrowth < 50, `sidecar grew ${sidecarGrowth.toFixed(1)} MB`)
    })

    it('an upload over the host\'s 100 MB limit is the host\'s 413, never a 503 of the gate', async () => {
      const res = await fetch(`${stack.url}/upload/image`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'multipart/form-data; boundary=authsvc-boundary-7d1f' },
        body: multipartStream('too-big.bin', 101 * MB, createHash('sha256')),
        duplex: 'half',
      } as RequestInit)
      await res.arrayBuffer()
      assert.equal(res.status, 413)
    })
  })
}
