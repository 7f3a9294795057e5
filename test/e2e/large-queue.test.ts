/**
 * Issue 21: a queue of large prompts never makes a non-admin's /queue answer 503. The host's
 * answer no longer fits one frame of the decision protocol (32 MiB): the plugin announces it
 * (`too_large`), the sidecar names the caller's own prompts (`narrow`), and only those travel.
 * Through the gate in front of the stand-in: real HTTP, the real plugin and sidecar.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { AIOHTTP_VERSIONS, ROOT, startStack, type Stack } from '../helpers/stack.js'
import { apiToken, bearer, json, register } from '../helpers/client.js'

const MAX_FRAME = (JSON.parse(readFileSync(join(ROOT, 'shared', 'protocol.json'), 'utf8')) as { max_frame_bytes: number }).max_frame_bytes
const sleepGraph = (seconds: number): Record<string, unknown> => ({ '1': { class_type: 'StandinSleep', inputs: { seconds } } })

for (const aiohttp of AIOHTTP_VERSIONS) {
  describe(`a queue too large for one frame (aiohttp ${aiohttp})`, () => {
    let stack: Stack
    let admin: string
    let alice: string
    let bob: string
    const aliceIds: string[] = []
    let bobId = ''
    let blocker = ''
    const post = async (token: string, path: string, body: unknown) => {
      const res = await fetch(`${stack.url}${path}`, { method: 'POST', headers: { ...bearer(token), 'Content-Type': 'application/json' }, body: JSON.stringify(body) })
      return { status: res.status, body: await json(res) }
    }
    const getQueue = async (token: string) => {
      const res = await fetch(`${stack.url}/queue`, { headers: { ...bearer(token), Accept: 'application/json' } })
      const text = await res.text()
      return { status: res.status, bytes: Buffer.byteLength(text), body: JSON.parse(text) }
    }
    const ids = (body: any): string[] => [...body.queue_running, ...body.queue_pending].map((item: unknown[]) => item[1] as string)

    before(async () => {
      stack = await startStack({ aiohttp })
      await register(stack, 'admin')
      admin = await apiToken(stack, 'admin')
      for (const name of ['alice', 'bob']) await register(stack, name, { bearer: admin })
      alice = await apiToken(stack, 'alice')
      bob = await apiToken(stack, 'bob')
      const run = await post(admin, '/prompt', { prompt: sleepGraph(120) })
      assert.equal(run.status, 200)
      blocker = run.body.prompt_id
      // seven prompts of about 5 MB each (a workflow with embedded images), behind the blocker
      const big = 'x'.repeat(5 * 1024 * 1024)
      for (let i = 0; i < 7; i++) {
        const res = await post(alice, '/prompt', { prompt: sleepGraph(0), extra_data: { extra_pnginfo: { workflow: { note: big, i } } } })
        assert.equal(res.status, 200, JSON.stringify(res.body).slice(0, 200))
        aliceIds.push(res.body.prompt_id)
      }
      const small = await post(bob, '/prompt', { prompt: sleepGraph(0) })
      assert.equal(small.status, 200)
      bobId = small.body.prompt_id
    })
    after(async () => {
      if (admin) {
        for (const path of ['/queue', '/interrupt']) {
          await fetch(`${stack.url}${path}`, { method: 'POST', headers: { ...bearer(admin), 'Content-Type': 'application/json' }, body: path === '/queue' ? '{"clear": true}' : '{}' })
        }
      }
      await stack?.stop()
    })

    it('bob\'s /queue answers 200 with his prompt only; alice\'s with all of hers (more than a frame holds)', async () => {
      const forBob = await getQueue(bob)
      assert.equal(forBob.status, 200, JSON.stringify(forBob.body).slice(0, 200))
      assert.deepEqual(ids(forBob.body), [bobId])
      const forAlice = await getQueue(alice)
      assert.equal(forAlice.status, 200, JSON.stringify(forAlice.body).slice(0, 200))
      assert.deepEqual(ids(forAlice.body).sort(), [...aliceIds].sort())
      assert.ok(forAlice.bytes > MAX_FRAME, `her own answer (${forAlice.bytes} bytes) is itself larger than a frame`)
      assert.equal(forAlice.body.queue_pending[0][3].extra_pnginfo.workflow.note.length, 5 * 1024 * 1024, 'her prompts come back whole')
    })

    it('the admin, who sees every item, gets 503 AUTHSVC_UNAVAILABLE: the whole queue must fit a frame to be filtered', async () => {
      const forAdmin = await getQueue(admin)
      assert.equal(forAdmin.status, 503)
      assert.equal(forAdmin.body.code, 'AUTHSVC_UNAVAILABLE')
      assert.ok(blocker)
    })
  })
}
