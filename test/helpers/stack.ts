/**
 * End-to-end stack: the ComfyUI stand-in (Python) loading the real plugin
 * from its custom_nodes/, which spawns the real sidecar; random port, temp
 * data dir, real HTTP. `aiohttp` picks Debian's 3.8 or the 3.11 copy made by
 * scripts/aiohttp311.sh.
 */
import { createServer } from 'node:net'
import { spawn, execFileSync, type ChildProcess } from 'node:child_process'
import { mkdirSync, symlinkSync, writeFileSync, readFileSync, rmSync, existsSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { scratchDir } from './temp-dir.js'
import { once } from 'node:events'

export const ROOT = resolve(import.meta.dirname, '..', '..')
export const PYTHON = process.env.AUTHSVC_PYTHON ?? '/usr/bin/python3'

export type AiohttpVersion = '3.8' | '3.11'
/** Both by default; `AUTHSVC_TEST_AIOHTTP=3.8` narrows a local run to one. */
export const AIOHTTP_VERSIONS: AiohttpVersion[] = process.env.AUTHSVC_TEST_AIOHTTP
  ? (process.env.AUTHSVC_TEST_AIOHTTP.split(',') as AiohttpVersion[])
  : ['3.8', '3.11']

/**
 * The aiohttp of real ComfyUI installs (ComfyUI 0.3.64 requires >= 3.11.8; on Debian's 3.8 it
 * warns and runs, a setup no install has): the one version for the suites whose subject is the
 * sidecar's features or the real host. Suites whose subject is how the plugin handles HTTP and
 * WebSocket traffic (fail closed, streaming, kept decisions, the route table, headers, frames)
 * run on both, as the plugin's own suite does.
 */
export const HOST_AIOHTTP: AiohttpVersion = AIOHTTP_VERSIONS.includes('3.11') ? '3.11' : AIOHTTP_VERSIONS[0]

let aiohttp311Path: string | undefined
export function aiohttp311Dir(): string {
  aiohttp311Path ??= execFileSync('bash', [join(ROOT, 'scripts/aiohttp311.sh')], { encoding: 'utf8' }).trim().split('\n').pop()!
  return aiohttp311Path
}

export function pythonEnv(version: AiohttpVersion): NodeJS.ProcessEnv {
  if (version === '3.8') return {}
  return {
    PYTHONPATH: aiohttp311Dir(),
    AIOHTTP_NO_EXTENSIONS: '1',
    YARL_NO_EXTENSIONS: '1',
    MULTIDICT_NO_EXTENSIONS: '1',
    PROPCACHE_NO_EXTENSIONS: '1',
    FROZENLIST_NO_EXTENSIONS: '1',
  }
}

/**
 * The password hash's cost in a stack whose config does not name `argon2`: the suites here are
 * about the gate, the pages and the flows, not the hash, and at the default cost (19 MiB, two
 * passes) the hash workers of every registration and sign-in took 218 s of CPU in one whole run
 * (about 6 % of it, on a machine where the run is CPU-bound).
 * The default cost is the unit config rows' subject; the hash itself, the integration rows' (their
 * harness hashes at this cost too).
 */
export const TEST_ARGON2 = { memory_kib: 256, time_cost: 1, parallelism: 1 }

export interface StackOptions {
  aiohttp?: AiohttpVersion
  /** written to <dataDir>/config.json, with `argon2: TEST_ARGON2` unless it names `argon2` */
  config?: Record<string, unknown>
  env?: NodeJS.ProcessEnv
  /** do not wait for the sidecar to be ready (fail-closed tests) */
  noWait?: boolean
  /** an existing temp dir to reuse (restart tests keep the data dir) */
  dir?: string
  multiUser?: boolean
}

export interface Stack {
  dir: string
  dataDir: string
  baseDir: string
  url: string
  controlUrl: string
  host: ChildProcess
  output: () => string
  counter(): Promise<{ total: number; by_route: Record<string, number> }>
  resetCounter(): Promise<void>
  lastRequest(): Promise<{ method: string; path: string; query_string: string; headers: Record<string, string>; body_sha256?: string; body_length?: number }>
  sidecarPid(): number
  waitReady(timeoutMs?: number): Promise<void>
  stop(): Promise<void>
}

export async function startStack(options: StackOptions = {}): Promise<Stack> {
  const dir = options.dir ?? scratchDir('as-e2e-')
  const dataDir = join(dir, 'data')
  const baseDir = join(dir, 'host')
  mkdirSync(join(baseDir, 'custom_nodes'), { recursive: true })
  mkdirSync(dataDir, { recursive: true, mode: 0o700 })
  const link = join(baseDir, 'custom_nodes', 'authsvc')
  if (!existsSync(link)) symlinkSync(ROOT, link)
  // a config.json of an earlier start in this dir (restart tests) is the test's own: kept as it is
  if (options.config || !existsSync(join(dataDir, 'config.json'))) {
    writeFileSync(join(dataDir, 'config.json'), JSON.stringify({ argon2: TEST_ARGON2, ...options.config }))
  }
  const args = [join(ROOT, 'test/host-standin/main.py'), '--base-dir', baseDir, '--listen', '127.0.0.1', '--port', '0', '--control-port', '0']
  if (options.multiUser) args.push('--multi-user')
  const host = spawn(PYTHON, args, {
    env: { ...process.env, ...pythonEnv(options.aiohttp ?? '3.8'), AUTHSVC_DATA_DIR: dataDir, PYTHONUNBUFFERED: '1', ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let out = ''
  host.stdout!.on('data', (d: Buffer) => (out += d.toString()))
  host.stderr!.on('data', (d: Buffer) => (out += d.toString()))
  const deadline = Date.now() + 20_000
  let url = ''
  let controlUrl = ''
  while (Date.now() < deadline) {
    url = /STANDIN READY (http:\/\/\S+)/.exec(out)?.[1] ?? ''
    controlUrl = /STANDIN CONTROL (http:\/\/\S+)/.exec(out)?.[1] ?? ''
    if (url && controlUrl) break
    if (host.exitCode !== null) throw new Error(`stand-in exited:\n${out}`)
    await new Promise((r) => setTimeout(r, 20))
  }
  if (!url || !controlUrl) {
    host.kill('SIGKILL')
    throw new Error(`stand-in did not start:\n${out}`)
  }
  const stack: Stack = {
    dir, dataDir, baseDir, url, controlUrl, host,
    output: () => out,
    async counter() {
      return (await fetch(`${controlUrl}/counter`)).json() as Promise<{ total: number; by_route: Record<string, number> }>
    },
    async resetCounter() {
      await fetch(`${controlUrl}/counter/reset`, { method: 'POST' })
    },
    async lastRequest() {
      return (await fetch(`${controlUrl}/last-request`)).json() as ReturnType<Stack['lastRequest']>
    },
    sidecarPid() {
      return Number(readFileSync(join(dataDir, 'sidecar.pid'), 'utf8').trim())
    },
    async waitReady(timeoutMs = 60_000) {
      const until = Date.now() + timeoutMs
      while (Date.now() < until) {
        try {
          const res = await fetch(`${url}/authsvc/health`)
          if (res.status === 200) return
        } catch {
          // not listening yet
        }
        await new Promise((r) => setTimeout(r, 25))
      }
      throw new Error(`sidecar not ready in ${timeoutMs} ms:\n${out}`)
    },
    async stop() {
      if (host.exitCode === null) {
        host.kill('SIGTERM')
        const timer = setTimeout(() => host.kill('SIGKILL'), 8000)
        await once(host, 'exit')
        clearTimeout(timer)
      }
    },
  }
  if (!options.noWait) await stack.waitReady()
  return stack
}

export async function destroyStack(stack: Stack): Promise<void> {
  await stack.stop()
  rmSync(stack.dir, { recursive: true, force: true })
}

/** Polls `check` every 50 ms until it holds or `timeoutMs` passes; for waiting on a real restart. */
export async function poll(check: () => Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const until = Date.now() + timeoutMs
  while (Date.now() < until) {
    if (await check()) return true
    await new Promise((r) => setTimeout(r, 50))
  }
  return false
}

/** A port nobody listens on now (tests race for it like anything else, and retry). */
export function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      const port = typeof address === 'object' && address ? address.port : 0
      server.close(() => resolvePort(port))
    })
  })
}
