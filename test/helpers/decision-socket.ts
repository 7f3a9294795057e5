/**
 * A client of the sidecar's decision socket, speaking its framing (u32 BE total
 * length, u32 BE JSON length, UTF-8 JSON, raw payload); answers are matched by
 * `id`, unasked messages (no id) are collected in `pushed`. For tests and the bench.
 */
import { connect, type Socket } from 'node:net'
import { encodeFrame, FrameDecoder } from '../../sidecar/src/kernel/frames.js'

export type Frame = Record<string, unknown>

export class FrameClient {
  private readonly decoder = new FrameDecoder()
  private readonly waiting = new Map<unknown, (f: { message: Frame; payload: Buffer }) => void>()
  private nextId = 1
  readonly pushed: Frame[] = []

  private constructor(private readonly socket: Socket) {
    socket.on('data', (chunk: Buffer) => {
      for (const frame of this.decoder.feed(chunk)) {
        if (frame.message.id === undefined) {
          this.pushed.push(frame.message)
          continue
        }
        const resolve = this.waiting.get(frame.message.id)
        this.waiting.delete(frame.message.id)
        resolve?.(frame)
      }
    })
  }

  static async open(path: string): Promise<FrameClient> {
    const socket = connect(path)
    await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject))
    return new FrameClient(socket)
  }

  /** Sends `msg` with a fresh id; resolves with the answer to it. */
  async send(msg: Frame, payload?: Buffer): Promise<Frame> {
    return (await this.exchange(msg, payload)).message
  }

  /** Sends `msg` (and a payload) with a fresh id; resolves with the answer and its payload. */
  exchange(msg: Frame, payload: Buffer = Buffer.alloc(0)): Promise<{ message: Frame; payload: Buffer }> {
    const id = this.nextId++
    this.socket.write(encodeFrame({ ...msg, id }, payload))
    return new Promise((resolve) => this.waiting.set(id, resolve))
  }

  /** A message that is never answered (a host event). */
  notify(msg: Frame): void {
    this.socket.write(encodeFrame(msg))
  }

  /** Raw bytes, for malformed-frame rows. */
  writeRaw(bytes: Buffer): void {
    this.socket.write(bytes)
  }

  close(): void {
    this.socket.destroy()
  }
}
