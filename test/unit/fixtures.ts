/**
 * Shared fixtures of the unit suites: a real sidecar (services + Fastify app +
 * decision handlers) on a temp data dir, with an injected clock and a cheap
 * argon2 cost, plus builders for request descriptions and owned-route calls.
 * Nothing here sleeps: time moves only when a test calls `clock.advance`.
 */
import assert from 'node:assert/strict'
import { mkdirSync, rmSync } from 'node:fs'
import { scratchDir } from '../helpers/temp-dir.js'
import { join } from 'node:path'
import type { FastifyInstance, LightMyRequestResponse, RouteOptions } from 'fastify'
import { buildApp, type BuiltApp, type Composition } from '../../sidecar/src/app.js'
import { validateConfig } from '../../sidecar/src/kernel/config/load.js'
import type { Config } from '../../sidecar/src/kernel/config/schema.js'
import type { DecisionHandlers } from '../../sidecar/src/kernel/server.js'
import type { Decision, RequestDescription } from '../../sidecar/src/kernel/protocol.js'
import { ERRORS } from '../../sidecar/src/kernel/errors.js'
import type { UserRecord } from '../../sidecar/src/identity/users.js'
import { createLogger } from '../../sidecar/src/kernel/log.js'
import { openServices, type Services } from '../../sidecar/src/services.js'
import type { KeyValueStore } from '../../sidecar/src/store/kv.js'
import { pythonHost, type PythonHost } from '../helpers/host-resolver.js'

export const SECRET = 'unit-test-master-secret-0123456789abcdef'
export const FAST_ARGON2 = { memory_kib: 64, time_cost: 1, parallelism: 1 }
export const T0 = Date.parse('2026-03-01T12:00:00.000Z')
export const log = createLogger({ level: 'silent' })

/** A temp dir, removed when the test process ends (test/helpers/temp-dir.ts). */
export function tempDir(tag = 'authsvc-unit-'): string {
  return scratchDir(tag)
}

/** A config as the sidecar would load it, with the cheap argon2 cost unless overridden. */
export function testConfig(overrides: Record<string, unknown> = {}): Config {
  return validateConfig({ argon2: FAST_ARGON2, ...overrides })
}

export interface FakeClock {
  (): number
  advance(ms: number): void
  set(ms: number): void
}

export function fakeClock(start = T0): FakeClock {
  let now = start
  const clock = (() => now) as FakeClock
  clock.advance = (ms) => {
    now += ms
  }
  clock.set = (ms) => {
    now = ms
  }
  return clock
}

export interface Sidecar {
  dir: string
  clock: FakeClock
  services: Services
  app: FastifyInstance
  handlers: DecisionHandlers
  /** the built app's live-socket registry and push hook (isolation tests) */
  built: BuiltApp
  /** the plugin's resolver over `<dir>/host` (input/, output/, temp/) */
  host: PythonHost
  close(options?: { keepDir?: boolean }): Promise<void>
}

export interface SidecarOptions {
  config?: Record<string, unknown>
  dir?: string
  clock?: FakeClock
  secret?: string
  /** sees every owned route as it is registered (before the app is ready) */
  onRoute?: (route: RouteOptions) => void
  /** make `<dir>/host` (input/, output/, temp/) at once (names always resolve there, test/helpers/host-resolver.ts) */
  host?: boolean
  /** the features to compose (default: the sidecar's, app.ts `features`) */
  compose?: Composition
  /** wraps the store the services open (services.ts `wrapStore`): a test's hold on a shared store's feed or reads */
  wrapStore?: (kv: KeyValueStore) => KeyValueStore
}

export async function openSidecar(options: SidecarOptions = {}): Promise<Sidecar> {
  const dir = options.dir ?? tempDir()
  const clock = options.clock ?? fakeClock()
  const config = testConfig(options.config)
  const services = await openServices({ config, dataDir: dir, env: { AUTHSVC_SECRET: options.secret ?? SECRET }, log, clock, watchGroups: false, wrapStore: options.wrapStore })
  const built = buildApp(services, log, options.compose)
  if (options.onRoute) built.app.addHook('onRoute', options.onRoute)
  await built.app.ready()
  // names resolve with the plugin's own resolver over <dir>/host, started the first time one is asked
  let started: PythonHost | undefined
  const host: PythonHost = {
    resolve(items) {
      if (started === undefined) {
        for (const d of ['input', 'output', 'temp']) mkdirSync(join(dir, 'host', d), { recursive: true })
        started = pythonHost(join(dir, 'host'))
      }
      return started.resolve(items)
    },
    close() {
      started?.close()
    },
  }
  if (options.host) for (const d of ['input', 'output', 'temp']) mkdirSync(join(dir, 'host', d), { recursive: true })
  const handlers = built.handlers('/tmp/x-http.sock')
  return {
    dir,
    clock,
    services,
    app: built.app,
    // as the decision server does: the later steps resolve on the host that asked
    handlers: { ...handlers, body: (m, p, h) => handlers.body(m, p, h ?? host), form: (m, h) => handlers.form(m, h ?? host), filter: (m, p, h) => handlers.filter(m, p, h ?? host) },
    built,
    host,
    async close({ keepDir = false } = {}) {
      host.close()
      await built.stop()
      await built.app.close()
      await services.close()
      if (!keepDir) rmSync(dir, { recursive: true, force: true })
    },
  }
}

/** Creates a user straight through the repositories (no HTTP, no validation). */
export async function addUser(sc: Sidecar, username: string, password: string, role = 'user'): Promise<UserRecord> {
  const hash = await sc.services.passwords.hash(password)
  return sc.services.users.create({ username, role, password_hash: hash }, new Date(sc.clock()))
}

export async function sessionJwt(sc: Sidecar, user: { user_id: string; username: string }): Promise<string> {
  return (await sc.services.sessions.issue(user, false)).token
}

export async function apiToken(sc: Sidecar, user: { user_id: string }, hours = 24): Promise<string> {
  return (await sc.services.tokens.issue(user.user_id, 'unit', hours)).token
}

// ---------------------------------------------------------------- decisions

export interface DescOptions {
  method?: string
  path: string
  query?: string
  /** the host's matched pattern; `null` for an unmatched request */
  pattern?: string | null
  kind?: 'route' | 'static'
  match_info?: Record<string, string>
  headers?: Record<string, string>
  peer?: string
  scheme?: string
}

let nextId = 1

/** A request description as the plugin sends it (shared/protocol.json `decide`). */
export function describeRequest(o: DescOptions): RequestDescription {
  const pattern = o.pattern === undefined ? o.path : o.pattern
  return {
    type: 'decide',
    id: nextId++,
    method: o.method ?? 'GET',
    path: o.path,
    query: o.query ?? '',
    route: pattern === null ? null : { pattern, kind: o.kind ?? 'route' },
    route_status: pattern === null ? 404 : 200,
    match_info: o.match_info ?? {},
    headers: { host: '127.0.0.1:8188', ...(o.headers ?? {}) },
    peer: o.peer ?? '127.0.0.1',
    scheme: o.scheme ?? 'http',
  }
}

/** The Authorization header of a bearer credential, as a description carries it (lowercase name). */
export const bearer = (t: string) => ({ authorization: `Bearer ${t}` })

export async function decide(sc: Sidecar, o: DescOptions): Promise<Decision> {
  const desc = describeRequest(o)
  // as the decision server does: the plugin that asked, to resolve names on its host
  Object.defineProperty(desc, 'host', { value: sc.host, enumerable: false })
  return sc.handlers.decide(desc)
}

export interface Answer {
  status: number
  headers: Record<string, string>
  body: string
  json: { error?: string; code?: string; statusCode?: number } & Record<string, unknown>
}

/** The respond decision, with header names lowercased and a JSON body parsed when there is one. */
export function answer(decision: Decision): Answer {
  assert.equal(decision.action, 'respond', `expected a respond decision, got ${JSON.stringify(decision)}`)
  const d = decision as Extract<Decision, { action: 'respond' }>
  const headers: Record<string, string> = {}
  for (const [k, v] of d.headers ?? []) headers[k.toLowerCase()] = v
  const body = d.body_text ?? ''
  let json = {}
  if (body !== '') {
    try {
      json = JSON.parse(body) as object
    } catch {
      json = {}
    }
  }
  return { status: d.status, headers, body, json }
}

/** Asserts a catalogue error answer: status, code, and the `{error, code, statusCode}` shape. */
export function assertDenied(decision: Decision, code: keyof typeof ERRORS, label = ''): Answer {
  const a = answer(decision)
  assert.equal(a.json.code, code, `${label} code (got ${a.body})`)
  assert.equal(a.status, ERRORS[code].status, `${label} status`)
  assert.deepEqual(Object.keys(a.json).sort(), ['code', 'error', 'statusCode'], `${label} shape`)
  assert.equal(a.json.statusCode, a.status, `${label} statusCode`)
  assert.match(a.headers['content-type'] ?? '', /^application\/json/, `${label} content-type`)
  return a
}

export function assertPass(decision: Decision, label = ''): Extract<Decision, { action: 'pass' }> {
  assert.equal(decision.action, 'pass', `${label}: expected pass, got ${JSON.stringify(decision)}`)
  return decision as Extract<Decision, { action: 'pass' }>
}

/** The answer of a body or filter step, with a replacement body (the frame's payload) as `body_text`. */
export type Stepped = Decision & { body_text?: string }

/** What a body or filter handler returned (an answer, or an answer and its payload), as one `Stepped`. */
export function stepAnswer(result: unknown): Stepped {
  const r = result as { answer?: Decision; payload?: Buffer }
  return r.answer !== undefined && Buffer.isBuffer(r.payload) ? { ...r.answer, body_text: r.payload.toString('utf8') } : (result as Stepped)
}

// ------------------------------------------------------------- owned routes

export interface CallOptions {
  method?: string
  url: string
  headers?: Record<string, string>
  /** JSON (object/array/primitive) or raw string/Buffer payload */
  body?: unknown
  bearer?: string
  cookie?: string
  peer?: string
  scheme?: string
  /** send a same-origin Origin header (needed by cookie-authenticated writes) */
  sameOrigin?: boolean
}

export const HOST = '127.0.0.1:8188'

let peerCount = 0

/** A remote address never used before in this process (198.18.0.0/15, the benchmarking range). */
export function freshPeer(): string {
  const n = peerCount++
  return `198.18.${Math.floor(n / 250) % 250}.${(n % 250) + 1}`
}

/** Routes that check passwords and count failures per client address (SPEC §7). */
const THROTTLED = /^\/(login|register|generate_token|authsvc\/generate_token|api\/authsvc\/generate_token)(\?|$)/

/**
 * One owned-route request through inject. The peer is loopback, except that a
 * POST to a password-checking route comes from a fresh address unless the test
 * names one: the per-address throttle then triggers only where a test asks for it.
 */
export async function call(sc: Sidecar, o: CallOptions): Promise<LightMyRequestResponse> {
  const throttled = (o.method ?? 'GET') === 'POST' && THROTTLED.test(o.url)
  const peer = o.peer ?? (throttled ? freshPeer() : '127.0.0.1')
  const headers: Record<string, string> = { host: HOST, 'x-authsvc-peer': peer, accept: 'application/json', ...(o.headers ?? {}) }
  if (o.scheme) headers['x-authsvc-scheme'] = o.scheme
  if (o.bearer) headers.authorization = `Bearer ${o.bearer}`
  if (o.cookie) headers.cookie = `jwt_token=${o.cookie}`
  if (o.sameOrigin) headers.origin = `http://${HOST}`
  let payload: string | Buffer | undefined
  if (o.body !== undefined) {
    if (typeof o.body === 'string' || Buffer.isBuffer(o.body)) payload = o.body
    else {
      payload = JSON.stringify(o.body)
      headers['content-type'] ??= 'application/json'
    }
  }
  return sc.app.inject({ method: (o.method ?? 'GET') as 'GET', url: o.url, headers, payload })
}

/** Registers the first user (admin) through the public route and returns its session JWT. */
export async function bootstrapAdmin(sc: Sidecar, username = 'root-admin', password = 'Adm1n-passphrase!'): Promise<{ user: UserRecord; jwt: string; password: string }> {
  const reg = await call(sc, { method: 'POST', url: '/register', body: { username, password } })
  assert.equal(reg.statusCode, 201, reg.body)
  const user = sc.services.users.byUsername(username)!
  return { user, jwt: await sessionJwt(sc, user), password }
}

export function errorCode(res: LightMyRequestResponse): string | undefined {
  try {
    return (JSON.parse(res.body) as { code?: string }).code
  } catch {
    return undefined
  }
}

/** Asserts a catalogue error response from an owned route. */
export function assertError(res: LightMyRequestResponse, status: number, code: string, label = ''): void {
  assert.equal(res.statusCode, status, `${label} status (body ${res.body.slice(0, 300)})`)
  assert.match(String(res.headers['content-type']), /^application\/json/, `${label} content-type`)
  const body = JSON.parse(res.body) as Record<string, unknown>
  assert.equal(body.code, code, `${label} code`)
  assert.equal(body.statusCode, status, `${label} statusCode`)
  assert.equal(typeof body.error, 'string', `${label} error`)
}

// ------------------------------------------------------------- host routes

/** fixtures/comfyui/routes.txt: every route except /internal/* is also served under /api. */
export const COMFYUI_ROUTES: Array<{ method: string; pattern: string }> = `
HEAD /internal/logs
GET /internal/logs
HEAD /internal/logs/raw
GET /internal/logs/raw
PATCH /internal/logs/subscribe
HEAD /internal/folder_paths
GET /internal/folder_paths
HEAD /internal/files/{directory_type}
GET /internal/files/{directory_type}
HEAD /ws
GET /ws
HEAD /
GET /
HEAD /embeddings
GET /embeddings
HEAD /models
GET /models
HEAD /models/{folder}
GET /models/{folder}
HEAD /extensions
GET /extensions
POST /upload/image
POST /upload/mask
HEAD /view
GET /view
HEAD /view_metadata/{folder_name}
GET /view_metadata/{folder_name}
HEAD /system_stats
GET /system_stats
HEAD /features
GET /features
HEAD /prompt
GET /prompt
HEAD /object_info
GET /object_info
HEAD /object_info/{node_class}
GET /object_info/{node_class}
HEAD /history
GET /history
HEAD /history/{prompt_id}
GET /history/{prompt_id}
HEAD /queue
GET /queue
POST /prompt
POST /queue
POST /interrupt
POST /free
POST /history
HEAD /settings
GET /settings
HEAD /settings/{id}
GET /settings/{id}
POST /settings
POST /settings/{id}
HEAD /users
GET /users
POST /users
HEAD /userdata
GET /userdata
HEAD /v2/userdata
GET /v2/userdata
HEAD /userdata/{file}
GET /userdata/{file}
POST /userdata/{file}
DELETE /userdata/{file}
POST /userdata/{file}/move/{dest}
HEAD /experiment/models
GET /experiment/models
HEAD /experiment/models/{folder}
GET /experiment/models/{folder}
HEAD /experiment/models/preview/{folder}/{path_index}/{filename}
GET /experiment/models/preview/{folder}/{path_index}/{filename}
HEAD /workflow_templates
GET /workflow_templates
HEAD /i18n
GET /i18n
`
  .trim()
  .split('\n')
  .map((line) => {
    const [method, pattern] = line.split(' ')
    return { method, pattern }
  })


const SAMPLE_PARAMS: Record<string, string> = {
  directory_type: 'output', folder: 'checkpoints', folder_name: 'checkpoints', node_class: 'KSampler',
  prompt_id: 'abc', id: 'Comfy.Setting', file: 'workflows/a.json', dest: 'workflows/b.json', path_index: '0', filename: 'x.png',
}

/** Every host route as a concrete request (path + match_info), in both twins except /internal. */
export function hostRouteRequests(): Array<{ method: string; pattern: string; path: string; match_info: Record<string, string> }> {
  const out: Array<{ method: string; pattern: string; path: string; match_info: Record<string, string> }> = []
  for (const { method, pattern } of COMFYUI_ROUTES) {
    const match_info: Record<string, string> = {}
    const path = pattern.replace(/\{(\w+)\}/g, (_, name: string) => {
      match_info[name] = SAMPLE_PARAMS[name] ?? 'x'
      return encodeURIComponent(match_info[name])
    })
    out.push({ method, pattern, path, match_info })
    if (!pattern.startsWith('/internal')) out.push({ method, pattern: `/api${pattern}`, path: `/api${path}`, match_info })
  }
  return out
}
