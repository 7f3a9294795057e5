/**
 * ntfy delivery (issue 24 item 3, SPEC §8) through a real sidecar on a loopback port and a local
 * ntfy stand-in that speaks ntfy's API: what reaches the topic is exactly the event stream filtered
 * by the enabled kinds, in order; retries on 500/429/not there; no retry on ntfy's refusals; the
 * queue's bound; a slow server never holds a request; a stop aborts what is in flight.
 *
 * No test waits for time to pass: each awaits the stand-in's n-th message or request, or a log line.
 */
import { describe, it, afterEach } from 'node:test'
import assert from 'node:assert/strict'
import { clockAt } from './harness.js'
import { totpAt } from './totp-reference.js'
import { startNtfyStandin, type NtfyStandin, type StandinMode } from '../helpers/ntfy-standin.js'
import { adminAndUsers, login, openNtfySidecar, PASSWORD, type NtfySidecar } from './ntfy-kit.js'
import { NOTIFIABLE_EVENTS, type NotifiableEvent } from '../../sidecar/src/notify/notifiable-events.js'
import { notificationOf, type AnyEventRecord } from '../../sidecar/src/notify/notification.js'
import type { PublisherOptions } from '../../sidecar/src/notify/publisher.js'

const TOPIC = 'authsvc-ops'
const NTFY_TOKEN = 'tk_0123456789abcdefghijklmnopq'

let open: Array<NtfySidecar | NtfyStandin> = []
afterEach(async () => {
  for (const each of open.reverse()) await each.close()
  open = []
})

async function world(ntfyConfig: Record<string, unknown>, options: { token?: string; publisher?: Partial<PublisherOptions>; clock?: () => number } = {}) {
  const ntfy = await startNtfyStandin({ token: options.token })
  open.push(ntfy)
  const sc = await openNtfySidecar({ config: { ntfy: { topic: TOPIC, base_url: ntfy.url, ...ntfyConfig } }, publisher: options.publisher, clock: options.clock })
  open.push(sc)
  return { ntfy, sc }
}

/** Emits a kind no feature of this build emits yet (the downloads and content-safety features, the start line). */
function emitRaw(sc: NtfySidecar, kind: string, fields: Record<string, unknown>): void {
  ;(sc.services.events.emit as (kind: string, fields: object) => void)(kind, fields)
}

const SYNTHETIC: Array<[NotifiableEvent, Record<string, unknown>]> = [
  ['nsfw_block', { subject: 'bob', ip: '127.0.0.1', outcome: 'refused' }],
  ['download_completed', { subject: 'root', filename: 'model.safetensors', source: 'huggingface' }],
  ['download_failed', { subject: 'root', filename: 'broken.safetensors', outcome: 'failure', reason: 'checksum mismatch' }],
  ['server_started', { version: '0.1.0' }],
]

describe('what reaches the topic is the event stream filtered by the enabled kinds', () => {
  const evens = NOTIFIABLE_EVENTS.filter((_, i) => i % 2 === 0)
  const odds = NOTIFIABLE_EVENTS.filter((_, i) => i % 2 === 1)
  const runs: Array<{ enabled: NotifiableEvent[]; last: NotifiableEvent; token?: string }> = [
    { enabled: evens, last: 'server_started', token: NTFY_TOKEN },
    { enabled: odds, last: 'download_completed' },
  ]
  for (const run of runs) {
    it(`enabled: ${run.enabled.join(', ')}; the rest never arrive (${run.token ? 'with' : 'without'} a token)`, async () => {
      assert.ok(run.enabled.includes(run.last), 'the last event is an enabled one: its arrival means every earlier one had its turn')
      const clock = clockAt()
      const { ntfy, sc } = await world({ enabled_events: run.enabled, ...(run.token ? { api_token: run.token } : {}) }, { token: run.token, clock })
      const stream: AnyEventRecord[] = []
      sc.services.events.onAny((record) => {
        stream.push(record as unknown as AnyEventRecord)
      })

      // every kind, each from the place it happens (through the routes where this build has them)
      const { admin, sessions } = await adminAndUsers(sc, 'bob')
      const locker = '198.51.100.7'
      for (let i = 0; i < 5; i++) assert.equal((await sc.call('POST', '/login', { body: { username: 'bob', password: `wrong-password-${i}` }, peer: locker })).status, 401)
      assert.equal((await sc.call('POST', '/login', { body: { username: 'bob', password: PASSWORD }, peer: locker })).status, 429, 'bob is locked out')
      assert.equal((await sc.call('POST', '/authsvc/generate_token', { bearer: sessions.bob, body: { label: 'phone' } })).status, 200)
      const setup = await sc.call('POST', '/authsvc/api/mfa/setup', { bearer: sessions.bob, body: {} })
      assert.equal((await sc.call('POST', '/authsvc/api/mfa/verify-setup', { bearer: sessions.bob, body: { code: totpAt(setup.body.secret, clock()) } })).status, 200)
      clock.advance(30_000)
      assert.equal((await sc.call('POST', '/authsvc/api/mfa/disable', { bearer: sessions.bob, body: { code: totpAt(setup.body.secret, clock()) } })).status, 200)
      assert.equal((await sc.call('POST', '/logout', { bearer: sessions.bob })).status, 200)
      assert.equal((await sc.call('PUT', '/authsvc/api/settings/guest-jwt', { bearer: admin, body: { allow_guest_jwt: true } })).status, 200)
      assert.equal((await sc.call('PUT', '/authsvc/api/users/bob', { bearer: admin, body: { role: 'admin' } })).status, 200)
      assert.equal((await sc.call('DELETE', '/authsvc/api/users/bob', { bearer: admin })).status, 200)
      for (const [kind, fields] of [...SYNTHETIC.filter(([k]) => k !== run.last), ...SYNTHETIC.filter(([k]) => k === run.last)]) emitRaw(sc, kind, fields)

      const kinds = new Set(stream.map((r) => r.kind))
      assert.deepEqual(NOTIFIABLE_EVENTS.filter((k) => !kinds.has(k)), [], 'the scenario emitted every notifiable kind')
      const expected = stream.filter((r) => (run.enabled as string[]).includes(r.kind)).map((r) => notificationOf(r))
      assert.equal(expected.at(-1)?.title, notificationOf(stream.at(-1)!).title, 'the last event is the sentinel')
      const got = await ntfy.waitForMessages(expected.length)
      assert.equal(got.at(-1)?.title, expected.at(-1)?.title, 'nothing of a disabled kind came before the sentinel')
      assert.deepEqual(got.map((m) => m.title), expected.map((m) => m.title))
      assert.deepEqual(got.map((m) => [m.topic, m.message, m.tags, m.priority, m.via]), expected.map((m) => [TOPIC, m.message, m.tags, m.priority, 'json']))
      assert.deepEqual(new Set(got.map((m) => m.authorization)), new Set([run.token ? `Bearer ${run.token}` : undefined]), 'the token as a Bearer header when set, no header otherwise')
      assert.equal(ntfy.requests.length, got.length, 'each delivered once, none refused')
      // a few literal titles, as an admin reads them on their phone
      const titles = got.map((m) => m.title ?? '')
      if (run.enabled.includes('user_created')) assert.ok(titles.includes('User bob created'), titles.join(' | '))
      // (whether a failure names its user depends on the record's fields: the list above pins the titles)
      if (run.enabled.includes('login_failure')) assert.equal(titles.filter((t) => t.startsWith('Login failed')).length, 5)
      if (run.enabled.includes('login_locked')) assert.equal(titles.filter((t) => t.endsWith('locked out')).length, 1)
      if (run.enabled.includes('user_role_changed')) assert.ok(titles.includes('bob is now admin'), titles.join(' | '))
      if (run.enabled.includes('user_login')) assert.ok(titles.includes('bob signed in'), titles.join(' | '))
    })
  }
})

describe('retries', () => {
  const retried: Array<[string, StandinMode]> = [
    ['500 twice', { kind: 'fail' }],
    ['429 twice', { kind: 'too_many' }],
  ]
  for (const [name, mode] of retried) {
    it(`${name}, then success: delivered exactly once, in order with the next one`, async () => {
      const { ntfy, sc } = await world({ enabled_events: ['user_login'] })
      const { admin } = await adminAndUsers(sc)
      // the first account's registration signs it in, then its login: two messages before the rows
      await ntfy.waitForMessages(2)
      ntfy.answerNext(mode, mode)
      await login(sc, 'root')
      await login(sc, 'root')
      const got = await ntfy.waitForMessages(4)
      assert.deepEqual(got.map((m) => m.title), ['root signed in', 'root signed in', 'root signed in', 'root signed in'])
      const refused = mode.kind === 'fail' ? 500 : 429
      assert.deepEqual(ntfy.requests.map((r) => r.answer), [200, 200, refused, refused, 200, 200])
      assert.equal(ntfy.requests[2].body, ntfy.requests[4].body, 'the retries sent the same message')
      const status = await sc.call('GET', '/authsvc/api/settings/ntfy/status', { bearer: admin })
      assert.equal(status.body.delivered, 4)
      assert.equal(status.body.failed, 0)
      assert.match(status.body.last_error, mode.kind === 'fail' ? /ntfy answered 500: internal server error \(50001\)/ : /ntfy answered 429: limit reached: too many requests \(42901\)/)
    })
  }

  it('a 500 that does not go away: the message is given up after its attempts, the next one is delivered', async () => {
    const { ntfy, sc } = await world({ enabled_events: ['server_started', 'download_failed'] }, { publisher: { serverErrorAttempts: 3 } })
    ntfy.answerNext({ kind: 'fail' }, { kind: 'fail' }, { kind: 'fail' })
    emitRaw(sc, 'server_started', {})
    emitRaw(sc, 'download_failed', { filename: 'x.safetensors' })
    const got = await ntfy.waitForMessages(1)
    assert.deepEqual(got.map((m) => m.title), ['Download failed: x.safetensors'])
    assert.deepEqual(ntfy.requests.map((r) => r.answer), [500, 500, 500, 200])
    await sc.logs.waitFor((l) => l.msg === 'ntfy failed on a notification 3 times; it is given up')
  })

  const refusals: Array<[string, { http: number; code: number; error: string; location?: string }]> = [
    ['400 invalid topic', { http: 400, code: 40009, error: 'invalid request: topic invalid' }],
    ['401 unauthorized', { http: 401, code: 40101, error: 'unauthorized' }],
    ['403 forbidden', { http: 403, code: 40301, error: 'forbidden' }],
    ['413 too large', { http: 413, code: 41303, error: 'JSON body too large' }],
    // a redirect is never followed: the token's request could be sent on to plain http elsewhere
    ['307 redirect', { http: 307, code: 30701, error: 'moved', location: '/elsewhere' }],
  ]
  for (const [name, refusal] of refusals) {
    it(`${name}: not sent again, counted, logged once for two refusals in a row`, async () => {
      const { ntfy, sc } = await world({ enabled_events: ['user_created', 'server_started'] })
      const mode: StandinMode = { kind: 'error', ...refusal }
      ntfy.answerNext(mode, mode)
      emitRaw(sc, 'user_created', { subject: 'first' })
      emitRaw(sc, 'user_created', { subject: 'second' })
      emitRaw(sc, 'server_started', {})
      const got = await ntfy.waitForMessages(1)
      assert.deepEqual(got.map((m) => m.title), ['authsvc started'])
      assert.deepEqual(ntfy.requests.map((r) => r.answer), [refusal.http, refusal.http, 200])
      const refused = sc.logs.lines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'ntfy refused a notification; it is not sent again')
      assert.equal(refused.length, 1, 'one line for the same cause twice')
      assert.equal(refused[0].ntfy.error, `ntfy answered ${refusal.http}: ${refusal.error} (${refusal.code})`)
      const admin = await adminAndUsers(sc)
      assert.equal((await sc.call('GET', '/authsvc/api/settings/ntfy/status', { bearer: admin.admin })).body.failed, 2)
    })
  }
})

describe('the queue is bounded; nothing is lost below the bound', () => {
  const created = (n: number) => `User user-${n} created`

  it('ntfy gone: beyond the bound the oldest waiting are dropped and counted; the rest arrive once it is back', async () => {
    const { ntfy, sc } = await world({ enabled_events: ['user_created'] }, { publisher: { bound: 5 } })
    await ntfy.gone()
    for (let i = 1; i <= 12; i++) emitRaw(sc, 'user_created', { subject: `user-${i}` })
    await sc.logs.waitFor((l) => l.msg === 'ntfy: cannot deliver notifications; trying again with growing pauses')
    const admin = await adminAndUsers(sc)
    const status = (await sc.call('GET', '/authsvc/api/settings/ntfy/status', { bearer: admin.admin })).body
    // user-1 was on its way when the others came; user-2..7 were pushed out by user-8..12 (and root's own creation)
    assert.deepEqual({ queued: status.queued, in_flight: status.in_flight, dropped: status.dropped }, { queued: 5, in_flight: 1, dropped: 7 })
    assert.match(status.last_error, /not reached \(ECONNREFUSED\)/)
    assert.equal(sc.logs.lines.filter((l) => l.includes('the oldest notifications are dropped')).length, 1, 'one warning for the run of drops')
    await ntfy.back()
    const got = await ntfy.waitForMessages(6)
    assert.deepEqual(got.map((m) => m.title), [created(1), created(9), created(10), created(11), created(12), 'User root created'])
    await sc.logs.waitFor((l) => l.msg === 'ntfy: delivering again')
  })

  it('ntfy gone while fewer than the bound wait: every one arrives, in order, once it is back', async () => {
    const { ntfy, sc } = await world({ enabled_events: ['user_created'] }, { publisher: { bound: 5 } })
    await ntfy.gone()
    for (let i = 1; i <= 5; i++) emitRaw(sc, 'user_created', { subject: `user-${i}` })
    await sc.logs.waitFor((l) => l.msg === 'ntfy: cannot deliver notifications; trying again with growing pauses')
    await ntfy.back()
    const got = await ntfy.waitForMessages(5)
    assert.deepEqual(got.map((m) => m.title), [1, 2, 3, 4, 5].map(created))
    const line = await sc.logs.waitFor((l) => l.msg === 'ntfy: delivering again')
    assert.equal((line.ntfy as { dropped: number }).dropped, 0)
    assert.equal(ntfy.messages.length, 5, 'each once')
  })
})

describe('a slow ntfy holds nothing', () => {
  it('a login answers while ntfy sits on its notification; past the timeout it is sent again and arrives once', async () => {
    const { ntfy, sc } = await world({ enabled_events: ['user_login'] }, { publisher: { timeoutMs: 300 } })
    await adminAndUsers(sc) // root's first login: delivered at once
    await ntfy.waitForMessages(1)
    ntfy.answerNext({ kind: 'slow', ms: 60_000 })
    const res = await sc.call('POST', '/login', { body: { username: 'root', password: PASSWORD } })
    assert.equal(res.status, 200, 'the login answered')
    await ntfy.waitForArrivals(2)
    const got = await ntfy.waitForMessages(2)
    assert.equal(got.length, 2)
    const requests = await ntfy.waitForRequests(3)
    assert.equal(requests.length, 3)
    assert.deepEqual(requests.map((r) => r.answer).sort(), [200, 200, 'aborted'], 'the held request was given up by the sidecar, then sent again')
    assert.equal(got[0].message === got[1].message, false, 'two logins, two messages: no duplicate')
  })

  it('a stop ends a long pause between attempts at once', { timeout: 10_000 }, async () => {
    const { ntfy, sc } = await world({ enabled_events: ['user_created'] }, { publisher: { retryBaseMs: 60_000, retryMaxMs: 60_000 } })
    await ntfy.gone()
    emitRaw(sc, 'user_created', { subject: 'a' })
    await sc.logs.waitFor((l) => l.msg === 'ntfy: cannot deliver notifications; trying again with growing pauses')
    await sc.close() // the pause is a minute: the test's timeout fails it if the stop waited for the pause
    const line = sc.logs.lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'ntfy: stopped with notifications undelivered')
    assert.deepEqual(line?.ntfy, { undelivered: 1 })
  })

  it('a stop aborts the request in flight and says how many were left', async () => {
    const { ntfy, sc } = await world({ enabled_events: ['user_created'] })
    ntfy.setMode({ kind: 'slow', ms: 60_000 })
    emitRaw(sc, 'user_created', { subject: 'a' })
    emitRaw(sc, 'user_created', { subject: 'b' })
    await ntfy.waitForArrivals(1)
    await sc.close()
    const requests = await ntfy.waitForRequests(1)
    assert.deepEqual(requests.map((r) => r.answer), ['aborted'])
    const line = sc.logs.lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'ntfy: stopped with notifications undelivered')
    assert.deepEqual(line?.ntfy, { undelivered: 2 })
    emitRaw(sc, 'user_created', { subject: 'c' })
    assert.equal(ntfy.arrived, 1, 'nothing is sent after the stop')
  })
})
