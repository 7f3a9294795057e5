/**
 * DESIGN §2.5 end to end: a 200 MB upload through the gate arrives intact
 * (sha256) while the host process (which runs the plugin) and the sidecar
 * grow by less than 50 MB at their peak (VmHWM), so nothing buffered it.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { createReadStream, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { destroyStack, startStack, type Stack } from '../helpers/stack.js'
import { apiToken, json, register } from '../helpers/client.js'

const MB = 1024 * 1024
const SIZE = 200 * MB

function peakRssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  return Number(/VmHWM:\s+(\d+) kB/.exec(status)![1]) / 1024
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

describe('streaming through the gate', () => {
  let stack: Stack
  let token: string
  before(async () => {
    stack = await startStack()
    await register(stack, 'uploader')
    token = await apiToken(stack, 'uploader')
  })
  after(async () => {
    await destroyStack(stack)
  })

  it('a 200 MB upload arrives intact and neither process buffers it', async () => {
    const hostPid = stack.host.pid!
    const sidecarPid = stack.sidecarPid()
    const hostBefore = peakRssMb(hostPid)
    const sidecarBefore = peakRssMb(sidecarPid)
    const sent = createHash('sha256')
    const res = await fetch(`${stack.url}/upload/image`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'multipart/form-data; boundary=authsvc-boundary-7d1f' },
      body: multipartStream('big.bin', SIZE, sent),
      duplex: 'half',
    } as RequestInit)
    assert.equal(res.status, 200, await res.clone().text())
    const answer = await json(res)
    const stored = join(stack.baseDir, 'input', answer.subfolder ?? '', answer.name)
    const received = createHash('sha256')
    for await (const piece of createReadStream(stored)) received.update(piece as Buffer)
    assert.equal(received.digest('hex'), sent.digest('hex'))
    const hostGrowth = peakRssMb(hostPid) - hostBefore
    const sidecarGrowth = peakRssMb(sidecarPid) - sidecarBefore
    assert.ok(hostGrowth < 50, `host (plugin) peak grew ${hostGrowth.toFixed(1)} MB`)
    assert.ok(sidecarGrowth < 50, `sidecar peak grew ${sidecarGrowth.toFixed(1)} MB`)
  })
})
