/**
 * A client of the sidecar's decision socket, speaking its framing (u32 BE
 * length + UTF-8 JSON); answers are matched by `id`. For tests and the bench.
 */
import { connect, type Socket } from 'node:net'

export type Frame = Record<string, unknown>

export class FrameClient {
  private buffer = Buffer.alloc(0)
  private readonly waiting = new Map<unknown, (f: Frame) => void>()
  private nextId = 1

  private constructor(private readonly socket: Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.buffer = Buffer.concat([this.buffer, chunk])
      while (this.buffer.length >= 4 && this.buffer.length >= 4 + this.buffer.readUInt32BE(0)) {
        const n = this.buffer.readUInt32BE(0)
        const frame = JSON.parse(this.buffer.subarray(4, 4 + n).toString()) as Frame
        this.buffer = this.buffer.subarray(4 + n)
        const resolve = this.waiting.get(frame.id)
        this.waiting.delete(frame.id)
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
  send(msg: Frame): Promise<Frame> {
    const id = this.nextId++
    const json = Buffer.from(JSON.stringify({ ...msg, id }))
    const head = Buffer.alloc(4)
    head.writeUInt32BE(json.length)
    this.socket.write(Buffer.concat([head, json]))
    return new Promise((resolve) => this.waiting.set(id, resolve))
  }

  close(): void {
    this.socket.destroy()
  }
}
