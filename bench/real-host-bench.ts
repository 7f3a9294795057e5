/**
 * The gate's cost inside the REAL ComfyUI 0.3.64 (../shared/real-comfyui or
 * COMFYUI_DIR; skipped with one line when neither exists), as ratios within
 * one run: a bare ComfyUI (no package in custom_nodes) and a gated one (this
 * package as a custom node, which spawns its sidecar) run side by side and are
 * measured back to back in alternating rounds (DESIGN §7, issue 10).
 *
 * Two layouts, switched on the running processes with taskset:
 * - `one core`: every process of each host (ComfyUI, and the sidecar with its
 *   workers) pinned to CPU 0, the client (this process and the wrk it starts)
 *   to CPU 1;
 * - `nothing pinned`: every process may run on every CPU.
 *
 * Figures per layout, a non-admin user with an API token, keep-alive (wrk):
 * - GET /prompt at 1 connection: added p50 and p99; at 32 connections: req/s ratio;
 * - GET /object_info (about 320 KB) at 1 connection: p50 ratio;
 * - GET /history with 200 entries (tiny prompts EmptyImage → SaveImage queued
 *   through the gate as that user; on the bare host the same 200 queued
 *   directly): p50 of the user's filtered history against the bare one;
 * - a CPU-bound prompt (EmptyImage 3072×3072 batch 3 → SaveImage) run to
 *   completion while the client polls GET /queue 20 times a second (through
 *   the gate, or bare): its execution time by the host's own timestamps
 *   (execution_start → execution_success), gated / bare.
 * Once: the CPU the plugin and the sidecar use over 10 idle seconds (utime +
 * stime from /proc/<pid>/stat of the gated host's process group, minus the bare
 * host's own, which has no plugin).
 *
 * Environment: BENCH_REAL_SECONDS (wrk run, default 3), BENCH_REAL_ROUNDS
 * (default 3), BENCH_REAL_PROMPT_ROUNDS (default 3), BENCH_REAL_LAYOUTS
 * (`pinned,free`), BENCH_REAL_AIOHTTP (`3.8` or `3.11`, default 3.8), and
 * AUTHSVC_* for the gated host (e.g. AUTHSVC_DECISION_SPIN_US).
 *
 * Ends with one PASS/FAIL line per target; exits 1 when a target is missed.
 */
import { execFileSync } from 'node:child_process'
import { readFileSync, readdirSync } from 'node:fs'
import { availableParallelism } from 'node:os'
import { REAL_HOST_SKIP, destroyRealHost, startRealHost, type RealHost } from '../test/helpers/real-host.js'
import type { AiohttpVersion } from '../test/helpers/stack.js'
import { ensureWrk, median, printVerdicts, wrk, type Verdict, type WrkResult } from './lib.js'

const SECONDS = Number(process.env.BENCH_REAL_SECONDS ?? 3)
const ROUNDS = Number(process.env.BENCH_REAL_ROUNDS ?? 3)
const PROMPT_ROUNDS = Number(process.env.BENCH_REAL_PROMPT_ROUNDS ?? 3)
const AIOHTTP = (process.env.BENCH_REAL_AIOHTTP ?? '3.8') as AiohttpVersion
const HISTORY_ENTRIES = 200
const IDLE_SECONDS = 10
const PASSWORD = 'bench-password-1'

type Layout = 'pinned' | 'free'
const LAYOUT_NAMES: Record<Layout, string> = {
  pinned: 'one core: host and sidecar on CPU 0, client on CPU 1',
  free: 'nothing pinned',
}
const TARGETS: Record<Layout, { p50: number; rps: number }> = {
  pinned: { p50: 0.25, rps: 0.7 },
  free: { p50: 0.1, rps: 0.8 },
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

// ---------------------------------------------------------------------------------------
// processes

function stat(pid: number): string[] | null {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8')
    return text.slice(text.lastIndexOf(')') + 2).split(' ') // [0] is field 3 (state)
  } catch {
    return null
  }
}

/** Live pids of the process group `pgid` (ComfyUI leads its own; the sidecar and its workers are in it). */
function group(pgid: number): number[] {
  return readdirSync('/proc').filter((e) => /^\d+$/.test(e)).map(Number).filter((pid) => {
    const s = stat(pid)
    return s !== null && s[0] !== 'Z' && Number(s[2]) === pgid
  })
}

/** utime + stime of each pid, in clock ticks. */
function cpuTicks(pids: number[]): Map<number, number> {
  const out = new Map<number, number>()
  for (const pid of pids) {
    const s = stat(pid)
    if (s) out.set(pid, Number(s[11]) + Number(s[12]))
  }
  return out
}

const TICKS_PER_SECOND = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100

function pin(pids: number[], cpus: string): void {
  for (const pid of pids) {
    try {
      execFileSync('taskset', ['-a', '-p', '-c', cpus, String(pid)], { stdio: 'ignore' })
    } catch {
      // a worker that ended meanwhile
    }
  }
}

// ---------------------------------------------------------------------------------------
// requests

interface Host {
  name: 'bare' | 'gated'
  host: RealHost
  /** what the bench user sends (an API token on the gated host; the same header on the bare one, which ignores it) */
  headers: Record<string, string>
}

async function must(res: Response, what: string): Promise<any> {
  const text = await res.text()
  if (res.status !== 200 && res.status !== 201) throw new Error(`${what}: ${res.status} ${text.slice(0, 300)}`)
  return text ? JSON.parse(text) : null
}

function graph(width: number, height: number, batch: number, color: number, prefix: string): Record<string, unknown> {
  return {
    '1': { class_type: 'EmptyImage', inputs: { width, height, batch_size: batch, color } },
    '2': { class_type: 'SaveImage', inputs: { images: ['1', 0], filename_prefix: prefix } },
  }
}

async function queuePrompt(h: Host, prompt: Record<string, unknown>): Promise<string> {
  const res = await fetch(`${h.host.url}/prompt`, {
    method: 'POST',
    headers: { ...h.headers, 'Content-Type': 'application/json', Accept: 'application/json' },
    body: JSON.stringify({ prompt }),
  })
  return (await must(res, `${h.name} POST /prompt`)).prompt_id
}

async function queueEmpty(h: Host): Promise<boolean> {
  const q = await must(await fetch(`${h.host.url}/queue`, { headers: h.headers }), `${h.name} GET /queue`)
  return q.queue_running.length === 0 && q.queue_pending.length === 0
}

async function waitIdle(h: Host, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs
  while (!(await queueEmpty(h))) {
    if (Date.now() > until) throw new Error(`${h.name}: queue not empty after ${timeoutMs} ms`)
    await sleep(50)
  }
}

/** The host's own execution time of a finished prompt (execution_start → execution_success), ms. */
async function executionMs(h: Host, promptId: string): Promise<number> {
  const history = await must(await fetch(`${h.host.url}/history/${promptId}`, { headers: h.headers }), `${h.name} GET /history/id`)
  const messages: Array<[string, { timestamp: number }]> = history[promptId]?.status?.messages ?? []
  const at = (name: string) => messages.find(([m]) => m === name)?.[1].timestamp
  const start = at('execution_start')
  const end = at('execution_success')
  if (start === undefined || end === undefined) throw new Error(`${h.name}: prompt ${promptId} did not succeed: ${JSON.stringify(history[promptId]?.status)}`)
  return end - start
}

/**
 * Queues the CPU-bound prompt and polls GET /queue 20 times a second until it has
 * run; returns the host's execution time.
 */
async function cpuBoundPrompt(h: Host, color: number): Promise<number> {
  const id = await queuePrompt(h, graph(3072, 3072, 3, color, `bench-heavy-${h.name}`))
  const until = Date.now() + 120_000
  let next = performance.now()
  for (;;) {
    if (await queueEmpty(h)) break
    if (Date.now() > until) throw new Error(`${h.name}: the CPU-bound prompt did not finish in 120 s`)
    next += 50
    await sleep(Math.max(0, next - performance.now()))
  }
  return executionMs(h, id)
}

// ---------------------------------------------------------------------------------------

interface Figures {
  c1: WrkResult[]
  c32: WrkResult[]
  objectInfo: WrkResult[]
  history: WrkResult[]
  prompt: number[]
}

const emptyFigures = (): Figures => ({ c1: [], c32: [], objectInfo: [], history: [], prompt: [] })

async function main(): Promise<void> {
  if (REAL_HOST_SKIP) {
    console.log(`\nreal ComfyUI bench skipped: ${REAL_HOST_SKIP}`)
    return
  }
  ensureWrk()
  const cpus = availableParallelism()
  const layouts = (process.env.BENCH_REAL_LAYOUTS ?? 'pinned,free').split(',').filter((l): l is Layout => l === 'pinned' || l === 'free')
  if (cpus < 2 && layouts.includes('pinned')) {
    console.log(`\none-core layout skipped: ${cpus} CPU available, the client needs another one`)
    layouts.splice(layouts.indexOf('pinned'), 1)
  }
  const allCpus = `0-${cpus - 1}`
  const started = Date.now()
  const [bareHost, gatedHost] = await Promise.all([startRealHost({ gate: false, aiohttp: AIOHTTP }), startRealHost({ aiohttp: AIOHTTP })])
  const verdicts: Verdict[] = []
  const judge = (name: string, value: number, digits: number, target: string, ok: boolean) =>
    verdicts.push({ name, value: value.toFixed(digits), target, ok })
  try {
    // the first account is the admin; the bench user is an ordinary user with an API token
    await must(await fetch(`${gatedHost.url}/register`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ username: 'root', password: PASSWORD }),
    }), 'register root')
    const login = await must(await fetch(`${gatedHost.url}/login`, {
      method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json' }, body: JSON.stringify({ username: 'root', password: PASSWORD }),
    }), 'login root')
    await must(await fetch(`${gatedHost.url}/register`, {
      method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${login.jwt_token}` },
      body: JSON.stringify({ username: 'bench', password: PASSWORD }),
    }), 'register bench')
    const token = (await must(await fetch(`${gatedHost.url}/authsvc/generate_token`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ username: 'bench', password: PASSWORD, label: 'bench' }),
    }), 'generate_token')).token as string
    const headers = { Authorization: `Bearer ${token}` }
    const bare: Host = { name: 'bare', host: bareHost, headers }
    const gated: Host = { name: 'gated', host: gatedHost, headers }
    const wrkHeaders = [`Authorization: Bearer ${token}`]

    // 200 history entries on each host: tiny prompts, through the gate as the bench user
    await Promise.all([bare, gated].map(async (h) => {
      for (let i = 0; i < HISTORY_ENTRIES; i++) await queuePrompt(h, graph(8, 8, 1, i, `bench-${h.name}`))
      await waitIdle(h, 120_000)
      const history = await must(await fetch(`${h.host.url}/history`, { headers }), `${h.name} GET /history`)
      if (Object.keys(history).length !== HISTORY_ENTRIES) throw new Error(`${h.name}: ${Object.keys(history).length} history entries`)
    }))

    // idle: the gated host's group (ComfyUI with the plugin, the sidecar) minus the bare ComfyUI
    await sleep(1000)
    const gatedPids = group(gatedHost.host.pid!)
    const barePids = group(bareHost.host.pid!)
    const sidecarPid = gatedHost.sidecarPid()
    const before = { gated: cpuTicks(gatedPids), bare: cpuTicks(barePids) }
    await sleep(IDLE_SECONDS * 1000)
    const after = { gated: cpuTicks(gatedPids), bare: cpuTicks(barePids) }
    const pct = (b: Map<number, number>, a: Map<number, number>, only?: (pid: number) => boolean) => {
      let ticks = 0
      for (const [pid, t] of a) if (!only || only(pid)) ticks += t - (b.get(pid) ?? t)
      return (100 * ticks) / TICKS_PER_SECOND / IDLE_SECONDS
    }
    const idleGatedHost = pct(before.gated, after.gated, (pid) => pid === gatedHost.host.pid)
    const idleSidecar = pct(before.gated, after.gated, (pid) => pid !== gatedHost.host.pid)
    const idleBare = pct(before.bare, after.bare)
    const idlePlugin = Math.max(0, idleGatedHost - idleBare)
    console.log(`\nidle ${IDLE_SECONDS} s (% of one core): bare ComfyUI ${idleBare.toFixed(1)}, gated ComfyUI ${idleGatedHost.toFixed(1)}, sidecar and workers ${idleSidecar.toFixed(1)} (pid ${sidecarPid})`)
    judge('idle: plugin + sidecar, % of a core over 10 s', idlePlugin + idleSidecar, 1, '<= 1.0', idlePlugin + idleSidecar <= 1)

    const setLayout = (layout: Layout) => {
      const hostCpus = layout === 'pinned' ? '0' : allCpus
      pin([...group(bareHost.host.pid!), ...group(gatedHost.host.pid!)], hostCpus)
      // this process and the wrk it starts (children inherit the mask)
      pin([process.pid], layout === 'pinned' ? '1' : allCpus)
    }

    const figures: Record<Layout, Record<'bare' | 'gated', Figures>> = {
      pinned: { bare: emptyFigures(), gated: emptyFigures() },
      free: { bare: emptyFigures(), gated: emptyFigures() },
    }
    for (const layout of layouts) {
      setLayout(layout)
      for (const h of [bare, gated]) {
        await wrk(`${h.host.url}/prompt`, 1, wrkHeaders, 1) // warm-up
        await wrk(`${h.host.url}/object_info`, 1, wrkHeaders, 1)
      }
      for (let round = 0; round < ROUNDS; round++) {
        const order = round % 2 === 0 ? [bare, gated] : [gated, bare]
        for (const h of order) {
          const f = figures[layout][h.name]
          f.c1.push(await wrk(`${h.host.url}/prompt`, 1, wrkHeaders, SECONDS))
          f.c32.push(await wrk(`${h.host.url}/prompt`, 32, wrkHeaders, SECONDS))
          f.objectInfo.push(await wrk(`${h.host.url}/object_info`, 1, wrkHeaders, SECONDS))
          f.history.push(await wrk(`${h.host.url}/history`, 1, wrkHeaders, SECONDS))
        }
      }
    }
    // every CPU-bound prompt has its own colour: ComfyUI would answer a repeated graph from its cache
    let color = 1000
    for (const h of [bare, gated]) await cpuBoundPrompt(h, color++) // warm-up (first large allocations)
    for (const layout of layouts) {
      setLayout(layout)
      for (let round = 0; round < PROMPT_ROUNDS; round++) {
        const order = round % 2 === 0 ? [bare, gated] : [gated, bare]
        for (const h of order) figures[layout][h.name].prompt.push(await cpuBoundPrompt(h, color++))
      }
    }
    setLayout('free')

    const row = (name: string, a: number, b: number, unit: string, extra = '') =>
      console.log(`${name.padEnd(44)} ${a.toFixed(3).padStart(10)} ${b.toFixed(3).padStart(10)}  ${unit.padEnd(6)}${extra}`)
    for (const layout of layouts) {
      const b = figures[layout].bare
      const g = figures[layout].gated
      const m = (f: Figures, key: 'c1' | 'c32' | 'objectInfo' | 'history', field: keyof WrkResult) => median(f[key].map((r) => r[field]))
      const p50 = [m(b, 'c1', 'p50'), m(g, 'c1', 'p50')]
      const p99 = [m(b, 'c1', 'p99'), m(g, 'c1', 'p99')]
      const rps = [m(b, 'c32', 'rps'), m(g, 'c32', 'rps')]
      const oi = [m(b, 'objectInfo', 'p50'), m(g, 'objectInfo', 'p50')]
      const hist = [m(b, 'history', 'p50'), m(g, 'history', 'p50')]
      const prompt = [median(b.prompt), median(g.prompt)]
      console.log(`\nreal ComfyUI 0.3.64 (aiohttp ${AIOHTTP}), ${LAYOUT_NAMES[layout]}; wrk ${SECONDS}s x ${ROUNDS} alternating rounds, medians`)
      console.log(`${''.padEnd(44)} ${'bare'.padStart(10)} ${'gated'.padStart(10)}`)
      row('GET /prompt p50, 1 connection', p50[0], p50[1], 'ms', `added ${(p50[1] - p50[0]).toFixed(3)}`)
      row('GET /prompt p99, 1 connection', p99[0], p99[1], 'ms', `added ${(p99[1] - p99[0]).toFixed(3)}`)
      row('GET /prompt, 32 connections', rps[0], rps[1], 'req/s', `ratio ${(rps[1] / rps[0]).toFixed(3)}`)
      row('GET /object_info p50, 1 connection', oi[0], oi[1], 'ms', `ratio ${(oi[1] / oi[0]).toFixed(3)}`)
      row(`GET /history (${HISTORY_ENTRIES} entries, non-admin) p50`, hist[0], hist[1], 'ms', `ratio ${(hist[1] / hist[0]).toFixed(3)}`)
      row(`CPU-bound prompt, /queue polled 20/s (x${PROMPT_ROUNDS})`, prompt[0], prompt[1], 'ms', `ratio ${(prompt[1] / prompt[0]).toFixed(3)}`)
      console.log(`  rounds: prompt bare ${b.prompt.join(' ')} gated ${g.prompt.join(' ')}; c1 p50 bare ${b.c1.map((r) => r.p50).join(' ')} gated ${g.c1.map((r) => r.p50).join(' ')}`)
      const t = TARGETS[layout]
      const tag = layout === 'pinned' ? 'one core' : 'nothing pinned'
      judge(`${tag}: added p50, GET /prompt, 1 connection (ms)`, p50[1] - p50[0], 3, `<= ${t.p50.toFixed(3)}`, p50[1] - p50[0] <= t.p50)
      judge(`${tag}: added p99, GET /prompt, 1 connection (ms)`, p99[1] - p99[0], 3, '<= 1.000', p99[1] - p99[0] <= 1)
      judge(`${tag}: throughput gated/bare, 32 connections`, rps[1] / rps[0], 3, `>= ${t.rps.toFixed(2)}`, rps[1] / rps[0] >= t.rps)
      judge(`${tag}: /object_info p50 gated/bare`, oi[1] / oi[0], 3, '<= 1.03', oi[1] / oi[0] <= 1.03)
      judge(`${tag}: CPU-bound prompt time gated/bare, polled`, prompt[1] / prompt[0], 3, '<= 1.03', prompt[1] / prompt[0] <= 1.03)
    }
    console.log(`\n(real-host bench: ${((Date.now() - started) / 1000).toFixed(0)} s)`)
    printVerdicts('targets inside the real ComfyUI (DESIGN §7, issue 10)', verdicts)
    if (verdicts.some((v) => !v.ok)) process.exitCode = 1
  } finally {
    await Promise.all([destroyRealHost(bareHost), destroyRealHost(gatedHost)])
  }
}

main().catch((err: unknown) => {
  console.error(err)
  process.exit(1)
})
