/**
 * The later steps of route behaviours (body, form, filter) keep their state in the sidecar
 * (kernel/steps.ts): the plugin carries only `{step: id}`. A step that names no live state
 * of its kind (unknown, forged, expired, evicted, already run, of another step or another
 * filter, or after a restart of the sidecar) is refused as an outage (503): only the plugin
 * sends a ctx, so it is never the client's doing; the state map is bounded; a kept filtered read's ctx stays
 * good for every reuse.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { StepStore, STEP_LIMITS } from '../../sidecar/src/kernel/steps.js'
import { addUser, assertDenied, assertPass, bearer, decide, fakeClock, openSidecar, sessionJwt, stepAnswer, type Sidecar } from './fixtures.js'

describe('StepStore: random ids, one-shot and shared steps, expiry, a bound', () => {
  it('a one-shot step is there until its message takes it; ids are random and opaque', () => {
    const store = new StepStore<string>(fakeClock())
    const a = store.open('a', 'alice')
    const b = store.open('b', 'alice')
    assert.notEqual(a.step, b.step)
    assert.match(a.step, /^[0-9a-f-]{36}$/)
    assert.deepEqual(Object.keys(a), ['step'], 'the token is the id and nothing else')
    assert.equal(store.get(a.step), 'a')
    store.done(a.step)
    assert.equal(store.get(a.step), undefined, 'taken')
    assert.equal(store.get(b.step), 'b')
    assert.equal(store.get('not-an-id'), undefined)
  })

  it('a shared step: equal keys get the same id while it lives, its message leaves it, each hand-out renews it', () => {
    const clock = fakeClock()
    const store = new StepStore<string>(clock, { max: 10, ttlMs: 1000 })
    let made = 0
    const first = store.share('k', () => `v${++made}`, 'alice')
    clock.advance(600)
    assert.deepEqual(store.share('k', () => `v${++made}`, 'alice'), first, 'the same id')
    store.done(first.step)
    assert.equal(store.get(first.step), 'v1', 'still there for the next reuse')
    clock.advance(600)
    assert.equal(store.get(first.step), 'v1', 'renewed by the second hand-out')
    assert.notDeepEqual(store.share('other', () => 'o', 'alice'), first)
    clock.advance(1000)
    assert.equal(store.get(first.step), undefined, 'expired')
    const again = store.share('k', () => `v${++made}`, 'alice')
    assert.notEqual(again.step, first.step, 'a new id once the old one expired')
    assert.equal(store.get(again.step), 'v2')
  })

  it('every step expires after the bound', () => {
    const clock = fakeClock()
    const store = new StepStore<string>(clock, { max: 10, ttlMs: 1000 })
    const a = store.open('a', 'alice')
    clock.advance(999)
    assert.equal(store.get(a.step), 'a')
    clock.advance(1)
    assert.equal(store.get(a.step), undefined)
    assert.equal(store.size, 0, 'an expired step is dropped when looked at')
  })

  it('at most `max` are held: expired ones go first, then the oldest', () => {
    const clock = fakeClock()
    const store = new StepStore<number>(clock, { max: 3, ttlMs: 1000 })
    const ids = [1, 2, 3].map((n) => store.open(n, 'alice').step)
    const fourth = store.open(4, 'alice').step
    assert.equal(store.size, 3)
    assert.equal(store.get(ids[0]), undefined, 'the oldest went')
    assert.deepEqual([store.get(ids[1]), store.get(ids[2]), store.get(fourth)], [2, 3, 4])
    clock.advance(500)
    const fifth = store.open(5, 'alice').step
    clock.advance(600) // 2, 3, 4 expired; 5 not
    const many = [6, 7].map((n) => store.open(n, 'alice').step)
    assert.equal(store.size, 3)
    assert.deepEqual([store.get(fifth), ...many.map((id) => store.get(id))], [5, 6, 7], 'the expired ones made room, not the live one')
    for (let n = 0; n < 50; n++) store.open(n, 'alice')
    assert.equal(store.size, 3, 'never more')
  })

  it('one owner holds at most `perOwner`: a flood pushes out only the flooder\'s own oldest steps', () => {
    const clock = fakeClock()
    const store = new StepStore<string>(clock, { max: 100, ttlMs: 1000, perOwner: 5 })
    const bobs = store.open('bob waits for his upload', 'bob')
    const shared = store.share('bob queue', () => 'bob kept read', 'bob')
    const mallory = Array.from({ length: 50 }, (_, n) => store.open(`m${n}`, 'mallory').step)
    assert.equal(store.get(bobs.step), 'bob waits for his upload', 'another owner\'s waiting step stays')
    assert.equal(store.get(shared.step), 'bob kept read', 'and their kept read\'s filter')
    assert.equal(store.size, 7, 'the flooder holds 5')
    assert.deepEqual(mallory.slice(0, 45).map((id) => store.get(id)), Array(45).fill(undefined), 'their own oldest went')
    assert.deepEqual(mallory.slice(45).map((id) => store.get(id)), ['m45', 'm46', 'm47', 'm48', 'm49'])
    assert.equal(STEP_LIMITS.perOwner, 256)
  })

  it('the default bound holds thousands and expires after half an hour (a large upload on a slow link)', () => {
    assert.ok(STEP_LIMITS.max >= 1000)
    assert.ok(STEP_LIMITS.ttlMs >= 10 * 60_000)
  })
})

describe('route behaviours: a step names only a live state of its own kind', () => {
  let sc: Sidecar
  let bobJwt: string
  let bobId: string
  before(async () => {
    sc = await openSidecar()
    const bob = await addUser(sc, 'bob', 'bob-password-1')
    bobId = bob.user_id
    bobJwt = await sessionJwt(sc, bob)
  })
  after(() => sc.close())

  const body = (ctx: unknown, text = '{"delete": []}') => sc.handlers.body({ type: 'body', id: 1, ctx }, Buffer.from(text, 'utf8'))
  const filter = (name: string, ctx: unknown, text: string) =>
    sc.handlers.filter({ type: 'filter', id: 1, name, ctx, status: 200, content_type: 'application/json' }, Buffer.from(text, 'utf8'))
  const queueWrite = async () => assertPass(await decide(sc, { method: 'POST', path: '/queue', pattern: '/queue', headers: bearer(bobJwt) })).need_body!.ctx
  const queueRead = async () => assertPass(await decide(sc, { path: '/queue', pattern: '/queue', headers: bearer(bobJwt) })).filter!

  it('the ctx a decision carries is an opaque step id: nothing of the state travels', async () => {
    const ctx = await queueWrite()
    assert.deepEqual(Object.keys(ctx as object), ['step'])
    assert.doesNotMatch(JSON.stringify(ctx), new RegExp(bobId), 'not even the owner')
  })

  it('a body step runs once; the same ctx again is refused (503), as are forged and old-style ctx bags', async () => {
    const ctx = await queueWrite()
    assertPass(stepAnswer(await body(ctx)))
    assertDenied(stepAnswer(await body(ctx)), 'AUTHSVC_UNAVAILABLE', 'replayed')
    for (const forged of [{ step: 'f00dbabe-0000-4000-8000-000000000000' }, { step: 1 }, { kind: 'queue-write', owner: bobId, seesAll: true }, null, 'x']) {
      assertDenied(stepAnswer(await body(forged)), 'AUTHSVC_UNAVAILABLE', JSON.stringify(forged))
    }
  })

  it('a step of another kind is refused: a filter\'s id as a body, a body\'s id as a filter, a filter under another name', async () => {
    const read = await queueRead()
    assertDenied(stepAnswer(await body(read.ctx)), 'AUTHSVC_UNAVAILABLE')
    const ctx = await queueWrite()
    assertDenied(stepAnswer(await filter('queue', ctx, '{}')), 'AUTHSVC_UNAVAILABLE')
    assertDenied(stepAnswer(await filter('history', read.ctx, '{}')), 'AUTHSVC_UNAVAILABLE', 'the filter was opened as queue')
    assertDenied(stepAnswer(await filter('queue', { step: 'nope' }, '{}')), 'AUTHSVC_UNAVAILABLE')
    assertPass(stepAnswer(await body(ctx)), 'the refusals did not use it up')
  })

  it('an expired step is refused: the decision was made more than the bound ago', async () => {
    const ctx = await queueWrite()
    sc.clock.advance(STEP_LIMITS.ttlMs)
    assertDenied(stepAnswer(await body(ctx)), 'AUTHSVC_UNAVAILABLE')
  })

  it('a kept filtered read: every decision of the same state hands out the same ctx, and it filters every reuse', async () => {
    const first = await queueRead()
    const second = await queueRead()
    assert.deepEqual(second.ctx, first.ctx, 'one state for a polled read')
    const item = (id: string) => `[1, "${id}", {}, {}, []]`
    for (let reuse = 0; reuse < 4; reuse++) {
      const host = `{"queue_running": [${item(`someone-else-${reuse}`)}], "queue_pending": []}`
      const out: { action: string; body_text?: string } = stepAnswer(await filter(first.name, first.ctx, host))
      assert.equal(out.action, 'replace', `reuse ${reuse}`)
      assert.equal(out.body_text, '{"queue_running": [], "queue_pending": []}', `reuse ${reuse}: nobody else's item`)
    }
    // the plugin reuses a kept decision for at most 5 s, then the host answers: well inside the bound
    sc.clock.advance(60_000)
    assert.equal(stepAnswer(await filter(first.name, first.ctx, '{"queue_running": [], "queue_pending": []}')).action, 'replace')
  })

  it('a restarted sidecar knows none of the old steps: a body and a filter are a 503 (never a pass)', async () => {
    const ctx = await queueWrite()
    const read = await queueRead()
    const other = await openSidecar()
    try {
      assertDenied(stepAnswer(await other.handlers.body({ type: 'body', id: 1, ctx }, Buffer.from('{"delete": []}'))), 'AUTHSVC_UNAVAILABLE')
      assertDenied(stepAnswer(await other.handlers.filter({ type: 'filter', id: 1, name: read.name, ctx: read.ctx, status: 200, content_type: 'application/json' }, Buffer.from('{}'))), 'AUTHSVC_UNAVAILABLE')
    } finally {
      await other.close()
    }
  })
})
