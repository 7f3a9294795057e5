/**
 * Kills a gated host's sidecar while many clients keep asking, and measures the refusal window:
 * from the kill until the last refused answer. Used by the real-host e2e row (which checks what
 * is answered) and by `npm run bench` (which judges the window, issue 27: at most 0.5 s).
 *
 * Each client is one keep-alive connection sending GET `path` back to back with a bearer token.
 * Every answer is recorded with the time its request started and ended (performance.now()).
 */
import { Agent, request } from 'node:http'
import { alive } from './processes.js'

export interface Answer {
  start: number
  end: number
  /** HTTP status, or 0 for a connection error */
  status: number
}

export interface KillWindow {
  /** ms from the kill to the end of the last refused (non-200) answer; 0 when none was refused */
  windowMs: number
  /** answers that were neither 200 nor 503 (a 500, a reset connection): must be none */
  unexpected: Answer[]
  refused: number
  answered: number
  /** ms from the kill until the new sidecar's pid file named another live process */
  respawnMs: number | null
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
      const after = answers.filter((a) => a.end > killedAt)
      const lastRefusal = after.reduce((m, a) => (a.status !== 200 ? Math.max(m, a.end) : m), -Infinity)
      const since = lastRefusal === -Infinity ? killedAt : lastRefusal
      return performance.now() - since >= settleMs && after.some((a) => a.status !== 200) && after.some((a) => a.start > since && a.status === 200)
    }, timeoutMs)
    const after = answers.filter((a) => a.end > killedAt)
    if (!settled) {
      const counts = new Map<number, number>()
      for (const a of after) counts.set(a.status, (counts.get(a.status) ?? 0) + 1)
      throw new Error(`no steady 200s within ${timeoutMs} ms of the kill; answers since: ${JSON.stringify([...counts])}`)
    }
    const refusedAnswers = after.filter((a) => a.status !== 200)
    const lastRefusal = Math.max(...refusedAnswers.map((a) => a.end))
    return {
      windowMs: lastRefusal - killedAt,
      unexpected: after.filter((a) => a.status !== 200 && a.status !== 503),
      refused: refusedAnswers.length,
      answered: after.length,
      respawnMs,
    }
  } finally {
    running = false
    await Promise.all(loops)
    agent.destroy()
  }
}
