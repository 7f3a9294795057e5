/**
 * Several instances on one store (issue 28), through the stand-in host, its plugin and real
 * sidecar processes, on Redis and on PostgreSQL started in temp dirs (each skipped with one
 * line where the server is not installed):
 * - parity: decision p50 on the decision socket, and the gate's p50 and throughput (wrk), on each
 *   shared backend against the embedded sqlite one, in alternating rounds (the decision path reads
 *   the replica either way, so the backend must not show);
 * - revocation: a session logged out on instance A, refused by instance B's decision socket, from
 *   the moment A acknowledged the logout (p99 over 100 rounds);
 * - recovery: the store killed, decisions refused (503) past the grace, the server started again:
 *   time from the server's return to the first decision that passes.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { ensureWrk, median, percentile, printVerdicts, wrk, type Verdict, type WrkResult } from './lib.js'
import { destroyStack, ROOT, startStack, type Stack } from '../test/helpers/stack.js'
import { FrameClient } from '../test/helpers/decision-socket.js'
import { postgresSkipReason, redisSkipReason, startPostgres, startRedis, type StoreServer } from '../test/helpers/store-servers.js'

const ROUNDS = Number(process.env.BENCH_SHARED_ROUNDS ?? 4)
const SECONDS = Number(process.env.BENCH_SHARED_SECONDS ?? 3)
const REVOCATIONS = Number(process.env.BENCH_SHARED_REVOCATIONS ?? 100)
const SECRET = 'shared-bench-secret-0123456789abcdefgh'
const PASSWORD = 'bench-password-1'
const PROTOCOL = (JSON.parse(readFileSync(join(ROOT, 'shared/protocol.json'), 'utf8')) as { version: number }).version

type Backend = { name: 'redis' | 'postgres'; start: () => Promise<StoreServer> }
const backends: Backend[] = []
for (const [name, skip, start] of [['redis', redisSkipReason(), startRedis], ['postgres', postgresSkipReason(), startPostgres]] as const) {
  if (skip === false) backends.push({ name, start })
  else console.log(`\nShared store bench on ${name}: skipped (${skip})`)
}

const storeConfig = (backend: Backend, server: StoreServer) => ({ store: { backend: backend.name, [`${backend.name}_url`]: server.url } })

/** a sidecar on a shared store starts slowly on a loaded machine: waited for longer than the default */
async function ready(starting: Promise<Stack>): Promise<Stack> {
  const stack = await starting
  await stack.waitReady(90_000)
  return stack
}

async function login(stack: Stack, username: string): Promise<string> {
  const res = await fetch(`${stack.url}/login`, { method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json' }, body: JSON.stringify({ username, password: PASSWORD }) })
  if (res.status !== 200) throw new Error(`login ${username}: ${res.status} ${await res.text()}`)
  return ((await res.json()) as { jwt_token: string }).jwt_token
}

async function register(stack: Stack, username: string, admin?: string): Promise<void> {
  const res = await fetch(`${stack.url}/register`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'application/json', ...(admin ? { Authorization: `Bearer ${admin}` } : {}) },
    body: JSON.stringify({ username, password: PASSWORD }),
  })
  if (res.status !== 201) throw new Error(`register ${username}: ${res.status} ${await res.text()}`)
}

async function decisionClient(stack: Stack): Promise<FrameClient> {
  const client = await FrameClient.open(join(stack.dataDir, 'authsvc.sock'))
  const hello = await client.send({ type: 'hello', protocol: PROTOCOL, plugin_version: 'bench' })
  if (hello.type !== 'hello') throw new Error(`no hello: ${JSON.stringify(hello)}`)
  return client
}

const decideFrame = (token: string) => ({
  type: 'decide', method: 'GET', path: '/prompt', query: '', route: { pattern: '/prompt', kind: 'route' }, route_status: 200,
  match_info: {}, headers: { authorization: `Bearer ${token}` }, peer: '127.0.0.1', scheme: 'http',
})

/**
 * decision round trips one at a time for `ms`, `gapMs` apart, sorted. The gaps are 0 (back to back:
 * the decision's own cost, the sidecar's loop awake) and 5 ms (past the decision socket's 2 ms
 * busy-poll window: every decision wakes an idle loop, about 0.4 ms against 0.07 ms). This bench
 * once used 2 ms, on the window's edge. The issue's criterion is the gate's (wrk through the plugin);
 * the back-to-back line is a verdict too, the 5 ms one is printed (docs/decisions.md: on the
 * shared backends waking an idle sidecar costs 40–100 µs more, cause not found).
 */
async function decisionLatencies(client: FrameClient, token: string, ms: number, gapMs: number): Promise<number[]> {
  const out: number[] = []
  const until = Date.now() + ms
  while (Date.now() < until) {
    const started = performance.now()
    const answer = await client.send(decideFrame(token))
    out.push(performance.now() - started)
    if (answer.action !== 'pass') throw new Error(`decision was not a pass: ${JSON.stringify(answer)}`)
    if (gapMs > 0) await new Promise((r) => setTimeout(r, gapMs))
  }
  return out.sort((a, b) => a - b)
}

const GAPS = [0, 5]

async function parity(verdicts: Verdict[]): Promise<void> {
  const servers: StoreServer[] = []
  const stacks: Array<{ name: string; stack: Stack; token: string; client: FrameClient }> = []
  try {
    const open = async (name: string, config: Record<string, unknown>) => {
      const stack = await ready(startStack({ noWait: true, config, env: { AUTHSVC_SECRET: SECRET } }))
      await register(stack, 'bench')
      const token = await login(stack, 'bench')
      stacks.push({ name, stack, token, client: await decisionClient(stack) })
    }
    await open('sqlite', {})
    for (const backend of backends) {
      const server = await backend.start()
      servers.push(server)
      await open(backend.name, storeConfig(backend, server))
    }
    const c1 = new Map<string, WrkResult[]>(stacks.map((s) => [s.name, []]))
    const c32 = new Map<string, WrkResult[]>(stacks.map((s) => [s.name, []]))
    const decisions = new Map<string, number[]>(stacks.flatMap((s) => GAPS.map((g): [string, number[]] => [`${s.name}@${g}`, []])))
    for (const s of stacks) await wrk(`${s.stack.url}/prompt`, 1, [`Authorization: Bearer ${s.token}`], 1) // warm-up
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 === 0 ? stacks : [...stacks].reverse()
      for (const s of order) c1.get(s.name)!.push(await wrk(`${s.stack.url}/prompt`, 1, [`Authorization: Bearer ${s.token}`], SECONDS))
      for (const s of order) c32.get(s.name)!.push(await wrk(`${s.stack.url}/prompt`, 32, [`Authorization: Bearer ${s.token}`], SECONDS))
      for (const gap of GAPS) for (const s of order) decisions.get(`${s.name}@${gap}`)!.push(percentile(await decisionLatencies(s.client, s.token, SECONDS * 1000, gap), 0.5))
    }
    console.log(`\nParity: GET /prompt through the gate (wrk ${SECONDS}s × ${ROUNDS} alternating rounds, medians) and decisions on the decision socket`)
    for (const s of stacks) {
      console.log(`  ${s.name.padEnd(9)} gate p50 ${median(c1.get(s.name)!.map((r) => r.p50)).toFixed(3)} ms  gate req/s at 32 ${Math.round(median(c32.get(s.name)!.map((r) => r.rps)))}  decision p50 ${GAPS.map((g) => `${median(decisions.get(`${s.name}@${g}`)!).toFixed(3)} ms (${g} ms apart)`).join(', ')}`)
    }
    for (const backend of backends) {
      const ratio = (of: Map<string, unknown[]>, pick: (x: never) => number) =>
        median(of.get(backend.name)!.map((x, i) => pick(x as never) / pick(of.get('sqlite')![i] as never)))
      const p50 = ratio(c1, (r: WrkResult) => r.p50)
      const rps = ratio(c32, (r: WrkResult) => r.rps)
      verdicts.push({ name: `${backend.name}: gate p50 / sqlite's, concurrency 1`, value: p50.toFixed(3), target: '<= 1.05', ok: p50 <= 1.05 })
      verdicts.push({ name: `${backend.name}: gate throughput / sqlite's, concurrency 32`, value: rps.toFixed(3), target: '>= 0.95', ok: rps >= 0.95 })
      const decRatio = (gap: number) => {
        const mine = decisions.get(`${backend.name}@${gap}`)!
        const base = decisions.get(`sqlite@${gap}`)!
        return median(mine.map((x, i) => x / base[i]))
      }
      const dec = decRatio(0)
      verdicts.push({ name: `${backend.name}: decision p50 / sqlite's (decision socket, back to back)`, value: dec.toFixed(3), target: '<= 1.05', ok: dec <= 1.05 })
      console.log(`  ${backend.name}: decision p50 / sqlite's with 5 ms between decisions (an idle loop woken each time): ${decRatio(5).toFixed(3)}`)
    }
  } finally {
    for (const s of stacks) {
      s.client.close()
      await destroyStack(s.stack)
    }
    for (const server of servers) await server.stop()
  }
}

async function revocationAndRecovery(backend: Backend, verdicts: Verdict[]): Promise<void> {
  const server = await backend.start()
  const a = await ready(startStack({ noWait: true, config: storeConfig(backend, server), env: { AUTHSVC_SECRET: SECRET } }))
  const b = await ready(startStack({ noWait: true, config: storeConfig(backend, server), env: { AUTHSVC_SECRET: SECRET } }))
  const onB = await decisionClient(b)
  try {
    await register(a, 'bench')
    const refusedOnB: number[] = []
    for (let i = 0; i < REVOCATIONS; i++) {
      const token = await login(a, 'bench')
      // B lets it in first (it reads the store when the feed has not brought the session yet)
      const first = await onB.send(decideFrame(token))
      if (first.action !== 'pass') throw new Error(`B refused a live session: ${JSON.stringify(first)}`)
      const res = await fetch(`${a.url}/logout`, { method: 'POST', headers: { Authorization: `Bearer ${token}`, Accept: 'application/json' } })
      const acked = performance.now()
      if (res.status !== 200) throw new Error(`logout on A: ${res.status}`)
      for (;;) {
        const answer = await onB.send(decideFrame(token))
        if (answer.action !== 'pass') break
        if (performance.now() - acked > 5000) throw new Error('B still passes a session logged out on A 5 s ago')
      }
      refusedOnB.push(performance.now() - acked)
    }
    refusedOnB.sort((x, y) => x - y)
    console.log(`\nRevocation on ${backend.name}: logout acknowledged on A → refused on B's decision socket, ${REVOCATIONS} rounds: p50 ${percentile(refusedOnB, 0.5).toFixed(2)} ms, p99 ${percentile(refusedOnB, 0.99).toFixed(2)} ms, max ${refusedOnB[refusedOnB.length - 1].toFixed(2)} ms`)
    verdicts.push({ name: `${backend.name}: revocation on A refused on B, p99 after the acknowledgement`, value: `${percentile(refusedOnB, 0.99).toFixed(1)} ms`, target: '<= 100 ms', ok: percentile(refusedOnB, 0.99) <= 100 })

    // recovery: kill the store, wait for B to refuse (past its grace), start the store again
    const token = await login(b, 'bench')
    await server.kill()
    for (;;) {
      const answer = await onB.send(decideFrame(token))
      if (answer.action === 'respond' && answer.status === 503) break
      await new Promise((r) => setTimeout(r, 20))
    }
    await server.restart()
    const back = performance.now()
    for (;;) {
      const answer = await onB.send(decideFrame(token))
      if (answer.action === 'pass') break
      if (performance.now() - back > 30_000) throw new Error('no decision passes 30 s after the store came back')
      await new Promise((r) => setTimeout(r, 5))
    }
    const resumed = performance.now() - back
    console.log(`Recovery on ${backend.name}: first decision passing ${resumed.toFixed(0)} ms after the server accepted connections again`)
    verdicts.push({ name: `${backend.name}: service resumes after the store's return`, value: `${resumed.toFixed(0)} ms`, target: '<= 1000 ms', ok: resumed <= 1000 })
  } finally {
    onB.close()
    await destroyStack(a)
    await destroyStack(b)
    await server.stop()
  }
}

const verdicts: Verdict[] = []
if (backends.length > 0) {
  ensureWrk()
  await parity(verdicts)
  for (const backend of backends) await revocationAndRecovery(backend, verdicts)
  printVerdicts('Several instances on one shared store', verdicts)
}
process.exitCode = verdicts.every((v) => v.ok) ? 0 : 1
