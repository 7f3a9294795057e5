/**
 * The decision socket: frames of protocol v3 (u32 BE total length, u32 BE length of the JSON
 * part, the UTF-8 JSON, then a raw payload: frames.ts, shared/protocol.json), many requests in
 * flight per connection, answers matched by `id`, pushed messages (`forget`, `close_ws`,
 * `queue_counts`) between them, and the plugin's `resolved` answers to the host link's questions.
 *
 * Guarantees: a malformed frame closes that connection (the plugin then fails
 * closed and reconnects); an exception while deciding answers a 503 for that
 * request, never a pass; a connection whose hello did not name this protocol
 * version (or that sent none) gets a 503 for every request, so a plugin of
 * another version is refused from this side too; the socket file is 0600.
 */
import { chmodSync, lstatSync, unlinkSync } from 'node:fs'
import { createServer, type Server, type Socket } from 'node:net'
import type { FastifyBaseLogger } from 'fastify'
import { errorBody } from './errors.js'
import { CpuRoom } from './cpu-room.js'
import { encodeFrame, FrameDecoder, FrameError, parseMessage, type Incoming } from './frames.js'
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
  type PreviewAnswer,
  type PreviewMessage,
  type RequestDescription,
  type ResolvedMessage,
  type WithPayload,
} from './protocol.js'

export interface DecisionHandlers {
  hello(msg: HelloMessage): object
  decide(msg: RequestDescription): Decision | Promise<Decision>
  body(msg: BodyMessage, payload: Buffer, host?: HostLink): Decision | WithPayload<Decision> | Promise<Decision | WithPayload<Decision>>
  form(msg: FormMessage, host?: HostLink): Decision | Promise<Decision>
  filter(msg: FilterMessage, payload: Buffer, host?: HostLink): FilterAnswer | WithPayload<FilterAnswer> | Promise<FilterAnswer | WithPayload<FilterAnswer>>
  event(msg: EventMessage): void
  /** a preview frame for a socket that asked for checks: whether it may go */
  preview(msg: PreviewMessage, payload: Buffer): PreviewAnswer | Promise<PreviewAnswer>
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

/** Hands a checked message to its handler; `resolved` answers a question of ours and is settled by the caller. */
export function dispatch(handlers: DecisionHandlers, msg: Exclude<Incoming, ResolvedMessage>, payload: Buffer, host: HostLink): Answer | Promise<Answer> | undefined {
  switch (msg.type) {
    case 'decide':
      // the plugin that asked, to resolve names on its host (not part of the message on the wire)
      Object.defineProperty(msg, 'host', { value: host, enumerable: false })
      return handlers.decide(msg)
    case 'body':
      return handlers.body(msg, payload, host)
    case 'form':
      return handlers.form(msg, host)
    case 'filter':
      return handlers.filter(msg, payload, host)
    case 'hello':
      return handlers.hello(msg)
    case 'event':
      handlers.event(msg)
      return undefined
    case 'preview':
      return handlers.preview(msg, payload)
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
    for (const { message: raw, payload } of frames) {
      const id = raw.id
      const parsed = parseMessage(raw)
      if ('refusal' in parsed) {
        log.error({ type: String(raw.type), reason: parsed.refusal }, 'malformed message from the plugin; answering 503 for it')
        if (raw.type !== 'event') answer(id, FAILED)
        continue
      }
      const msg = parsed.message
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
