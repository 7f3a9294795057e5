/**
 * The audit log (audit/audit-log.ts) on the real sqlite file, and its routes (audit/routes.ts):
 * retention by count and by age, paging and filters, the bound while the store refuses writes,
 * sealed details under `encryption_level: all`, lines that survive a restart, a console that never
 * shows a deleted user's lines to a new user of the same name, and a 400 for every bad query.
 */
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { SqliteAuditLog } from '../../sidecar/src/audit/audit-log.js'
import { openSqliteStore } from '../../sidecar/src/store/kv.js'
import type { EventRecord } from '../../sidecar/src/kernel/events.js'
import { addUser, assertPass, bootstrapAdmin, call, decide, errorCode, stepAnswer, fakeClock, log, openSidecar, sessionJwt, tempDir, T0, type Sidecar } from './fixtures.js'

const DAY = 24 * 60 * 60 * 1000
const started = (at: number, n: number): EventRecord => ({ kind: 'server_started', at, outcome: 'success', version: `v${n}`, users: n })

describe('audit log on the sqlite file', () => {
  it('keeps the newest max_events and nothing older than retention_days', async () => {
    const dir = tempDir()
    const kv = await openSqliteStore(join(dir, 'a.sqlite'))
    const clock = fakeClock()
    const audit = await SqliteAuditLog.open(kv.sql!, { retentionDays: 2, maxEvents: 1000 }, clock, log, null)
    for (let i = 0; i < 1100; i++) audit.append(started(clock() - 3 * DAY + i, i)) // all older than the retention
    for (let i = 0; i < 1100; i++) audit.append(started(clock() + i, 10_000 + i))
    await audit.flush() // 2200 appended: the flush prunes (every 1000 appends)
    assert.equal(await audit.prune(), 0, 'the flush pruned already')
    const newest = await audit.query({ limit: 1000 })
    assert.equal(newest.length, 1000)
    assert.equal(newest[0].details.users, 11_099, 'newest first')
    assert.equal(newest[999].details.users, 10_100, 'the oldest 100 went')
    clock.advance(3 * DAY)
    assert.equal(await audit.prune(), 1000)
    assert.deepEqual(await audit.query({ limit: 10 }), [])
    await kv.close()
  })

  it('while the store refuses writes: records wait in memory, in order, the oldest dropped beyond the bound and counted; all written once it is back', async () => {
    const dir = tempDir()
    const kv = await openSqliteStore(join(dir, 'a.sqlite'))
    let refuse = false
    const sql = (statement: string, ...params: unknown[]) => {
      if (refuse && statement.startsWith('INSERT')) return Promise.reject(new Error('SQLITE_FULL: database or disk is full'))
      return kv.sql!(statement, ...params)
    }
    const audit = await SqliteAuditLog.open(sql, { retentionDays: 30, maxEvents: 100_000, maxBuffered: 50 }, () => T0, log, null)
    refuse = true
    for (let i = 0; i < 60; i++) audit.append(started(T0, i))
    await assert.rejects(audit.flush(), /SQLITE_FULL/)
    assert.equal(audit.dropped, 10, 'beyond 50 waiting, the oldest ten went')
    for (let i = 60; i < 65; i++) audit.append(started(T0, i))
    await assert.rejects(audit.flush())
    assert.equal(audit.dropped, 15)
    refuse = false
    await audit.flush()
    const stored = (await audit.query({ limit: 100 })).map((e) => e.details.users)
    assert.deepEqual(stored, Array.from({ length: 50 }, (_, i) => 64 - i), 'the newest 50, in order, once each')
    await kv.close()
  })

  it('under encryption_level all, names, addresses and details are sealed in the file; the view still filters by user and lists the names', async () => {
    const sc = await openSidecar({ config: { store: { encryption_level: 'all' } } })
    try {
      const admin = await bootstrapAdmin(sc)
      sc.services.events.emit('model_granted', { actor: admin.user.username, subject: 'distinct-subject-name', folder: 'checkpoints', item_name: 'a-distinctive-item-name', ip: '203.0.113.99' })
      const res = await call(sc, { url: '/authsvc/api/audit?user=distinct-subject-name', bearer: admin.jwt })
      assert.equal(res.statusCode, 200, res.body)
      const [row] = JSON.parse(res.body).events
      assert.deepEqual([row.kind, row.actor, row.subject, row.ip, row.details.item_name], ['model_granted', admin.user.username, 'distinct-subject-name', '203.0.113.99', 'a-distinctive-item-name'])
      const names = JSON.parse((await call(sc, { url: '/authsvc/api/admin/consoles', bearer: admin.jwt })).body).users
      assert.deepEqual(names, [admin.user.username, 'distinct-subject-name'].sort())
      await sc.services.flush()
      const bytes = readdirSync(sc.dir).filter((f) => f.startsWith('authsvc.sqlite')).map((f) => readFileSync(join(sc.dir, f)).toString('latin1')).join('')
      assert.ok(bytes.includes('model_granted'), 'the kind stays readable (the view filters on it)')
      for (const clear of ['a-distinctive-item-name', 'distinct-subject-name', '203.0.113.99', admin.user.username]) assert.ok(!bytes.includes(clear), `${clear} is sealed`)
    } finally {
      await sc.close()
    }
  })
})

describe('who acts, when it is no user', () => {
  it('an anonymous client (local_anonymous_role) is recorded as `anonymous:<role>`, never under the name of an account called like the role', async () => {
    const sc = await openSidecar({ config: { local_anonymous_role: 'user' } })
    try {
      const admin = await bootstrapAdmin(sc)
      const named = await addUser(sc, 'user', 'same-name-as-the-role-1')
      // an anonymous local client queues a prompt and is refused one
      const prompt = async (body: string) => {
        const d = assertPass(await decide(sc, { method: 'POST', path: '/prompt', pattern: '/prompt' }))
        return stepAnswer(await sc.handlers.body({ type: 'body', id: 1, ctx: d.need_body!.ctx }, Buffer.from(body, 'utf8'), sc.host))
      }
      assert.equal((await prompt('{"prompt":{"1":{}}}')).action, 'pass')
      assert.equal((await prompt('{"prompt":{"1":{}},"front":1}')).action, 'respond')
      // and logs out: it had no session, so nothing ended and nothing is recorded
      assert.equal((await call(sc, { method: 'POST', url: '/logout', headers: { origin: 'http://127.0.0.1:8188' } })).statusCode, 200)
      const rows = await sc.services.audit.query({ kinds: ['prompt_queued', 'prompt_refused', 'user_logout'], limit: 10 })
      assert.deepEqual(rows.map((r) => [r.kind, r.actor, r.subject, r.details.principal]), [
        ['prompt_refused', null, null, 'anonymous:user'],
        ['prompt_queued', null, null, 'anonymous:user'],
      ])
      const own = await call(sc, { url: '/authsvc/me/console', bearer: await sessionJwt(sc, named) })
      assert.deepEqual(JSON.parse(own.body).lines, [], 'the account called "user" reads none of it')
      assert.ok(admin.jwt)
    } finally {
      await sc.close()
    }
  })
})

describe('audit routes', async () => {
  const sc: Sidecar = await openSidecar()
  after(() => sc.close())
  const admin = await bootstrapAdmin(sc)
  const alice = await addUser(sc, 'alice', 'alice-passphrase-1')
  const aliceJwt = await sessionJwt(sc, alice)
  // 7 events of alice's, one minute apart, two kinds
  for (let i = 0; i < 7; i++) {
    sc.clock.advance(60_000)
    sc.services.events.emit(i % 2 === 0 ? 'prompt_queued' : 'prompt_refused', i % 2 === 0
      ? { actor: 'alice', subject: 'alice', ip: '10.0.0.1', prompt_id: `p${i}` }
      : { actor: 'alice', subject: 'alice', ip: '10.0.0.1', outcome: 'refused', code: 'MODEL_NOT_ALLOWED', status: 403 })
  }
  const audit = async (query: string, token = admin.jwt) => call(sc, { url: `/authsvc/api/audit${query}`, bearer: token })
  const events = async (query: string) => {
    const res = await audit(query)
    assert.equal(res.statusCode, 200, res.body)
    return JSON.parse(res.body) as { events: Array<{ seq: number; kind: string; at_iso: string; details: Record<string, unknown> }>; next_before: number | null }
  }

  it('pages newest first with next_before until the end', async () => {
    const seen: string[] = []
    let before = ''
    for (;;) {
      const page = await events(`?user=alice&limit=3${before}`)
      seen.push(...page.events.map((e) => String(e.details.prompt_id ?? e.details.code)))
      if (page.next_before === null) break
      before = `&before=${page.next_before}`
    }
    assert.deepEqual(seen, ['p6', 'MODEL_NOT_ALLOWED', 'p4', 'MODEL_NOT_ALLOWED', 'p2', 'MODEL_NOT_ALLOWED', 'p0'])
  })

  it('filters by kinds and by time, bounds inclusive', async () => {
    assert.equal((await events('?kind=prompt_refused')).events.length, 3)
    assert.equal((await events('?kind=prompt_refused,prompt_queued&user=alice')).events.length, 7)
    const since = new Date(T0 + 2 * 60_000).toISOString()
    const until = new Date(T0 + 4 * 60_000).toISOString()
    assert.deepEqual((await events(`?user=alice&since=${since}&until=${until}`)).events.map((e) => e.at_iso), [until, new Date(T0 + 3 * 60_000).toISOString(), since])
    assert.deepEqual((await events('?user=nobody')).events, [])
  })

  const bad: Array<[string, string]> = [
    ['limit=0', 'limit below one'],
    ['limit=501', 'limit above 500'],
    ['limit=ten', 'limit not a number'],
    ['before=-1', 'negative cursor'],
    ['before=abc', 'cursor not a number'],
    ['since=yesterday', 'since not a time'],
    ['until=2026-13-45T99:00:00Z', 'until not a time'],
    [`since=${new Date(T0 + DAY).toISOString()}&until=${new Date(T0).toISOString()}`, 'since after until'],
    ['kind=Prompt-Queued', 'kind with other characters'],
    ['kind=a,,b', 'empty kind in the list'],
    ['user=', 'empty user'],
  ]
  for (const [query, why] of bad) {
    it(`400 VALIDATION_FAILED: ${why} (?${query})`, async () => {
      const res = await audit(`?${query}`)
      assert.equal(res.statusCode, 400, res.body)
      assert.equal(errorCode(res), 'VALIDATION_FAILED')
    })
  }

  it('a credential in the query (?token=, ?access_token=) works on every read, as on any route (SPEC §3)', async () => {
    for (const [url, token] of [['/authsvc/me/console', aliceJwt], ['/authsvc/api/audit', admin.jwt], ['/authsvc/api/admin/consoles/alice', admin.jwt], ['/authsvc/api/admin/consoles', admin.jwt]] as const) {
      for (const key of ['token', 'access_token']) {
        const res = await call(sc, { url: `${url}?${key}=${encodeURIComponent(token)}` })
        assert.equal(res.statusCode, 200, `${url} ?${key}=: ${res.body}`)
      }
    }
  })

  it('the views are the admin\'s: a user gets 403 ADMIN_REQUIRED, nobody gets 401', async () => {
    for (const url of ['/authsvc/api/audit', '/authsvc/api/admin/consoles', '/authsvc/api/admin/consoles/alice', '/api/authsvc/api/audit']) {
      assert.equal(errorCode(await call(sc, { url, bearer: aliceJwt })), 'ADMIN_REQUIRED', url)
      assert.equal((await call(sc, { url })).statusCode, 401, url)
    }
  })

  it('an unknown name with no lines is 404; a console reads newest last and at most `limit` lines', async () => {
    assert.equal((await call(sc, { url: '/authsvc/api/admin/consoles/nobody', bearer: admin.jwt })).statusCode, 404)
    const res = await call(sc, { url: '/authsvc/api/admin/consoles/alice?limit=2', bearer: admin.jwt })
    const body = JSON.parse(res.body) as { username: string; lines: string[] }
    assert.equal(body.username, 'alice')
    assert.equal(body.lines.length, 2)
    assert.match(body.lines[0], /prompt_refused \[refused\] by alice from 10\.0\.0\.1 code=MODEL_NOT_ALLOWED status=403$/)
    assert.match(body.lines[1], /prompt_queued by alice from 10\.0\.0\.1 prompt_id=p6$/)
  })

  it('a user reads what an admin did to their account, but not the admin\'s address', async () => {
    sc.services.events.emit('user_role_changed', { actor: admin.user.username, subject: 'alice', ip: '10.7.7.7', role: 'user' })
    const own = JSON.parse((await call(sc, { url: '/authsvc/me/console', bearer: aliceJwt })).body) as { lines: string[]; events: Array<{ kind: string; ip: string | null; actor: string }> }
    const change = own.events.filter((e) => e.kind === 'user_role_changed')
    assert.deepEqual(change.map((e) => [e.actor, e.ip]), [[admin.user.username, null]])
    assert.ok(!own.lines.some((l) => l.includes('10.7.7.7')))
    assert.ok(own.events.some((e) => e.ip === '10.0.0.1'), 'her own addresses stay')
    const adminView = JSON.parse((await call(sc, { url: '/authsvc/api/audit?kind=user_role_changed', bearer: admin.jwt })).body)
    assert.equal(adminView.events[0].ip, '10.7.7.7')
  })

  it('a new user who takes a deleted user\'s name never reads the old lines; the admin still does', async () => {
    const del = await call(sc, { method: 'DELETE', url: '/authsvc/api/users/alice', bearer: admin.jwt })
    assert.equal(del.statusCode, 200, del.body)
    sc.clock.advance(60_000)
    const again = await addUser(sc, 'alice', 'another-passphrase-2')
    const res = await call(sc, { url: '/authsvc/me/console', bearer: await sessionJwt(sc, again) })
    assert.equal(res.statusCode, 200, res.body)
    assert.deepEqual(JSON.parse(res.body).lines, [])
    const kept = JSON.parse((await call(sc, { url: '/authsvc/api/admin/consoles/alice', bearer: admin.jwt })).body).lines as string[]
    assert.equal(kept.length, 9, 'seven events, the role change and the deletion')
  })

  it('lines survive a restart', async () => {
    const dir = tempDir()
    const first = await openSidecar({ dir })
    first.services.events.emit('server_started', { version: 'before-restart', users: 0 })
    await first.close({ keepDir: true })
    const second = await openSidecar({ dir })
    try {
      const rows = await second.services.audit.query({ kinds: ['server_started'], limit: 5 })
      assert.deepEqual(rows.map((r) => r.details.version), ['before-restart'])
    } finally {
      await second.close()
    }
  })
})

describe('routine events cannot push the rest out', () => {
  it('at most 60 prompt events a minute per user are stored; the next stored one says how many were left out; sign-ins are never held back', async () => {
    const sc = await openSidecar()
    try {
      const who = { actor: 'mallory', subject: 'mallory', ip: '10.9.9.9' }
      for (let i = 0; i < 500; i++) sc.services.events.emit('prompt_refused', { ...who, outcome: 'refused', code: 'VALIDATION_FAILED', status: 400 })
      for (let i = 0; i < 100; i++) sc.services.events.emit('user_login', { ...who, mfa: false })
      sc.services.events.emit('prompt_refused', { actor: 'alice', subject: 'alice', ip: '10.0.0.2', outcome: 'refused', code: 'MODEL_NOT_ALLOWED', status: 403 })
      const count = async (kind: string, user: string) => (await sc.services.audit.query({ kinds: [kind], user, limit: 500 })).length
      assert.equal(await count('prompt_refused', 'mallory'), 60)
      assert.equal(await count('user_login', 'mallory'), 100, 'security events are all kept')
      assert.equal(await count('prompt_refused', 'alice'), 1, 'another user is not held back by mallory')
      sc.clock.advance(60_000)
      sc.services.events.emit('prompt_refused', { ...who, outcome: 'refused', code: 'VALIDATION_FAILED', status: 400 })
      const [latest] = await sc.services.audit.query({ kinds: ['prompt_refused'], user: 'mallory', limit: 1 })
      assert.equal(latest.details.suppressed, 440, 'the next stored one counts those left out')
    } finally {
      await sc.close()
    }
  })
})
