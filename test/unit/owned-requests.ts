/**
 * Shared request helpers of the owned-route suites (owned-routes-*.test.ts):
 * a form body and its content type, an answer's JSON, and the two calls most
 * rows start from (POST /login, GET /authsvc/api/me), all through the real
 * app's inject() (fixtures.ts `call`).
 */
import type { LightMyRequestResponse } from 'fastify'
import { call, type CallOptions, type Sidecar } from './fixtures.js'

export const FORM = { 'content-type': 'application/x-www-form-urlencoded' }
export const json = (res: LightMyRequestResponse) => JSON.parse(res.body) as Record<string, any>
export const form = (fields: Record<string, string>) => new URLSearchParams(fields).toString()

export async function login(sc: Sidecar, username: string, password: string, extra: Partial<CallOptions> = {}): Promise<LightMyRequestResponse> {
  return call(sc, { method: 'POST', url: '/login', body: { username, password }, ...extra })
}

export async function me(sc: Sidecar, o: Partial<CallOptions>): Promise<LightMyRequestResponse> {
  return call(sc, { url: '/authsvc/api/me', ...o })
}
