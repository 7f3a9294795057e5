/**
 * Small HTTP/WebSocket helpers for end-to-end tests: register, login, tokens, ws messages and
 * how a prompt ended on its socket. Each takes any host with a `url` (a stand-in `Stack` or a
 * `RealHost`).
 */
import assert from 'node:assert/strict'
import WebSocket from 'ws'

/** A gated host as these helpers see it: only its URL is read. */
export interface HostUrl {
  url: string
}

export const PASSWORD = 'correct-horse-battery'

/** The Authorization header of a bearer credential (session JWT, API token). */
export const bearer = (token: string) => ({ Authorization: `Bearer ${token}` })

export async function json(res: Response): Promise<any> {
  const text = await res.text()
  try {
    return JSON.parse(text)
  } catch {
    throw new Error(`not JSON (${res.status}): ${text.slice(0, 300)}`)
  }
}

export async function register(stack: HostUrl, username: string, opts: { bearer?: string; role?: string } = {}): Promise<Response> {
  return fetch(`${stack.url}/register`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...(opts.bearer ? { Authorization: `Bearer ${opts.bearer}` } : {}) },
    body: JSON.stringify({ username, password: PASSWORD, ...(opts.role ? { role: opts.role } : {}) }),
  })
}

export async function login(stack: HostUrl, username: string, password = PASSWORD): Promise<{ jwt: string; cookie: string }> {
  const res = await fetch(`${stack.url}/login`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
    body: JSON.stringify({ username, password }),
  })
  if (res.status !== 200) throw new Error(`login ${username}: ${res.status} ${await res.text()}`)
  const body = await json(res)
  const setCookie = res.headers.get('set-cookie') ?? ''
  return { jwt: body.jwt_token, cookie: setCookie.split(';')[0] }
}

export async function apiToken(stack: HostUrl, username: string, password = PASSWORD): Promise<string> {
  const res = await fetch(`${stack.url}/authsvc/generate_token`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ username, password, label: 'test' }),
  })
  if (res.status !== 200) throw new Error(`generate_token: ${res.status} ${await res.text()}`)
  return (await json(res)).token
}

/**
 * Registers the first user, `root` (so the admin), then each of `users` as root; the session
 * JWT of each by name, root's included.
 */
export async function registerUsers(stack: HostUrl, ...users: string[]): Promise<Record<string, string>> {
  assert.equal((await register(stack, 'root')).status, 201)
  const jwt: Record<string, string> = { root: (await login(stack, 'root')).jwt }
  for (const name of users) assert.equal((await register(stack, name, { bearer: jwt.root })).status, 201)
  for (const name of users) jwt[name] = (await login(stack, name)).jwt
  return jwt
}

/** The stand-in's smallest graph: EmptyImage → SaveImage. */
export function tinyGraph(prefix = 'e2e'): Record<string, unknown> {
  return {
    '1': { class_type: 'EmptyImage', inputs: { width: 8, height: 8, batch_size: 1, color: 0 } },
    '2': { class_type: 'SaveImage', inputs: { images: ['1', 0], filename_prefix: prefix } },
  }
}

export interface WsMessage {
  type: string
  data: any
}

export class WsClient {
  readonly messages: WsMessage[] = []
  /** binary frames (previews, progress text), as received */
  readonly binary: Buffer[] = []
  private waiters: Array<() => void> = []

  private constructor(readonly ws: WebSocket) {
    ws.on('message', (data, isBinary) => {
      if (isBinary) {
        this.binary.push(Buffer.isBuffer(data) ? data : Buffer.from(data as ArrayBuffer))
        for (const w of this.waiters.splice(0)) w()
        return
      }
      this.messages.push(JSON.parse(data.toString()))
      for (const w of this.waiters.splice(0)) w()
    })
  }

  static open(url: string, headers: Record<string, string> = {}): Promise<WsClient> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, { headers })
      ws.on('open', () => resolve(new WsClient(ws)))
      ws.on('unexpected-response', (_req, res) => reject(new Error(`ws refused: ${res.statusCode}`)))
      ws.on('error', reject)
    })
  }

  async waitFor(predicate: (m: WsMessage) => boolean, timeoutMs = 10_000): Promise<WsMessage> {
    const until = Date.now() + timeoutMs
    for (;;) {
      const found = this.messages.find(predicate)
      if (found) return found
      if (Date.now() > until) throw new Error(`no matching ws message; got ${JSON.stringify(this.messages.map((m) => m.type))}`)
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve)
        setTimeout(resolve, 100)
      })
    }
  }

  close(): void {
    this.ws.close()
  }
}

/** ws:// URL of the host's socket for `clientId`. */
export const wsUrl = (stack: HostUrl, clientId: string) => `${stack.url.replace('http', 'ws')}/ws?clientId=${clientId}`

const ENDINGS = ['execution_success', 'execution_error', 'execution_interrupted']

/** How a prompt ended on the socket of its client_id: execution_success / _error / _interrupted. */
export async function promptEnding(ws: WsClient, promptId: string, timeoutMs: number): Promise<string> {
  const end = await ws.waitFor((m) => ENDINGS.includes(m.type) && m.data.prompt_id === promptId, timeoutMs)
  return end.type
}

/** True once the socket has had the message that ended `promptId`. */
export const promptEnded = (ws: WsClient, promptId: string) => ws.messages.some((m) => ENDINGS.includes(m.type) && m.data.prompt_id === promptId)

/**
 * How a prompt ended, once the host has also written its history: `executing` with node null
 * comes after that.
 */
export async function promptFinished(ws: WsClient, promptId: string, timeoutMs: number): Promise<string> {
  const end = await promptEnding(ws, promptId, timeoutMs)
  await ws.waitFor((m) => m.type === 'executing' && m.data.node === null && m.data.prompt_id === promptId, timeoutMs)
  return end
}
