/**
 * The decision socket: length-prefixed JSON frames (u32 BE + UTF-8 JSON),
 * many requests in flight per connection, answers matched by `id`.
 *
 * Guarantees: a malformed frame closes that connection (the plugin then fails
 * closed and reconnects); an exception while deciding answers a 503 for that
 * request, never a pass; a connection whose hello did not name this protocol
 * version (or that sent none) gets a 503 for every request, so a plugin of
 * another version is refused from this side too; the socket file is 0600.
 */
import { chmodSync, lstatSync, readFileSync, unlinkSync } from 'node:fs'
import { createServer, type Server, type Socket } from 'node:net'
import { availableParallelism } from 'node:os'
import type { FastifyBaseLogger } from 'fastify'
import { errorBody } from '../errors.js'
import { checkMessage, encodeFrame, FrameDecoder, FrameError } from './frames.js'
import { ConnectionLink, type HostLink } from './host-link.js'
import {
  MAX_FRAME_BYTES,
  PROTOCOL_VERSION,
  type BodyMessage,
  type PushMessage,
  type Decision,
  type EventMessage,
  type FilterAnswer,
  type FilterMessage,
  type FormMessage,
  type HelloMessage,
  type RequestDescription,
  type WithPayload,
} from './protocol.js'

export interface DecisionHandlers {
  hello(msg: HelloMessage): object
  decide(msg: RequestDescription): Decision | Promise<Decision>
  body(msg: BodyMessage, payload: Buffer, host?: HostLink): Decision | WithPayload<Decision> | Promise<Decision | WithPayload<Decision>>
  form(msg: FormMessage, host?: HostLink): Decision | Promise<Decision>
  filter(msg: FilterMessage, payload: Buffer, host?: HostLink): FilterAnswer | WithPayload<FilterAnswer> | Promise<FilterAnswer | WithPayload<FilterAnswer>>
  event(msg: EventMessage): void
}

type Answer = object | WithPayload<object>

const FAILED = {
  action: 'respond',
  status: 503,
  headers: [['Content-Type', 'application/json; charset=utf-8'], ['Retry-After', '1']],
  body_text: JSON.stringify(errorBody('AUTHSVC_UNAVAILABLE')),
} as const

const isWithPayload = (a: Answer): a is WithPayload<object> => 'payload' in a && Buffer.isBuffer((a as WithPayload<object>).payload)

/** The frame of one answer; an answer too large for a frame is a 503 for that request only. */
function answerFrame(id: unknown, result: Answer, log: FastifyBaseLogger): Buffer {
  const frame = isWithPayload(result) ? encodeFrame({ ...result.answer, id }, result.payload) : encodeFrame({ ...result, id })
  if (frame.length - 4 <= MAX_FRAME_BYTES) return frame
  log.error({ bytes: frame.length }, 'decision answer larger than a frame; answering 503 for that request')
  return encodeFrame({ ...FAILED, id })
}

export function removeStaleSocket(path: string): void {
  try {
    if (lstatSync(path).isSocket()) unlinkSync(path)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
  }
}

export function dispatch(handlers: DecisionHandlers, msg: Record<string, unknown>, payload: Buffer, host: HostLink): Answer | Promise<Answer> | undefined {
  switch (msg.type) {
    case 'decide':
      // the plugin that asked, to resolve names on its host (not part of the message on the wire)
      Object.defineProperty(msg, 'host', { value: host, enumerable: false })
      return handlers.decide(msg as unknown as RequestDescription)
    case 'body':
      return handlers.body(msg as unknown as BodyMessage, payload, host)
    case 'form':
      return handlers.form(msg as unknown as FormMessage, host)
    case 'filter':
      return handlers.filter(msg as unknown as FilterMessage, payload, host)
    case 'hello':
      return handlers.hello(msg as unknown as HelloMessage)
    case 'event':
      handlers.event(msg as unknown as EventMessage)
      return undefined
    default:
      throw new Error(`unknown message type ${String(msg.type)}`)
  }
}

/** The CPU quota of this process's cgroup in CPUs (v2 cpu.max, v1 cfs), or null when unlimited or unknown. */
function cgroupQuota(): number | null {
  let lines: string[]
  try {
    lines = readFileSync('/proc/self/cgroup', 'ascii').split('\n')
  } catch {
    return null
  }
  for (const line of lines) {
    const [, controllers, path] = line.split(/:(.*?):/)
    if (path === undefined) continue
    const dir = path.replace(/\/$/, '')
    let candidates: Array<[string, string | null]>
    if (controllers === '') candidates = [[`/sys/fs/cgroup${dir}/cpu.max`, null], ['/sys/fs/cgroup/cpu.max', null]]
    else if (controllers.split(',').includes('cpu')) {
      const base = `/sys/fs/cgroup/${controllers}`
      candidates = [[`${base}${dir}/cpu.cfs_quota_us`, `${base}${dir}/cpu.cfs_period_us`], [`${base}/cpu.cfs_quota_us`, `${base}/cpu.cfs_period_us`]]
    } else continue
    for (const [quotaFile, periodFile] of candidates) {
      let fields: string[]
      try {
        fields = readFileSync(quotaFile, 'ascii').trim().split(/\s+/)
        if (periodFile !== null) fields.push(readFileSync(periodFile, 'ascii').trim())
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

/** How often the usable CPUs are looked at again (taskset, cpusets and quotas change under a running process). */
const CPU_CHECK_MS = 1000
const CLOCK_TICKS_PER_MS = 100 / 1000 // USER_HZ: 100 on every Linux architecture Node runs on

/** The CPUs this process may run on (/proc/self/status, Cpus_allowed_list), or null when unreadable. */
function allowedCpus(): Set<number> | null {
  try {
    const list = /^Cpus_allowed_list:\s*(\S+)/m.exec(readFileSync('/proc/self/status', 'ascii'))?.[1]
    if (!list) return null
    const out = new Set<number>()
    for (const range of list.split(',')) {
      const [a, b] = range.split('-').map(Number)
      for (let c = a; c <= (b ?? a); c++) out.add(c)
    }
    return out
  } catch {
    return null
  }
}

/** Idle + iowait clock ticks of the given CPUs since boot (/proc/stat); null when unreadable. */
function idleTicks(cpus: Set<number>): number | null {
  let text: string
  try {
    text = readFileSync('/proc/stat', 'ascii')
  } catch {
    return null
  }
  let idle = 0
  for (const line of text.split('\n')) {
    if (!line.startsWith('cpu')) break
    if (line[3] === ' ') continue
    const f = line.split(' ')
    if (cpus.has(Number(f[0].slice(3)))) idle += Number(f[4]) + Number(f[5])
  }
  return idle
}

/** µs during which some runnable task waited for a CPU, since boot (PSI, /proc/pressure/cpu); null without PSI. */
function cpuPressure(): number | null {
  try {
    const total = /total=(\d+)/.exec(readFileSync('/proc/pressure/cpu', 'ascii'))?.[1]
    return total === undefined ? null : Number(total)
  } catch {
    return null
  }
}

/**
 * Whether polling would use a core nobody else needs: at least 2 usable CPUs and, over
 * the last second, at least half a core idle, counting this process's own polling as
 * idle, while tasks waited for a CPU less than a fifth of that second (PSI; without PSI,
 * polling is not counted as idle). The wait is what stops polling that sustains itself:
 * polling counted as idle is idle only while nobody else wanted that CPU. On a core
 * shared with the host, or beside a sampler that keeps the other core busy, polling
 * takes the very CPU the host needs (to send the next request, to run its prompts), so
 * no polling then.
 */
export class CpuRoom {
  private checkedAt = -Infinity
  private idle: number | null = null
  private pressure: number | null = null
  private cpusKey = ''
  /** ms spent polling since the last check */
  spun = 0
  free = false

  constructor(private readonly cpus: () => number = usableCpus) {}

  check(): boolean {
    const now = performance.now()
    const elapsed = now - this.checkedAt
    if (elapsed < CPU_CHECK_MS) return this.free
    const spun = this.spun
    this.spun = 0
    const cpus = this.cpus() >= 2 ? allowedCpus() : null
    const idle = cpus === null ? null : idleTicks(cpus)
    const pressure = idle === null ? null : cpuPressure()
    const cpusKey = cpus === null ? '' : [...cpus].join(',')
    if (idle === null) this.free = false
    else if (this.idle === null || cpusKey !== this.cpusKey) this.free = false // no earlier sample of these CPUs: the next check decides
    else {
      const idleCores = (idle - this.idle) / CLOCK_TICKS_PER_MS / elapsed
      if (pressure === null || this.pressure === null) this.free = idleCores >= 0.5
      else this.free = (pressure - this.pressure) / 1000 / elapsed < 0.2 && idleCores + spun / elapsed >= 0.5
    }
    this.checkedAt = now
    this.idle = idle
    this.pressure = pressure
    this.cpusKey = cpusKey
    return this.free
  }
}

/**
 * After traffic, keep the event loop polling (setImmediate turns) for a short
 * window, so the next decision is picked up at once instead of after a
 * process wake-up, which on small virtual machines costs more than deciding.
 *
 * Only for light, one-at-a-time traffic: when frames arrive in batches the
 * plugin is busy with many requests, the loop wakes for every batch anyway,
 * and polling would only take CPU from the host. Never with fewer than 2
 * usable CPUs: on a core shared with the host, polling takes the very CPU the
 * host needs to send the next request (and to run its prompts).
 */
class BusyPoll {
  private until = 0
  private running = false
  private since = 0
  private framesPerRead = 1

  constructor(
    private readonly windowMs: number,
    private readonly cpuIsFree: () => boolean,
    private readonly room: CpuRoom = new CpuRoom(),
  ) {}

  touch(frames: number): void {
    if (this.windowMs <= 0 || !this.cpuIsFree()) return
    this.framesPerRead = this.framesPerRead * 0.8 + frames * 0.2
    if (this.framesPerRead > 1.5) return
    const now = performance.now()
    if (this.running) this.account(now) // the check below counts this window's polling so far
    if (!this.room.check()) return
    this.until = now + this.windowMs
    if (!this.running) {
      this.running = true
      this.since = now
      setImmediate(this.turn)
    }
  }

  private account(now: number): void {
    this.room.spun += now - this.since
    this.since = now
  }

  private readonly turn = (): void => {
    const now = performance.now()
    if (now < this.until && this.cpuIsFree()) setImmediate(this.turn)
    else {
      this.running = false
      this.account(now)
    }
  }
}

function serveConnection(socket: Socket, handlers: DecisionHandlers, log: FastifyBaseLogger, busy: BusyPoll, agreedSockets: Set<Socket>): void {
  const decoder = new FrameDecoder()
  const link = new ConnectionLink(socket)
  let agreed = false
  // answers produced in one turn leave in one write
  let corked = false
  const uncork = (): void => {
    corked = false
    socket.uncork()
  }
  const answer = (id: unknown, result: Answer): void => {
    if (socket.destroyed) return
    if (!corked) {
      corked = true
      socket.cork()
      process.nextTick(uncork)
    }
    socket.write(answerFrame(id, result, log))
  }
  const fail = (id: unknown, err: unknown): void => {
    log.error({ err }, 'decision failed; answering 503')
    answer(id, FAILED)
  }
  socket.on('data', (chunk: Buffer) => {
    let frames
    try {
      frames = decoder.feed(chunk)
    } catch (err) {
      log.warn({ reason: err instanceof FrameError ? err.message : String(err) }, 'unreadable decision frame; closing connection')
      socket.destroy()
      return
    }
    for (const { message: msg, payload } of frames) {
      const id = msg.id
      const refusal = checkMessage(msg)
      if (refusal !== null) {
        log.error({ type: String(msg.type), reason: refusal }, 'malformed message from the plugin; answering 503 for it')
        if (msg.type !== 'event') answer(id, FAILED)
        continue
      }
      if (msg.type === 'hello') {
        agreed = msg.protocol === PROTOCOL_VERSION
        if (agreed) agreedSockets.add(socket)
        else agreedSockets.delete(socket)
      } else if (!agreed) {
        if (msg.type !== 'event') answer(id, FAILED)
        continue
      }
      if (msg.type === 'resolved') {
        link.settle(msg)
        continue
      }
      try {
        const result = dispatch(handlers, msg, payload, link)
        if (result === undefined) continue
        if (result instanceof Promise) result.then((r) => answer(id, r), (err) => fail(id, err))
        else answer(id, result)
      } catch (err) {
        if (msg.type === 'event') log.error({ err, event: msg.name }, 'host event could not be applied')
        else fail(id, err)
      }
    }
    if (frames.length > 0) busy.touch(frames.length)
  })
  socket.on('close', () => agreedSockets.delete(socket))
  socket.on('error', (err) => log.debug({ err }, 'decision connection error'))
}

export interface BusyPollOptions {
  windowMs: number
  /** polling stops while this is false (password hashes running: the CPU is spoken for) */
  cpuIsFree: () => boolean
}

export interface DecisionServer {
  server: Server
  /** Sends an unasked message to every plugin connection that agreed on the protocol. */
  push(message: PushMessage): void
  /** Settles once what was written to every agreed connection so far is in the kernel (at most 2 s). */
  flushed(): Promise<void>
}

export async function listenDecisionSocket(
  path: string,
  handlers: DecisionHandlers,
  log: FastifyBaseLogger,
  busyPoll: BusyPollOptions = { windowMs: 0, cpuIsFree: () => true },
): Promise<DecisionServer> {
  removeStaleSocket(path)
  const busy = new BusyPoll(busyPoll.windowMs, busyPoll.cpuIsFree)
  const agreedSockets = new Set<Socket>()
  const server = createServer((socket) => serveConnection(socket, handlers, log, busy, agreedSockets))
  const oldMask = process.umask(0o177)
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(path, () => {
        server.off('error', reject)
        resolve()
      })
    })
  } finally {
    process.umask(oldMask)
  }
  chmodSync(path, 0o600)
  return {
    server,
    push(message) {
      const frame = encodeFrame(message)
      for (const socket of agreedSockets) if (!socket.destroyed) socket.write(frame)
    },
    flushed() {
      const waiting = [...agreedSockets].filter((s) => !s.destroyed && s.writableLength > 0)
      if (waiting.length === 0) return Promise.resolve()
      const drained = waiting.map((s) => new Promise<void>((resolve) => {
        const done = (): void => {
          s.off('drain', done)
          s.off('close', done)
          resolve()
        }
        s.on('drain', done)
        s.on('close', done)
      }))
      return Promise.race([Promise.all(drained), new Promise<void>((resolve) => setTimeout(resolve, 2000).unref())]).then(() => {})
    },
  }
}
