/** Small constructors for decisions, so every denial has the catalogue's JSON shape. */
import { AuthsvcError, errorBody, type ErrorCode } from './errors.js'
import type { RespondDecision } from './protocol.js'

const JSON_TYPE: [string, string] = ['Content-Type', 'application/json; charset=utf-8']

export function denyDecision(code: ErrorCode, message?: string, extraHeaders: Array<[string, string]> = []): RespondDecision {
  const body = errorBody(code, message)
  return { action: 'respond', status: body.statusCode, headers: [JSON_TYPE, ...extraHeaders], body_text: JSON.stringify(body) }
}

export function errorDecision(err: AuthsvcError): RespondDecision {
  return denyDecision(err.code, err.message, Object.entries(err.headers))
}

export function jsonDecision(status: number, body: unknown): RespondDecision {
  return { action: 'respond', status, headers: [JSON_TYPE], body_text: JSON.stringify(body) }
}

/** 302 to the login page; `next` is a same-origin path (the raw path and query as requested). */
export function loginRedirectDecision(path: string, query: string): RespondDecision {
  const next = query ? `${path}?${query}` : path
  return {
    action: 'respond',
    status: 302,
    headers: [['Location', `/login?next=${encodeURIComponent(next)}`], ['Cache-Control', 'no-store']],
    body_text: '',
  }
}
