/**
 * Queue and prompt bookkeeping (issue 21, items 3 and 8), on the stand-in with the real plugin
 * and sidecar, real HTTP, real WebSocket frames and the real sqlite file:
 * - `queue_remaining` (GET /prompt, a socket's first `status`, every later broadcast) counts only
 *   the caller's own prompts for non-admins; admins see the host's number;
 * - `clear` sends the host only the caller's own queued ids;
 * - prompt records and client-id bindings go when the host forgets the prompt, and survive a
 *   restart of the sidecar; a prompt without client id uses no slot of its owner's;
 * - a `prompt_id` the host knows but the gate did not record for the caller is refused.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { join } from 'node:path'
import sqlite3 from 'sqlite3'
import { HOST_AIOHTTP, startStack, type Stack } from '../helpers/stack.js'
import { apiToken, bearer, json, register, tinyGraph, WsClient, type WsMessage } from '../helpers/client.js'

const HISTORY_LIMIT = 4

function sql<T>(path: string, query: string, ...params: unknown[]): Promise<T[]> {
  return new Promise((resolve, reject) => {
    const db = new sqlite3.Database(path, (err) => {
      if (err) return reject(err)
      db.all(query, params, (e: Error | null, rows: T[]) => {
        db.close()
        if (e) reject(e)
        else resolve(rows)
      })
    })
  })
}

const sleepGraph = (seconds: number): Record<string, unknown> => ({ '1': { class_type: 'StandinSleep', inputs: { seconds } } })

for (const aiohttp of [HOST_AIOHTTP]) {
  describe(`queue bookkeeping (aiohttp ${aiohttp})`, () => {
    let stack: Stack
    let admin: string
    let alice: string
    let bob: string
    const db = (): string => join(stack.dataDir, 'authsvc.sqlite')
    const keys = async (kind: string): Promise<string[]> =>
      (await sql<{ key: string }>(db(), `SELECT key FROM authsvc_records WHERE key LIKE ?`, `%${kind}:%`)).map((r) => r.key.slice(r.key.indexOf(`${kind}:`) + kind.length + 1))
    /** polls the sqlite file (the sidecar writes it in the background) until `check` holds */
    async function storeUntil(kind: string, check: (ids: string[]) => boolean, what: string): Promise<string[]> {
      const until = Date.now() + 60_000 // a deadline, not a wait: two real hosts may share the two cores
      for (;;) {
        const ids = await keys(kind)
        if (check(ids)) return ids
        if (Date.now() > until) throw new Error(`${what}: store holds ${JSON.stringify(ids)}`)
        await new Promise((r) => setTimeout(r, 50))
      }
    }
    const post = (token: string, path: string, body: unknown): Promise<Response> =>
      fetch(`${stack.url}${path}`, { method: 'POST', headers: { ...bearer(token), 'Content-Type': 'application/json' }, body: JSON.stringify(body) })
    async function queue(token: string, prompt: Record<string, unknown>, extra: Record<string, unknown> = {}): Promise<string> {
      const res = await post(token, '/prompt', { prompt, ...extra })
      const body = await json(res)
      assert.equal(res.status, 200, JSON.stringify(body))
      return body.prompt_id
    }
    const remaining = async (token: string): Promise<string> => (await fetch(`${stack.url}/prompt`, { headers: bearer(token) })).text()
    const statuses = (ws: WsClient): WsMessage[] => ws.messages.filter((m) => m.type === 'status')
    const lastRemaining = (ws: WsClient): number => statuses(ws).at(-1)!.data.status.exec_info.queue_remaining
    /** every broadcast reaches every socket: wait until `ws` got as many as `witness` (opened together) */
    async function sameFrames(ws: WsClient, witness: WsClient, hostTotal: number): Promise<void> {
      await witness.waitFor(() => statuses(witness).length > 0 && lastRemaining(witness) === hostTotal)
      await ws.waitFor(() => statuses(ws).length >= statuses(witness).length)
    }
    async function inHistory(token: string, id: string): Promise<void> {
      const until = Date.now() + 10_000
      while (Date.now() < until) {
        const body = await json(await fetch(`${stack.url}/history/${id}`, { headers: bearer(token) }))
        if (body[id]?.status?.completed) return
        await new Promise((r) => setTimeout(r, 50))
      }
      throw new Error(`${id} never finished`)
    }

    before(async () => {
      stack = await startStack({ aiohttp, env: { STANDIN_HISTORY_LIMIT: String(HISTORY_LIMIT) } })
      await register(stack, 'admin')
      admin = await apiToken(stack, 'admin')
      for (const name of ['alice', 'bob']) await register(stack, name, { bearer: admin })
      alice = await apiToken(stack, 'alice')
      bob = await apiToken(stack, 'bob')
    })
    after(async () => {
      await stack?.stop()
    })

    it('queue_remaining counts only the caller’s own prompts; clear sends only their queued ids', async () => {
      const bobDone = await queue(bob, tinyGraph('bob-done'))
      await inHistory(bob, bobDone)
      const adminWs = await WsClient.open(`${stack.url.replace('http', 'ws')}/ws?clientId=admin-tab`, bearer(admin))
      const bobWs = await WsClient.open(`${stack.url.replace('http', 'ws')}/ws?clientId=bob-tab`, bearer(bob))
      await adminWs.waitFor((m) => m.type === 'status')
      await bobWs.waitFor((m) => m.type === 'status')
      const blocker = await queue(admin, sleepGraph(60))
      const quiet = await remaining(bob)
      assert.equal(quiet, '{"exec_info": {"queue_remaining": 0}}')
      const aliceIds: string[] = []
      for (const wanted of [0, 1, 5]) {
        while (aliceIds.length < wanted) aliceIds.push(await queue(alice, sleepGraph(0)))
        assert.equal(await remaining(admin), `{"exec_info": {"queue_remaining": ${1 + wanted}}}`, 'the admin sees the host’s number')
        assert.equal(await remaining(bob), quiet, `bob's GET /prompt with ${wanted} of alice's queued`)
        assert.equal(await remaining(alice), `{"exec_info": {"queue_remaining": ${wanted}}}`)
        await sameFrames(bobWs, adminWs, 1 + wanted)
        assert.deepEqual(statuses(bobWs).map((m) => m.data.status.exec_info.queue_remaining), statuses(bobWs).map(() => 0), `bob's status frames with ${wanted} of alice's queued`)
        const late = await WsClient.open(`${stack.url.replace('http', 'ws')}/ws`, bearer(bob))
        const first = await late.waitFor((m) => m.type === 'status')
        assert.equal(first.data.status.exec_info.queue_remaining, 0, 'the status a new socket gets first')
        late.close()
      }
      const bobIds = [await queue(bob, sleepGraph(0)), await queue(bob, sleepGraph(0))]
      assert.equal(await remaining(bob), '{"exec_info": {"queue_remaining": 2}}')
      await sameFrames(bobWs, adminWs, 8)
      assert.equal(lastRemaining(bobWs), 2)
      assert.equal(lastRemaining(adminWs), 8)

      await stack.resetCounter()
      const cleared = await post(bob, '/queue', { clear: true })
      assert.equal(cleared.status, 200)
      const seen = await stack.lastRequest()
      const sent = JSON.stringify({ delete: bobIds })
      assert.equal(seen.body_sha256, createHash('sha256').update(sent).digest('hex'), `the host got ${sent}, not bob's finished ${bobDone}`)
      assert.equal(await remaining(bob), '{"exec_info": {"queue_remaining": 0}}')
      assert.equal(await remaining(admin), '{"exec_info": {"queue_remaining": 6}}', 'alice’s prompts and the blocker stay')

      assert.equal((await post(admin, '/interrupt', { prompt_id: blocker })).status, 200)
      // prompts end in queue order, and the host keeps only the newest HISTORY_LIMIT entries: the
      // first of alice's may already be gone by the time the last has ended, so wait for the last
      await inHistory(alice, aliceIds.at(-1)!)
      adminWs.close()
      bobWs.close()
    })

    it('records and bindings last as long as the host knows the prompt; minted ids use no slot', async () => {
      const ws = await WsClient.open(`${stack.url.replace('http', 'ws')}/ws?clientId=alice-tab`, bearer(alice))
      await ws.waitFor((m) => m.type === 'status')
      // far more prompts without a client id than an owner has slots (256)
      const ids: string[] = []
      for (let round = 0; round < 33; round++) {
        ids.push(...(await Promise.all(Array.from({ length: 8 }, () => queue(alice, tinyGraph('many'))))))
      }
      const last = ids.at(-1)!
      await inHistory(alice, last)
      const kept = await storeUntil('prompt', (p) => p.length <= HISTORY_LIMIT + 1, 'prompt records beyond the host history')
      assert.ok(kept.includes(last), 'the newest prompt is still known')
      const bindings = await storeUntil('client_id', (c) => c.filter((id) => id.startsWith('authsvc-')).length <= HISTORY_LIMIT + 1, 'minted client ids')
      assert.ok(bindings.includes('alice-tab'), 'the tab’s id kept its slot')
      await assert.rejects(WsClient.open(`${stack.url.replace('http', 'ws')}/ws?clientId=alice-tab`, bearer(bob)), /403/)

      // a deleted history entry: the host forgets it, so does the gate
      assert.equal((await post(alice, '/history', { delete: [last] })).status, 200)
      await storeUntil('prompt', (p) => !p.includes(last), 'a deleted prompt')
      ws.close()
    })

    it('a restarted sidecar keeps the bindings and refuses host ids it has no record of', async () => {
      const ws = await WsClient.open(`${stack.url.replace('http', 'ws')}/ws?clientId=bob-kept`, bearer(bob))
      await ws.waitFor((m) => m.type === 'status')
      const orphan = await queue(alice, tinyGraph('orphan'))
      await inHistory(alice, orphan)
      await storeUntil('client_id', (c) => c.includes('bob-kept'), 'the binding')
      // the gate loses its record of a prompt the host still has (a store restored from a backup, a crash)
      await sql(db(), `DELETE FROM authsvc_records WHERE key LIKE ?`, `%prompt:${orphan}`)
      const pid = stack.sidecarPid()
      process.kill(pid, 'SIGKILL')
      const until = Date.now() + 20_000
      while (stack.sidecarPid() === pid && Date.now() < until) await new Promise((r) => setTimeout(r, 50))
      await stack.waitReady()
      ws.close()
      await assert.rejects(WsClient.open(`${stack.url.replace('http', 'ws')}/ws?clientId=bob-kept`, bearer(alice)), /403/, 'the binding outlived the sidecar')
      const claim = await post(bob, '/prompt', { prompt: tinyGraph('claim'), prompt_id: orphan })
      assert.equal(claim.status, 409)
      assert.equal((await json(claim)).code, 'PROMPT_ID_TAKEN')
      assert.deepEqual(await json(await fetch(`${stack.url}/history/${orphan}`, { headers: bearer(bob) })), {}, 'bob never sees it')
      const fresh = await post(bob, '/prompt', { prompt: tinyGraph('fresh'), prompt_id: 'bob-own-id-1' })
      assert.equal(fresh.status, 200, 'an id nobody knows is still the client’s to choose')
    })
  })
}
