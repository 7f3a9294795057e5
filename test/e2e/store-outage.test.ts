/**
 * Issue 28 item 5 end to end: the shared store (Redis, then PostgreSQL) is killed under
 * load, through the stand-in host, its plugin and a real sidecar process.
 *
 * - reads go on from the replica for at most the stated bound (STORE_GRACE_MS after the
 *   instance notices; a killed server is noticed when its connection closes), then every
 *   answer is 503 STORE_UNAVAILABLE: no request is served past it;
 * - a write that cannot reach the store is never acknowledged (201/200): every one that was
 *   is found afterwards;
 * - open WebSockets close with 4503 once decisions stop;
 * - when the server is back (same port, same data), service resumes by itself.
 * How fast it resumes is a bench line (bench/store-bench.ts), not a timed assertion here.
 */
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import WebSocket from 'ws'
import { destroyStack, poll, startStack, type Stack } from '../helpers/stack.js'
import { PASSWORD, bearer, json, login, register } from '../helpers/client.js'
import { postgresSkipReason, redisSkipReason, startPostgres, startRedis, type StoreServer } from '../helpers/store-servers.js'
import { STORE_GRACE_MS } from '../../sidecar/src/store/health.js'

/** the instance notices a killed server within this (its connection closes; the probe is a fallback) */
const NOTICE_MS = 1500

interface Answer {
  started: number
  status: number
  code?: string
}

const backends = [
  { name: 'redis' as const, skip: redisSkipReason(), start: startRedis },
  { name: 'postgres' as const, skip: postgresSkipReason(), start: startPostgres },
]

for (const backend of backends) {
  describe(`the ${backend.name} store killed under load`, { skip: backend.skip, concurrency: false }, () => {
    let server: StoreServer
    let stack: Stack
    let admin: string

    before(async () => {
      server = await backend.start()
      stack = await startStack({ noWait: true, config: { store: { backend: backend.name, [`${backend.name}_url`]: server.url } }, env: { AUTHSVC_SECRET: 'outage-secret-0123456789abcdefghij' } })
      await stack.waitReady(90_000) // a loaded 2-core machine starts a sidecar on a shared store slowly
      assert.equal((await register(stack, 'root')).status, 201)
      admin = (await login(stack, 'root')).jwt
    })
    after(async () => {
      if (stack) await destroyStack(stack)
      await server?.stop()
    })

    it('serves from the replica at most the bound, then 503 only, loses no acknowledged write, and comes back', { timeout: 180_000 }, async () => {
      const phase = (what: string) => process.env.AUTHSVC_TEST_DEBUG && console.error(`[outage ${backend.name}] ${what} reads=${reads.length} acked=${acknowledged.length}`)
      const reads: Answer[] = []
      const acknowledged: string[] = []
      const writeAnswers: number[] = []
      let running = true
      const readLoop = async () => {
        while (running) {
          const started = Date.now()
          const res = await fetch(`${stack.url}/authsvc/api/me`, { headers: { ...bearer(admin), Accept: 'application/json' } })
          const body = await json(res)
          reads.push({ started, status: res.status, code: body.code })
        }
      }
      let n = 0
      const writeLoop = async () => {
        while (running) {
          const name = `w${backend.name}${n++}`
          const res = await register(stack, name, { bearer: admin })
          await res.text()
          writeAnswers.push(res.status)
          if (res.status === 201) acknowledged.push(name)
          else assert.equal(res.status, 503, `a refused write is 503, got ${res.status}`)
        }
      }
      const loops = [readLoop(), readLoop(), writeLoop()]

      // an open socket, closed once decisions stop
      const ws = new WebSocket(`${stack.url.replace('http', 'ws')}/ws?clientId=outage-${backend.name}`, { headers: bearer(admin) })
      await new Promise<void>((resolve, reject) => {
        ws.once('open', () => resolve())
        ws.once('unexpected-response', (_q, r) => reject(new Error(`upgrade ${r.statusCode}`)))
      })
      const closed = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)))

      assert.ok(await poll(async () => acknowledged.length >= 3 && reads.length >= 20, 20_000), 'load runs before the outage')
      phase('killing')
      const killedAt = Date.now()
      await server.kill()
      const bound = killedAt + NOTICE_MS + STORE_GRACE_MS
      assert.ok(await poll(async () => reads.some((r) => r.started > bound + 500), 30_000), 'reads go on past the bound')
      phase('past the bound')
      assert.equal(await closed, 4503, "the open socket closes with 4503 (store unavailable)")

      phase('restarting')
      const restartedAt = Date.now()
      await server.restart()
      assert.ok(await poll(async () => reads.some((r) => r.started > restartedAt && r.status === 200), 30_000), 'service resumes by itself once the store is back')
      const resumed = reads.find((r) => r.started > restartedAt && r.status === 200)!.started
      // a little more traffic after the return, then stop
      assert.ok(await poll(async () => writeAnswers.length > 0 && acknowledged.length > 0 && reads.filter((r) => r.started > resumed).length >= 5, 20_000))
      phase('stopping load')
      running = false
      await Promise.all(loops)

      const afterBound = reads.filter((r) => r.started >= bound && r.started < restartedAt)
      assert.ok(afterBound.length > 0, 'requests were made past the bound')
      const served = afterBound.filter((r) => r.status !== 503 || r.code !== 'STORE_UNAVAILABLE')
      assert.deepEqual(served, [], 'nothing is served past the bound while the store is down; every answer is 503 STORE_UNAVAILABLE')
      const during = reads.filter((r) => r.started >= killedAt && r.started < restartedAt)
      assert.deepEqual(during.filter((r) => r.status !== 200 && r.status !== 503), [], 'meanwhile every answer is the replica\'s 200 or 503')
      assert.ok(writeAnswers.includes(503), 'writes during the outage were refused with 503')

      // every acknowledged write is there, and works, after the return
      for (const name of acknowledged) {
        const res = await fetch(`${stack.url}/login`, { method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json' }, body: JSON.stringify({ username: name, password: PASSWORD }) })
        assert.equal(res.status, 200, `${name} was acknowledged before or after the outage and signs in now`)
      }
      ws.terminate()
    })
  })
}
