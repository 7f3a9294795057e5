/**
 * In-process sidecar for integration tests of owned routes: real services on
 * a temp data dir and a real sqlite file, an injected clock, `inject()` calls
 * that look like what the plugin forwards (x-authsvc-peer / -scheme).
 */
import { rmSync } from 'node:fs'
import { scratchDir } from '../helpers/temp-dir.js'
import { TEST_ARGON2 } from '../helpers/stack.js'
import type { FastifyBaseLogger, FastifyInstance } from 'fastify'
import type { KeyValueStore } from '../../sidecar/src/store/kv.js'
import { buildApp } from '../../sidecar/src/app.js'
import { validateConfig } from '../../sidecar/src/kernel/config/load.js'
import { createLogger } from '../../sidecar/src/kernel/log.js'
import { openServices, type Services } from '../../sidecar/src/services.js'

export const PASSWORD = 'integration-password-1'

export interface Clock {
  (): number
  advance(ms: number): void
}

export function clockAt(start = Date.parse('2026-06-01T00:00:00Z')): Clock {
  let now = start
  const clock = (() => now) as Clock
  clock.advance = (ms) => (now += ms)
  return clock
}

export interface Harness {
  dir: string
  clock: Clock
  services: Services
  app: FastifyInstance
  call(method: string, url: string, options?: { body?: unknown; headers?: Record<string, string>; peer?: string }): Promise<{ status: number; body: any; headers: Record<string, unknown> }>
  close(): Promise<void>
}

export async function openHarness(options: { config?: Record<string, unknown>; env?: Record<string, string>; dir?: string; clock?: Clock; wrapStore?: (kv: KeyValueStore) => KeyValueStore; log?: FastifyBaseLogger } = {}): Promise<Harness> {
  const dir = options.dir ?? scratchDir('as-int-')
  const clock = options.clock ?? clockAt()
  const log = options.log ?? createLogger({ level: 'silent' })
  const config = validateConfig({ argon2: TEST_ARGON2, ...options.config })
  const services = await openServices({ config, dataDir: dir, env: { AUTHSVC_SECRET: 'integration-secret-0123456789abcdefghij', ...options.env }, log, clock, watchGroups: false, wrapStore: options.wrapStore })
  const { app } = buildApp(services, log)
  await app.ready()
  return {
    dir, clock, services, app,
    async call(method, url, { body, headers = {}, peer = '127.0.0.1' } = {}) {
      const res = await app.inject({
        method: method as 'GET',
        url,
        headers: { 'x-authsvc-peer': peer, accept: 'application/json', ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...headers },
        payload: body === undefined ? undefined : JSON.stringify(body),
      })
      let parsed: unknown = res.body
      try {
        parsed = JSON.parse(res.body)
      } catch {
        // not JSON: keep the text
      }
      return { status: res.statusCode, body: parsed, headers: res.headers }
    },
    async close() {
      await app.close()
      await services.close()
      if (!options.dir) rmSync(dir, { recursive: true, force: true })
    },
  }
}

export const bearer = (token: string) => ({ authorization: `Bearer ${token}` })

export async function registerAndLogin(h: Harness, username: string, opts: { admin?: string; role?: string } = {}): Promise<string> {
  const reg = await h.call('POST', '/register', { body: { username, password: PASSWORD, ...(opts.role ? { role: opts.role } : {}) }, headers: opts.admin ? bearer(opts.admin) : {} })
  if (reg.status !== 201) throw new Error(`register ${username}: ${reg.status} ${JSON.stringify(reg.body)}`)
  const login = await h.call('POST', '/login', { body: { username, password: PASSWORD } })
  if (login.status !== 200 || !login.body.jwt_token) throw new Error(`login ${username}: ${login.status} ${JSON.stringify(login.body)}`)
  return login.body.jwt_token
}
