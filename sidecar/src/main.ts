/**
 * The sidecar process: config → services → app → sockets. All I/O of start-up
 * lives here. Exits non-zero with every configuration problem listed when the
 * config is invalid; exits when its stdin closes if asked to (the plugin's
 * pipe), so it never outlives the ComfyUI process that started it.
 */
import { mkdirSync, chmodSync, mkdtempSync, writeFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { buildApp, prepareApp } from './app.js'
import { transfersRunning } from './downloads/queue.js'
import { systemClock } from './kernel/clock.js'
import { ConfigError, dataDirFromEnv, loadConfig } from './kernel/config/load.js'
import { listenDecisionSocket, removeStaleSocket } from './kernel/server.js'
import { createLogger } from './kernel/log.js'
import { SERVICE_VERSION, openServices } from './services.js'
import { SecretMismatchError, StoreConfigError } from './store/open.js'

/**
 * A standby (AUTHSVC_STANDBY=1) has loaded every module (most of a start's CPU) and waits for
 * one line on stdin before it touches the data dir: the plugin promotes it the moment the
 * running sidecar dies, so decisions come back without a cold start (issue 27). Its stdin
 * closing first means the host is gone: it exits without having done anything.
 */
function standbyUntilPromoted(): Promise<boolean> {
  return new Promise((resolve) => {
    let seen = ''
    const onData = (chunk: Buffer) => {
      seen += chunk.toString('utf8')
      if (!seen.includes('\n')) return
      process.stdin.off('data', onData)
      process.stdin.off('end', onEnd)
      // paused until the stdin watch below takes over: an EOF (the host died) meanwhile must
      // not be emitted to nobody, or this sidecar would outlive its host
      process.stdin.pause()
      resolve(seen.startsWith('go'))
    }
    const onEnd = () => resolve(false)
    process.stdin.on('data', onData)
    process.stdin.once('end', onEnd)
  })
}

/**
 * A standby's rehearsal: one whole start (store, app, its routes and schemas) on a scratch data
 * dir, closed again. V8 compiles a function on its first call and several modules load parts of
 * themselves on first use; after the rehearsal a promotion pays for neither. Nothing of the real
 * data dir is touched, and the scratch dir is removed whether the rehearsal worked or not.
 */
async function rehearse(): Promise<void> {
  const scratch = mkdtempSync(join(tmpdir(), 'authsvc-standby-'))
  // a standby stopped mid-rehearsal (the host stopping) leaves no scratch dir behind
  const stopped = () => {
    rmSync(scratch, { recursive: true, force: true })
    process.exit(0)
  }
  process.once('SIGTERM', stopped)
  process.once('SIGINT', stopped)
  try {
    const quiet = createLogger({ level: 'silent' })
    const defaults = loadConfig(scratch, {})
    const config = { ...defaults, argon2: { ...defaults.argon2, memory_kib: 64, time_cost: 1, parallelism: 1 } }
    const services = await openServices({ config, dataDir: scratch, env: { AUTHSVC_SECRET: 'standby-rehearsal-only' }, log: quiet, watchGroups: false })
    const built = buildApp(services, quiet)
    await built.app.ready()
    await built.app.inject({ method: 'GET', url: '/authsvc/health' })
    await built.stop()
    await built.app.close()
    await services.close()
  } finally {
    process.off('SIGTERM', stopped)
    process.off('SIGINT', stopped)
    rmSync(scratch, { recursive: true, force: true })
  }
}

async function main(): Promise<void> {
  const log = createLogger()
  const prepared = prepareApp(log, systemClock)
  const standby = process.env.AUTHSVC_STANDBY === '1'
  if (standby) {
    let told = false // promoted (or told to go away) already
    const promoted = standbyUntilPromoted().finally(() => (told = true))
    // the real app's routes and schemas, before the data dir may be touched: a promotion then
    // only opens the store and binds the decision side to it
    await prepared.app.ready()
    // a rehearsal that fails only costs the promotion its head start; none once promoted
    if (!told) await rehearse().catch(() => {})
    if (!(await promoted)) process.exit(0)
  }
  // what the start costs from here (the standby's promotion, or a cold start after the imports)
  const since = { at: performance.now(), cpu: process.cpuUsage() }
  const dataDir = dataDirFromEnv(process.env)
  mkdirSync(dataDir, { recursive: true, mode: 0o700 })
  chmodSync(dataDir, 0o700)
  let config
  try {
    config = loadConfig(dataDir, process.env)
  } catch (err) {
    if (err instanceof ConfigError) {
      log.fatal({ problems: err.problems }, 'invalid configuration; not starting')
      process.exit(2)
    }
    throw err
  }
  const decisionSocket = process.env.AUTHSVC_SOCKET || join(dataDir, 'authsvc.sock')
  const httpSocket = decisionSocket.replace(/\.sock$/, '') + '-http.sock'
  let services
  try {
    services = await openServices({ config, dataDir, env: process.env, log })
  } catch (err) {
    if (err instanceof SecretMismatchError || err instanceof StoreConfigError) {
      log.fatal(err.message)
      process.exit(2)
    }
    throw err
  }
  const built = prepared.bind(services)
  const { app, handlers } = built
  removeStaleSocket(httpSocket)
  const oldMask = process.umask(0o177)
  try {
    await app.listen({ path: httpSocket })
  } finally {
    process.umask(oldMask)
  }
  chmodSync(httpSocket, 0o600)
  const decisionServer = await listenDecisionSocket(decisionSocket, handlers(httpSocket), log, {
    windowMs: Number(process.env.AUTHSVC_BUSY_POLL_US ?? 2000) / 1000,
    // not while a password hash or a download runs: the CPU is spoken for, and polling takes from it
    cpuIsFree: () => !services.passwords.hashing && !transfersRunning(),
  })
  built.setPush(decisionServer.push)
  built.setFlushed(decisionServer.flushed)
  const pidFile = join(dataDir, 'sidecar.pid')
  writeFileSync(pidFile, `${process.pid}\n`, { mode: 0o600 })
  chmodSync(pidFile, 0o600) // a leftover file keeps its mode through writeFileSync
  // under the plugin, the plugin's own "gate ready" line says this once for both processes
  const readyLevel = process.env.AUTHSVC_EXIT_ON_STDIN_EOF === '1' ? 'debug' : 'info'
  const cpu = process.cpuUsage(since.cpu)
  log[readyLevel]({
    decisionSocket, httpSocket, dataDir, users: services.users.count, standby,
    start_ms: Math.round(performance.now() - since.at), start_cpu_ms: Math.round((cpu.user + cpu.system) / 1000),
  }, 'authsvc sidecar ready')
  services.events.emit('server_started', { version: SERVICE_VERSION, users: services.users.count })

  let stopping = false
  const stop = async (reason: string) => {
    if (stopping) return
    stopping = true
    log.info({ reason }, 'stopping')
    decisionServer.server.close()
    await built.stop() // every feature's jobs: watchers, checks, workers, the session prune
    await app.close().catch(() => {})
    await services.close().catch((err: unknown) => log.error({ err }, 'store close failed'))
    rmSync(pidFile, { force: true })
    removeStaleSocket(decisionSocket)
    process.exit(0)
  }
  process.on('SIGTERM', () => void stop('SIGTERM'))
  process.on('SIGINT', () => void stop('SIGINT'))
  if (process.env.AUTHSVC_EXIT_ON_STDIN_EOF === '1') {
    process.stdin.on('end', () => void stop('parent gone (stdin closed)'))
    process.stdin.on('error', () => void stop('parent gone (stdin error)'))
    process.stdin.resume()
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`authsvc sidecar failed to start: ${(err as Error).stack ?? String(err)}\n`)
  process.exit(1)
})
