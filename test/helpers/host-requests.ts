/**
 * What a signed-in user sends a gated host in the end-to-end suites, bound once to the host's
 * URL: JSON requests whose answer is read whole (status, text, the JSON when it is JSON, the
 * bytes), the upload form the frontend sends, the LoadImage options offered, a queued prompt;
 * and the check that an answer is the gate's refusal of a given status and code.
 *
 * The URL is asked for at every call: a host started in `before()`, or restarted on another
 * port, is the one asked. Requests go through fetch, so a path is normalised as a browser
 * would (a suite that must send `..` as written uses node:http itself).
 */
import assert from 'node:assert/strict'
import { bearer } from './client.js'

export interface HostAnswer {
  status: number
  headers: Headers
  text: string
  /** the parsed JSON, or undefined when the answer is not JSON */
  body: any
  bytes: Buffer
}

/** The JSON in `text`, or undefined when there is none. */
export function parsedJson(text: string): any {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

/** The answer is the gate's refusal: this status and this catalogue code. */
export function assertRefused(res: { status: number; text: string }, status: number, code: string, what: string): void {
  assert.equal(res.status, status, `${what}: ${res.status} ${res.text.slice(0, 300)}`)
  assert.equal(parsedJson(res.text)?.code, code, `${what}: ${res.text.slice(0, 300)}`)
}

/** The prompt ids of a GET /queue answer, running first. */
export const queueIds = (body: any): string[] => [...body.queue_running, ...body.queue_pending].map((item: unknown[]) => item[1] as string)

export interface HostRequests {
  /** Accept: application/json and the bearer; a body (JSON, or a string as is) goes with Content-Type: application/json. */
  request(method: string, path: string, token: string, body?: unknown): Promise<HostAnswer>
  get(path: string, token: string): Promise<HostAnswer>
  /** Always with Content-Type: application/json; no body is an empty one. */
  post(path: string, token: string, body?: unknown): Promise<HostAnswer>
  /** The frontend's upload: `image` as a PNG part named `name`, then `fields`. */
  upload(token: string, name: string, bytes: Buffer, fields?: Record<string, string>, route?: string): Promise<HostAnswer>
  /** The options LoadImage (or `cls`) offers this user (asserts 200). */
  loadImageOptions(token: string, cls?: string): Promise<string[]>
  /** POSTs a prompt body; asserts 200 and returns its prompt_id. */
  queuePrompt(token: string, body: Record<string, unknown> | string, path?: string): Promise<string>
}

async function answerOf(res: Response): Promise<HostAnswer> {
  const bytes = Buffer.from(await res.arrayBuffer())
  const text = bytes.toString('utf8')
  return { status: res.status, headers: res.headers, text, body: parsedJson(text), bytes }
}

export function hostRequests(url: () => string): HostRequests {
  const request = async (method: string, path: string, token: string, body?: unknown): Promise<HostAnswer> => answerOf(await fetch(url() + path, {
    method,
    headers: { Accept: 'application/json', ...(body === undefined ? {} : { 'Content-Type': 'application/json' }), ...bearer(token) },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  }))
  const get = (path: string, token: string) => request('GET', path, token)
  const post = (path: string, token: string, body?: unknown) => request('POST', path, token, body ?? '')
  return {
    request,
    get,
    post,
    async upload(token, name, bytes, fields = {}, route = '/upload/image') {
      const form = new FormData()
      form.append('image', new Blob([new Uint8Array(bytes)], { type: 'image/png' }), name)
      for (const [k, v] of Object.entries(fields)) form.append(k, v)
      return answerOf(await fetch(url() + route, { method: 'POST', headers: { Accept: 'application/json', ...bearer(token) }, body: form }))
    },
    async loadImageOptions(token, cls = 'LoadImage') {
      const res = await get(`/object_info/${cls}`, token)
      assert.equal(res.status, 200, res.text)
      return res.body[cls].input.required.image[0]
    },
    async queuePrompt(token, body, path = '/prompt') {
      const res = await post(path, token, body)
      assert.equal(res.status, 200, `${path}: ${res.text}`)
      assert.equal(typeof res.body.prompt_id, 'string')
      return res.body.prompt_id
    },
  }
}
