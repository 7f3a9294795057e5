/**
 * The kernel's background jobs and event stream (sidecar/src/kernel/jobs.ts, events.ts): jobs
 * start once, run periodically without overlapping, stop last-started first and clear their
 * timers; a failing job or listener is logged and stops nothing else. Time is node:test's mocked
 * timers: nothing sleeps.
 */
import { describe, it, mock, afterEach } from 'node:test'
import assert from 'node:assert/strict'
import pino from 'pino'
import type { FastifyBaseLogger } from 'fastify'
import { Jobs } from '../../sidecar/src/kernel/jobs.js'
import { Events } from '../../sidecar/src/kernel/events.js'

declare module '../../sidecar/src/kernel/events.js' {
  interface EventMap {
    test_ping: { n: number }
    test_pong: { who: string }
  }
}

function capture(): { log: FastifyBaseLogger; errors: () => Array<Record<string, unknown>> } {
  const lines: string[] = []
  const log = pino({ level: 'info' }, { write: (line: string) => void lines.push(line) }) as FastifyBaseLogger
  return { log, errors: () => lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => (l.level as number) >= 50) }
}

afterEach(() => mock.timers.reset())

describe('kernel jobs', () => {
  it('start runs each start once in order; a job added later starts at once; stop goes in reverse', async () => {
    const { log } = capture()
    const jobs = new Jobs(log)
    const seen: string[] = []
    for (const name of ['a', 'b']) jobs.add({ name, start: () => void seen.push(`start ${name}`), stop: () => void seen.push(`stop ${name}`) })
    await jobs.start()
    await jobs.start()
    jobs.add({ name: 'c', start: async () => void seen.push('start c'), stop: () => void seen.push('stop c') })
    await jobs.stop()
    await jobs.stop()
    assert.deepEqual(seen, ['start a', 'start b', 'start c', 'stop c', 'stop b', 'stop a'])
    assert.throws(() => jobs.add({ name: 'late' }), /while the jobs stop/)
  })

  it('a stop while the jobs are still starting: the ones not started yet never start (none is left running)', async () => {
    const { log } = capture()
    const jobs = new Jobs(log)
    const seen: string[] = []
    jobs.add({ name: 'slow', start: async () => { await new Promise((resolve) => setImmediate(resolve)); seen.push('start slow') }, stop: () => void seen.push('stop slow') })
    jobs.add({ name: 'later', start: () => void seen.push('start later'), stop: () => void seen.push('stop later') })
    const starting = jobs.start()
    const stopping = jobs.stop()
    await Promise.all([starting, stopping])
    assert.deepEqual(seen.filter((s) => s.endsWith('later')), [], 'the later job never started, so nothing of it runs')
    assert.ok(seen.includes('stop slow'), 'the started one was stopped')
  })

  it('every: runs each period, skips a period while a run is still going, and stop waits for it', async () => {
    mock.timers.enable({ apis: ['setInterval'] })
    const { log } = capture()
    const jobs = new Jobs(log)
    let runs = 0
    let release: () => void = () => {}
    jobs.add({ name: 'prune', every: { ms: 1000, run: () => { runs++; return new Promise<void>((resolve) => (release = resolve)) } } })
    await jobs.start()
    assert.equal(runs, 0, 'the first run is one period after start')
    mock.timers.tick(1000)
    assert.equal(runs, 1)
    mock.timers.tick(3000)
    assert.equal(runs, 1, 'no second run while the first is going')
    release()
    await new Promise((resolve) => setImmediate(resolve))
    mock.timers.tick(1000)
    assert.equal(runs, 2, 'the next period runs again')
    let stopped = false
    const stopping = jobs.stop().then(() => (stopped = true))
    await new Promise((resolve) => setImmediate(resolve))
    assert.equal(stopped, false, 'stop waits for the run in progress')
    release()
    await stopping
    mock.timers.tick(5000)
    assert.equal(runs, 2, 'no run after stop')
  })

  it('a failing start, run or stop is logged with the job name and nothing else stops', async () => {
    mock.timers.enable({ apis: ['setInterval'] })
    const { log, errors } = capture()
    const jobs = new Jobs(log)
    let otherRuns = 0
    let otherStopped = false
    jobs.add({ name: 'broken', start: () => { throw new Error('no start') }, every: { ms: 10, run: async () => { throw new Error('no run') } }, stop: () => { throw new Error('no stop') } })
    jobs.add({ name: 'fine', every: { ms: 10, run: () => void otherRuns++ }, stop: () => void (otherStopped = true) })
    await jobs.start()
    mock.timers.tick(10)
    await new Promise((resolve) => setImmediate(resolve))
    await jobs.stop()
    assert.equal(otherRuns, 1)
    assert.equal(otherStopped, true)
    assert.deepEqual(errors().map((e) => [e.job, e.step ?? 'start']), [['broken', 'start'], ['broken', 'run'], ['broken', 'stop']])
  })
})

describe('kernel events', () => {
  it('listeners of a kind and of every kind get one record with kind and time, in order', () => {
    const { log } = capture()
    const events = new Events(() => 1234, log)
    const seen: unknown[] = []
    events.on('test_ping', (r) => void seen.push(['ping', r.n, r.at]))
    events.onAny((r) => void seen.push(['any', r.kind]))
    events.emit('test_ping', { n: 7 })
    events.emit('test_pong', { who: 'x' })
    assert.deepEqual(seen, [['ping', 7, 1234], ['any', 'test_ping'], ['any', 'test_pong']])
  })

  it('a listener that throws or rejects is logged; the emitter and the other listeners go on', async () => {
    const { log, errors } = capture()
    const events = new Events(() => 0, log)
    let later = 0
    events.on('test_ping', () => { throw new Error('boom') })
    events.on('test_ping', async () => { throw new Error('async boom') })
    events.on('test_ping', () => void later++)
    assert.doesNotThrow(() => events.emit('test_ping', { n: 1 }))
    await new Promise((resolve) => setImmediate(resolve))
    assert.equal(later, 1)
    assert.deepEqual(errors().map((e) => e.event), ['test_ping', 'test_ping'])
  })
})
