/**
 * A local stand-in for an ntfy server (Debian has none), speaking its publishing API as ntfy does:
 *
 * - JSON publishing: `POST`/`PUT /` with `{topic, message?, title?, tags?, priority?}`;
 * - plain publishing: `POST`/`PUT /<topic>` with the message as the body and the `Title`, `Tags`,
 *   `Priority` headers (and their `X-` and short spellings: `t`, `ta`, `p`/`prio`);
 * - 200 with the message as ntfy answers it: `{id, time, expires, event:"message", topic, title?,
 *   message, tags?, priority?}` (an empty message is "triggered", as ntfy makes it);
 * - errors in ntfy's shape `{"code":40009,"http":400,"error":"invalid request: topic invalid","link":""}`
 *   with ntfy's codes: 400 invalid JSON (40017), invalid topic (40009), invalid priority (40007);
 *   401 unknown token (40101) and 403 no token for a protected topic (40301) when started with a
 *   `token`; 413 a JSON body over the limit (41303); 429 (42901); 500 (50001).
 *
 * Modes for the tests: answer slowly (the request is taken only once the delay is over and only if
 * the client still waits, as a server that had not got to it), fail with 500, refuse with 429, or be
 * gone (the port closed, open connections cut) and come back on the same port. It records every
 * request and every accepted message, and a test awaits "the n-th message arrived" as an event.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import { EventEmitter, once } from 'node:events'
import { randomBytes } from 'node:crypto'

export type StandinMode =
  | { kind: 'ok' }
  | { kind: 'slow'; ms: number }
  | { kind: 'fail' }
  | { kind: 'too_many' }
  /** any other ntfy error */
  | { kind: 'error'; http: number; code: number; error: string; location?: string }

export interface NtfyPublished {
  id: string
  time: number
  expires: number
  event: 'message'
  topic: string
  title?: string
  message: string
  tags?: string[]
  priority?: number
}

export interface StandinRequest {
  method: string
  path: string
  authorization: string | undefined
  contentType: string | undefined
  body: string
  /** what the stand-in did with it */
  answer: number | 'aborted'
}

export interface StandinMessage extends NtfyPublished {
  /** how it was published */
  via: 'json' | 'path'
  authorization: string | undefined
}

export interface NtfyStandin {
  url: string
  port: number
  requests: StandinRequest[]
  messages: StandinMessage[]
  /** requests whose body was read, answered or not yet */
  arrived: number
  /** the mode of every request from now on */
  setMode(mode: StandinMode): void
  /** modes for the next requests, one each, before the current mode applies again */
  answerNext(...modes: StandinMode[]): void
  /** resolves when at least `n` messages were accepted (rejects after `timeoutMs`, a safety net) */
  waitForMessages(n: number, timeoutMs?: number): Promise<StandinMessage[]>
  waitForRequests(n: number, timeoutMs?: number): Promise<StandinRequest[]>
  /** resolves when at least `n` requests arrived (a slow answer still pending counts) */
  waitForArrivals(n: number, timeoutMs?: number): Promise<void>
  /** closes the port and cuts every open connection: clients get "connection refused" */
  gone(): Promise<void>
  /** listens again on the same port */
  back(): Promise<void>
  close(): Promise<void>
}

const TOPIC = /^[-_A-Za-z0-9]{1,64}$/
const RESERVED = new Set(['docs', 'static', 'file', 'app', 'account', 'settings', 'signup', 'login', 'v1'])
const JSON_LIMIT = 32 * 1024
const LINK = 'https://ntfy.sh/docs/publish/'

const ntfyError = (http: number, code: number, error: string, link = '') => ({ code, http, error, link })
const ERRORS = {
  jsonInvalid: ntfyError(400, 40017, 'invalid request: request body must be message JSON', `${LINK}#publish-as-json`),
  topicInvalid: ntfyError(400, 40009, 'invalid request: topic invalid'),
  priorityInvalid: ntfyError(400, 40007, 'invalid priority parameter', `${LINK}#message-priority`),
  unauthorized: ntfyError(401, 40101, 'unauthorized', `${LINK}#authentication`),
  forbidden: ntfyError(403, 40301, 'forbidden', `${LINK}#authentication`),
  notFound: ntfyError(404, 40401, 'page not found'),
  tooLarge: ntfyError(413, 41303, 'JSON body too large'),
  tooMany: ntfyError(429, 42901, 'limit reached: too many requests', `${LINK}#limitations`),
  internal: ntfyError(500, 50001, 'internal server error'),
}

const PRIORITY_WORDS: Record<string, number> = { min: 1, low: 2, default: 3, high: 4, max: 5, urgent: 5 }

export async function startNtfyStandin(options: { token?: string; port?: number } = {}): Promise<NtfyStandin> {
  const events = new EventEmitter()
  const requests: StandinRequest[] = []
  const messages: StandinMessage[] = []
  const arrivals: StandinRequest[] = []
  let mode: StandinMode = { kind: 'ok' }
  const next: StandinMode[] = []
  const sockets = new Set<Socket>()
  let server: Server
  let port = options.port ?? 0

  const send = (res: ServerResponse, status: number, body: object, location?: string) => {
    if (res.destroyed) return
    res.writeHead(status, { 'Content-Type': 'application/json', 'Access-Control-Allow-Origin': '*', ...(location ? { Location: location } : {}) })
    res.end(`${JSON.stringify(body)}\n`)
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = []
    let size = 0
    for await (const chunk of req) {
      size += (chunk as Buffer).length
      if (size <= JSON_LIMIT + 1) chunks.push(chunk as Buffer)
    }
    const body = Buffer.concat(chunks).toString('utf8')
    const record: StandinRequest = {
      method: req.method ?? '', path: (req.url ?? '/').split('?')[0], authorization: req.headers.authorization,
      contentType: req.headers['content-type'], body, answer: 'aborted',
    }
    arrivals.push(record)
    events.emit('arrival')
    const current = next.shift() ?? mode
    if (current.kind === 'slow') {
      // taken only once the delay is over, and only if the client still waits
      let timer: NodeJS.Timeout | undefined
      await new Promise<void>((resolve) => {
        timer = setTimeout(resolve, current.ms)
        res.once('close', () => resolve())
      })
      clearTimeout(timer)
      if (res.destroyed || res.writableEnded || req.socket.destroyed) {
        requests.push(record)
        events.emit('request')
        return
      }
    }
    const answer = (status: number, out: object, location?: string) => {
      record.answer = status
      requests.push(record)
      send(res, status, out, location)
      events.emit('request')
    }
    if (current.kind === 'fail') return answer(500, ERRORS.internal)
    if (current.kind === 'too_many') return answer(429, ERRORS.tooMany)
    if (current.kind === 'error') return answer(current.http, ntfyError(current.http, current.code, current.error), current.location)
    if (req.method !== 'POST' && req.method !== 'PUT') return answer(404, ERRORS.notFound)
    if (size > JSON_LIMIT) return answer(413, ERRORS.tooLarge)

    let published: Omit<NtfyPublished, 'id' | 'time' | 'expires' | 'event'>
    let via: StandinMessage['via']
    if (record.path === '/') {
      via = 'json'
      let parsed: unknown
      try {
        parsed = JSON.parse(body)
      } catch {
        return answer(400, ERRORS.jsonInvalid)
      }
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return answer(400, ERRORS.jsonInvalid)
      const m = parsed as Record<string, unknown>
      if (typeof m.topic !== 'string' || !TOPIC.test(m.topic) || RESERVED.has(m.topic)) return answer(400, ERRORS.topicInvalid)
      if (m.priority !== undefined && !(Number.isInteger(m.priority) && (m.priority as number) >= 0 && (m.priority as number) <= 5)) return answer(400, ERRORS.priorityInvalid)
      if (m.tags !== undefined && !(Array.isArray(m.tags) && m.tags.every((t) => typeof t === 'string'))) return answer(400, ERRORS.jsonInvalid)
      if ((m.title !== undefined && typeof m.title !== 'string') || (m.message !== undefined && typeof m.message !== 'string')) return answer(400, ERRORS.jsonInvalid)
      published = {
        topic: m.topic,
        message: (m.message as string | undefined) || 'triggered',
        ...(m.title ? { title: m.title as string } : {}),
        ...((m.tags as string[] | undefined)?.length ? { tags: m.tags as string[] } : {}),
        ...(m.priority ? { priority: m.priority as number } : {}),
      }
    } else {
      via = 'path'
      const topic = record.path.slice(1)
      if (!TOPIC.test(topic) || RESERVED.has(topic)) return answer(404, ERRORS.notFound)
      const header = (...names: string[]) => names.map((n) => req.headers[n]).find((v): v is string => typeof v === 'string' && v !== '')
      const title = header('x-title', 'title', 't')
      const tags = header('x-tags', 'tags', 'tag', 'ta')?.split(',').map((t) => t.trim()).filter(Boolean)
      const rawPriority = header('x-priority', 'priority', 'prio', 'p')
      let priority: number | undefined
      if (rawPriority !== undefined) {
        priority = /^[1-5]$/.test(rawPriority) ? Number(rawPriority) : PRIORITY_WORDS[rawPriority.toLowerCase()]
        if (priority === undefined) return answer(400, ERRORS.priorityInvalid)
      }
      published = { topic, message: body.trim() || 'triggered', ...(title ? { title } : {}), ...(tags?.length ? { tags } : {}), ...(priority ? { priority } : {}) }
    }
    // access control as a server with this topic denied to anonymous users: no token 403, a wrong one 401
    if (options.token !== undefined) {
      const auth = req.headers.authorization
      if (auth === undefined) return answer(403, ERRORS.forbidden)
      if (auth !== `Bearer ${options.token}`) return answer(401, ERRORS.unauthorized)
    }
    const time = Math.floor(Date.now() / 1000)
    const message: NtfyPublished = { id: randomBytes(9).toString('base64url').slice(0, 12), time, expires: time + 43200, event: 'message', ...published }
    record.answer = 200
    requests.push(record)
    messages.push({ ...message, via, authorization: req.headers.authorization })
    send(res, 200, message)
    events.emit('request')
    events.emit('message')
  }

  async function listen(): Promise<void> {
    server = createServer((req, res) => {
      handle(req, res).catch((err: unknown) => {
        if (!res.headersSent && !res.destroyed) send(res, 500, { ...ERRORS.internal, error: `stand-in: ${String(err)}` })
      })
    })
    server.on('connection', (socket) => {
      sockets.add(socket)
      socket.once('close', () => sockets.delete(socket))
    })
    server.listen(port, '127.0.0.1')
    await once(server, 'listening')
    port = (server.address() as { port: number }).port
  }

  const waitFor = <T>(list: T[], n: number, event: string, timeoutMs: number): Promise<T[]> =>
    new Promise((resolve, reject) => {
      if (list.length >= n) return resolve(list.slice())
      const timer = setTimeout(() => {
        events.off(event, check)
        reject(new Error(`the ntfy stand-in saw ${list.length} ${event}s, not ${n}, within ${timeoutMs} ms`))
      }, timeoutMs)
      function check(): void {
        if (list.length < n) return
        clearTimeout(timer)
        events.off(event, check)
        resolve(list.slice())
      }
      events.on(event, check)
    })

  const shut = async (): Promise<void> => {
    const closed = new Promise<void>((resolve) => server.close(() => resolve()))
    for (const socket of sockets) socket.destroy()
    await closed
  }

  await listen()
  return {
    get url() {
      return `http://127.0.0.1:${port}`
    },
    get port() {
      return port
    },
    requests,
    messages,
    get arrived() {
      return arrivals.length
    },
    setMode(m) {
      mode = m
    },
    answerNext(...modes) {
      next.push(...modes)
    },
    waitForMessages: (n, timeoutMs = 15_000) => waitFor(messages, n, 'message', timeoutMs),
    waitForRequests: (n, timeoutMs = 15_000) => waitFor(requests, n, 'request', timeoutMs),
    waitForArrivals: async (n, timeoutMs = 15_000) => {
      await waitFor(arrivals, n, 'arrival', timeoutMs)
    },
    gone: shut,
    back: listen,
    close: async () => {
      if (server.listening) await shut()
    },
  }
}
