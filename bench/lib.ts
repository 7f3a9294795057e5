/** Helpers shared by the bench scripts: wrk as a child process, medians, verdict lines. */
import { execFile, execFileSync } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import { promisify } from 'node:util'

export const run = promisify(execFile)

export function ensureWrk(): void {
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

export interface WrkResult {
  p50: number
  p99: number
  rps: number
  requests: number
}

/** wrk as a child process (asynchronous: the bench's own loop keeps running meanwhile). */
export async function wrk(url: string, connections: number, headers: string[], seconds: number): Promise<WrkResult> {
  const args = ['-t', connections > 1 ? '2' : '1', '-c', String(connections), '-d', `${seconds}s`, '--latency']
  for (const h of headers) args.push('-H', h)
  const { stdout: out } = await run('wrk', [...args, url], { encoding: 'utf8' })
  const pct = (p: string) => {
    const m = new RegExp(`^\\s+${p}%\\s+([\\d.]+)(us|ms|s)`, 'm').exec(out)
    if (!m) throw new Error(`wrk output without ${p}%:\n${out}`)
    return toMs(m[1], m[2])
  }
  const rps = /Requests\/sec:\s+([\d.]+)/.exec(out)
  const non2xx = /Non-2xx or 3xx responses: (\d+)/.exec(out)
  if (non2xx) throw new Error(`wrk saw ${non2xx[1]} error responses from ${url}`)
  const requests = /(\d+) requests in/.exec(out)
  return { p50: pct('50'), p99: pct('99'), rps: Number(rps?.[1] ?? 0), requests: Number(requests?.[1] ?? 0) }
}

export const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
export const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]

export interface Verdict {
  name: string
  value: string
  target: string
  ok: boolean
}

export function printVerdicts(title: string, verdicts: Verdict[]): void {
  console.log(`\n${title}`)
  for (const v of verdicts) console.log(`${v.ok ? 'PASS' : 'FAIL'}  ${v.name.padEnd(60)} ${v.value.padStart(10)}  target ${v.target}`)
}

/** Every live pid of process group `pgid` (a real host leads its own: ComfyUI, its sidecar and the sidecar's workers). */
export function group(pgid: number): number[] {
  const out: number[] = []
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      if (fields[0] !== 'Z' && Number(fields[2]) === pgid) out.push(Number(entry))
    } catch {
      // gone
    }
  }
  return out
}

/** Pins every thread of these processes to `cpus` (taskset's list form: '0', '1', '0-1'). */
export function pin(pids: number[], cpus: string): void {
  for (const pid of pids) {
    try {
      execFileSync('taskset', ['-a', '-p', '-c', cpus, String(pid)], { stdio: 'ignore' })
    } catch {
      // exited meanwhile
    }
  }
}
