/**
 * CPU room: whether keeping the event loop polling for the next decision uses a core nobody
 * else needs.
 *
 * Guarantees:
 * - the rule (`roomIsFree`) is the plugin's too (`host-plugin/cpu_room.py`): both are checked
 *   against `shared/vectors/cpu-room.json` (`test/unit/cpu-room.test.ts`,
 *   `test/plugin/test_cpu_room.py`), and so are the readings of /proc and the cgroup files it is
 *   given, so the two sides cannot drift apart;
 * - a reading that fails counts as no room: nothing here ever makes the sidecar poll on a CPU it
 *   cannot show to be free;
 * - the CPUs are sampled at most once a second (taskset, cpusets and cgroup quotas change under a
 *   running process, so they are looked at again every time).
 */
import { readFileSync } from 'node:fs'
import { availableParallelism } from 'node:os'

/** A file of /proc or /sys as text; throws when it is not there. */
export type Read = (path: string) => string

const readText: Read = (path) => readFileSync(path, 'ascii')

/** How often the usable CPUs are looked at again. */
const CPU_CHECK_MS = 1000
/** USER_HZ: 100 on every Linux architecture Node runs on. */
export const CLOCK_TICKS_PER_SECOND = 100

/**
 * One look at the CPUs: how many this process may use at once, which, their idle + iowait clock
 * ticks since boot (null when not read: fewer than 2 usable, or unreadable), the PSI µs some task
 * waited for a CPU (null without PSI), and the peer process's [pid, CPU ticks] (null when there
 * is none to count: the sidecar cannot learn the host's pid from its socket, so it never has one).
 */
export interface CpuSample {
  usable: number
  cpus: readonly number[]
  idle: number | null
  pressure: number | null
  peer: readonly [number, number] | null
}

const sameCpus = (a: readonly number[], b: readonly number[]): boolean =>
  a.length === b.length && [...a].sort((x, y) => x - y).join(',') === [...b].sort((x, y) => x - y).join(',')

/**
 * Polling pays only while another core is free to compute the answer: this process may use at
 * least 2 CPUs (affinity, cgroup quota) and, between the two samples, those CPUs were idle for at
 * least half a core, counting as idle this process's own polling (`spunS`) and the peer's CPU,
 * while tasks waited for a CPU less than a fifth of that time (PSI; without PSI, polling is not
 * counted as idle). The wait is what stops polling that sustains itself: polling counted as idle
 * is idle only while nobody else wanted that CPU. On a core shared with the host, or beside a
 * sampler that keeps the other core busy, polling takes the very CPU the host needs (to send the
 * next request, to run its prompts), so no polling then.
 */
export function roomIsFree(before: CpuSample | null, after: CpuSample, elapsedS: number, spunS: number, ticksPerSecond = CLOCK_TICKS_PER_SECOND): boolean {
  if (after.usable < 2 || after.idle === null) return false
  // no earlier sample of these CPUs: the next check decides
  if (before === null || before.idle === null || !sameCpus(before.cpus, after.cpus)) return false
  const idleCores = (after.idle - before.idle) / ticksPerSecond / elapsedS
  if (after.pressure === null || before.pressure === null) return idleCores >= 0.5
  let peerCores = 0
  if (after.peer !== null && before.peer !== null && after.peer[0] === before.peer[0] && after.peer[1] >= 0 && before.peer[1] >= 0) {
    peerCores = (after.peer[1] - before.peer[1]) / ticksPerSecond / elapsedS
  }
  const waited = (after.pressure - before.pressure) / 1e6 / elapsedS
  return waited < 0.2 && idleCores + spunS / elapsedS + peerCores >= 0.5
}

/** The CPU quota of this process's cgroup in CPUs (v2 cpu.max, v1 cfs), or null when unlimited or unknown. */
export function cgroupQuota(read: Read = readText): number | null {
  let lines: string[]
  try {
    lines = read('/proc/self/cgroup').split('\n')
  } catch {
    return null
  }
  for (const line of lines) {
    const [, controllers, path] = line.split(/:(.*?):/)
    if (path === undefined) continue
    const dir = path.replace(/\/+$/, '')
    let candidates: Array<[string, string | null]>
    if (controllers === '') candidates = [[`/sys/fs/cgroup${dir}/cpu.max`, null], ['/sys/fs/cgroup/cpu.max', null]]
    else if (controllers.split(',').includes('cpu')) {
      const base = `/sys/fs/cgroup/${controllers}`
      candidates = [[`${base}${dir}/cpu.cfs_quota_us`, `${base}${dir}/cpu.cfs_period_us`], [`${base}/cpu.cfs_quota_us`, `${base}/cpu.cfs_period_us`]]
    } else continue
    for (const [quotaFile, periodFile] of candidates) {
      let fields: string[]
      try {
        fields = read(quotaFile).trim().split(/\s+/)
        if (periodFile !== null) fields.push(read(periodFile).trim())
      } catch {
        continue
      }
      if (fields.length < 2 || fields[0] === 'max' || fields[0] === '-1') return null
      const quota = Number(fields[0]) / Number(fields[1])
      return Number.isFinite(quota) && quota > 0 ? quota : null
    }
  }
  return null
}

/** How many CPUs this process can run on at once: its affinity (inherited from the host), capped by its cgroup's quota. */
export function usableCpus(): number {
  const quota = cgroupQuota()
  return quota === null ? availableParallelism() : Math.min(availableParallelism(), quota)
}

/** The CPUs this process may run on (/proc/self/status, Cpus_allowed_list), or null when unreadable. */
export function allowedCpus(read: Read = readText): number[] | null {
  try {
    const list = /^Cpus_allowed_list:\s*(\S+)/m.exec(read('/proc/self/status'))?.[1]
    if (!list) return null
    const out: number[] = []
    for (const range of list.split(',')) {
      const [a, b] = range.split('-').map(Number)
      for (let c = a; c <= (b ?? a); c++) out.push(c)
    }
    return out
  } catch {
    return null
  }
}

/** Idle + iowait clock ticks of the given CPUs since boot (/proc/stat); null when unreadable. */
export function idleTicks(cpus: readonly number[], read: Read = readText): number | null {
  let text: string
  try {
    text = read('/proc/stat')
  } catch {
    return null
  }
  const wanted = new Set(cpus)
  let idle = 0
  for (const line of text.split('\n')) {
    if (!line.startsWith('cpu')) break
    if (line[3] === ' ') continue
    const f = line.split(' ')
    if (wanted.has(Number(f[0].slice(3)))) idle += Number(f[4]) + Number(f[5])
  }
  return idle
}

/** µs during which some runnable task waited for a CPU, since boot (PSI, /proc/pressure/cpu); null without PSI. */
export function cpuPressure(read: Read = readText): number | null {
  try {
    const total = /total=(\d+)/.exec(read('/proc/pressure/cpu'))?.[1]
    return total === undefined ? null : Number(total)
  } catch {
    return null
  }
}

/**
 * `roomIsFree` over the last second, for this process (the sidecar has no peer it can count).
 *
 * The decision socket asks after every read of frames, in the turn that decided them and before
 * their answers leave (they are corked until the next tick): `check()` reads nothing then. It
 * answers the last verdict and, when that is a second old, takes the next sample of /proc in a
 * later turn (`setImmediate`), once the answers are on their way (DESIGN §2: no I/O while
 * deciding; /proc is no disk, but its reads are system calls all the same).
 */
export class CpuRoom {
  private checkedAt = -Infinity
  private sample: CpuSample | null = null
  private sampling = false
  /** ms spent polling since the last check */
  spun = 0
  free = false

  constructor(private readonly cpus: () => number = usableCpus) {}

  check(): boolean {
    if (!this.sampling && performance.now() - this.checkedAt >= CPU_CHECK_MS) {
      this.sampling = true
      setImmediate(this.resample)
    }
    return this.free
  }

  private readonly resample = (): void => {
    this.sampling = false
    const now = performance.now()
    const elapsed = now - this.checkedAt
    const spun = this.spun
    this.spun = 0
    const sample = this.look()
    this.free = roomIsFree(this.sample, sample, elapsed / 1000, spun / 1000)
    this.checkedAt = now
    this.sample = sample
  }

  private look(): CpuSample {
    const usable = this.cpus()
    const cpus = usable >= 2 ? allowedCpus() : null
    const idle = cpus === null ? null : idleTicks(cpus)
    return { usable, cpus: cpus ?? [], idle, pressure: idle === null ? null : cpuPressure(), peer: null }
  }
}
