/**
 * Issue 14 on the real ComfyUI: the package installed as ComfyUI-Manager installs it (a git
 * clone into custom_nodes/, then install.py with ComfyUI's Python), started without any
 * install step, updated by a second commit, and refused a bad config.
 *
 * One upstream repository (a clone of this one's HEAD) and one user clone of it run through
 * the steps in order; the first step runs install.py for real (npm ci from the registry or
 * npm's cache, sqlite3's install script, then the build); later clones hardlink that
 * node_modules, since they are about the build, not about npm. sqlite3's install script finds
 * its prebuilt binary where a local prebuild is looked for first (`sqlitePrebuildEnv`): a user's
 * machine downloads it from GitHub, which is not reachable here, and compiling it instead took
 * two to three minutes of the CI run.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync, existsSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { REAL_HOST_SKIP, startRealHost, type RealHost } from '../helpers/real-host.js'
import { NAVIGATION, clone, get, git, lines, runInstallPy, sqliteCompiled, sqlitePrebuildEnv, until } from './install-kit.js'

const MESSAGE = 'Authentication required'
/** Our own failures (ComfyUI logs tracebacks of its optional nodes on this machine: not ours). */
const PLUGIN_TROUBLE = /custom_nodes\/authsvc\/.*", line \d+|setup failed|Cannot find module|IMPORT FAILED.*authsvc/

/** A release as upstream would publish it: a source change the running sidecar shows, and a lockfile change. */
function commitUpdate(upstream: string, tag: string): void {
  const errors = join(upstream, 'sidecar/src/kernel/errors.ts')
  const source = readFileSync(errors, 'utf8')
  const next = source.replace(/message: 'Authentication required[^']*'/, `message: '${MESSAGE} (${tag})'`)
  assert.notEqual(next, source, 'kernel/errors.ts still holds the AUTH_REQUIRED message this test edits')
  writeFileSync(errors, next)
  for (const file of ['package.json', 'package-lock.json']) {
    const path = join(upstream, file)
    const json = JSON.parse(readFileSync(path, 'utf8'))
    json.version = `${json.version.split('-')[0]}-${tag}`
    if (json.packages?.['']) json.packages[''].version = json.version
    writeFileSync(path, JSON.stringify(json, null, 2) + '\n')
  }
  git(upstream, 'commit', '-q', '-am', `release ${tag}`)
}

/** The message of the 401 an anonymous API call gets, or undefined while the gate refuses (503). */
async function authMessage(host: RealHost): Promise<string | undefined> {
  const res = await get(`${host.url}/prompt`)
  if (res.status === 503) {
    assert.equal(JSON.parse(res.body).code, 'AUTHSVC_UNAVAILABLE')
    return undefined
  }
  assert.equal(res.status, 401, res.body)
  return JSON.parse(res.body).error
}

describe('install like a custom node, on the real ComfyUI', { skip: REAL_HOST_SKIP }, () => {
  let dir = ''
  let upstream = ''
  let user = ''
  let npmEnv: NodeJS.ProcessEnv = {}
  const hosts: RealHost[] = []
  async function start(clonePath: string, env: NodeJS.ProcessEnv = {}, config?: Record<string, unknown>): Promise<RealHost> {
    const host = await startRealHost({ gate: false, customNodes: [clonePath], noWait: true, env, config })
    hosts.push(host)
    return host
  }
  async function stopAll(): Promise<void> {
    for (const host of hosts.splice(0)) await host.stop()
  }

  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'as-install-'))
    upstream = clone(join(dir, 'upstream'))
    user = clone(join(dir, 'user', 'authsvc'), upstream)
    npmEnv = { ...process.env, ...sqlitePrebuildEnv(join(dir, 'prebuilds')) }
  })
  after(async () => {
    await stopAll()
    rmSync(dir, { recursive: true, force: true })
  })

  it('install.py on a fresh clone installs for real; a second run changes nothing and takes seconds; ComfyUI then works', { timeout: 300_000 }, async () => {
    const first = await runInstallPy(user, npmEnv)
    assert.equal(first.status, 0, first.stdout + first.stderr)
    assert.ok(!sqliteCompiled(user), 'sqlite3 was compiled: its install script did not take the local prebuild (sqlitePrebuildEnv)')
    assert.match(first.stdout, /installing npm dependencies/)
    assert.match(first.stdout, /building the sidecar/)
    assert.ok(lines(first.stdout, /./).length <= 4, `short progress lines only:\n${first.stdout}`)
    const stamp = join(user, 'sidecar/dist/.build-stamp.json')
    const installed = join(user, 'node_modules/.package-lock.json')
    const before = [statSync(stamp).mtimeMs, statSync(installed).mtimeMs]

    const second = await runInstallPy(user, npmEnv)
    assert.equal(second.status, 0, second.stdout + second.stderr)
    assert.match(second.stdout, /nothing to do/)
    assert.ok(second.ms < 5000, `a second run takes seconds, not ${second.ms} ms`)
    assert.deepEqual([statSync(stamp).mtimeMs, statSync(installed).mtimeMs], before, 'the second run rewrote the install')

    const host = await start(user)
    const page = await until(async () => {
      const res = await get(`${host.url}/`, NAVIGATION)
      return res.status === 302 ? res : undefined
    }, 60_000, 'the login redirect', host.output)
    assert.equal(page.location, '/login?next=%2F')
    assert.equal(await authMessage(host), MESSAGE)
    assert.deepEqual(lines(host.output(), /finishing the installation|cannot start the sidecar/), [])
    assert.deepEqual(lines(host.output(), PLUGIN_TROUBLE), [])
    await stopAll()
  })

  it('a plain clone started without any install step: the finishing page, JSON 503 for the API, then the login page by itself', { timeout: 300_000 }, async () => {
    const plain = clone(join(dir, 'plain', 'authsvc'), upstream)
    // npm is not the subject here (the test above ran it): the same dependencies, hardlinked
    execFileSync('cp', ['-al', join(user, 'node_modules'), join(plain, 'node_modules')])
    const host = await start(plain)

    const page = await get(`${host.url}/`, NAVIGATION)
    assert.equal(page.status, 503)
    assert.match(page.type, /^text\/html/)
    assert.match(page.body, /authsvc is finishing its installation/)
    assert.match(page.body, /<meta http-equiv="refresh" content="\d+">/)
    const api = await get(`${host.url}/prompt`, { Accept: 'application/json' })
    assert.equal(api.status, 503)
    assert.equal(JSON.parse(api.body).code, 'AUTHSVC_UNAVAILABLE')

    const login = await until(async () => {
      const res = await get(`${host.url}/`, NAVIGATION)
      if (res.status === 503) {
        assert.match(res.body, /authsvc is (finishing its installation|starting)/)
        return undefined
      }
      return res
    }, 240_000, 'the login redirect after the background install', host.output)
    assert.equal(login.status, 302)
    const loginPage = await get(`${host.url}${login.location}`, NAVIGATION)
    assert.equal(loginPage.status, 200)
    assert.match(loginPage.type, /^text\/html/)

    const out = host.output()
    assert.equal(lines(out, /sidecar is not built.*finishing the installation in the background/).length, 1, out)
    assert.equal(lines(out, /authsvc install: building the sidecar/).length, 1, out)
    assert.deepEqual(lines(out, /cannot start the sidecar/), [])
    assert.deepEqual(lines(out, PLUGIN_TROUBLE), [])
    assert.ok(existsSync(join(plain, 'sidecar/dist/.build-stamp.json')))
    await stopAll()
  })

  it('an update (lockfile and a source changed) followed by install.py gives a working, rebuilt sidecar', { timeout: 180_000 }, async () => {
    commitUpdate(upstream, 'u2')
    git(user, 'pull', '-q', '--ff-only')
    const run = await runInstallPy(user, npmEnv)
    assert.equal(run.status, 0, run.stdout + run.stderr)
    assert.match(run.stdout, /building the sidecar/)
    const host = await start(user)
    const message = await until(() => authMessage(host), 60_000, 'the rebuilt sidecar', host.output)
    assert.equal(message, `${MESSAGE} (u2)`)
    await stopAll()
  })

  it('an update without install.py: the page says what to run and no sidecar starts; with the background install, never the old sidecar', { timeout: 240_000 }, async () => {
    commitUpdate(upstream, 'u3')
    git(user, 'pull', '-q', '--ff-only')

    // the owner turned the background install off: the page names the problem and the fix, and nothing runs
    const host = await start(user, { AUTHSVC_AUTO_INSTALL: '0' })
    const page = await until(async () => {
      const res = await get(`${host.url}/`, NAVIGATION)
      return /cannot start/.test(res.body) ? res : undefined
    }, 30_000, 'the page naming the stale build', host.output)
    assert.equal(page.status, 503)
    assert.match(page.body, /older than this package&#x27;s sources/)
    assert.match(page.body, /python authsvc\/install\.py/)
    for (let i = 0; i < 5; i++) assert.equal(await authMessage(host), undefined)
    const out = host.output()
    assert.equal(lines(out, /cannot start the sidecar: the sidecar build is older than this package's sources/).length, 1, out)
    assert.ok(!existsSync(join(host.dataDir, 'sidecar.pid')), 'a stale sidecar was started')
    await stopAll()

    // default: the plugin rebuilds by itself; every answer before the new sidecar is a 503, never the u2 sidecar's
    const auto = await start(user)
    const message = await until(() => authMessage(auto), 180_000, 'the sidecar rebuilt in the background', auto.output)
    assert.equal(message, `${MESSAGE} (u3)`)
    await stopAll()
  })

  it('a refused config is logged once, named on the page, and picked up as soon as it is fixed', { timeout: 120_000 }, async () => {
    const host = await start(user, {}, { no_such_setting: true })
    const page = await until(async () => {
      const res = await get(`${host.url}/`, NAVIGATION)
      return /cannot start/.test(res.body) ? res : undefined
    }, 30_000, 'the page naming the refused config', host.output)
    assert.match(page.body, /refused its configuration/)
    for (let i = 0; i < 10; i++) assert.equal((await get(`${host.url}/prompt`)).status, 503)
    writeFileSync(join(host.dataDir, 'config.json'), '{}')
    const message = await until(() => authMessage(host), 30_000, 'the sidecar after the config fix', host.output)
    assert.equal(message, `${MESSAGE} (u3)`)
    const out = host.output()
    assert.equal(lines(out, /refused its configuration/).length, 1, out)
    assert.equal(lines(out, /invalid configuration; not starting/).length, 1, out)
    await stopAll()
  })
})
