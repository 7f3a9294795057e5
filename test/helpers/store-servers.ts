/**
 * Real Redis and PostgreSQL servers for the shared-store suites (issue 28),
 * from Debian's `redis-server` and `postgresql`, started by the test in a temp
 * dir, listening on loopback at a free port, stopped (and removed) after.
 *
 * `skipReason()` says in one line why a server cannot run here (not
 * installed); CI installs both (.ci/run), so there it never skips.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { createServer, connect } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export interface StoreServer {
  url: string
  port: number
  /** the server's process id while it runs (Redis only: to pause it with SIGSTOP) */
  readonly pid?: number
  /** SIGKILL (an outage), keeping the data */
  kill(): Promise<void>
  /** starts it again on the same port and data */
  restart(): Promise<void>
  stop(): Promise<void>
  /** SIGSTOP on every process of the server (one that stops answering without closing anything), and SIGCONT; where implemented */
  freeze?(): Promise<void>
  thaw?(): Promise<void>
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      server.close(() => resolve(typeof address === 'object' && address !== null ? address.port : 0))
    })
  })
}

async function waitForPort(port: number, child: ChildProcess, what: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${what} exited with ${child.exitCode} before listening`)
    const open = await new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1')
      socket.once('connect', () => {
        socket.destroy()
        resolve(true)
      })
      socket.once('error', () => resolve(false))
    })
    if (open) return
    if (Date.now() > deadline) throw new Error(`${what} did not listen on ${port} within ${timeoutMs} ms`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

function exited(child: ChildProcess): Promise<void> {
  return child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : new Promise((resolve) => child.once('exit', () => resolve()))
}

const REDIS = '/usr/bin/redis-server'

function postgresBin(): string | null {
  const base = '/usr/lib/postgresql'
  if (!existsSync(base)) return null
  const versions = readdirSync(base).filter((v) => existsSync(join(base, v, 'bin', 'postgres'))).sort((a, b) => Number(b) - Number(a))
  return versions.length === 0 ? null : join(base, versions[0], 'bin')
}

export function redisSkipReason(): string | false {
  return existsSync(REDIS) ? false : `redis-server is not installed (${REDIS}); apt-get install redis-server`
}

export function postgresSkipReason(): string | false {
  if (postgresBin() === null) return 'PostgreSQL is not installed (/usr/lib/postgresql/*/bin/postgres); apt-get install postgresql'
  if (spawnSync('id', ['postgres']).status !== 0) return 'there is no postgres user to run initdb as'
  return false
}

/**
 * Starts a server on a port `freePort` found, another one while the server exits before it listens:
 * the port is free when found, not when the server binds it, and test files run side by side.
 */
async function onAFreePort(first: number, start: (port: number) => Promise<void>): Promise<number> {
  let port = first
  for (let attempt = 1; ; attempt++) {
    try {
      await start(port)
      return port
    } catch (err) {
      if (attempt >= 5 || !(err instanceof Error) || !/exited with \d+ before listening/.test(err.message)) throw err
      port = await freePort()
    }
  }
}

export async function startRedis(): Promise<StoreServer> {
  const dir = mkdtempSync(join(tmpdir(), 'as-redis-'))
  let port = await freePort()
  let child: ChildProcess
  const start = async () => {
    child = spawn(REDIS, ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'yes', '--appendfsync', 'always', '--protected-mode', 'no'], {
      stdio: 'ignore',
    })
    await waitForPort(port, child, 'redis-server')
  }
  port = await onAFreePort(port, async (p) => {
    port = p
    await start()
  })
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    get pid() {
      return child.pid
    },
    async kill() {
      child.kill('SIGKILL')
      await exited(child)
    },
    restart: start,
    async stop() {
      child.kill('SIGTERM')
      await exited(child)
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

export async function startPostgres(): Promise<StoreServer> {
  const bin = postgresBin()
  if (bin === null) throw new Error('PostgreSQL is not installed')
  const dir = mkdtempSync(join(tmpdir(), 'as-pg-'))
  chmodSync(dir, 0o755)
  const data = join(dir, 'data')
  const owner = spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' })
  const group = spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' })
  chownSync(dir, Number(owner.stdout.trim()), Number(group.stdout.trim()))
  const asPostgres = (cmd: string, args: string[]) => (process.getuid?.() === 0 ? ['runuser', ['-u', 'postgres', '--', cmd, ...args]] as const : [cmd, args] as const)
  const [initCmd, initArgs] = asPostgres(join(bin, 'initdb'), ['-D', data, '-A', 'trust', '-U', 'authsvc', '--no-sync', '-E', 'UTF8'])
  const init = spawnSync(initCmd, [...initArgs], { encoding: 'utf8' })
  if (init.status !== 0) throw new Error(`initdb failed: ${init.stderr}`)
  let port = await freePort()
  let child: ChildProcess
  const start = async () => {
    const [cmd, args] = asPostgres(join(bin, 'postgres'), ['-D', data, '-p', String(port), '-k', dir, '-c', 'listen_addresses=127.0.0.1', '-c', 'fsync=off', '-c', 'max_connections=200'])
    child = spawn(cmd, [...args], { stdio: 'ignore' })
    await waitForPort(port, child, 'postgres')
    // the port opens before the database accepts logins
    const deadline = Date.now() + 30_000
    for (;;) {
      const ready = spawnSync(join(bin, 'pg_isready'), ['-h', '127.0.0.1', '-p', String(port), '-U', 'authsvc', '-d', 'postgres'])
      if (ready.status === 0) break
      if (Date.now() > deadline) throw new Error('postgres did not accept connections')
      await new Promise((r) => setTimeout(r, 100))
    }
  }
  port = await onAFreePort(port, async (p) => {
    port = p
    await start()
  })
  // the postmaster's own id (runuser is its parent), from its lock file; its backends are its children
  const postmaster = () => Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0])
  const processes = () => {
    const pid = postmaster()
    return [pid, ...spawnSync('pgrep', ['-P', String(pid)], { encoding: 'utf8' }).stdout.split('\n').filter(Boolean).map(Number)]
  }
  const signal = (pid: number, sig: NodeJS.Signals) => {
    try {
      process.kill(pid, sig)
    } catch {
      // already gone
    }
  }
  return {
    url: `postgres://authsvc@127.0.0.1:${port}/postgres`,
    port,
    async freeze() {
      const pid = postmaster()
      signal(pid, 'SIGSTOP') // first, so it starts no backend the list below would miss
      for (const p of processes()) signal(p, 'SIGSTOP')
    },
    async thaw() {
      // runuser stops itself when its child stops; it must go on too, or it never reaps the postmaster
      if (child.pid !== undefined) signal(child.pid, 'SIGCONT')
      for (const pid of processes()) signal(pid, 'SIGCONT')
    },
    async kill() {
      // a crash: the postmaster and every backend at once, by id (a backend left behind would keep the old shared memory)
      for (const pid of processes()) signal(pid, 'SIGKILL')
      await exited(child)
    },
    restart: start,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        signal(postmaster(), 'SIGINT') // fast shutdown
        await exited(child)
      }
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
