/**
 * The decision socket's frames and the check of every message at the trust boundary.
 *
 * Frame: u32 BE total length N, u32 BE length J of the JSON part, J bytes of UTF-8
 * JSON, then N-4-J bytes of raw payload (bodies never travel as JSON strings, so
 * bytes and 64-bit integers arrive as sent). Nothing from the plugin is trusted
 * before `checkMessage` has accepted its shape: a malformed message is refused
 * for that request (503), never cast and used.
 */
import { MAX_FRAME_BYTES } from './protocol.js'

export interface Frame {
  message: Record<string, unknown>
  payload: Buffer
}

const EMPTY = Buffer.alloc(0)

export function encodeFrame(message: object, payload: Buffer = EMPTY): Buffer {
  const json = JSON.stringify(message)
  const jsonLength = Buffer.byteLength(json)
  const total = 4 + jsonLength + payload.length
  const frame = Buffer.allocUnsafe(4 + total)
  frame.writeUInt32BE(total, 0)
  frame.writeUInt32BE(jsonLength, 4)
  frame.write(json, 8)
  if (payload.length > 0) payload.copy(frame, 8 + jsonLength)
  return frame
}

export class FrameError extends Error {}

/**
 * Incremental decoder; throws FrameError on a frame that cannot be read (the connection is then
 * closed). Chunks are kept as they arrive and joined once a whole frame is there, so a frame of
 * megabytes arriving in many reads is copied once, not once per read.
 */
export class FrameDecoder {
  private chunks: Buffer[] = []
  private buffered = 0

  feed(chunk: Buffer): Frame[] {
    this.chunks.push(chunk)
    this.buffered += chunk.length
    const out: Frame[] = []
    while (this.buffered >= 8) {
      const head = this.chunks[0].length >= 8 ? this.chunks[0] : this.join()
      const total = head.readUInt32BE(0)
      const jsonLength = head.readUInt32BE(4)
      if (total > MAX_FRAME_BYTES || jsonLength > total - 4) throw new FrameError('frame too large or malformed')
      if (this.buffered < 4 + total) break
      const buffer = this.chunks.length === 1 ? this.chunks[0] : this.join()
      const json = buffer.subarray(8, 8 + jsonLength)
      const payload = buffer.subarray(8 + jsonLength, 4 + total)
      const rest = buffer.subarray(4 + total)
      this.chunks = rest.length > 0 ? [rest] : []
      this.buffered = rest.length
      let message: unknown
      try {
        message = JSON.parse(json.toString('utf8'))
      } catch {
        throw new FrameError('frame is not JSON')
      }
      if (typeof message !== 'object' || message === null || Array.isArray(message)) throw new FrameError('message is not an object')
      out.push({ message: message as Record<string, unknown>, payload })
    }
    return out
  }

  private join(): Buffer {
    const joined = Buffer.concat(this.chunks, this.buffered)
    this.chunks = [joined]
    return joined
  }
}

const isString = (v: unknown): v is string => typeof v === 'string'
const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v)
const isStringMap = (v: unknown): boolean => isRecord(v) && Object.values(v).every(isString)

/** Why a message of the plugin cannot be used, or null when its shape is right. */
export function checkMessage(msg: Record<string, unknown>): string | null {
  switch (msg.type) {
    case 'hello':
      return null // any hello is answered with our version; agreement is decided on its protocol
    case 'decide': {
      if (!isString(msg.method) || !isString(msg.path) || !isString(msg.query)) return 'decide: method, path and query must be strings'
      const route = msg.route
      if (route !== null && !(isRecord(route) && isString(route.pattern) && (route.kind === 'route' || route.kind === 'static'))) {
        return 'decide: route must be null or {pattern, kind}'
      }
      if (typeof msg.route_status !== 'number') return 'decide: route_status must be a number'
      if (!isStringMap(msg.match_info) || !isStringMap(msg.headers)) return 'decide: match_info and headers must map strings to strings'
      if (!isString(msg.peer) || !isString(msg.scheme)) return 'decide: peer and scheme must be strings'
      return null
    }
    case 'body':
      return null
    case 'form':
      return isStringMap(msg.fields) && isStringMap(msg.files) ? null : 'form: fields and files must map strings to strings'
    case 'filter':
      return isString(msg.name) && typeof msg.status === 'number' && isString(msg.content_type) ? null : 'filter: name, status and content_type are required'
    case 'resolved':
      return typeof msg.rid === 'number' ? null : 'resolved: rid must be a number'
    case 'event':
      return isString(msg.name) && typeof msg.t === 'number' && isRecord(msg.data) ? null : 'event: name, t and data are required'
    default:
      return `unknown message type ${String(msg.type)}`
  }
}
