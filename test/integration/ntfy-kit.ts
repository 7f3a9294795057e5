/**
 * A real sidecar for the ntfy suites: real services on a temp data dir and its sqlite file, the
 * sidecar's own composition (the notify feature with quick retry pauses unless told otherwise),
 * its owned routes listening on a real loopback port (requests carry `x-authsvc-peer` as the
 * plugin's do), and every log line it writes, at debug level, captured for the tests to read and
 * to await.
 */
import { EventEmitter } from 'node:events'
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { buildApp, features, type BuiltApp } from '../../sidecar/src/app.js'
import { validateConfig } from '../../sidecar/src/kernel/config/load.js'
import { createLogger } from '../../sidecar/src/kernel/log.js'
import { notifyFeature } from '../../sidecar/src/notify/feature.js'
import type { PublisherOptions } from '../../sidecar/src/notify/publisher.js'
import { openServices, type Services } from '../../sidecar/src/services.js'

export const SECRET = 'ntfy-suite-master-secret-0123456789abcdef'
export const PASSWORD = 'ntfy-suite-password-1'
export const QUICK: Partial<PublisherOptions> = { retryBaseMs: 20, retryMaxMs: 80, timeoutMs: 2000 }

export interface CapturedLog {
  lines: string[]
  /** resolves with the first line (already written or to come) that `match` accepts */
  waitFor(match: (line: Record<string, unknown>) => boolean, timeoutMs?: number): Promise<Record<string, unknown>>
}

export function captureLog(): { log: ReturnType<typeof createLogger>; captured: CapturedLog } {
  const lines: string[] = []
  const written = new EventEmitter()
  const log = createLogger({
    level: 'debug',
    destination: {
      write(line: string) {
        lines.push(line)
        written.emit('line', line)
      },
    },
  })
  const parse = (line: string) => JSON.parse(line) as Record<string, unknown>
  return {
    log,
    captured: {
      lines,
      waitFor(match, timeoutMs = 15_000) {
        const seen = lines.map(parse).find(match)
        if (seen) return Promise.resolve(seen)
        return new Promise((resolve, reject) => {
          const timer = setTimeout(() => {
            written.off('line', check)
            reject(new Error(`no such log line within ${timeoutMs} ms; lines:\n${lines.join('')}`))
          }, timeoutMs)
          function check(line: string): void {
            const parsed = parse(line)
            if (!match(parsed)) return
            clearTimeout(timer)
            written.off('line', check)
            resolve(parsed)
          }
          written.on('line', check)
        })
      },
    },
  }
}

export interface Answer {
  status: number
  body: any
}

export interface NtfySidecar {
  dir: string
  url: string
  services: Services
  built: BuiltApp
  logs: CapturedLog
  /** one request over HTTP; `peer` is the client address the plugin would report */
  call(method: string, path: string, options?: { bearer?: string; body?: unknown; peer?: string }): Promise<Answer>
  /** the sqlite file and its WAL, as bytes */
  storeBytes(): Buffer
  close(options?: { keepDir?: boolean }): Promise<void>
}

export interface NtfySidecarOptions {
  config?: Record<string, unknown>
  publisher?: Partial<PublisherOptions>
  dir?: string
  clock?: () => number
  /** the master secret (default SECRET) */
  secret?: string
}

export async function openNtfySidecar(options: NtfySidecarOptions = {}): Promise<NtfySidecar> {
  const dir = options.dir ?? mkdtempSync(join(tmpdir(), 'as-ntfy-'))
  const { log, captured } = captureLog()
  const config = validateConfig({ argon2: { memory_kib: 64, time_cost: 1, parallelism: 1 }, ...options.config })
  const services = await openServices({ config, dataDir: dir, env: { AUTHSVC_SECRET: options.secret ?? SECRET }, log, clock: options.clock, watchGroups: false })
  const publisher = { ...QUICK, ...options.publisher }
  const built = buildApp(services, log, (s, l, c) => features(s, l, c).map((f) => (f.name === 'notify' ? notifyFeature(s, l, c, publisher) : f)))
  const address = await built.app.listen({ host: '127.0.0.1', port: 0 })
  let closed = false
  return {
    dir,
    url: address,
    services,
    built,
    logs: captured,
    async call(method, path, { bearer, body, peer = '127.0.0.1' } = {}) {
      const res = await fetch(`${address}${path}`, {
        method,
        headers: {
          'x-authsvc-peer': peer,
          accept: 'application/json',
          ...(bearer ? { authorization: `Bearer ${bearer}` } : {}),
          ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
      })
      const text = await res.text()
      let parsed: unknown = text
      try {
        parsed = JSON.parse(text)
      } catch {
        // not JSON: the text
      }
      return { status: res.status, body: parsed }
    },
    storeBytes() {
      return Buffer.concat(['', '-wal'].map((suffix) => join(dir, `authsvc.sqlite${suffix}`)).filter(existsSync).map((f) => readFileSync(f)))
    },
    async close({ keepDir = false } = {}) {
      if (closed) return
      closed = true
      await built.stop()
      await built.app.close()
      await services.close()
      if (!keepDir) rmSync(dir, { recursive: true, force: true })
    },
  }
}

/** Registers the first user (admin) and a session for it; then `users` as plain users. */
export async function adminAndUsers(sc: NtfySidecar, ...users: string[]): Promise<{ admin: string; sessions: Record<string, string> }> {
  const reg = await sc.call('POST', '/register', { body: { username: 'root', password: PASSWORD } })
  if (reg.status !== 201) throw new Error(`register root: ${reg.status} ${JSON.stringify(reg.body)}`)
  const admin = await login(sc, 'root')
  const sessions: Record<string, string> = {}
  for (const name of users) {
    const r = await sc.call('POST', '/register', { bearer: admin, body: { username: name, password: PASSWORD } })
    if (r.status !== 201) throw new Error(`register ${name}: ${r.status} ${JSON.stringify(r.body)}`)
    sessions[name] = await login(sc, name)
  }
  return { admin, sessions }
}

export async function login(sc: NtfySidecar, username: string, password = PASSWORD): Promise<string> {
  const res = await sc.call('POST', '/login', { body: { username, password } })
  if (res.status !== 200 || typeof res.body.jwt_token !== 'string') throw new Error(`login ${username}: ${res.status} ${JSON.stringify(res.body)}`)
  return res.body.jwt_token
}
