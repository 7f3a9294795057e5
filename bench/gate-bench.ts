/**
 * `npm run bench`: the gate's cost, measured as ratios within one run, side by
 * side against the bare stand-in (DESIGN §7). Load comes from wrk (Debian),
 * a separate C process, so the Node load generator does not compete for CPU.
 *
 * Measures, on a trivial host route (GET /prompt) with a valid session:
 * - added p50 / p99 latency at concurrency 1 (median of interleaved rounds);
 * - throughput with the gate / bare at concurrency 32;
 * - a login storm: 200 concurrent wrong-password logins (argon2id at the
 *   default cost, distinct client addresses through a trusted proxy header so
 *   the throttle does not short-circuit them) against another user's p99.
 */
import { execFileSync, spawn } from 'node:child_process'
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { tmpdir } from 'node:os'
import { once } from 'node:events'
import { destroyStack, PYTHON, ROOT, startStack } from '../test/helpers/stack.js'

const DURATION = process.env.BENCH_SECONDS ?? '4'
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3)

function ensureWrk(): void {
  try {
    execFileSync('wrk', ['--version'], { stdio: 'ignore' })
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') return // wrk --version exits 1 but exists
    execFileSync('apt-get', ['install', '-y', '-qq', 'wrk'], { stdio: 'ignore', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } })
  }
}

function toMs(value: string, unit: string): number {
  const n = Number(value)
  return unit === 'us' ? n / 1000 : unit === 'ms' ? n : n * 1000
}

interface WrkResult {
  p50: number
  p99: number
  rps: number
}

function wrk(url: string, connections: number, headers: string[]): WrkResult {
  const args = ['-t', connections > 1 ? '2' : '1', '-c', String(connections), '-d', `${DURATION}s`, '--latency']
  for (const h of headers) args.push('-H', h)
  const out = execFileSync('wrk', [...args, url], { encoding: 'utf8' })
  const pct = (p: string) => {
    const m = new RegExp(`^\\s+${p}%\\s+([\\d.]+)(us|ms|s)`, 'm').exec(out)
    if (!m) throw new Error(`wrk output without ${p}%:\n${out}`)
    return toMs(m[1], m[2])
  }
  const rps = /Requests\/sec:\s+([\d.]+)/.exec(out)
  const non2xx = /Non-2xx or 3xx responses: (\d+)/.exec(out)
  if (non2xx) throw new Error(`wrk saw ${non2xx[1]} error responses from ${url}`)
  return { p50: pct('50'), p99: pct('99'), rps: Number(rps?.[1] ?? 0) }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]

async function startBare(): Promise<{ url: string; stop: () => Promise<void>; dir: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'as-bench-bare-'))
  mkdirSync(join(dir, 'custom_nodes'), { recursive: true })
  const child = spawn(PYTHON, [join(ROOT, 'test/host-standin/main.py'), '--base-dir', dir, '--listen', '127.0.0.1', '--port', '0'], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, PYTHONUNBUFFERED: '1' },
  })
  let out = ''
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()))
  for (let i = 0; i < 400 && !/STANDIN READY/.test(out); i++) await new Promise((r) => setTimeout(r, 25))
  const url = /STANDIN READY (\S+)/.exec(out)?.[1]
  if (!url) throw new Error(`bare stand-in did not start: ${out}`)
  return {
    url,
    dir,
    stop: async () => {
      child.kill('SIGTERM')
      await once(child, 'exit')
    },
  }
}

/** 200 workers posting wrong passwords until `stop`; returns how many logins were answered. */
function loginStorm(url: string, workers: number): { stop: () => Promise<number> } {
  let running = true
  let answered = 0
  let n = 0
  const worker = async () => {
    while (running) {
      n++
      const ip = `198.51.${(n >> 8) & 255}.${n & 255}`
      try {
        const res = await fetch(`${url}/login`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', Accept: 'application/json', 'X-Forwarded-For': ip },
          body: JSON.stringify({ username: `storm-${n}`, password: 'wrong-password-123' }),
        })
        await res.arrayBuffer()
        if (res.status === 401) answered++
      } catch {
        // a refused connection under load is not a login
      }
    }
  }
  const all = Array.from({ length: workers }, worker)
  return {
    stop: async () => {
      running = false
      await Promise.all(all)
      return answered
    },
  }
}

async function main(): Promise<void> {
  ensureWrk()
  const bare = await startBare()
  // trusted_proxies: the login storm gives each attempt its own client address
  const gated = await startStack({ config: { trusted_proxies: ['127.0.0.1/32'] } })
  try {
    await fetch(`${gated.url}/register`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ username: 'bench', password: 'bench-password-1' }),
    })
    const login = await fetch(`${gated.url}/login`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
      body: JSON.stringify({ username: 'bench', password: 'bench-password-1' }),
    })
    const { jwt_token } = (await login.json()) as { jwt_token: string }
    const auth = [`Authorization: Bearer ${jwt_token}`]
    const path = '/prompt'
    const check = await fetch(`${gated.url}${path}`, { headers: { Authorization: `Bearer ${jwt_token}` } })
    if (check.status !== 200) throw new Error(`gated ${path} answered ${check.status}`)

    wrk(`${bare.url}${path}`, 1, []) // warm-up
    wrk(`${gated.url}${path}`, 1, auth)
    const c1 = { bare: [] as WrkResult[], gated: [] as WrkResult[] }
    const c32 = { bare: [] as WrkResult[], gated: [] as WrkResult[] }
    for (let round = 0; round < ROUNDS; round++) {
      c1.bare.push(wrk(`${bare.url}${path}`, 1, []))
      c1.gated.push(wrk(`${gated.url}${path}`, 1, auth))
      c32.bare.push(wrk(`${bare.url}${path}`, 32, []))
      c32.gated.push(wrk(`${gated.url}${path}`, 32, auth))
    }
    const row = (name: string, b: number, g: number, unit: string) =>
      `${name.padEnd(34)} ${b.toFixed(3).padStart(10)} ${g.toFixed(3).padStart(10)}  ${unit}`
    const p50b = median(c1.bare.map((r) => r.p50))
    const p50g = median(c1.gated.map((r) => r.p50))
    const p99b = median(c1.bare.map((r) => r.p99))
    const p99g = median(c1.gated.map((r) => r.p99))
    const rpsb = median(c32.bare.map((r) => r.rps))
    const rpsg = median(c32.gated.map((r) => r.rps))
    console.log(`\nGET ${path} with a valid session (Bearer JWT); wrk ${DURATION}s x ${ROUNDS} interleaved rounds, medians`)
    console.log(`${''.padEnd(34)} ${'bare'.padStart(10)} ${'gated'.padStart(10)}`)
    console.log(row('latency p50, concurrency 1', p50b, p50g, 'ms'))
    console.log(row('latency p99, concurrency 1', p99b, p99g, 'ms'))
    console.log(row('throughput, concurrency 32', rpsb, rpsg, 'req/s'))
    console.log(`\nadded p50: ${(p50g - p50b).toFixed(3)} ms (target <= 0.150)`)
    console.log(`added p99: ${(p99g - p99b).toFixed(3)} ms (target <= 1.000)`)
    console.log(`throughput ratio: ${(rpsg / rpsb).toFixed(3)} (target >= 0.70)`)

    const quiet = wrk(`${gated.url}${path}`, 1, auth)
    const storm = loginStorm(gated.url, 200)
    await new Promise((r) => setTimeout(r, 1000))
    const started = Date.now()
    const loaded = wrk(`${gated.url}${path}`, 1, auth)
    const logins = await storm.stop()
    const seconds = (Date.now() - started) / 1000
    console.log(`\nlogin storm: 200 concurrent wrong-password logins (argon2id default cost), GET ${path} of another user at concurrency 1`)
    console.log(`${''.padEnd(34)} ${'quiet'.padStart(10)} ${'storm'.padStart(10)}`)
    console.log(row('latency p50', quiet.p50, loaded.p50, 'ms'))
    console.log(row('latency p99', quiet.p99, loaded.p99, 'ms'))
    console.log(`logins answered during the storm: ${(logins / seconds).toFixed(1)}/s (target >= 30/s); p99 under storm ${loaded.p99.toFixed(3)} ms (target <= 5)`)
  } finally {
    await bare.stop()
    rmSync(bare.dir, { recursive: true, force: true })
    await destroyStack(gated)
  }
}

main().catch((err: unknown) => {
  console.error(err)
  process.exit(1)
})
