/**
 * The gate as a service inside the REAL ComfyUI 0.3.64 (issue 27), skipped where none exists:
 * - `COMFYUI_DIR=… npm start -- --cpu --port P …` runs ComfyUI with its own Python (here
 *   COMFYUI_PYTHON, as the real-comfyui README says) and the given flags, reaches the login page,
 *   and its log is quiet when healthy: one "gate ready" line, no refusal or recovery lines, no
 *   line per request; SIGTERM to npm stops every process it started;
 * - a sidecar killed while 50 clients keep asking: every answer is a 200 or a 503 (fail closed,
 *   nothing else), the standby that waited beside it takes over at once, requests that came
 *   meanwhile wait for it instead of being refused, and answers come back. How fast is judged
 *   by `npm run bench` (bench/restart-bench.ts), not here.
 */
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { cpSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PYTHON, ROOT, poll } from '../helpers/stack.js'
import { REAL_COMFYUI, REAL_HOST_SKIP, comfySource, destroyRealHost, freePort, startRealHost } from '../helpers/real-host.js'
import { PASSWORD, json } from '../helpers/client.js'
import { alive, childrenOf, isStandbySidecar, processesWithEnv } from '../helpers/processes.js'
import { killUnderLoad, sidecarStable, standbyWaiting } from '../helpers/kill-under-load.js'

const post = (url: string, body: object, headers: Record<string, string> = {}) => fetch(url, {
  method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json', ...headers }, body: JSON.stringify(body),
})

describe('COMFYUI_DIR npm start runs the real ComfyUI, quietly', { skip: REAL_HOST_SKIP }, () => {
  const work = mkdtempSync(join(tmpdir(), 'as-comfydir-'))
  after(() => rmSync(work, { recursive: true, force: true }))

  it('npm start -- --cpu --port P: ComfyUI\'s Python, its flags, the login page, one ready line, no request lines; SIGTERM stops it all', async () => {
    // a ComfyUI of the user's own: install.sh links this package into its custom_nodes/
    const comfy = join(work, 'ComfyUI')
    cpSync(comfySource(), comfy, { recursive: true })
    const dataDir = join(work, 'data')
    const port = await freePort()
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      COMFYUI_DIR: comfy,
      COMFYUI_PYTHON: PYTHON,
      PYTHONPATH: join(REAL_COMFYUI, 'stubs'),
      AUTHSVC_DATA_DIR: dataDir,
      PYTHONUNBUFFERED: '1',
    }
    delete env.PORT
    delete env.AUTHSVC_SOCKET
    delete env.AUTHSVC_LOG_LEVEL // the default level, as a user runs it
    const args = ['start', '--silent', '--', '--cpu', '--port', String(port), '--front-end-root', join(REAL_COMFYUI, 'frontend')]
    const npm = spawn('npm', args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true })
    let out = ''
    npm.stdout!.on('data', (d: Buffer) => (out += d.toString()))
    npm.stderr!.on('data', (d: Buffer) => (out += d.toString()))
    const url = `http://127.0.0.1:${port}`
    try {
      const up = await poll(async () => {
        if (npm.exitCode !== null) return true
        try {
          return (await fetch(`${url}/login`)).status === 200
        } catch {
          return false
        }
      }, 180_000)
      assert.ok(up && npm.exitCode === null, `the login page did not come up on ${url}:\n${out}`)
      assert.match(out, new RegExp(`running ComfyUI in ${comfy.replace(/[.]/g, '\\.')} with ${PYTHON} \\(from COMFYUI_PYTHON\\): main\\.py --listen 127\\.0\\.0\\.1 --cpu --port ${port} --front-end-root`))
      const page = await fetch(`${url}/login`)
      assert.match(page.headers.get('content-type') ?? '', /^text\/html/)
      assert.match(await page.text(), /<form/)

      // what a first user does: register, sign in, use the API, hit a missing page
      assert.equal((await post(`${url}/register`, { username: 'admin', password: PASSWORD })).status, 201)
      const { jwt_token: jwt } = await json(await post(`${url}/login`, { username: 'admin', password: PASSWORD }))
      assert.equal((await fetch(`${url}/prompt`, { headers: { Authorization: `Bearer ${jwt}` } })).status, 200)
      assert.equal((await fetch(`${url}/authsvc/api/users`, { headers: { Authorization: `Bearer ${jwt}` } })).status, 200)
      assert.equal((await fetch(`${url}/authsvc/nope`, { headers: { Authorization: `Bearer ${jwt}` } })).status, 404)
      assert.equal((await fetch(`${url}/prompt`)).status, 401)

      const lines = out.split('\n')
      assert.equal(lines.filter((l) => /authsvc: gate ready: authsvc \d/.test(l)).length, 1, `one "gate ready" line:\n${out}`)
      assert.match(out, new RegExp(`gate ready: .*data dir ${dataDir.replace(/[.]/g, '\\.')}`))
      assert.deepEqual(lines.filter((l) => /refus|work again|works again/i.test(l)), [], 'no refusal or recovery line on a healthy start')
      assert.deepEqual(lines.filter((l) => /"msg":"(request|incoming request|request completed|route not found)"|Server listening at/.test(l)), [], 'no line per request')
      assert.deepEqual(lines.filter((l) => /\/authsvc\/api\/users|\/prompt/.test(l)), [], 'no request path in the log')

      const tree = processesWithEnv(`AUTHSVC_DATA_DIR=${dataDir}`)
      assert.ok(tree.length >= 3, `ComfyUI, the sidecar and its standby carry the data dir: ${tree}`)
      const exited = once(npm, 'exit')
      process.kill(npm.pid!, 'SIGTERM')
      await exited
      assert.ok(await poll(async () => processesWithEnv(`AUTHSVC_DATA_DIR=${dataDir}`).length === 0, 20_000),
        `still running after SIGTERM: ${processesWithEnv(`AUTHSVC_DATA_DIR=${dataDir}`)}`)
    } finally {
      for (const pid of [-npm.pid!, ...processesWithEnv(`AUTHSVC_DATA_DIR=${dataDir}`)]) {
        try {
          process.kill(pid, 'SIGKILL')
        } catch {
          // gone
        }
      }
    }
  })
})

describe('a sidecar killed under load, real ComfyUI', { skip: REAL_HOST_SKIP }, () => {
  it('50 clients: only 200s and 503s, the standby takes over at once, requests wait for it, answers come back', async () => {
    const host = await startRealHost({})
    try {
      assert.equal((await post(`${host.url}/register`, { username: 'root', password: PASSWORD })).status, 201)
      const token = (await json(await post(`${host.url}/authsvc/generate_token`, { username: 'root', password: PASSWORD, label: 'load' }))).token as string
      assert.ok(await standbyWaiting(host.host.pid!), 'a standby waits beside the running sidecar')
      await sidecarStable(join(host.dataDir, 'sidecar.pid')) // a younger one dying is a crash loop, replaced after a pause
      const standby = childrenOf(host.host.pid!).find(isStandbySidecar)!
      const before = host.sidecarPid()
      const result = await killUnderLoad({ url: host.url, token, clients: 50, sidecarPid: () => host.sidecarPid(), timeoutMs: 60_000 })
      assert.deepEqual(result.unexpected, [], 'fail closed: nothing but 200 and 503')
      // refused: at most the requests in flight when it died, one per client; the rest waited
      assert.ok(result.refused <= 50, `${result.refused} refusals: requests sent during the restart waited for it`)
      assert.ok(result.slowestMs < 2000 + 500, `no request waited past the decision timeout (${result.slowestMs.toFixed(0)} ms)`)
      assert.equal(host.sidecarPid(), standby, 'the standby became the sidecar')
      assert.ok(!alive(before))
      console.log(`no answer for ${result.silentMs.toFixed(0)} ms, 503s until ${result.windowMs.toFixed(0)} ms after the kill (${result.refused} of ${result.answered} answers)`)
      assert.match(host.output(), /authsvc: sidecar exited \(status -9\); restarting now \(requests wait for it\)/)
      assert.match(host.output(), /authsvc: sidecar restarted \(pid \d+\)/)
      // a new standby is spawned for the next time
      assert.ok(await poll(async () => childrenOf(host.host.pid!).some((pid) => pid !== standby && isStandbySidecar(pid)), 30_000), 'a new standby waits again')
    } finally {
      await destroyRealHost(host)
    }
  })
})
