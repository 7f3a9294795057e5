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
import { chmodSync, lstatSync, unlinkSync } from 'node:fs'
import { createServer, type Server, type Socket } from 'node:net'
import type { FastifyBaseLogger } from 'fastify'
import { errorBody } from '../errors.js'
import {
  MAX_FRAME_BYTES,
  PROTOCOL_VERSION,
  type BodyMessage,
  type Decision,
  type FilterAnswer,
  type FilterMessage,
  type HelloMessage,
  type RequestDescription,
} from './protocol.js'

export interface DecisionHandlers {
  hello(msg: HelloMessage): object
  decide(msg: RequestDescription): Decision | Promise<Decision>
  body(msg: BodyMessage): Decision | Promise<Decision>
  filter(msg: FilterMessage): FilterAnswer | Promise<FilterAnswer>
}

type Answer = object & { id?: unknown }

const FAILED = {
  action: 'respond',
  status: 503,
  headers: [['Content-Type', 'application/json; charset=utf-8'], ['Retry-After', '1']],
  body_text: JSON.stringify(errorBody('AUTHSVC_UNAVAILABLE')),
} as const

function writeFrame(socket: Socket, answer: Answer): void {
  if (socket.destroyed) return
  const json = JSON.stringify(answer)
  const length = Buffer.byteLength(json)
  const frame = Buffer.allocUnsafe(4 + length)
  frame.writeUInt32BE(length, 0)
  frame.write(json, 4)
  socket.write(frame)
}

export function removeStaleSocket(path: string): void {
  try {
    if (lstatSync(path).isSocket()) unlinkSync(path)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
  }
}

export function dispatch(handlers: DecisionHandlers, msg: Record<string, unknown>): Answer | Promise<Answer> {
  switch (msg.type) {
    case 'decide':
      return handlers.decide(msg as unknown as RequestDescription)
    case 'body':
      return handlers.body(msg as unknown as BodyMessage)
    case 'filter':
      return handlers.filter(msg as unknown as FilterMessage)
    case 'hello':
      return handlers.hello(msg as unknown as HelloMessage)
    default:
      throw new Error(`unknown message type ${String(msg.type)}`)
  }
}

/**
 * After traffic, keep the event loop polling (setImmediate turns) for a short
 * window, so the next decision is picked up at once instead of after a
 * process wake-up, which on small virtual machines costs more than deciding.
 *
 * Only for light, one-at-a-time traffic: when frames arrive in batches the
 * plugin is busy with many requests, the loop wakes for every batch anyway,
 * and polling would only take CPU from the host.
 */
class BusyPoll {
  private until = 0
  private running = false
  private framesPerRead = 1

  constructor(
    private readonly windowMs: number,
    private readonly cpuIsFree: () => boolean,
  ) {}

  touch(frames: number): void {
    if (this.windowMs <= 0 || !this.cpuIsFree()) return
    this.framesPerRead = this.framesPerRead * 0.8 + frames * 0.2
    if (this.framesPerRead > 1.5) return
    this.until = performance.now() + this.windowMs
    if (!this.running) {
      this.running = true
      setImmediate(this.turn)
    }
  }

  private readonly turn = (): void => {
    if (performance.now() < this.until && this.cpuIsFree()) setImmediate(this.turn)
    else this.running = false
  }
}

function serveConnection(socket: Socket, handlers: DecisionHandlers, log: FastifyBaseLogger, busy: BusyPoll): void {
  let buffer: Buffer = Buffer.alloc(0)
  let agreed = false
  // answers produced in one turn leave in one write
  let corked = false
  const uncork = (): void => {
    corked = false
    socket.uncork()
  }
  const answer = (id: unknown, result: Answer): void => {
    if (!corked) {
      corked = true
      socket.cork()
      process.nextTick(uncork)
    }
    writeFrame(socket, { ...result, id })
  }
  const fail = (id: unknown, err: unknown): void => {
    log.error({ err }, 'decision failed; answering 503')
    answer(id, FAILED)
  }
  socket.on('data', (chunk: Buffer) => {
    let frames = 0
    buffer = buffer.length === 0 ? chunk : Buffer.concat([buffer, chunk])
    while (buffer.length >= 4) {
      const length = buffer.readUInt32BE(0)
      if (length > MAX_FRAME_BYTES) {
        log.warn('decision frame too large; closing connection')
        socket.destroy()
        return
      }
      if (buffer.length < 4 + length) break
      const payload = buffer.subarray(4, 4 + length)
      buffer = buffer.subarray(4 + length)
      let msg: Record<string, unknown>
      try {
        msg = JSON.parse(payload.toString('utf8')) as Record<string, unknown>
        if (typeof msg !== 'object' || msg === null) throw new Error('not an object')
      } catch {
        log.warn('malformed decision frame; closing connection')
        socket.destroy()
        return
      }
      const id = msg.id
      frames++
      if (msg.type === 'hello') agreed = msg.protocol === PROTOCOL_VERSION
      else if (!agreed) {
        answer(id, FAILED)
        continue
      }
      try {
        const result = dispatch(handlers, msg)
        if (result instanceof Promise) result.then((r) => answer(id, r), (err) => fail(id, err))
        else answer(id, result)
      } catch (err) {
        fail(id, err)
      }
    }
    if (frames > 0) busy.touch(frames)
  })
  socket.on('error', (err) => log.debug({ err }, 'decision connection error'))
}

export interface BusyPollOptions {
  windowMs: number
  /** polling stops while this is false (password hashes running: the CPU is spoken for) */
  cpuIsFree: () => boolean
}

export async function listenDecisionSocket(
  path: string,
  handlers: DecisionHandlers,
  log: FastifyBaseLogger,
  busyPoll: BusyPollOptions = { windowMs: 0, cpuIsFree: () => true },
): Promise<Server> {
  removeStaleSocket(path)
  const busy = new BusyPoll(busyPoll.windowMs, busyPoll.cpuIsFree)
  const server = createServer((socket) => serveConnection(socket, handlers, log, busy))
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
  return server
}
