/**
 * One audit log for every instance of a shared store (issue 28, item 1): two
 * sidecars' services and routes, each with its own data dir, on one real
 * Redis, then one real PostgreSQL. What happens on A is in B's audit view and
 * in the user's console on B once A has written it (A's flush is the event the
 * test waits for, never a time); retention runs on one instance at a time;
 * `encryption_level: all` still seals the rows in the shared server.
 */
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { createClient } from 'redis'
import { PASSWORD, bearer, clockAt, openHarness, registerAndLogin, type Harness } from './harness.js'
import { postgresSkipReason, redisSkipReason, startPostgres, startRedis, type StoreServer } from '../helpers/store-servers.js'

const SECRET = 'shared-audit-secret-0123456789abcdef'
const DAY = 86_400_000

interface Backend {
  name: 'redis' | 'postgres'
  skip: string | false
  start(): Promise<StoreServer>
  /** every byte of the audit rows as the server holds them */
  rawAudit(url: string): Promise<string>
}

const backends: Backend[] = [
  {
    name: 'redis',
    skip: redisSkipReason(),
    start: startRedis,
    async rawAudit(url) {
      const client = createClient({ url, RESP: 2 })
      await client.connect()
      try {
        return JSON.stringify(await client.sendCommand(['XRANGE', 'authsvc:audit', '-', '+']))
      } finally {
        await client.close()
      }
    },
  },
  {
    name: 'postgres',
    skip: postgresSkipReason(),
    start: startPostgres,
    async rawAudit(url) {
      const client = new pg.Client({ connectionString: url })
      await client.connect()
      try {
        return JSON.stringify((await client.query('SELECT * FROM authsvc_audit')).rows)
      } finally {
        await client.end()
      }
    },
  },
]

for (const backend of backends) {
  describe(`one audit log for two instances on ${backend.name}`, { skip: backend.skip }, () => {
    let server: StoreServer
    let a: Harness
    let b: Harness
    let admin: string
    const clock = clockAt(Date.now())
    const open = (extra: Record<string, unknown> = {}) =>
      openHarness({ config: { store: { backend: backend.name, [`${backend.name}_url`]: server.url, ...extra } }, env: { AUTHSVC_SECRET: SECRET }, clock })

    before(async () => {
      server = await backend.start()
      a = await open()
      b = await open()
      admin = await registerAndLogin(a, 'root')
    })
    after(async () => {
      await a?.close()
      await b?.close()
      await server?.stop()
    })

    it('a sign-in and a grant on A are in B’s audit view and in the user’s console on B', async () => {
      const jwt = await registerAndLogin(a, 'alice', { admin })
      a.services.events.emit('model_granted', { actor: 'root', subject: 'alice', folder: 'checkpoints', item_name: 'only-on-a.safetensors', ip: '203.0.113.7' })
      await a.services.audit.flush()
      const view = await b.call('GET', '/authsvc/api/audit?user=alice&kind=user_login,model_granted,user_created', { headers: bearer(admin) })
      assert.equal(view.status, 200, JSON.stringify(view.body))
      const seen = view.body.events.map((e: { kind: string; actor: string | null; subject: string | null }) => [e.kind, e.actor, e.subject])
      assert.deepEqual(seen, [
        ['model_granted', 'root', 'alice'],
        ['user_login', 'alice', 'alice'],
        ['user_created', 'root', 'alice'],
      ])
      assert.equal(view.body.events[0].details.item_name, 'only-on-a.safetensors')
      const login = await b.call('POST', '/login', { body: { username: 'alice', password: PASSWORD } })
      assert.equal(login.status, 200)
      const consoleOnB = await b.call('GET', '/authsvc/me/console', { headers: bearer(login.body.jwt_token) })
      assert.equal(consoleOnB.status, 200, JSON.stringify(consoleOnB.body))
      const lines: string[] = consoleOnB.body.lines
      assert.ok(lines.some((l) => l.includes('model_granted') && l.includes('only-on-a.safetensors')), lines.join('\n'))
      // and B's own sign-in is in A's console for alice, after A's lines
      const consoleOnA = await a.call('GET', '/authsvc/me/console', { headers: bearer(jwt) })
      const kinds = consoleOnA.body.events.map((e: { kind: string }) => e.kind)
      assert.equal(kinds.filter((k: string) => k === 'user_login').length, 2, kinds.join(','))
      const names = await b.call('GET', '/authsvc/api/admin/consoles', { headers: bearer(admin) })
      assert.ok(names.body.users.includes('alice') && names.body.users.includes('root'), JSON.stringify(names.body))
    })

    it('retention: both instances pruning at once remove the old events once, one of them doing it', async () => {
      for (let i = 0; i < 5; i++) a.services.events.emit('model_granted', { actor: 'root', subject: 'old-events', folder: 'loras', item_name: `old-${i}` })
      await a.services.audit.flush()
      const before = (await b.services.audit.query({ user: 'old-events', limit: 10 })).length
      assert.equal(before, 5)
      const total = await b.services.store.audit.count()
      clock.advance(91 * DAY) // beyond the default retention_days (90): every event so far is too old
      b.services.events.emit('model_granted', { actor: 'root', subject: 'new-events', folder: 'loras', item_name: 'new' })
      await b.services.audit.flush()
      const removed = await Promise.all([a.services.audit.prune(), b.services.audit.prune()])
      assert.deepEqual([...removed].sort((x, y) => x - y), [0, total], 'one pruned every old event, the other nothing')
      assert.deepEqual((await a.services.audit.query({ limit: 10 })).map((e) => e.subject), ['new-events'])
    })

    it('while the server is down, events wait in memory, in order; once it is back they are written once', async () => {
      const down = new Promise<void>((resolve) => {
        const off = a.services.store.onConnection((connected) => {
          if (!connected) {
            off()
            resolve()
          }
        })
      })
      await server.kill()
      await down
      for (let i = 0; i < 3; i++) a.services.events.emit('model_granted', { actor: 'root', subject: 'during-outage', folder: 'loras', item_name: `outage-${i}` })
      await assert.rejects(a.services.audit.flush(), (err: unknown) => (err as { code?: string }).code === 'STORE_UNAVAILABLE')
      const back = new Promise<void>((resolve) => {
        const off = a.services.store.onConnection((connected) => {
          if (connected) {
            off()
            resolve()
          }
        })
      })
      await server.restart()
      await back
      await a.services.audit.flush()
      assert.equal(a.services.audit.dropped, 0)
      const rows = await b.services.audit.query({ user: 'during-outage', limit: 10 })
      assert.deepEqual(rows.map((e) => e.details.item_name), ['outage-2', 'outage-1', 'outage-0'])
    })
  })

  describe(`encryption_level all on ${backend.name}: the shared audit rows are sealed`, { skip: backend.skip }, () => {
    let server: StoreServer
    let a: Harness
    let b: Harness
    before(async () => {
      server = await backend.start()
      const open = () =>
        openHarness({ config: { store: { backend: backend.name, [`${backend.name}_url`]: server.url, encryption_level: 'all' } }, env: { AUTHSVC_SECRET: SECRET } })
      a = await open()
      b = await open()
    })
    after(async () => {
      await a?.close()
      await b?.close()
      await server?.stop()
    })

    it('B reads and filters A’s sealed rows; the server holds no name, address or detail in clear', async () => {
      const subject = `sealed-${randomUUID().slice(0, 8)}`
      a.services.events.emit('model_granted', { actor: 'sealing-admin', subject, folder: 'checkpoints', item_name: 'a-secret-item-name', ip: '198.51.100.23' })
      await a.services.audit.flush()
      const [row] = await b.services.audit.query({ user: subject, limit: 10 })
      assert.deepEqual([row.kind, row.actor, row.subject, row.ip, row.details.item_name], ['model_granted', 'sealing-admin', subject, '198.51.100.23', 'a-secret-item-name'])
      assert.ok((await b.services.audit.usernames()).includes(subject))
      const raw = await backend.rawAudit(server.url)
      assert.ok(raw.includes('model_granted'), 'the kind stays readable')
      for (const clear of ['a-secret-item-name', subject, '198.51.100.23', 'sealing-admin']) assert.ok(!raw.includes(clear), `${clear} is sealed`)
    })
  })
}
