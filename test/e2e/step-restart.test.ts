/**
 * A later step's state lives in the sidecar (kernel/steps.ts); the plugin carries only its
 * id. Through the real plugin: a body step whose sidecar was replaced while the client was still
 * sending the body reaches a sidecar that never opened that step, and is refused as the outage
 * it is (503 AUTHSVC_UNAVAILABLE, the same whether the new sidecar or the ended connection
 * answers), never a 500 and never the host's handler; the next request goes through.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { request } from 'node:http'
import { AIOHTTP_VERSIONS, destroyStack, poll, startStack, type Stack } from '../helpers/stack.js'
import { bearer, login, register, tinyGraph } from '../helpers/client.js'

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

for (const aiohttp of AIOHTTP_VERSIONS) {
  describe(`a step across a sidecar restart, aiohttp ${aiohttp}`, () => {
    let stack: Stack
    let admin: string
    before(async () => {
      stack = await startStack({ aiohttp })
      await register(stack, 'root')
      admin = (await login(stack, 'root')).jwt
    })
    after(async () => {
      await destroyStack(stack)
    })

    it('a /prompt body finished after the sidecar was replaced: refused cleanly, the host never runs it', async () => {
      const body = Buffer.from(JSON.stringify({ prompt: tinyGraph('restart') }), 'utf8')
      const url = new URL(`${stack.url}/prompt`)
      await stack.resetCounter()
      const answer = new Promise<{ status: number; text: string }>((resolve, reject) => {
        const req = request({
          host: url.hostname, port: url.port, path: url.pathname, method: 'POST',
          headers: { ...bearer(admin), 'Content-Type': 'application/json', 'Content-Length': String(body.length), Accept: 'application/json' },
        }, (res) => {
          let text = ''
          res.setEncoding('utf8')
          res.on('data', (d: string) => (text += d))
          res.on('end', () => resolve({ status: res.statusCode ?? 0, text }))
        })
        req.on('error', reject)
        req.write(body.subarray(0, 10))
        // the decision (need_body, with the step's id) comes back while the client is still sending
        void sleep(500).then(async () => {
          const before = stack.sidecarPid()
          process.kill(before, 'SIGKILL')
          const replaced = await poll(async () => {
            try {
              return stack.sidecarPid() !== before && (await fetch(`${stack.url}/authsvc/health`)).status === 200
            } catch {
              return false
            }
          }, 20_000)
          assert.ok(replaced, 'a new sidecar answers')
          req.end(body.subarray(10))
        }).catch(reject)
      })
      const { status, text } = await answer
      // the old sidecar's step is unknown to the new one, or its connection ended first: an outage either way
      assert.deepEqual([status, JSON.parse(text).code], [503, 'AUTHSVC_UNAVAILABLE'], text)
      assert.equal((await stack.counter()).total, 0, 'the host\'s handler never ran')
      const next = await fetch(`${stack.url}/prompt`, { method: 'POST', headers: { ...bearer(admin), 'Content-Type': 'application/json' }, body })
      assert.equal(next.status, 200, 'the next request goes through')
    })
  })
}
