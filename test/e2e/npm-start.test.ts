/**
 * The README's quick start: `npm start` (install.sh, then `node scripts/start.mjs`)
 * serves the gated ComfyUI stand-in on 127.0.0.1:$PORT with the data dir from
 * AUTHSVC_DATA_DIR. Runs scripts/start.mjs as `npm start` does after install
 * and checks what a new user sees: health, a refused API call, the redirect
 * of the browser, the first administrator's registration; then that a stop
 * (SIGTERM from a service manager, or Ctrl-C: SIGINT to the whole process
 * group) ends every process, the sidecar included. Run on aiohttp 3.8 and 3.11.
 */
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, readFileSync, rmSync, existsSync } from 'node:fs'
import { join } from 'node:path'
import { tmpdir } from 'node:os'
import { AIOHTTP_VERSIONS, ROOT, freePort, poll, pythonEnv, type AiohttpVersion } from '../helpers/stack.js'
import { PASSWORD, json } from '../helpers/client.js'
import { alive, childrenOf, isStandbySidecar, processesWithEnv } from '../helpers/processes.js'

interface Started {
  child: ChildProcess
  url: string
  output: () => string
}

async function npmStart(aiohttp: AiohttpVersion, dataDir: string): Promise<Started> {
  const port = await freePort()
  const env: NodeJS.ProcessEnv = { ...process.env, ...pythonEnv(aiohttp), PORT: String(port), AUTHSVC_DATA_DIR: dataDir, PYTHONUNBUFFERED: '1' }
  delete env.COMFYUI_DIR // the bundled stand-in, as on a fresh machine
  delete env.AUTHSVC_SOCKET
  // detached: its own process group, so a Ctrl-C (SIGINT to the group) can be reproduced
  const child = spawn(process.execPath, [join(ROOT, 'scripts/start.mjs')], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true })
  let out = ''
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()))
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()))
  const url = `http://127.0.0.1:${port}`
  const up = await poll(async () => {
    if (child.exitCode !== null) return true
    try {
      return (await fetch(`${url}/authsvc/health`)).status === 200
    } catch {
      return false // not listening yet
    }
  }, 30_000)
  assert.ok(up && child.exitCode === null, `npm start did not come up on ${url}:\n${out}`)
  return { child, url, output: () => out }
}

/** Everything `npm start` runs: start.mjs, the host it spawned, and the sidecar (from sidecar.pid). */
function processTree(started: Started, dataDir: string): { node: number; host: number; sidecar: number; standbys: number[] } {
  const node = started.child.pid!
  const hosts = childrenOf(node)
  assert.equal(hosts.length, 1, `start.mjs has one child (the host): ${hosts}`)
  const sidecar = Number(readFileSync(join(dataDir, 'sidecar.pid'), 'utf8'))
  assert.ok(alive(sidecar), `sidecar ${sidecar} is running`)
  const children = childrenOf(hosts[0])
  assert.ok(children.includes(sidecar), `the host's children ${children} include the sidecar of sidecar.pid`)
  const others = children.filter((pid) => pid !== sidecar)
  assert.ok(others.every(isStandbySidecar), `the host's other children are standby sidecars: ${others}`)
  for (const pid of children) assert.match(readFileSync(`/proc/${pid}/cmdline`, 'utf8'), /sidecar\/dist\/main\.js/)
  return { node, host: hosts[0], sidecar, standbys: others }
}

async function expectAllGone(started: Started, pids: { node: number; host: number; sidecar: number; standbys: number[] }): Promise<void> {
  const timer = setTimeout(() => started.child.kill('SIGKILL'), 15_000)
  const done = started.child.exitCode !== null || started.child.signalCode !== null
  const [code, signal] = done ? [started.child.exitCode, started.child.signalCode] : await once(started.child, 'exit')
  clearTimeout(timer)
  assert.equal(signal, null, `start.mjs was killed by ${signal}:\n${started.output()}`)
  assert.equal(code, 0, `start.mjs exit code:\n${started.output()}`)
  assert.ok(await poll(async () => !alive(pids.host), 5000), `the host ${pids.host} outlived start.mjs`)
  assert.ok(await poll(async () => !alive(pids.sidecar), 5000), `the sidecar ${pids.sidecar} outlived the host`)
  for (const standby of pids.standbys) assert.ok(await poll(async () => !alive(standby), 5000), `the standby ${standby} outlived the host`)
}

for (const aiohttp of AIOHTTP_VERSIONS) {
  describe(`npm start, aiohttp ${aiohttp}`, { concurrency: false }, () => {
    const dataDir = join(mkdtempSync(join(tmpdir(), 'as-npm-start-')), 'data') // does not exist yet
    const running: Started[] = []
    after(() => {
      for (const s of running) if (s.child.exitCode === null && s.child.signalCode === null) process.kill(-s.child.pid!, 'SIGKILL')
      rmSync(join(dataDir, '..'), { recursive: true, force: true })
    })

    it('serves the gated stand-in: health, 401 for the API, 302 for the browser, first admin; SIGTERM stops everything', async () => {
      const started = await npmStart(aiohttp, dataDir)
      running.push(started)
      assert.match(started.output(), new RegExp(`starting the ComfyUI stand-in on ${started.url.replace(/\./g, '\\.')} \\(data dir ${dataDir.replace(/\./g, '\\.')}\\)`))

      const health = await fetch(`${started.url}/authsvc/health`)
      assert.equal(health.status, 200)
      assert.deepEqual(await json(health), { status: 'ok', version: '0.1.0', users: false })

      const api = await fetch(`${started.url}/prompt`)
      assert.equal(api.status, 401)
      assert.match(api.headers.get('content-type') ?? '', /^application\/json/)
      assert.equal((await json(api)).code, 'AUTH_REQUIRED')

      const page = await fetch(`${started.url}/`, { headers: { Accept: 'text/html,application/xhtml+xml' }, redirect: 'manual' })
      assert.equal(page.status, 302)
      assert.match(page.headers.get('location') ?? '', /^\/(register|login)(\?|$)/)

      const reg = await fetch(`${started.url}/register`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ username: 'admin', password: PASSWORD }),
      })
      assert.equal(reg.status, 201, await reg.clone().text())
      assert.equal((await json(await fetch(`${started.url}/authsvc/health`))).users, true)

      const pids = processTree(started, dataDir)
      process.kill(started.child.pid!, 'SIGTERM') // start.mjs alone, as a service manager would
      await expectAllGone(started, pids)
      assert.equal(existsSync(join(dataDir, 'sidecar.pid')), false, 'the sidecar removed its pid file')
    })

    it('restarts on the same data dir with the admin kept; Ctrl-C (SIGINT to the process group) stops everything', async () => {
      const started = await npmStart(aiohttp, dataDir)
      running.push(started)
      const login = await fetch(`${started.url}/login`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
        body: JSON.stringify({ username: 'admin', password: PASSWORD }),
      })
      assert.equal(login.status, 200, await login.clone().text())
      const { jwt_token: jwt } = await json(login)
      const queue = await fetch(`${started.url}/queue`, { headers: { Authorization: `Bearer ${jwt}` } })
      assert.equal(queue.status, 200)

      const pids = processTree(started, dataDir)
      process.kill(-started.child.pid!, 'SIGINT') // the terminal's Ctrl-C: every process of the group gets it
      await expectAllGone(started, pids)
    })
  })
}

/** `npm start` on the stand-in, as a user runs it, in its own process group, on a free port and a fresh data dir. */
async function spawnNpmStart(aiohttp: AiohttpVersion, tag: string): Promise<{ npm: ChildProcess; dataDir: string; port: number; output: () => string }> {
  const dataDir = join(mkdtempSync(join(tmpdir(), tag)), 'data')
  const port = await freePort()
  const env: NodeJS.ProcessEnv = { ...process.env, ...pythonEnv(aiohttp), PORT: String(port), AUTHSVC_DATA_DIR: dataDir, PYTHONUNBUFFERED: '1' }
  delete env.COMFYUI_DIR
  delete env.AUTHSVC_SOCKET
  const npm = spawn('npm', ['start', '--silent'], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true })
  let out = ''
  npm.stdout!.on('data', (d: Buffer) => (out += d.toString()))
  npm.stderr!.on('data', (d: Buffer) => (out += d.toString()))
  return { npm, dataDir, port, output: () => out }
}

/** Every process below `pid` (children, their children...). */
function descendants(pid: number): number[] {
  const out: number[] = []
  for (const child of childrenOf(pid)) out.push(child, ...descendants(child))
  return out
}

async function portRefuses(url: string): Promise<boolean> {
  try {
    await fetch(`${url}/authsvc/health`)
    return false
  } catch {
    return true // nothing listens any more
  }
}

// Issue 9, hole 12: a TERM to `npm start` (a process manager, `timeout`) ended npm, but the host and
// the sidecar kept running, orphaned, holding the port. Each row sends one stop signal to the npm
// process alone (not its group) and expects every process it started to end and the port to be free.
// One aiohttp version: the hole is in process management, not in the host's HTTP library.
describe('`npm start` itself: every stop signal stops the whole tree', { concurrency: false }, () => {
  const aiohttp = AIOHTTP_VERSIONS[0]
  const rows: Array<[NodeJS.Signals, string]> = [
    ['SIGTERM', 'a process manager or `timeout` stops npm'],
    ['SIGINT', 'an interrupt sent to npm alone (not the terminal\'s whole group)'],
    ['SIGHUP', 'the terminal running npm closes (npm does not forward HUP)'],
  ]
  for (const [signal, why] of rows) {
    it(`${signal} to npm (${why}) ends npm, start.mjs, the host and the sidecar; the port is free`, async () => {
      const { npm, dataDir, port, output } = await spawnNpmStart(aiohttp, 'as-npm-signal-')
      const url = `http://127.0.0.1:${port}`
      let tree: number[] = []
      try {
        // install.sh runs first and may rebuild the sidecar: a generous limit, polled, never slept
        const up = await poll(async () => npm.exitCode === null && existsSync(join(dataDir, 'sidecar.pid')) && !(await portRefuses(url)), 180_000)
        assert.ok(up, `npm start did not come up on ${url}:\n${output()}`)
        tree = descendants(npm.pid!)
        const sidecar = Number(readFileSync(join(dataDir, 'sidecar.pid'), 'utf8'))
        assert.ok(tree.includes(sidecar), `the sidecar ${sidecar} is in npm's tree ${tree}`)
        assert.ok(tree.length >= 3, `npm's tree holds start.mjs, the host and the sidecar: ${tree}`)
        const exited = once(npm, 'exit')
        process.kill(npm.pid!, signal)
        await exited
        const gone = await poll(async () => tree.every((pid) => !alive(pid)), 15_000)
        assert.ok(gone, `still running after ${signal} to npm: ${tree.filter(alive)}\n${output()}`)
        assert.ok(await portRefuses(url), `port ${port} is still served`)
      } finally {
        // when the row fails, nothing it started may outlive it (the sidecar runs in its own session)
        for (const pid of [-npm.pid!, ...tree]) {
          try {
            process.kill(pid, 'SIGKILL')
          } catch {
            // gone already
          }
        }
        rmSync(join(dataDir, '..'), { recursive: true, force: true })
      }
    })
  }
})

// Issue 27: a stop signal stops everything `npm start` started in every state it can be in, not only
// once it is up: while the host is still starting, while a standby sidecar waits beside the running
// one, and while a killed sidecar is being replaced. Each row: SIGTERM to npm alone, then no process
// of its tree may be left and the port must be free.
describe('`npm start` stopped in each state leaves no process behind', { concurrency: false }, () => {
  const aiohttp = AIOHTTP_VERSIONS[0]
  type State = 'starting' | 'running with a standby' | 'replacing a killed sidecar'
  const states: State[] = ['starting', 'running with a standby', 'replacing a killed sidecar']
  for (const state of states) {
    it(`SIGTERM while ${state}`, async () => {
      const { npm, dataDir, port, output } = await spawnNpmStart(aiohttp, 'as-npm-state-')
      const url = `http://127.0.0.1:${port}`
      const seen = new Set<number>()
      const collect = () => {
        for (const pid of descendants(npm.pid!)) seen.add(pid)
      }
      try {
        if (state === 'starting') {
          // the host process exists (start.mjs spawned it) but the gate is not answering yet
          const spawned = await poll(async () => npm.exitCode === null && /starting the ComfyUI stand-in/.test(output()) && descendants(npm.pid!).length >= 2, 180_000)
          assert.ok(spawned, `npm start did not spawn the host:\n${output()}`)
          assert.ok(!existsSync(join(dataDir, 'sidecar.pid')), 'caught before the sidecar was ready')
        } else {
          const up = await poll(async () => npm.exitCode === null && existsSync(join(dataDir, 'sidecar.pid')) && !(await portRefuses(url)), 180_000)
          assert.ok(up, `npm start did not come up on ${url}:\n${output()}`)
          const standby = await poll(async () => descendants(npm.pid!).some(isStandbySidecar), 30_000)
          assert.ok(standby, `no standby sidecar appeared beside the running one: ${descendants(npm.pid!)}`)
          if (state === 'replacing a killed sidecar') {
            collect()
            process.kill(Number(readFileSync(join(dataDir, 'sidecar.pid'), 'utf8')), 'SIGKILL')
          }
        }
        collect()
        const exited = once(npm, 'exit')
        process.kill(npm.pid!, 'SIGTERM')
        await exited
        // also what was spawned after the last look: every process that carries this run's data dir
        const left = () => [...new Set([...[...seen].filter(alive), ...processesWithEnv(`AUTHSVC_DATA_DIR=${dataDir}`)])]
        const gone = await poll(async () => left().length === 0, 15_000)
        assert.ok(gone, `still running after SIGTERM while ${state}: ${left()}\n${output()}`)
        assert.ok(await portRefuses(url), `port ${port} is still served`)
      } finally {
        for (const pid of [-npm.pid!, ...seen, ...processesWithEnv(`AUTHSVC_DATA_DIR=${dataDir}`)]) {
          try {
            process.kill(pid, 'SIGKILL')
          } catch {
            // gone already
          }
        }
        rmSync(join(dataDir, '..'), { recursive: true, force: true })
      }
    })
  }
})
