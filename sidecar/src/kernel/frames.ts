/**
 * The decision socket's frames and the check of every message at the trust boundary.
 *
 * Frame: u32 BE total length N, u32 BE length J of the JSON part, J bytes of UTF-8
 * JSON, then N-4-J bytes of raw payload (bodies never travel as JSON strings, so
 * bytes and 64-bit integers arrive as sent). Nothing from the plugin is trusted
 * before `parseMessage` has accepted its shape: a malformed message is refused
 * for that request (503), never cast and used.
 */
import {
  MAX_FRAME_BYTES,
  type BodyMessage,
  type EventMessage,
  type FilterMessage,
  type FormMessage,
  type HelloMessage,
  type HostFacts,
  type MatchedRoute,
  type PreviewMessage,
  type RequestDescription,
  type ResolvedMessage,
} from './protocol.js'

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
const isStringMap = (v: unknown): v is Record<string, string> => isRecord(v) && Object.values(v).every(isString)
const isStringListMap = (v: unknown): v is Record<string, string[]> =>
  isRecord(v) && Object.values(v).every((list) => Array.isArray(list) && list.every(isString))

/** What the plugin may send: each message as its type says, checked (frames.ts `parseMessage`). */
export type Incoming = HelloMessage | RequestDescription | BodyMessage | FormMessage | FilterMessage | EventMessage | ResolvedMessage | PreviewMessage

/**
 * The host facts of a hello: the fields this side types are kept only when of their type (a wrong
 * one is left out, as if not sent); the others go on as sent, to what reads and checks them
 * (models/behaviours.ts `setFacts`: model paths, model inputs, legacy folders).
 */
export function hostFactsOf(raw: Record<string, unknown>): HostFacts {
  const facts: HostFacts & Record<string, unknown> = {}
  for (const [key, value] of Object.entries(raw)) {
    switch (key) {
      case 'output_dir':
      case 'input_dir':
      case 'temp_dir':
      case 'user_dir':
      case 'comfyui_version':
        if (isString(value)) facts[key] = value
        break
      case 'model_folders':
      case 'writer_inputs':
        if (isStringListMap(value)) facts[key] = value
        break
      default:
        facts[key] = value
    }
  }
  return facts
}

function helloOf(msg: Record<string, unknown>, id: number): HelloMessage {
  const running = Array.isArray(msg.running)
    ? msg.running.flatMap((r: unknown) => (isRecord(r) && isString(r.prompt_id) && typeof r.t === 'number' ? [{ prompt_id: r.prompt_id, t: r.t }] : []))
    : undefined
  return {
    type: 'hello',
    id,
    protocol: msg.protocol,
    plugin_version: msg.plugin_version,
    ...(isRecord(msg.host) ? { host: hostFactsOf(msg.host) } : {}),
    ...(running !== undefined ? { running } : {}),
    ...(Array.isArray(msg.sockets) ? { sockets: msg.sockets } : {}),
    ...(msg.prompts !== undefined ? { prompts: msg.prompts } : {}),
  }
}

function describedRoute(route: unknown): MatchedRoute | null | undefined {
  if (route === null) return null
  if (!isRecord(route) || !isString(route.pattern)) return undefined
  return route.kind === 'route' || route.kind === 'static' ? { pattern: route.pattern, kind: route.kind } : undefined
}

/**
 * The message of the plugin as its type, or why it cannot be used. Nothing of a message is used
 * before this accepted it, and what it gives is built from the checked fields, never cast: the
 * step's `ctx` goes on as sent (the behaviours take only their own step ids, kernel/steps.ts).
 */
export function parseMessage(msg: Record<string, unknown>): { message: Incoming } | { refusal: string } {
  const type = msg.type
  if (type === 'event') {
    return isString(msg.name) && typeof msg.t === 'number' && isRecord(msg.data)
      ? { message: { type, name: msg.name, t: msg.t, data: msg.data } }
      : { refusal: 'event: name, t and data are required' }
  }
  if (type === 'resolved') {
    // the rest is checked where the answer is awaited (host-link.ts)
    if (typeof msg.rid !== 'number') return { refusal: 'resolved: rid must be a number' }
    const message: ResolvedMessage = { type, rid: msg.rid }
    if ('results' in msg) message.results = msg.results
    if ('roots' in msg) message.roots = msg.roots
    if ('error' in msg) message.error = msg.error
    return { message }
  }
  const id = msg.id
  if (typeof id !== 'number') return { refusal: `${String(type)}: id must be a number` }
  switch (type) {
    case 'hello':
      return { message: helloOf(msg, id) } // any hello is answered with our version; agreement is decided on its protocol
    case 'decide': {
      const { method, path, query, route_status, match_info, headers, peer, scheme } = msg
      if (!isString(method) || !isString(path) || !isString(query)) return { refusal: 'decide: method, path and query must be strings' }
      const route = describedRoute(msg.route)
      if (route === undefined) return { refusal: 'decide: route must be null or {pattern, kind}' }
      if (typeof route_status !== 'number') return { refusal: 'decide: route_status must be a number' }
      if (!isStringMap(match_info) || !isStringMap(headers)) return { refusal: 'decide: match_info and headers must map strings to strings' }
      if (!isString(peer) || !isString(scheme)) return { refusal: 'decide: peer and scheme must be strings' }
      return { message: { type, id, method, path, query, route, route_status, match_info, headers, peer, scheme } }
    }
    case 'body':
      return { message: { type, id, ctx: msg.ctx } }
    case 'preview':
      return { message: { type, id } }
    case 'form':
      return isStringMap(msg.fields) && isStringMap(msg.files)
        ? { message: { type, id, ctx: msg.ctx, fields: msg.fields, files: msg.files } }
        : { refusal: 'form: fields and files must map strings to strings' }
    case 'filter': {
      const { name, status, content_type: contentType } = msg
      if (!isString(name) || typeof status !== 'number' || !isString(contentType)) return { refusal: 'filter: name, status and content_type are required' }
      return { message: { type, id, name, ctx: msg.ctx, status, content_type: contentType, ...(msg.too_large === true ? { too_large: true } : {}) } }
    }
    default:
      return { refusal: `unknown message type ${String(type)}` }
  }
}
