/**
 * `npx authsvc store copy --to <url>` (issue 28, item 10) as a real child
 * process (bin/authsvc.mjs) on a real sqlite data dir, into a real PostgreSQL,
 * a real Redis and another sqlite file; then services and routes started on
 * the target: every user signs in, the API token and the session from before
 * the copy still work, TOTP works, grants, settings and audit events are there,
 * and this host's own bookkeeping was left behind. Then the refusals: a wrong
 * AUTHSVC_SECRET, a target set up with another secret, an unreachable target,
 * a non-empty target without --force, bad URLs; and no password in any output.
 */
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import pg from 'pg'
import { createClient } from 'redis'
import { PASSWORD, bearer, clockAt, openHarness, registerAndLogin, type Harness } from './harness.js'
import { totpAt } from './totp-reference.js'
import { postgresSkipReason, redisSkipReason, startPostgres, startRedis, type StoreServer } from '../helpers/store-servers.js'
import { openRedisSharedStore } from '../../sidecar/src/store/redis-store.js'
import { checkSecret } from '../../sidecar/src/store/open.js'

const ROOT = resolve(import.meta.dirname, '..', '..')
const SECRET = 'store-copy-secret-0123456789abcdefghij'
const URL_PASSWORD = 'pw-never-printed-7f3a'

interface Run {
  code: number | null
  stdout: string
  stderr: string
}

function copy(dir: string, to: string, extra: string[] = [], env: NodeJS.ProcessEnv = {}): Promise<Run> {
  const childEnv: NodeJS.ProcessEnv = { ...process.env, AUTHSVC_SECRET: SECRET, ...env }
  delete childEnv.AUTHSVC_DATA_DIR
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [join(ROOT, 'bin/authsvc.mjs'), 'store', 'copy', '--to', to, '--data-dir', dir, ...extra], { cwd: ROOT, env: childEnv, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()))
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
    child.on('error', reject)
    child.on('close', (code) => resolvePromise({ code, stdout, stderr }))
  })
}

/** What a user of the source data dir had before the copy. */
interface Before {
  adminJwt: string
  aliceToken: string
  bobJwt: string
  carolTotp: string
  users: string[]
  auditEvents: number
  /** kind, time, actor, subject and details of every event, oldest first */
  audit: string[]
}

const skipPostgres = postgresSkipReason()
const skipRedis = redisSkipReason()

describe('authsvc store copy', () => {
  const clock = clockAt(Date.now())
  let src: string
  let made: Before
  let postgres: StoreServer | undefined
  let redis: StoreServer | undefined
  const opened: Harness[] = []

  /** a PostgreSQL database of its own on the test server, its URL with a password (the server trusts loopback) */
  const database = async (name: string) => {
    const admin = new pg.Client({ connectionString: postgres!.url })
    await admin.connect()
    try {
      await admin.query(`CREATE DATABASE ${name}`)
    } finally {
      await admin.end()
    }
    return postgres!.url.replace('postgres://authsvc@', `postgres://authsvc:${URL_PASSWORD}@`).replace(/\/postgres$/, `/${name}`)
  }

  before(async () => {
    assert.ok(existsSync(join(ROOT, 'sidecar/dist/cli.js')), 'build the sidecar first: npx tsc -p sidecar/tsconfig.json')
    if (skipPostgres === false) postgres = await startPostgres()
    if (skipRedis === false) redis = await startRedis()
    src = mkdtempSync(join(tmpdir(), 'as-copy-src-'))
    const h = await openHarness({ dir: src, env: { AUTHSVC_SECRET: SECRET }, clock })
    try {
      const adminJwt = await registerAndLogin(h, 'root')
      const aliceJwt = await registerAndLogin(h, 'alice', { admin: adminJwt })
      const bobJwt = await registerAndLogin(h, 'bob', { admin: adminJwt })
      const carolJwt = await registerAndLogin(h, 'carol', { admin: adminJwt })
      const token = await h.call('POST', '/authsvc/generate_token', { body: { label: 'laptop' }, headers: bearer(aliceJwt) })
      assert.equal(token.status, 200, JSON.stringify(token.body))
      const setup = await h.call('POST', '/authsvc/api/mfa/setup', { headers: bearer(carolJwt), body: {} })
      const confirm = await h.call('POST', '/authsvc/api/mfa/verify-setup', { headers: bearer(carolJwt), body: { code: totpAt(setup.body.secret, clock()) } })
      assert.equal(confirm.status, 200, JSON.stringify(confirm.body))
      const alice = h.services.users.byUsername('alice')!
      await h.services.modelGrants.grant({ user_id: alice.user_id, folder: 'checkpoints', item_name: 'copied-grant.safetensors', granted_by: 'root', created_at_iso: new Date(clock()).toISOString() })
      const tag = String((await h.call('GET', '/authsvc/api/ip-lists', { headers: bearer(adminJwt) })).headers.etag)
      const lists = await h.call('PUT', '/authsvc/api/ip-lists', { headers: { ...bearer(adminJwt), 'if-match': tag }, body: { whitelist: [], blacklist: [{ ip: '203.0.113.99', permanent: true }] } })
      assert.equal(lists.status, 200, JSON.stringify(lists.body))
      // this host's own bookkeeping: stays behind
      await h.services.localKv.set('prompt:copy-test-prompt', { owner: alice.user_id })
      await h.services.flush()
      const auditEvents = await h.services.store.audit.count()
      assert.ok(auditEvents >= 8, `events recorded: ${auditEvents}`)
      const audit = (await h.services.store.audit.page(0, 1000)).map((r) => JSON.stringify([r.kind, r.at, r.actor, r.subject, r.details]))
      made = { adminJwt, aliceToken: token.body.token, bobJwt, carolTotp: setup.body.secret, users: ['root', 'alice', 'bob', 'carol'], auditEvents, audit }
    } finally {
      await h.close()
    }
  })
  after(async () => {
    for (const h of opened) await h.close().catch(() => {})
    await postgres?.stop()
    await redis?.stop()
    rmSync(src, { recursive: true, force: true })
  })

  /** services and routes on the target, in a data dir of their own (another instance, or this one after the switch) */
  const onTarget = async (store: Record<string, unknown>) => {
    const h = await openHarness({ config: { store }, env: { AUTHSVC_SECRET: SECRET }, clock })
    opened.push(h)
    return h
  }

  const everythingIsThere = async (t: Harness) => {
    for (const name of ['root', 'alice', 'bob']) {
      const res = await t.call('POST', '/login', { body: { username: name, password: PASSWORD } })
      assert.equal(res.status, 200, `${name}: ${JSON.stringify(res.body)}`)
    }
    // TOTP: a code of a step never used on the source
    clock.advance(30_000)
    const first = await t.call('POST', '/login', { body: { username: 'carol', password: PASSWORD } })
    assert.ok(first.body.mfa_temp_token, JSON.stringify(first.body))
    const verified = await t.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: first.body.mfa_temp_token, code: totpAt(made.carolTotp, clock()) } })
    assert.equal(verified.status, 200, JSON.stringify(verified.body))
    // the API token and the session of before the copy
    assert.equal((await t.call('GET', '/authsvc/api/me', { headers: bearer(made.aliceToken) })).body.username, 'alice')
    const bob = await t.call('GET', '/authsvc/api/me', { headers: bearer(made.bobJwt) })
    assert.equal(bob.status, 200, JSON.stringify(bob.body))
    assert.equal(bob.body.username, 'bob')
    // grants, settings
    const grants = await t.call('GET', '/authsvc/api/users/alice/shared-items', { headers: bearer(made.adminJwt) })
    assert.equal(grants.status, 200, JSON.stringify(grants.body))
    assert.deepEqual(grants.body.items.map((g: { item_name: string }) => g.item_name), ['copied-grant.safetensors'])
    assert.equal(t.services.ipGate.refuse('203.0.113.99'), 'IP_DENIED')
    // the audit log, as the admin's view reads it
    // every event of the source, in its order, before the target's own (its start, the sign-ins above)
    const copied = (await t.services.store.audit.page(0, made.auditEvents)).map((r) => JSON.stringify([r.kind, r.at, r.actor, r.subject, r.details]))
    assert.deepEqual(copied, made.audit)
    const view = await t.call('GET', '/authsvc/api/audit?user=carol&kind=user_created,mfa_enabled', { headers: bearer(made.adminJwt) })
    assert.equal(view.status, 200, JSON.stringify(view.body))
    assert.ok(view.body.events.some((e: { kind: string }) => e.kind === 'user_created'), JSON.stringify(view.body.events))
    // a name taken before the copy stays taken, in any case
    const twin = await t.call('POST', '/register', { headers: bearer(made.adminJwt), body: { username: 'ALICE', password: PASSWORD } })
    assert.equal(twin.status, 409, JSON.stringify(twin.body))
    // this host's bookkeeping did not travel
    assert.equal(await t.services.kv.get('prompt:copy-test-prompt'), undefined)
  }

  /** `local`: the source is the sqlite file, where this host's bookkeeping lives beside the records */
  const summaryIsRight = (run: Run, local = true) => {
    assert.equal(run.code, 0, run.stderr + run.stdout)
    assert.match(run.stdout, /records copied: \d+ \(.*user: 4.*\)/)
    assert.match(run.stdout, /session: \d+/)
    assert.match(run.stdout, /token: 1/)
    assert.match(run.stdout, /mfa: 1/)
    assert.match(run.stdout, /model_grant: 1/)
    assert.match(run.stdout, /setting: \d+/)
    assert.match(run.stdout, new RegExp(`audit events copied: ${made.auditEvents}\\b`))
    assert.match(run.stdout, local ? /not copied: this host's own bookkeeping .*; here prompt: 1\)/ : /not copied: this host's own bookkeeping \([^;]*\), which stays/)
    assert.ok(!/records copied: .*prompt/.test(run.stdout), 'prompt records are not copied')
    assert.ok(!(run.stdout + run.stderr).includes(URL_PASSWORD), 'no password in the output')
  }

  it('to PostgreSQL: a sidecar on the target finds everyone and everything', { skip: skipPostgres }, async () => {
    const url = await database('copy_main')
    const run = await copy(src, url)
    summaryIsRight(run)
    assert.match(run.stdout, /written for the postgres store: 5 \(the username index and the admin list/)
    const t = await onTarget({ backend: 'postgres', postgres_url: url })
    await everythingIsThere(t)
  })

  it('to Redis: a sidecar on the target finds everyone and everything', { skip: skipRedis }, async () => {
    const url = `${redis!.url}/1`
    const run = await copy(src, url)
    summaryIsRight(run)
    const t = await onTarget({ backend: 'redis', redis_url: url })
    await everythingIsThere(t)
  })

  it('to another sqlite file: a sidecar on it finds everyone and everything', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'as-copy-file-'))
    try {
      const file = join(dir, 'moved.sqlite')
      const run = await copy(src, file)
      summaryIsRight(run)
      assert.ok(!run.stdout.includes('written for the'), 'nothing derived for a sqlite target')
      const t = await onTarget({ backend: 'sqlite', sqlite_path: file })
      await everythingIsThere(t)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('from PostgreSQL on to Redis: a shared source is read as configured, its index and admin list travel as records', { skip: skipPostgres || skipRedis }, async () => {
    const url = await database('copy_chain')
    assert.equal((await copy(src, url)).code, 0)
    // a data dir whose config.json names the PostgreSQL store, as an instance of it would have
    const shared = mkdtempSync(join(tmpdir(), 'as-copy-pgdir-'))
    try {
      writeFileSync(join(shared, 'config.json'), JSON.stringify({ store: { backend: 'postgres', postgres_url: url } }))
      const wrong = await copy(shared, `${redis!.url}/5`, [], { AUTHSVC_SECRET: 'not-the-secret-of-this-store-0123456789' })
      assert.equal(wrong.code, 1)
      assert.match(wrong.stderr.trim(), /^authsvc: AUTHSVC_SECRET differs from the one the source postgres store was set up with/)
      const target = `${redis!.url}/4`
      const run = await copy(shared, target)
      summaryIsRight(run, false)
      assert.match(run.stdout, /^copying the postgres store \(postgres:\/\/127\.0\.0\.1:\d+\/copy_chain\) to the redis store/m)
      assert.match(run.stdout, /username: 4/)
      assert.ok(!run.stdout.includes('written for the'), 'the index and the admin list were records of the source')
      const t = await onTarget({ backend: 'redis', redis_url: target })
      await everythingIsThere(t)
    } finally {
      rmSync(shared, { recursive: true, force: true })
    }
  })

  it('refuses a target that holds records unless --force, saying what it found', { skip: skipPostgres }, async () => {
    const url = await database('copy_twice')
    assert.equal((await copy(src, url)).code, 0)
    const again = await copy(src, url)
    assert.equal(again.code, 1, again.stdout)
    const line = again.stderr.trim()
    assert.equal(line.split('\n').length, 1, line)
    assert.match(line, /^authsvc: the target postgres store is not empty: it holds records \(.*user: 4.*\) and \d+ audit events; copy into an empty store, or pass --force/)
    assert.ok(!line.includes(URL_PASSWORD))
    const forced = await copy(src, url, ['--force'])
    assert.equal(forced.code, 0, forced.stderr)
    assert.match(forced.stdout, /records copied: \d+ \(.*user: 4/)
  })

  it('refuses a wrong AUTHSVC_SECRET before writing anything, naming AUTHSVC_SECRET', { skip: skipRedis }, async () => {
    const url = `${redis!.url}/2`
    const run = await copy(src, url, [], { AUTHSVC_SECRET: 'not-the-secret-of-this-store-0123456789' })
    assert.equal(run.code, 1, run.stdout)
    assert.match(run.stderr.trim(), /^authsvc: AUTHSVC_SECRET does not open the sealed values of the source sqlite store/)
    const client = createClient({ url, RESP: 2 })
    await client.connect()
    try {
      assert.deepEqual(await client.sendCommand(['KEYS', '*']), [], 'the target was not written')
    } finally {
      await client.close()
    }
  })

  it('refuses a target set up with another AUTHSVC_SECRET, even with --force', { skip: skipRedis }, async () => {
    const url = `${redis!.url}/3`
    const other = await openRedisSharedStore(url)
    try {
      await checkSecret(other, 'the-check-value-of-another-secret', 'redis')
    } finally {
      await other.close()
    }
    const run = await copy(src, url, ['--force'])
    assert.equal(run.code, 1, run.stdout)
    assert.match(run.stderr.trim(), /^authsvc: AUTHSVC_SECRET differs from the one the target redis store was set up with/)
  })

  it('an unreachable target: one line, exit 1, no password', async () => {
    const run = await copy(src, `postgres://authsvc:${URL_PASSWORD}@127.0.0.1:1/nothing`)
    assert.equal(run.code, 1)
    const line = run.stderr.trim()
    assert.equal(line.split('\n').length, 1, line)
    assert.match(line, /^authsvc: cannot reach the target postgres store \(postgres:\/\/127\.0\.0\.1:1\/nothing\)/)
    assert.ok(!(run.stdout + run.stderr).includes(URL_PASSWORD))
    const redisRun = await copy(src, `redis://default:${URL_PASSWORD}@127.0.0.1:1/0`)
    assert.equal(redisRun.code, 1)
    assert.match(redisRun.stderr.trim(), /^authsvc: cannot reach the target redis store \(redis:\/\/127\.0\.0\.1:1\/0\)/)
    assert.ok(!(redisRun.stdout + redisRun.stderr).includes(URL_PASSWORD))
  })

  it('bad targets are usage errors (exit 2) that never quote a password', async () => {
    const rows: Array<[string, RegExp]> = [
      [`postgres://u:${URL_PASSWORD}@[::1/db`, /^--to is not a valid postgres:\/\/ URL$/],
      [`mysql://u:${URL_PASSWORD}@db.example/authsvc`, /^--to mysql:\/\/ is not a store authsvc knows/],
      [join(src, 'authsvc.sqlite'), /^--to names the source store itself$/],
      [src, /is a directory: name the sqlite file/],
      [join(src, 'no-such-dir', 'x.sqlite'), /its directory does not exist$/],
    ]
    for (const [to, expected] of rows) {
      const run = await copy(src, to)
      assert.equal(run.code, 2, `${to}: ${run.stdout}${run.stderr}`)
      assert.match(run.stderr.trim(), expected, to)
      assert.ok(!(run.stdout + run.stderr).includes(URL_PASSWORD), to)
    }
    const missing = await new Promise<Run>((resolvePromise) => {
      const child = spawn(process.execPath, [join(ROOT, 'bin/authsvc.mjs'), 'store', 'copy', '--data-dir', src], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] })
      let stderr = ''
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
      child.on('close', (code) => resolvePromise({ code, stdout: '', stderr }))
    })
    assert.equal(missing.code, 2)
    assert.match(missing.stderr, /store copy needs --to TARGET/)
  })
})
