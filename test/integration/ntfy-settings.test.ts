/**
 * The ntfy settings API (SPEC §5.4, §8) through a real sidecar on a loopback port: who reads and
 * writes what, the validation rows (an attack table: where the token and the events may go), the
 * token's secrecy (answers, the sqlite file, every log line, the event), config.json as the first
 * value until an admin saves, and the test notification with each of ntfy's answers.
 */
import { describe, it, after, afterEach } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { startNtfyStandin, type NtfyStandin } from '../helpers/ntfy-standin.js'
import { adminAndUsers, login, openNtfySidecar, type NtfySidecar } from './ntfy-kit.js'
import type { AnyEventRecord } from '../../sidecar/src/notify/notification.js'

const SETTINGS = '/authsvc/api/settings/ntfy'

let open: Array<NtfySidecar | NtfyStandin> = []
afterEach(async () => {
  for (const each of open.reverse()) await each.close()
  open = []
})

async function sidecar(options: Parameters<typeof openNtfySidecar>[0] = {}): Promise<NtfySidecar> {
  const sc = await openNtfySidecar(options)
  open.push(sc)
  return sc
}

async function standin(options: Parameters<typeof startNtfyStandin>[0] = {}): Promise<NtfyStandin> {
  const ntfy = await startNtfyStandin(options)
  open.push(ntfy)
  return ntfy
}

/** A token no other text of the run contains. */
const freshToken = () => `tk_${randomBytes(15).toString('hex')}`

const valid = (over: Record<string, unknown> = {}) => ({ topic: 'authsvc-ops', base_url: 'https://ntfy.example.net', enabled_events: ['login_failure'], ...over })

describe('who reads and writes the ntfy settings', () => {
  it('the defaults; an admin sees the topic, a user does not; anonymous is refused', async () => {
    const sc = await sidecar()
    const { admin, sessions } = await adminAndUsers(sc, 'alice')
    assert.deepEqual((await sc.call('GET', SETTINGS, { bearer: admin })).body, { topic: '', base_url: 'https://ntfy.sh', enabled_events: [], has_api_token: false })
    assert.equal((await sc.call('PUT', SETTINGS, { bearer: admin, body: valid() })).status, 200)
    assert.deepEqual((await sc.call('GET', SETTINGS, { bearer: admin })).body, { topic: 'authsvc-ops', base_url: 'https://ntfy.example.net', enabled_events: ['login_failure'], has_api_token: false })
    const asUser = await sc.call('GET', SETTINGS, { bearer: sessions.alice })
    assert.deepEqual(asUser.body, { base_url: 'https://ntfy.example.net', enabled_events: ['login_failure'], has_api_token: false }, 'no topic key at all for a non-admin')
    for (const path of [SETTINGS, `/api${SETTINGS}`]) {
      const anonymous = await sc.call('GET', path)
      assert.deepEqual([anonymous.status, anonymous.body.code], [401, 'AUTH_REQUIRED'], path)
    }
  })

  const refusedToUser: Array<[string, string, unknown]> = [
    ['PUT the settings', 'PUT', valid({ topic: 'alices-own-topic' })],
    ['send a test notification', 'POST', undefined],
    ['read the queue status', 'GET', undefined],
  ]
  for (const [what, method, body] of refusedToUser) {
    it(`a non-admin may not ${what}: 403 ADMIN_REQUIRED, nothing changes`, async () => {
      const sc = await sidecar()
      const { admin, sessions } = await adminAndUsers(sc, 'alice')
      await sc.call('PUT', SETTINGS, { bearer: admin, body: valid() })
      const path = method === 'POST' ? `${SETTINGS}/test` : method === 'GET' ? `${SETTINGS}/status` : SETTINGS
      const res = await sc.call(method, path, { bearer: sessions.alice, body })
      assert.deepEqual([res.status, res.body.code], [403, 'ADMIN_REQUIRED'])
      assert.equal((await sc.call('GET', SETTINGS, { bearer: admin })).body.topic, 'authsvc-ops')
    })
  }
})

describe('validation: where the token and the events may go (400 VALIDATION_FAILED, nothing stored)', () => {
  // one sidecar for the rows: a refused PUT stores nothing, each accepted one checks its own answer
  let shared: { sc: NtfySidecar; admin: string } | undefined
  const world = async () => {
    if (shared === undefined) {
      const sc = await openNtfySidecar()
      shared = { sc, admin: (await adminAndUsers(sc)).admin }
    }
    return shared
  }
  after(() => shared?.sc.close())

  const rows: Array<[string, Record<string, unknown>, RegExp]> = [
    ['plain http to another host', valid({ base_url: 'http://ntfy.example.net' }), /base_url: http:\/\/ is allowed only for a loopback host/],
    ['plain http to a name that looks like loopback', valid({ base_url: 'http://127.0.0.1.nip.io' }), /base_url: http:\/\/ is allowed only for a loopback host/],
    ['plain http to localhost as a subdomain', valid({ base_url: 'http://localhost.evil.example' }), /base_url: http:\/\/ is allowed only/],
    ['plain http to a private address', valid({ base_url: 'http://10.0.0.5:8080' }), /base_url: http:\/\/ is allowed only/],
    ['plain http to the IPv4-mapped loopback', valid({ base_url: 'http://[::ffff:127.0.0.1]' }), /base_url: http:\/\/ is allowed only/],
    ['a user and password in the URL', valid({ base_url: 'https://phil:secret@ntfy.example.net' }), /base_url: must not carry a user or password/],
    ['a query in the URL', valid({ base_url: 'https://ntfy.example.net/?auth=abc' }), /base_url: must not have a query or a fragment/],
    ['another scheme', valid({ base_url: 'ftp://ntfy.example.net' }), /base_url: must be an https:\/\/ URL/],
    ['a file URL', valid({ base_url: 'file:///etc/passwd' }), /base_url: must be an https:\/\/ URL/],
    ['not a URL', valid({ base_url: 'ntfy.sh' }), /base_url: not a URL/],
    ['an empty URL', valid({ base_url: '' }), /base_url/],
    ['a topic with a space', valid({ topic: 'ops alerts' }), /topic: must be 1 to 64 letters, digits, _ or -/],
    ['a topic with a slash', valid({ topic: '../admin' }), /topic: must be/],
    ['a topic of 65 characters', valid({ topic: 'a'.repeat(65) }), /topic/],
    ['a topic with a non-ASCII letter', valid({ topic: 'réseau' }), /topic: must be/],
    ['an unknown event kind', valid({ enabled_events: ['login_failure', 'coffee_ready'] }), /enabled_events: unknown event kind "coffee_ready"; known kinds: user_created, /],
    ['a real kind that is not notifiable', valid({ enabled_events: ['password_changed'] }), /enabled_events: unknown event kind "password_changed"/],
    ['events not a list', valid({ enabled_events: 'login_failure' }), /enabled_events/],
    ['a token with a line break (header injection)', valid({ api_token: 'tk_abc\r\nX-Evil: 1' }), /api_token: must be visible ASCII characters without spaces/],
    ['a token with a space', valid({ api_token: 'tk_abc def' }), /api_token: must be visible ASCII/],
    ['an unknown key', valid({ priority: 5 }), /Invalid request/],
    ['no topic key', { base_url: 'https://ntfy.sh', enabled_events: [] }, /topic/],
    ['two problems at once', valid({ topic: 'bad topic', base_url: 'http://example.org' }), /topic: must be .*; base_url: http:\/\//],
  ]
  for (const [name, body, message] of rows) {
    it(`refuses ${name}`, async () => {
      const { sc, admin } = await world()
      const before = (await sc.call('GET', SETTINGS, { bearer: admin })).body
      const res = await sc.call('PUT', SETTINGS, { bearer: admin, body })
      assert.deepEqual([res.status, res.body.code], [400, 'VALIDATION_FAILED'], JSON.stringify(res.body))
      assert.match(res.body.error, message)
      assert.deepEqual((await sc.call('GET', SETTINGS, { bearer: admin })).body, before, 'nothing stored')
    })
  }

  const accepted: Array<[string, string, string]> = [
    ['https with a path and a trailing slash', 'https://example.net/ntfy/', 'https://example.net/ntfy'],
    ['http to 127.0.0.1 with a port', 'http://127.0.0.1:2586', 'http://127.0.0.1:2586'],
    ['http to 127.1 (the parser spells it out)', 'http://127.1:2586/', 'http://127.0.0.1:2586'],
    ['http to localhost', 'http://localhost:8080', 'http://localhost:8080'],
    ['http to [::1]', 'http://[::1]:2586', 'http://[::1]:2586'],
    ['https with the default port', 'https://ntfy.sh:443/', 'https://ntfy.sh'],
  ]
  for (const [name, base_url, stored] of accepted) {
    it(`accepts ${name}, stored as ${stored}`, async () => {
      const { sc, admin } = await world()
      const res = await sc.call('PUT', SETTINGS, { bearer: admin, body: valid({ base_url }) })
      assert.equal(res.status, 200, JSON.stringify(res.body))
      assert.equal(res.body.base_url, stored)
    })
  }

  it('an empty topic turns notifications off; duplicate kinds count once, in the spec\'s order', async () => {
    const { sc, admin } = await world()
    const res = await sc.call('PUT', SETTINGS, { bearer: admin, body: valid({ topic: '', enabled_events: ['server_started', 'user_created', 'server_started'] }) })
    assert.deepEqual(res.body, { topic: '', base_url: 'https://ntfy.example.net', enabled_events: ['user_created', 'server_started'], has_api_token: false })
  })
})

describe('the token never leaves', () => {
  it('not in any answer, not in the sqlite file in clear, not in any log line or event; it does reach ntfy', async () => {
    const token = freshToken()
    const ntfy = await standin({ token })
    const sc = await sidecar()
    const events: AnyEventRecord[] = []
    sc.services.events.onAny((r) => {
      events.push(r as unknown as AnyEventRecord)
    })
    const { admin, sessions } = await adminAndUsers(sc, 'alice')
    const answers: unknown[] = []
    const keep = async (p: Promise<{ status: number; body: unknown }>) => {
      const res = await p
      answers.push(res.body)
      return res
    }
    const put = await keep(sc.call('PUT', SETTINGS, { bearer: admin, body: valid({ base_url: ntfy.url, enabled_events: ['user_login', 'login_failure'], api_token: token }) }))
    assert.equal(put.status, 200)
    assert.equal((put.body as { has_api_token: boolean }).has_api_token, true)
    await keep(sc.call('GET', SETTINGS, { bearer: admin }))
    await keep(sc.call('GET', SETTINGS, { bearer: sessions.alice }))
    await keep(sc.call('GET', `${SETTINGS}/status`, { bearer: admin }))
    assert.equal((await keep(sc.call('POST', `${SETTINGS}/test`, { bearer: admin }))).status, 200)
    await login(sc, 'alice')
    await sc.call('POST', '/login', { body: { username: 'alice', password: 'not-her-password' } })
    const got = await ntfy.waitForMessages(3)
    assert.deepEqual(got.map((m) => m.authorization), [`Bearer ${token}`, `Bearer ${token}`, `Bearer ${token}`], 'the token is what ntfy gets')
    // a wrong token now: ntfy's refusals are logged and answered, still without the token
    const other = freshToken()
    await keep(sc.call('PUT', SETTINGS, { bearer: admin, body: valid({ base_url: ntfy.url, enabled_events: ['user_login'], api_token: other }) }))
    const refused = await keep(sc.call('POST', `${SETTINGS}/test`, { bearer: admin }))
    assert.deepEqual([refused.status, (refused.body as { code: string }).code], [502, 'NTFY_REJECTED'])
    await login(sc, 'alice')
    await sc.logs.waitFor((l) => l.msg === 'ntfy refused a notification; it is not sent again')
    await keep(sc.call('GET', `${SETTINGS}/status`, { bearer: admin }))
    await sc.services.flush()

    for (const secret of [token, other]) {
      assert.ok(!JSON.stringify(answers).includes(secret), 'no answer holds the token')
      assert.ok(!sc.storeBytes().includes(Buffer.from(secret)), 'the sqlite file holds no token in clear')
      assert.deepEqual(sc.logs.lines.filter((l) => l.includes(secret)), [], 'no log line holds the token')
      assert.ok(!JSON.stringify(events).includes(secret), 'no event holds the token')
    }
    assert.ok(sc.storeBytes().includes(Buffer.from('enc:v1:')), 'the token is stored sealed')
    const changed = events.filter((e) => e.kind === 'settings_changed' && e.setting === 'ntfy')
    assert.equal(changed.length, 2)
    assert.deepEqual(Object.keys(changed[0]).sort(), ['actor', 'at', 'ip', 'kind', 'outcome', 'setting'])
    assert.equal(changed[0].actor, 'root')
  })

  it('absent keeps the token, empty removes it; a removed token sends no Authorization header', async () => {
    const token = freshToken()
    const ntfy = await standin()
    const sc = await sidecar()
    const { admin } = await adminAndUsers(sc)
    await sc.call('PUT', SETTINGS, { bearer: admin, body: valid({ base_url: ntfy.url, api_token: token }) })
    const kept = await sc.call('PUT', SETTINGS, { bearer: admin, body: valid({ base_url: ntfy.url, topic: 'renamed' }) })
    assert.equal(kept.body.has_api_token, true)
    await sc.call('POST', `${SETTINGS}/test`, { bearer: admin })
    const removed = await sc.call('PUT', SETTINGS, { bearer: admin, body: valid({ base_url: ntfy.url, api_token: '' }) })
    assert.equal(removed.body.has_api_token, false)
    await sc.call('POST', `${SETTINGS}/test`, { bearer: admin })
    const got = await ntfy.waitForMessages(2)
    assert.deepEqual(got.map((m) => [m.topic, m.authorization]), [['renamed', `Bearer ${token}`], ['authsvc-ops', undefined]])
  })

  it('the kept token never goes to another server: a new server without the token is refused (400), nothing changes', async () => {
    const token = freshToken()
    const ntfy = await standin()
    const other = await standin()
    const sc = await sidecar()
    const { admin } = await adminAndUsers(sc)
    await sc.call('PUT', SETTINGS, { bearer: admin, body: valid({ base_url: ntfy.url, api_token: token }) })
    const moved = await sc.call('PUT', SETTINGS, { bearer: admin, body: valid({ base_url: other.url }) })
    assert.equal(moved.status, 400)
    assert.equal(moved.body.code, 'VALIDATION_FAILED')
    assert.match(moved.body.error, /api_token: the server changed/)
    assert.equal((await sc.call('GET', SETTINGS, { bearer: admin })).body.base_url, ntfy.url, 'nothing changed')
    // with an empty token it moves (and sends none); with a new token it moves and sends that one
    assert.equal((await sc.call('PUT', SETTINGS, { bearer: admin, body: valid({ base_url: other.url, api_token: '' }) })).body.has_api_token, false)
    await sc.call('POST', `${SETTINGS}/test`, { bearer: admin })
    const [got] = await other.waitForMessages(1)
    assert.equal(got.authorization, undefined)
    assert.equal(ntfy.requests.length, 0, 'the first server got nothing')
  })

  it('a sealed token that no longer opens (another master secret) is logged once and not sent', async () => {
    const token = freshToken()
    const ntfy = await standin()
    const first = await openNtfySidecar()
    const { admin } = await adminAndUsers(first)
    await first.call('PUT', SETTINGS, { bearer: admin, body: valid({ base_url: ntfy.url, enabled_events: ['server_started'], api_token: token }) })
    await first.close({ keepDir: true })
    const again = await sidecar({ dir: first.dir, secret: 'another-master-secret-0123456789abcdefgh' })
    ;(again.services.events.emit as (k: string, f: object) => void)('server_started', {})
    const got = await ntfy.waitForMessages(1)
    assert.equal(got[0].authorization, undefined)
    const line = await again.logs.waitFor((l) => typeof l.msg === 'string' && l.msg.startsWith('ntfy: the saved token does not open'))
    assert.ok(!JSON.stringify(line).includes(token))
    assert.equal(again.logs.lines.filter((l) => l.includes('the saved token does not open')).length, 1, 'once, not once per event')
  })
})

describe('config.json is the first value, until an admin saves', () => {
  it('config\'s section applies (token and all); a save wins, also after a restart with the same config', async () => {
    const token = freshToken()
    const ntfy = await standin({ token })
    const config = { ntfy: { topic: 'from-config', base_url: ntfy.url, enabled_events: ['user_created', 'server_started'], api_token: token } }
    const first = await openNtfySidecar({ config })
    const { admin } = await adminAndUsers(first)
    assert.deepEqual((await first.call('GET', SETTINGS, { bearer: admin })).body, { topic: 'from-config', base_url: ntfy.url, enabled_events: ['user_created', 'server_started'], has_api_token: true })
    assert.equal((await first.call('GET', `${SETTINGS}/status`, { bearer: admin })).body.source, 'config')
    const created = await ntfy.waitForMessages(1)
    assert.deepEqual([created[0].title, created[0].topic, created[0].authorization], ['User root created', 'from-config', `Bearer ${token}`])
    assert.equal((await first.call('PUT', SETTINGS, { bearer: admin, body: { topic: 'from-admin', base_url: ntfy.url, enabled_events: ['server_started'] } })).status, 200)
    await first.close({ keepDir: true })

    const again = await sidecar({ dir: first.dir, config })
    const session = await login(again, 'root')
    assert.deepEqual((await again.call('GET', SETTINGS, { bearer: session })).body, { topic: 'from-admin', base_url: ntfy.url, enabled_events: ['server_started'], has_api_token: true })
    assert.equal((await again.call('GET', `${SETTINGS}/status`, { bearer: session })).body.source, 'saved')
    await again.logs.waitFor((l) => l.msg === 'ntfy: the settings an admin saved apply; config.json\'s ntfy section is ignored')
    ;(again.services.events.emit as (k: string, f: object) => void)('server_started', {})
    const got = await ntfy.waitForMessages(2)
    assert.deepEqual([got[1].title, got[1].topic, got[1].authorization], ['authsvc started', 'from-admin', `Bearer ${token}`], 'the token kept from config, sealed now')
  })
})

describe('the test notification', () => {
  it('ntfy took it: {status:"ok"}, and the stand-in has it', async () => {
    const ntfy = await standin()
    const sc = await sidecar()
    const { admin } = await adminAndUsers(sc)
    await sc.call('PUT', SETTINGS, { bearer: admin, body: valid({ base_url: ntfy.url }) })
    const res = await sc.call('POST', `${SETTINGS}/test`, { bearer: admin })
    assert.deepEqual([res.status, res.body], [200, { status: 'ok' }])
    const [message] = await ntfy.waitForMessages(1)
    assert.deepEqual([message.topic, message.title, message.tags], ['authsvc-ops', 'authsvc test notification', ['bell']])
    assert.match(message.message, /^Sent from the admin panel by root at \d{4}-/)
  })

  const failures: Array<[string, (ntfy: NtfyStandin) => Promise<void> | void, string, RegExp]> = [
    ['ntfy refuses the token', (n) => n.answerNext({ kind: 'error', http: 401, code: 40101, error: 'unauthorized' }), 'NTFY_REJECTED', /^ntfy answered 401: unauthorized \(40101\)$/],
    ['ntfy refuses the topic', (n) => n.answerNext({ kind: 'error', http: 403, code: 40301, error: 'forbidden' }), 'NTFY_REJECTED', /^ntfy answered 403: forbidden \(40301\)$/],
    ['ntfy fails', (n) => n.answerNext({ kind: 'fail' }), 'NTFY_REJECTED', /^ntfy answered 500: internal server error \(50001\)$/],
    ['ntfy is rate limiting', (n) => n.answerNext({ kind: 'too_many' }), 'NTFY_REJECTED', /^ntfy answered 429: limit reached: too many requests \(42901\)$/],
    ['ntfy is gone', (n) => n.gone(), 'NTFY_UNREACHABLE', /^ntfy at http:\/\/127\.0\.0\.1:\d+: not reached \(ECONNREFUSED\)$/],
    ['ntfy answers too late', (n) => n.answerNext({ kind: 'slow', ms: 60_000 }), 'NTFY_UNREACHABLE', /^ntfy at http:\/\/127\.0\.0\.1:\d+: no answer within 500 ms$/],
  ]
  for (const [name, arrange, code, message] of failures) {
    it(`${name}: 502 ${code} saying what happened`, async () => {
      const ntfy = await standin()
      const sc = await sidecar({ publisher: { timeoutMs: 500 } })
      const { admin } = await adminAndUsers(sc)
      await sc.call('PUT', SETTINGS, { bearer: admin, body: valid({ base_url: ntfy.url }) })
      await arrange(ntfy)
      const res = await sc.call('POST', `${SETTINGS}/test`, { bearer: admin })
      assert.deepEqual([res.status, res.body.code, res.body.statusCode], [502, code, 502])
      assert.match(res.body.error, message)
    })
  }

  it('no topic yet: 400 VALIDATION_FAILED, nothing sent', async () => {
    const ntfy = await standin()
    const sc = await sidecar()
    const { admin } = await adminAndUsers(sc)
    await sc.call('PUT', SETTINGS, { bearer: admin, body: valid({ topic: '', base_url: ntfy.url }) })
    const res = await sc.call('POST', `${SETTINGS}/test`, { bearer: admin })
    assert.deepEqual([res.status, res.body.code, res.body.error], [400, 'VALIDATION_FAILED', 'No ntfy topic is set: save a topic first'])
    assert.equal(ntfy.arrived, 0)
  })
})
