/**
 * A large user base (issue 28): with 100,000 users and 1,000,000 sessions and API tokens in
 * the store, the sidecar starts in ≤ 3 s, stays within 300 MB and decides as fast as on an
 * empty store (p99 within 10 %).
 *
 * Two data dirs on the embedded sqlite store hold the same 100 bench users, each with a
 * session and an API token; the "full" one also holds 100,000 more users with 500,000
 * sessions and 500,000 tokens (and their per-user index records), written straight into the
 * sqlite file as the sidecar writes them (values as JSON: `encryption_level: fields`, the
 * default). Both are real sidecar processes (`sidecar/dist/main.js`), as the plugin starts
 * them:
 * - start: from the spawn to the "authsvc sidecar ready" line, a cold start (imports
 *   included; the plugin's standby would spare those);
 * - memory: the process's peak resident set (VmHWM) after start and every decision below;
 * - decisions: on the decision socket, one at a time, rotating over the 200 credentials (each
 *   used once first: a record's first use reads the store), in alternating rounds between the
 *   two sidecars; p99 of each round, median over rounds.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { createHash, randomBytes, randomUUID } from 'node:crypto'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import argon2 from 'argon2'
import { SignJWT } from 'jose'
import sqlite3 from 'sqlite3'
import { median, percentile, printVerdicts, type Verdict } from './lib.js'
import { ROOT } from '../test/helpers/stack.js'
import { FrameClient } from '../test/helpers/decision-socket.js'
import { openSqliteSharedStore } from '../sidecar/src/store/sqlite-store.js'
import { deriveKeys } from '../sidecar/src/identity/secrets.js'

const USERS = Number(process.env.BENCH_SCALE_USERS ?? 100_000)
const SESSIONS = Number(process.env.BENCH_SCALE_SESSIONS ?? 500_000)
const TOKENS = Number(process.env.BENCH_SCALE_TOKENS ?? 500_000)
const BENCH_USERS = 100
const ROUNDS = Number(process.env.BENCH_SCALE_ROUNDS ?? 10)
const PER_ROUND = Number(process.env.BENCH_SCALE_DECISIONS ?? 2000)
const SECRET = 'scale-bench-secret-0123456789abcdefghij'
const PROTOCOL = (JSON.parse(readFileSync(join(ROOT, 'shared/protocol.json'), 'utf8')) as { version: number }).version
const DAY = 24 * 3600_000

interface Credentials {
  sessions: string[]
  tokens: string[]
}

function exec(db: sqlite3.Database, sql: string, params: unknown[] = []): Promise<void> {
  return new Promise((resolve, reject) => db.run(sql, params, (err) => (err ? reject(err) : resolve())))
}

/** The same 100 users, sessions and tokens in every data dir: records as the sidecar writes them. */
async function benchRecords(): Promise<{ rows: Array<[string, unknown]>; credentials: Credentials }> {
  const keys = deriveKeys(Buffer.from(SECRET, 'utf8'))
  const hash = await argon2.hash('bench-password-1', { type: argon2.argon2id, memoryCost: 19456, timeCost: 2, parallelism: 1 })
  const now = Date.now()
  const iso = (ms: number) => new Date(ms).toISOString()
  const rows: Array<[string, unknown]> = []
  const credentials: Credentials = { sessions: [], tokens: [] }
  for (let i = 0; i < BENCH_USERS; i++) {
    const userId = randomUUID()
    const username = `bench${String(i).padStart(3, '0')}`
    rows.push([`user:${userId}`, { user_id: userId, username, role: i === 0 ? 'admin' : 'user', password_hash: hash, mfa_enabled: false, sfw_check: false, created_at_iso: iso(now - DAY), disabled: false }])
    const jti = randomUUID()
    const exp = now + 7 * DAY
    credentials.sessions.push(
      await new SignJWT({ username, typ: 'session' }).setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).setSubject(userId).setJti(jti)
        .setIssuedAt(Math.floor(now / 1000)).setExpirationTime(Math.floor(exp / 1000)).sign(keys.jwt),
    )
    rows.push([`session:${jti}`, { jti, user_id: userId, created_at_iso: iso(now), last_used_at_iso: iso(now), exp_at_iso: iso(exp), remember_me: false, revoked: false }])
    rows.push([`session_index:${userId}`, { entries: [[jti, exp]] }])
    const token = `ast_${randomBytes(32).toString('base64url')}`
    const tokenHash = createHash('sha256').update(token).digest('hex')
    credentials.tokens.push(token)
    rows.push([`token:${tokenHash}`, { hash: tokenHash, user_id: userId, label: 'bench', created_at_iso: iso(now), expires_at_iso: iso(exp), last_used_at_iso: null }])
    rows.push([`token_index:${userId}`, { entries: [[tokenHash, exp]] }])
  }
  rows.push(['store_meta:session_index', { built_at_ms: now }], ['store_meta:token_index', { built_at_ms: now }])
  return { rows, credentials }
}

/** A data dir whose sqlite store holds `rows`, plus (when `filler`) the large user base. */
async function seed(rows: Array<[string, unknown]>, filler: boolean): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'as-scale-'))
  const dataDir = join(dir, 'data')
  mkdirSync(dataDir, { mode: 0o700 })
  const path = join(dataDir, 'authsvc.sqlite')
  await (await openSqliteSharedStore(path)).close() // the tables, as the sidecar makes them
  const db = await new Promise<sqlite3.Database>((resolve, reject) => {
    const d = new sqlite3.Database(path, (err) => (err ? reject(err) : resolve(d)))
  })
  await exec(db, 'BEGIN')
  let seq = 0
  for (const [key, value] of rows) await exec(db, 'INSERT INTO authsvc_records (key, seq, value) VALUES (?, ?, ?)', [key, ++seq, JSON.stringify(value)])
  if (filler) {
    const hash = (rows.find(([k]) => k.startsWith('user:'))![1] as { password_hash: string }).password_hash
    const now = Date.now()
    const exp = now + 7 * DAY
    const created = new Date(now - DAY).toISOString()
    const expIso = new Date(exp).toISOString()
    // ids shaped like the sidecar's (UUIDs; token hashes of 64 hex), numbered so the indexes can name them
    const uid = (n: string) => `'00000000-0000-4000-8000-' || printf('%012d', ${n})`
    const gen = (n: number) => `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ${n - 1})`
    await exec(db, `${gen(USERS)} INSERT INTO authsvc_records (key, seq, value) SELECT 'user:' || ${uid('i')}, ${seq} + i + 1,
      json_object('user_id', ${uid('i')}, 'username', 'user' || printf('%06d', i), 'role', 'user', 'password_hash', ?, 'mfa_enabled', json('false'),
        'sfw_check', json('false'), 'created_at_iso', ?, 'disabled', json('false')) FROM n`, [hash, created])
    seq += USERS
    await exec(db, `${gen(SESSIONS)} INSERT INTO authsvc_records (key, seq, value) SELECT 'session:' || printf('10000000-0000-4000-8000-%012d', i), ${seq} + i + 1,
      json_object('jti', printf('10000000-0000-4000-8000-%012d', i), 'user_id', ${uid(`i % ${USERS}`)}, 'created_at_iso', ?, 'last_used_at_iso', ?,
        'exp_at_iso', ?, 'remember_me', json('false'), 'revoked', json('false'), 'user_agent', 'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36', 'ip', '192.0.2.' || (i % 250)) FROM n`,
    [created, created, expIso])
    seq += SESSIONS
    await exec(db, `${gen(TOKENS)} INSERT INTO authsvc_records (key, seq, value) SELECT 'token:' || printf('%064d', i), ${seq} + i + 1,
      json_object('hash', printf('%064d', i), 'user_id', ${uid(`i % ${USERS}`)}, 'label', 'script ' || i, 'created_at_iso', ?, 'expires_at_iso', ?, 'last_used_at_iso', json('null')) FROM n`,
    [created, expIso])
    seq += TOKENS
    await exec(db, `${gen(SESSIONS)} INSERT INTO authsvc_records (key, seq, value) SELECT 'session_index:' || ${uid(`i % ${USERS}`)}, ${seq} + (i % ${USERS}) + 1,
      json_object('entries', json_group_array(json_array(printf('10000000-0000-4000-8000-%012d', i), ${exp}))) FROM n GROUP BY i % ${USERS}`)
    seq += USERS
    await exec(db, `${gen(TOKENS)} INSERT INTO authsvc_records (key, seq, value) SELECT 'token_index:' || ${uid(`i % ${USERS}`)}, ${seq} + (i % ${USERS}) + 1,
      json_object('entries', json_group_array(json_array(printf('%064d', i), ${exp}))) FROM n GROUP BY i % ${USERS}`)
    seq += USERS
  }
  await exec(db, `INSERT INTO authsvc_meta (name, value) VALUES ('seq', ?) ON CONFLICT(name) DO UPDATE SET value = excluded.value`, [seq])
  await exec(db, 'COMMIT')
  await new Promise<void>((resolve, reject) => db.close((err) => (err ? reject(err) : resolve())))
  return dataDir
}

interface Running {
  child: ChildProcess
  startMs: number
  client: FrameClient
}

async function startSidecar(dataDir: string): Promise<Running> {
  const t0 = performance.now()
  const child = spawn(process.execPath, [join(ROOT, 'sidecar', 'dist', 'main.js')], {
    env: { ...process.env, AUTHSVC_DATA_DIR: dataDir, AUTHSVC_SECRET: SECRET, AUTHSVC_SOCKET: join(dataDir, 'authsvc.sock'), AUTHSVC_LOG_LEVEL: 'info' },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  let err = ''
  child.stderr!.on('data', (c: Buffer) => (err += c.toString()))
  const startMs = await new Promise<number>((resolve, reject) => {
    let out = ''
    child.stdout!.on('data', (c: Buffer) => {
      out += c.toString()
      if (out.includes('authsvc sidecar ready')) resolve(performance.now() - t0)
    })
    child.once('exit', (code) => reject(new Error(`sidecar exited ${code}: ${err.slice(-2000)} ${out.slice(-2000)}`)))
  })
  const client = await FrameClient.open(join(dataDir, 'authsvc.sock'))
  const hello = await client.send({ type: 'hello', protocol: PROTOCOL, plugin_version: 'bench' })
  if (hello.type !== 'hello') throw new Error(`no hello: ${JSON.stringify(hello)}`)
  return { child, startMs, client }
}

function memoryMb(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  const kb = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? 0)
  return { rss: kb('VmRSS') / 1024, peak: kb('VmHWM') / 1024 }
}

const decideFrame = (token: string) => ({
  type: 'decide', method: 'GET', path: '/prompt', query: '', route: { pattern: '/prompt', kind: 'route' }, route_status: 200,
  match_info: {}, headers: { authorization: `Bearer ${token}` }, peer: '127.0.0.1', scheme: 'http',
})

async function decide(client: FrameClient, token: string): Promise<number> {
  const t0 = performance.now()
  const answer = await client.send(decideFrame(token))
  const ms = performance.now() - t0
  if (answer.action !== 'pass') throw new Error(`decision was not a pass: ${JSON.stringify(answer)}`)
  return ms
}

const { rows, credentials } = await benchRecords()
const all = [...credentials.sessions, ...credentials.tokens]
const seedStarted = performance.now()
const emptyDir = await seed(rows, false)
const fullDir = await seed(rows, true)
console.log(`\nScale: ${USERS} users, ${SESSIONS} sessions and ${TOKENS} tokens seeded in ${((performance.now() - seedStarted) / 1000).toFixed(1)} s`)
if (process.env.BENCH_SCALE_SEED_ONLY === '1') {
  // for profiling a start by hand: the data dirs stay, nothing runs
  console.log(`  empty: ${emptyDir}\n  full: ${fullDir}\n  AUTHSVC_SECRET=${SECRET}`)
  process.exit(0)
}
const running: Running[] = []
try {
  // one at a time: the two starts must not share the CPU
  const empty = await startSidecar(emptyDir)
  running.push(empty)
  const full = await startSidecar(fullDir)
  running.push(full)
  const firstUse: number[] = []
  for (const token of all) await decide(empty.client, token)
  for (const token of all) firstUse.push(await decide(full.client, token))
  firstUse.sort((a, b) => a - b)
  const p99s = new Map<Running, number[]>([[empty, []], [full, []]])
  // one round each not counted: the code paths of a held record warm up in both alike
  for (const s of [empty, full]) for (let i = 0; i < PER_ROUND; i++) await decide(s.client, all[i % all.length])
  for (let r = 0; r < ROUNDS; r++) {
    for (const s of r % 2 === 0 ? [empty, full] : [full, empty]) {
      const ms: number[] = []
      for (let i = 0; i < PER_ROUND; i++) ms.push(await decide(s.client, all[i % all.length]))
      ms.sort((a, b) => a - b)
      p99s.get(s)!.push(percentile(ms, 0.99))
    }
  }
  const memEmpty = memoryMb(empty.child.pid!)
  const memFull = memoryMb(full.child.pid!)
  const p99Empty = median(p99s.get(empty)!)
  const p99Full = median(p99s.get(full)!)
  console.log(`  start (spawn → ready): empty store ${empty.startMs.toFixed(0)} ms, full store ${full.startMs.toFixed(0)} ms`)
  console.log(`  memory: empty store RSS ${memEmpty.rss.toFixed(0)} MB (peak ${memEmpty.peak.toFixed(0)}), full store RSS ${memFull.rss.toFixed(0)} MB (peak ${memFull.peak.toFixed(0)})`)
  console.log(`  decisions (${ROUNDS} alternating rounds of ${PER_ROUND}, p99 per round): empty [${p99s.get(empty)!.map((x) => x.toFixed(3)).join(', ')}], full [${p99s.get(full)!.map((x) => x.toFixed(3)).join(', ')}]`)
  console.log(`  a credential's first use on the full store (reads its record): p50 ${percentile(firstUse, 0.5).toFixed(3)} ms, p99 ${percentile(firstUse, 0.99).toFixed(3)} ms`)
  const verdicts: Verdict[] = [
    { name: `start with ${USERS / 1000}k users and ${(SESSIONS + TOKENS) / 1e6}M sessions and tokens (spawn → ready)`, value: `${(full.startMs / 1000).toFixed(2)} s`, target: '<= 3 s', ok: full.startMs <= 3000 },
    { name: 'sidecar peak memory with that store', value: `${memFull.peak.toFixed(0)} MB`, target: '<= 300 MB', ok: memFull.peak <= 300 },
    { name: 'decision p99 with that store / an empty store\'s', value: (p99Full / p99Empty).toFixed(3), target: '<= 1.10', ok: p99Full / p99Empty <= 1.1 },
  ]
  printVerdicts('Scale (issue 28)', verdicts)
  process.exitCode = verdicts.every((v) => v.ok) ? 0 : 1
} finally {
  for (const r of running) {
    r.client.close()
    r.child.kill('SIGTERM')
  }
  await Promise.all(running.map((r) => new Promise((resolve) => (r.child.exitCode !== null ? resolve(null) : r.child.once('exit', resolve)))))
  for (const d of [emptyDir, fullDir]) rmSync(join(d, '..'), { recursive: true, force: true })
}
