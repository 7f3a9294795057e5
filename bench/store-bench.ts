/**
 * The shared store's verbs on PostgreSQL (issue 28), against a real server
 * started in a temp dir (skipped with one line where PostgreSQL is not
 * installed), one client at a time, over loopback:
 * - each verb's p50 against a bare `SELECT 1` on the same pool: a verb that is
 *   one statement costs one round trip plus the server's work, never a
 *   connection's setup or several round trips;
 * - the feed: from a write acknowledged on one client to the change heard on
 *   another (the store's share of "a revocation on A is refused on B").
 */
import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { percentile, printVerdicts, type Verdict } from './lib.js'
import { postgresSkipReason, startPostgres } from '../test/helpers/store-servers.js'
import { openPostgresSharedStore } from '../sidecar/src/store/postgres-store.js'

const N = Number(process.env.BENCH_STORE_N ?? 2000)

const skip = postgresSkipReason()
if (skip !== false) {
  console.log(`\nShared store on PostgreSQL: skipped (${skip})`)
} else {
  const server = await startPostgres()
  const a = await openPostgresSharedStore(server.url)
  const b = await openPostgresSharedStore(server.url)
  const ping = new pg.Pool({ connectionString: server.url, max: 1 })
  try {
    const time = async (what: () => Promise<unknown>): Promise<{ p50: number; p99: number }> => {
      for (let i = 0; i < 200; i++) await what() // warm: connections, prepared statements, plans
      const ms: number[] = []
      for (let i = 0; i < N; i++) {
        const t0 = process.hrtime.bigint()
        await what()
        ms.push(Number(process.hrtime.bigint() - t0) / 1e6)
      }
      ms.sort((x, y) => x - y)
      return { p50: percentile(ms, 0.5), p99: percentile(ms, 0.99) }
    }
    const k = `bench${randomUUID().slice(0, 8)}`
    const record = { username: 'alice', role: 'user', groups: ['a', 'b'], created_at: 1_700_000_000_000, sealed: 'x'.repeat(200) }
    let i = 0
    const base = await time(() => ping.query('SELECT 1'))
    const results: Array<[string, { p50: number; p99: number }]> = [
      ['get', await time(() => a.get(`${k}:u${i++ % 100}`))],
      ['set', await time(() => a.set(`${k}:u${i++ % 100}`, record))],
      ['commit (one check, two writes)', await time(async () => {
        const key = `${k}:c${i++ % 100}`
        const current = await a.getVersioned(key)
        i++
        return a.commit([{ key, seq: current?.seq ?? null }], [{ key, value: record }, { key: `${k}:idx${i % 100}`, value: { id: i } }])
      })],
      ['increment', await time(() => a.increment(`${k}-n${i++ % 100}`, 60_000))],
      ['claim', await time(() => a.claim(`${k}-s${i++}`, 60_000))],
    ]
    // the commit above reads first (getVersioned) as a caller does: two statements, so two round trips
    const feed: number[] = []
    for (let j = 0; j < 500; j++) {
      const key = `${k}:feed${j}`
      const heard = new Promise<bigint>((resolve) => {
        const off = b.subscribe((c) => {
          if (c.key !== key) return
          off()
          resolve(process.hrtime.bigint())
        })
      })
      await a.set(key, record)
      const acked = process.hrtime.bigint()
      const at = await heard
      feed.push(Math.max(0, Number(at - acked) / 1e6))
    }
    feed.sort((x, y) => x - y)
    console.log(`\nShared store on PostgreSQL (${N} calls each, one at a time; SELECT 1: p50 ${base.p50.toFixed(3)} ms, p99 ${base.p99.toFixed(3)} ms)`)
    for (const [name, r] of results) console.log(`  ${name.padEnd(34)} p50 ${r.p50.toFixed(3)} ms  p99 ${r.p99.toFixed(3)} ms  (${(r.p50 / base.p50).toFixed(1)}× SELECT 1)`)
    console.log(`  feed: acknowledged on A → heard on B   p50 ${percentile(feed, 0.5).toFixed(3)} ms  p99 ${percentile(feed, 0.99).toFixed(3)} ms`)
    const verdicts: Verdict[] = results.map(([name, r]) => {
      const rounds = name.startsWith('commit') ? 2 : 1
      // one statement is one round trip plus the server's work: within 3 × a bare round trip per statement, or 1 ms
      const bound = Math.max(rounds * 3 * base.p50, 1)
      return { name: `postgres ${name} p50 (${rounds} round trip${rounds > 1 ? 's' : ''})`, value: `${r.p50.toFixed(3)} ms`, target: `≤ ${bound.toFixed(3)} ms`, ok: r.p50 <= bound }
    })
    verdicts.push({ name: 'postgres feed delivery p99 (write acknowledged → heard elsewhere)', value: `${percentile(feed, 0.99).toFixed(3)} ms`, target: '≤ 100 ms', ok: percentile(feed, 0.99) <= 100 })
    printVerdicts('Shared store on PostgreSQL', verdicts)
    if (verdicts.some((v) => !v.ok)) process.exitCode = 1
  } finally {
    await ping.end()
    await a.close()
    await b.close()
    await server.stop()
  }
}
