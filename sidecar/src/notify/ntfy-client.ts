/**
 * One publish to ntfy through its JSON API: `POST <base_url>/` with `{topic, title, message, tags,
 * priority}`, `Authorization: Bearer <token>` when there is a token. The answer is sorted into what
 * the caller does next:
 *
 * - `delivered` (2xx);
 * - `unavailable`: not reached, timed out, 429, 502, 503, 504; the server says "not now", nothing
 *   about this message: try again later;
 * - `server_error`: another 5xx, which may be this message's doing: try again a few times;
 * - `rejected`: any other answer (400 invalid topic, 401/403 token, 413, a redirect, which is never
 *   followed): trying again cannot help.
 *
 * Guarantees: the request ends by `timeoutMs` whatever the server does; at most 16 KiB of an answer
 * is read; a `detail` names the status and ntfy's own error (`{"code":40301,"error":"forbidden"}`)
 * or the network error's code, never the token or the URL's query (it has none: settings-rules.ts).
 */
import type { NtfyMessage } from './notification.js'
import type { NtfyDestination } from './ntfy-settings.js'

export type PublishOutcome =
  | { kind: 'delivered'; id: string | null }
  | { kind: 'unavailable'; status: number | null; detail: string; retryAfterMs: number | null }
  | { kind: 'server_error'; status: number; detail: string }
  | { kind: 'rejected'; status: number; detail: string }

export interface PublishOptions {
  timeoutMs: number
  /** aborts the request (the publisher stopping) */
  signal?: AbortSignal
}

const ANSWER_MAX = 16 * 1024
const NOT_NOW = new Set([429, 502, 503, 504])

export async function publishToNtfy(to: NtfyDestination, message: NtfyMessage, options: PublishOptions): Promise<PublishOutcome> {
  const timeout = AbortSignal.timeout(options.timeoutMs)
  const signal = options.signal ? AbortSignal.any([options.signal, timeout]) : timeout
  let response: Response
  try {
    response = await fetch(`${to.base_url}/`, {
      method: 'POST',
      headers: {
        'Content-Type': 'application/json',
        Accept: 'application/json',
        ...(to.api_token !== '' ? { Authorization: `Bearer ${to.api_token}` } : {}),
      },
      body: JSON.stringify({ topic: to.topic, ...message }),
      redirect: 'manual',
      signal,
    })
  } catch (err) {
    if (timeout.aborted) return { kind: 'unavailable', status: null, detail: `no answer within ${options.timeoutMs} ms`, retryAfterMs: null }
    if (options.signal?.aborted) return { kind: 'unavailable', status: null, detail: 'stopped', retryAfterMs: null }
    return { kind: 'unavailable', status: null, detail: `not reached (${networkCode(err)})`, retryAfterMs: null }
  }
  let text: string
  try {
    text = await readCapped(response, ANSWER_MAX)
  } catch {
    if (timeout.aborted) return { kind: 'unavailable', status: null, detail: `its answer did not end within ${options.timeoutMs} ms`, retryAfterMs: null }
    text = ''
  }
  const status = response.status
  if (status >= 200 && status < 300) return { kind: 'delivered', id: messageId(text) }
  const detail = `ntfy answered ${status}${ntfyError(text)}`
  if (NOT_NOW.has(status)) return { kind: 'unavailable', status, detail, retryAfterMs: retryAfterMs(response.headers.get('retry-after')) }
  if (status >= 500) return { kind: 'server_error', status, detail }
  return { kind: 'rejected', status, detail }
}

/** The network error's code (ECONNREFUSED, ENOTFOUND, UND_ERR_SOCKET...) from undici's `cause`, else its words ("bad port"). */
function networkCode(err: unknown): string {
  const cause = (err as { cause?: { code?: unknown; message?: unknown } }).cause
  if (cause && typeof cause.code === 'string') return cause.code
  if (cause && typeof cause.message === 'string') return cause.message.slice(0, 100)
  return err instanceof Error ? err.name : 'error'
}

async function readCapped(response: Response, max: number): Promise<string> {
  if (response.body === null) return ''
  const reader = response.body.getReader()
  const chunks: Uint8Array[] = []
  let size = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    chunks.push(value)
    size += value.byteLength
    if (size >= max) {
      await reader.cancel()
      break
    }
  }
  return Buffer.concat(chunks).subarray(0, max).toString('utf8')
}

/** ntfy's own error (`{"code":40101,"http":401,"error":"unauthorized",...}`) as ` unauthorized (40101)`. */
function ntfyError(text: string): string {
  try {
    const body = JSON.parse(text) as { code?: unknown; error?: unknown }
    if (typeof body.error === 'string') {
      const error = body.error.replace(/[\u0000-\u001f\u007f]+/g, ' ').slice(0, 200)
      return typeof body.code === 'number' ? `: ${error} (${body.code})` : `: ${error}`
    }
  } catch {
    // not ntfy's JSON: the status says enough
  }
  return ''
}

function messageId(text: string): string | null {
  try {
    const body = JSON.parse(text) as { id?: unknown }
    return typeof body.id === 'string' ? body.id.slice(0, 64) : null
  } catch {
    return null
  }
}

/** Retry-After in seconds (ntfy sends none today; a proxy in front of it may). */
function retryAfterMs(header: string | null): number | null {
  if (header === null || !/^\d{1,6}$/.test(header.trim())) return null
  return Number(header.trim()) * 1000
}
