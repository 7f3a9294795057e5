/**
 * Queue, history and actions per owner: each user sees and acts on their own
 * prompts only (the admin on all, never another's secret), with paging on
 * their own entries; large host answers are edited off the event loop.
 *
 * Part of per-user isolation through the real decider and its later steps
 * (body, form, filter, host events), with the real services and sqlite file;
 * the shared world is isolation-world.ts. End to end on the real ComfyUI:
 * test/e2e/real-host-isolation.test.ts.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { bearer, assertDenied, assertPass, decide, stepAnswer, type DescOptions, type Sidecar, type Stepped } from './fixtures.js'
import { event, filtered, ownPrompt, world, type World } from './isolation-world.js'

async function withBody(sc: Sidecar, o: DescOptions, body: string): Promise<Stepped> {
  const d = await decide(sc, o)
  if (d.action !== 'pass' || !('need_body' in d) || d.need_body === undefined) return d as Stepped
  return stepAnswer(await sc.handlers.body({ type: 'body', id: 1, ctx: d.need_body.ctx }, Buffer.from(body, 'utf8'), sc.host))
}

describe('queue, history and actions per owner', () => {
  let w: World
  let alicePrompt: string
  let bobPrompt: string
  const queueItem = (id: string, extra: string) => `[1, "${id}", {"1": {"inputs": {"seed": 18446744073709551615}}}, ${extra}, ["1"]]`
  let queue: string
  before(async () => {
    w = await world()
    alicePrompt = await ownPrompt(w.sc, w.aliceJwt)
    bobPrompt = await ownPrompt(w.sc, w.bobJwt)
    queue = `{"queue_running": [${queueItem(alicePrompt, '{"client_id": "a", "api_key_comfy_org": "ALICE-KEY"}')}], "queue_pending": [${queueItem(bobPrompt, '{"client_id": "b"}')}, ${queueItem('before-authsvc', '{}')}]}`
  })
  after(() => w.sc.close())

  it('GET /queue: bob sees only his item; alice only hers, with her own secret', async () => {
    const forBob = await filtered(w.sc, { path: '/queue', pattern: '/queue', headers: bearer(w.bobJwt) }, queue)
    assert.equal(forBob, `{"queue_running": [], "queue_pending": [${queueItem(bobPrompt, '{"client_id": "b"}')}]}`)
    const forAlice = JSON.parse(await filtered(w.sc, { path: '/api/queue', pattern: '/api/queue', headers: bearer(w.aliceJwt) }, queue) as string) as { queue_running: unknown[][]; queue_pending: unknown[] }
    assert.equal(forAlice.queue_running[0][1], alicePrompt)
    assert.equal((forAlice.queue_running[0][3] as Record<string, unknown>).api_key_comfy_org, 'ALICE-KEY')
    assert.equal(forAlice.queue_pending.length, 0)
  })

  it('GET /queue: the admin sees everything, but not alice\'s secret; numbers stay as the host wrote them', async () => {
    const forAdmin = await filtered(w.sc, { path: '/queue', pattern: '/queue', headers: bearer(w.adminJwt) }, queue) as string
    assert.doesNotMatch(forAdmin, /ALICE-KEY/)
    assert.match(forAdmin, /18446744073709551615/)
    const parsed = JSON.parse(forAdmin) as { queue_running: unknown[]; queue_pending: unknown[] }
    assert.equal(parsed.queue_running.length + parsed.queue_pending.length, 3)
  })

  const history = () => `{"${alicePrompt}": {"prompt": [1]}, "${bobPrompt}": {"prompt": [2]}, "old": {"prompt": [3]}}`

  it('GET /history: bob gets only his entries; max_items/offset apply to his own', async () => {
    const d = assertPass(await decide(w.sc, { path: '/history', pattern: '/history', query: 'max_items=1&offset=0', headers: bearer(w.bobJwt) }))
    assert.deepEqual(d.drop_query, ['max_items', 'offset'], 'the host is asked for everything')
    assert.equal(await filtered(w.sc, { path: '/history', pattern: '/history', query: 'max_items=1', headers: bearer(w.bobJwt) }, history()), `{"${bobPrompt}": {"prompt": [2]}}`)
    assert.equal(await filtered(w.sc, { path: '/history', pattern: '/history', query: 'max_items=1&offset=1', headers: bearer(w.bobJwt) }, history()), '{}')
    assert.equal(await filtered(w.sc, { path: '/history', pattern: '/history', headers: bearer(w.adminJwt) }, history()), 'unchanged')
  })

  for (const q of ['max_items=1_0', 'max_items=%EF%BC%91', 'offset=%D9%A1', 'max_items=1.5', 'max_items=']) {
    it(`GET /history?${q} (numbers Python reads and the sidecar would not) → 400, never unfiltered`, async () => {
      assertDenied(await decide(w.sc, { path: '/history', pattern: '/history', query: q, headers: bearer(w.bobJwt) }), 'VALIDATION_FAILED')
    })
  }

  it('every body the sidecar checks reaches the host as plain application/json (no client charset: utf-7 would read other keys)', async () => {
    for (const [method, path] of [['POST', '/prompt'], ['POST', '/queue'], ['POST', '/history'], ['POST', '/interrupt']]) {
      const d = assertPass(await decide(w.sc, { method, path, pattern: path, headers: { ...bearer(w.bobJwt), 'content-type': 'application/json; charset=utf-7' } }))
      assert.ok(d.need_body, path)
      assert.equal(d.set_headers?.['content-type'], 'application/json', path)
    }
  })

  it('GET /history/{id}: someone else\'s entry answers {} without asking the host', async () => {
    const d = await decide(w.sc, { path: `/history/${alicePrompt}`, pattern: '/history/{prompt_id}', match_info: { prompt_id: alicePrompt }, headers: bearer(w.bobJwt) })
    assert.equal(d.action, 'respond')
    assert.equal((d as { body_text: string }).body_text, '{}')
    assertPass(await decide(w.sc, { path: `/history/${alicePrompt}`, pattern: '/history/{prompt_id}', match_info: { prompt_id: alicePrompt }, headers: bearer(w.aliceJwt) }))
  })

  const writes: Array<[string, string]> = [['/queue', '/queue'], ['/history', '/history'], ['/api/queue', '/api/queue']]
  let reports = 0
  for (const [path, pattern] of writes) {
    it(`POST ${path}: bob deleting alice's id → 403 NOT_OWNER; clear → a delete of his own ids only`, async () => {
      const o = { method: 'POST', path, pattern, headers: bearer(w.bobJwt) }
      assertDenied(await withBody(w.sc, o, JSON.stringify({ delete: [alicePrompt] })), 'NOT_OWNER')
      assertDenied(await withBody(w.sc, o, JSON.stringify({ delete: [bobPrompt, alicePrompt] })), 'NOT_OWNER', 'one foreign id in the list')
      const own = await withBody(w.sc, o, JSON.stringify({ delete: [bobPrompt] }))
      assert.deepEqual(JSON.parse(own.body_text!), { delete: [bobPrompt] })
      // clear: only his ids still there (queue: waiting; history: finished), as the host last reported
      const queued = pattern.endsWith('/queue')
      // his prompt running (for the queue) or waiting (for the history): not there to clear
      event(w.sc, 'host_prompts', { seq: ++reports, running: queued ? [bobPrompt] : [], pending: queued ? [alicePrompt] : [bobPrompt], added: [alicePrompt], gone: [] })
      assert.deepEqual(JSON.parse((await withBody(w.sc, o, JSON.stringify({ clear: true }))).body_text!), { delete: [] }, 'nothing of his is there')
      event(w.sc, 'host_prompts', { seq: ++reports, running: [], pending: queued ? [bobPrompt, alicePrompt] : [], added: [bobPrompt], gone: [] })
      const clear = await withBody(w.sc, o, JSON.stringify({ clear: true }))
      assert.deepEqual(JSON.parse(clear.body_text!), { delete: [bobPrompt] })
      for (const bad of ['[]', '{"delete": "abc"}', '{"delete": [1]}', 'nonsense']) assertDenied(await withBody(w.sc, o, bad), 'VALIDATION_FAILED', bad)
      assertPass(await decide(w.sc, { ...o, headers: bearer(w.adminJwt) }), 'the admin clears for everyone')
    })
  }

  it('POST /interrupt: only a running prompt of the caller', async () => {
    const o = (jwt: string) => ({ method: 'POST', path: '/interrupt', pattern: '/interrupt', headers: bearer(jwt) })
    assertDenied(await withBody(w.sc, o(w.bobJwt), ''), 'NOT_OWNER', 'nothing of his runs')
    event(w.sc, 'execution_start', { prompt_id: alicePrompt })
    assertDenied(await withBody(w.sc, o(w.bobJwt), ''), 'NOT_OWNER', 'without prompt_id')
    assertDenied(await withBody(w.sc, o(w.bobJwt), JSON.stringify({ prompt_id: alicePrompt })), 'NOT_OWNER', 'naming hers')
    assert.deepEqual(JSON.parse((await withBody(w.sc, o(w.aliceJwt), '')).body_text!), { prompt_id: alicePrompt }, 'hers, pinned to its id')
    assert.deepEqual(JSON.parse((await withBody(w.sc, o(w.aliceJwt), 'not json')).body_text!), { prompt_id: alicePrompt })
    event(w.sc, 'execution_end', { prompt_id: alicePrompt, status: 'success' })
    assertDenied(await withBody(w.sc, o(w.aliceJwt), ''), 'NOT_OWNER', 'after her run ended')
  })

  it('with seperate_users false everything is shared, secrets still filtered', async () => {
    const shared = await world({ seperate_users: false })
    try {
      const a = await ownPrompt(shared.sc, shared.aliceJwt)
      const q = `{"queue_running": [], "queue_pending": [${queueItem(a, '{"auth_token_comfy_org": "SECRET"}')}]}`
      const forBob = await filtered(shared.sc, { path: '/queue', pattern: '/queue', headers: bearer(shared.bobJwt) }, q) as string
      assert.match(forBob, new RegExp(a))
      assert.doesNotMatch(forBob, /SECRET/)
      assertPass(await decide(shared.sc, { method: 'POST', path: '/queue', pattern: '/queue', headers: bearer(shared.bobJwt) }))
    } finally {
      await shared.sc.close()
    }
  })
})

describe('large host answers are edited off the event loop', () => {
  const entry = (id: string) => `"${id}": {"prompt": [1, "${id}", {"3": {"inputs": {"seed": 18446744073709551615, "text": "${'x'.repeat(2000)}"}}}, {}, []], "outputs": {}}`
  const ids = Array.from({ length: 400 }, (_, i) => `p${i}`)
  const history = `{${ids.map(entry).join(', ')}}`
  const own = new Set(ids.filter((_, i) => i % 3 === 0))

  it('a large history is filtered in the worker, exactly as inline, while the loop stays free', async () => {
    const { FilterPool, INLINE_BYTES } = await import('../../sidecar/src/isolation/filter-pool.js')
    const { filterHistory } = await import('../../sidecar/src/isolation/host-json-filters.js')
    assert.ok(Buffer.byteLength(history) > INLINE_BYTES * 10)
    const pool = new FilterPool()
    try {
      let loopTurned = false
      setImmediate(() => (loopTurned = true))
      const out = (await pool.history(Buffer.from(history), own, 5, -1)).toString('utf8')
      assert.equal(loopTurned, true, 'the event loop ran while the worker filtered')
      assert.equal(out, filterHistory(history, own, 5, -1))
      assert.deepEqual(Object.keys(JSON.parse(out) as object), ['p387', 'p390', 'p393', 'p396', 'p399'])
      assert.match(out, /18446744073709551615/)
    } finally {
      await pool.close()
    }
  })

  it('one slow edit (a huge history) never holds up another user\'s filtered read', async () => {
    const { FilterPool } = await import('../../sidecar/src/isolation/filter-pool.js')
    const pool = new FilterPool()
    try {
      // two threads, warmed up: the pool keeps what it started
      await Promise.all([pool.history(Buffer.from(history), own, null, -1), pool.history(Buffer.from(history), own, null, -1)])
      assert.equal(pool.size, 2)
      const huge = `{${Array.from({ length: 12_000 }, (_, i) => entry(`h${i}`)).join(', ')}}` // about 25 MB
      let hugeDone = false
      const slow = pool.history(Buffer.from(huge), new Set(['h1']), null, -1).then((b) => {
        hugeDone = true
        return b
      })
      const quick = await pool.queue(Buffer.from(`{"queue_running": [], "queue_pending": [[0, "q1", {"t": "${'y'.repeat(80_000)}"}, {}, []]]}`), new Set(['q1']), false)
      assert.equal(hugeDone, false, 'the small read was answered while the huge edit was still running')
      assert.match(quick.toString('utf8'), /"q1"/)
      assert.deepEqual(Object.keys(JSON.parse((await slow).toString('utf8')) as object), ['h1'])
    } finally {
      await pool.close()
    }
  })

  it('a small answer is edited inline (a worker round trip would cost more)', async () => {
    const { FilterPool } = await import('../../sidecar/src/isolation/filter-pool.js')
    const pool = new FilterPool()
    try {
      let loopTurned = false
      setImmediate(() => (loopTurned = true))
      await pool.history(Buffer.from(`{${entry('p0')}}`), own, null, -1)
      assert.equal(loopTurned, false)
    } finally {
      await pool.close()
    }
  })
})
