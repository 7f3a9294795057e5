/**
 * Kills a gated host's sidecar while many clients keep asking, and measures how long the gate
 * stops answering: the longest span after the kill in which no request got any answer (held
 * requests wait for the replacement sidecar), and the span from the kill to the last refused
 * answer. Used by the real-host e2e row (which checks what is answered) and by `npm run bench`
 * (which judges both, issue 27: at most 0.5 s).
 *
 * Each client is one keep-alive connection sending GET `path` back to back with a bearer token.
 * Every answer is recorded with the time its request started and ended (performance.now()).
 */
import { Agent, request } from 'node:http'
import { readFileSync, statSync } from 'node:fs'
import { alive, childrenOf, isStandbySidecar } from './processes.js'

export interface Answer {
  start: number
  end: number
  /** HTTP status, or 0 for a connection error */
  status: number
}

export interface KillWindow {
  /** ms from the kill to the end of the last refused (non-200) answer; 0 when none was refused */
  windowMs: number
  /** the longest span (ms) after the kill in which no request got any answer */
  silentMs: number
  /** the longest time (ms) one request sent after the kill waited for its answer */
  slowestMs: number
  /** answers that were neither 200 nor 503 (a 500, a reset connection): must be none */
  unexpected: Answer[]
  refused: number
  answered: number
  /** ms from the kill until the new sidecar's pid file named another live process */
  respawnMs: number | null
  /** Date.now() at the kill, to line the host's own log up with it */
  killedAtEpochMs: number
}

export interface KillOptions {
  url: string
  token: string
  path?: string
  clients?: number
  /** answers before the kill, to be sure the load runs */
  warmMs?: number
  /** the window is closed once every answer in this span after the last refusal was a 200 */
  settleMs?: number
  timeoutMs?: number
  /** the sidecar's pid now (read from sidecar.pid) */
  sidecarPid: () => number
}

function get(agent: Agent, url: URL, token: string): Promise<number> {
  return new Promise((resolve) => {
    const req = request(url, { agent, headers: { Authorization: `Bearer ${token}` } }, (res) => {
      res.resume()
      res.on('end', () => resolve(res.statusCode ?? 0))
      res.on('error', () => resolve(0))
    })
    req.on('error', () => resolve(0))
    req.end()
  })
}

export async function killUnderLoad(options: KillOptions): Promise<KillWindow> {
  const clients = options.clients ?? 300
  const settleMs = options.settleMs ?? 1000
  const timeoutMs = options.timeoutMs ?? 20_000
  const url = new URL(options.path ?? '/prompt', options.url)
  const agent = new Agent({ keepAlive: true, maxSockets: clients })
  const answers: Answer[] = []
  let running = true
  const loops = Array.from({ length: clients }, async () => {
    while (running) {
      const start = performance.now()
      const status = await get(agent, url, options.token)
      answers.push({ start, end: performance.now(), status })
    }
  })
  const until = (check: () => boolean, ms: number) => new Promise<boolean>((resolve) => {
    const deadline = performance.now() + ms
    const tick = () => {
      if (check()) resolve(true)
      else if (performance.now() > deadline) resolve(false)
      else setTimeout(tick, 5)
    }
    tick()
  })
  try {
    const warmMs = options.warmMs ?? 1000
    const warmFrom = performance.now()
    await until(() => performance.now() - warmFrom >= warmMs && answers.some((a) => a.status === 200), warmMs + 10_000)
    const before = options.sidecarPid()
    const killedAt = performance.now()
    const killedAtEpochMs = Date.now()
    process.kill(before, 'SIGKILL')
    let respawnMs: number | null = null
    const settled = await until(() => {
      if (respawnMs === null) {
        try {
          const now = options.sidecarPid()
          if (now !== before && alive(now)) respawnMs = performance.now() - killedAt
        } catch {
          // the pid file is being rewritten
        }
      }
      if (respawnMs === null) return false // the replacement is not there yet: keep measuring
      const after = answers.filter((a) => a.end > killedAt)
      const lastRefusal = after.reduce((m, a) => (a.status !== 200 ? Math.max(m, a.end) : m), -Infinity)
      const since = Math.max(lastRefusal, killedAt + respawnMs)
      return performance.now() - since >= settleMs && after.some((a) => a.start > since && a.status === 200)
    }, timeoutMs)
    const after = answers.filter((a) => a.end > killedAt)
    if (!settled) {
      const counts = new Map<number, number>()
      for (const a of after) counts.set(a.status, (counts.get(a.status) ?? 0) + 1)
      throw new Error(`no replacement sidecar with steady 200s within ${timeoutMs} ms of the kill; answers since: ${JSON.stringify([...counts])}`)
    }
    const refusedAnswers = after.filter((a) => a.status !== 200)
    const lastRefusal = refusedAnswers.length > 0 ? Math.max(...refusedAnswers.map((a) => a.end)) : killedAt
    const ends = [killedAt, ...after.map((a) => a.end).sort((x, y) => x - y)]
    let silentMs = 0
    for (let i = 1; i < ends.length; i++) silentMs = Math.max(silentMs, ends[i] - ends[i - 1])
    const sentAfter = answers.filter((a) => a.start > killedAt)
    return {
      windowMs: lastRefusal - killedAt,
      silentMs,
      slowestMs: Math.max(0, ...sentAfter.map((a) => a.end - a.start)),
      unexpected: after.filter((a) => a.status !== 200 && a.status !== 503),
      refused: refusedAnswers.length,
      answered: after.length,
      respawnMs,
      killedAtEpochMs,
    }
  } finally {
    running = false
    await Promise.all(loops)
    agent.destroy()
  }
}

/** CPU ticks (utime + stime) of `pid`, or null once it is gone. */
function cpuTicks(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return Number(fields[11]) + Number(fields[12])
  } catch {
    return null
  }
}

/**
 * Resolves once a standby sidecar beside the running one has finished loading and waits (its CPU
 * time stands still for `quietMs`), or false after `timeoutMs`. A kill before that measures a
 * standby still loading, which is a second crash within seconds, not the case the target is for.
 */
export async function standbyWaiting(hostPid: number, quietMs = 300, timeoutMs = 60_000): Promise<boolean> {
  const deadline = performance.now() + timeoutMs
  while (performance.now() < deadline) {
    const standby = childrenOf(hostPid).find(isStandbySidecar)
    if (standby !== undefined) {
      const before = cpuTicks(standby)
      await new Promise((resolve) => setTimeout(resolve, quietMs))
      if (before !== null && cpuTicks(standby) === before) return true
    } else {
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }
  return false
}

/**
 * The plugin replaces a sidecar at once only when it ran for STABLE_RUN_S (10 s, sidecar_process.py),
 * counted from the moment it was started or promoted, a little before it wrote its pid file; a
 * sidecar dying sooner is a crash loop and waits out a backoff. So 10.5 s from the pid file's
 * time is past that. A bench that kills faster measures the crash-loop pause, not a restart.
 */
export async function sidecarStable(pidFile: string, stableMs = 10_500): Promise<void> {
  const age = Date.now() - statSync(pidFile).mtimeMs
  if (age < stableMs) await new Promise((resolve) => setTimeout(resolve, stableMs - age))
}
