/**
 * DESIGN §2.1 end to end, over real HTTP through the stand-in: the gate
 * answers 503 AUTHSVC_UNAVAILABLE and never calls a handler when the sidecar
 * is not started yet, killed, slower than the timeout, answering garbage or
 * another protocol version, and when the plugin's own setup fails.
 */
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, writeFileSync, chmodSync, rmSync, existsSync } from 'node:fs'
import { join } from 'node:path'
import { tmpdir } from 'node:os'
import { AIOHTTP_VERSIONS, ROOT, destroyStack, poll, startStack, type Stack } from '../helpers/stack.js'

async function expectUnavailable(stack: Stack, path = '/prompt'): Promise<void> {
  const res = await fetch(stack.url + path, { headers: { Accept: 'application/json' } })
  assert.equal(res.status, 503, `${path} answered ${res.status}`)
  const body = (await res.json()) as { code: string; statusCode: number }
  assert.equal(body.code, 'AUTHSVC_UNAVAILABLE')
  assert.equal(body.statusCode, 503)
}

interface Fake {
  socket: string
  child: ChildProcess
  dir: string
  /** how many decide frames the fake received: proves the plugin asked it */
  decides: () => number
}

async function startFake(mode: string): Promise<Fake> {
  const dir = mkdtempSync(join(tmpdir(), 'as-fake-'))
  const socket = join(dir, 'fake.sock')
  const child = spawn(process.execPath, [join(ROOT, 'test/helpers/fake-sidecar.mjs'), mode, socket], { stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()))
  await once(child.stdout!, 'data')
  return { socket, child, dir, decides: () => out.split('\n').filter((l) => l === 'FAKE DECIDE').length }
}


for (const aiohttp of AIOHTTP_VERSIONS) {
  describe(`fail closed, aiohttp ${aiohttp}`, () => {
    const cleanups: Array<() => Promise<void>> = []
    after(async () => {
      for (const c of cleanups.reverse()) await c()
    })

    it('sidecar not started yet → 503, then normal answers once it is up', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'as-slownode-'))
      const slowNode = join(dir, 'slow-node.sh')
      const used = join(dir, 'used')
      writeFileSync(slowNode, `#!/bin/sh\ntouch "${used}"\nsleep 2\nexec "${process.execPath}" "$@"\n`)
      chmodSync(slowNode, 0o755)
      const stack = await startStack({ aiohttp, noWait: true, env: { AUTHSVC_NODE: slowNode } })
      cleanups.push(async () => { await destroyStack(stack); rmSync(dir, { recursive: true, force: true }) })
      await expectUnavailable(stack)
      await expectUnavailable(stack, '/login')
      await stack.waitReady()
      assert.ok(existsSync(used), 'the plugin started the sidecar with AUTHSVC_NODE')
      const res = await fetch(`${stack.url}/prompt`)
      assert.equal(res.status, 401)
      assert.equal((await stack.counter()).total, 0)
    })

    it('sidecar killed while serving → 503 until the plugin restarted it, then normal answers', async () => {
      // the refusal itself, without what issue 27 added around it: no standby (it takes over in
      // about 50 ms, which on a quiet machine can come before the next request) and no hold (a
      // request would wait up to the decision timeout for the replacement, and a cold start within
      // it answers 401). Both have their own rows (real-host-service.test.ts, the restart suite).
      const stack = await startStack({ aiohttp, env: { AUTHSVC_STANDBY_SIDECAR: '0', AUTHSVC_RESTART_HOLD_MS: '0' } })
      cleanups.push(() => destroyStack(stack))
      const before = stack.sidecarPid()
      process.kill(before, 'SIGKILL')
      await expectUnavailable(stack)
      const recovered = await poll(async () => (await fetch(`${stack.url}/authsvc/health`)).status === 200, 15_000)
      assert.ok(recovered, 'sidecar came back')
      assert.notEqual(stack.sidecarPid(), before)
      assert.equal((await fetch(`${stack.url}/prompt`)).status, 401)
      assert.equal((await stack.counter()).total, 0)
    })

    for (const mode of ['slow', 'garbage', 'mismatch'] as const) {
      it(`sidecar ${mode} → 503 and no handler call`, async () => {
        const fake = await startFake(mode)
        const stack = await startStack({ aiohttp, noWait: true, env: { AUTHSVC_SOCKET: fake.socket, AUTHSVC_DECISION_TIMEOUT_MS: '300' } })
        cleanups.push(async () => { await destroyStack(stack); fake.child.kill(); rmSync(fake.dir, { recursive: true, force: true }) })
        // give the plugin time to connect, so the 503 is the fake's doing and not "not connected yet"
        await new Promise((r) => setTimeout(r, 500))
        const started = Date.now()
        for (let i = 0; i < 3; i++) await expectUnavailable(stack)
        const elapsed = Date.now() - started
        if (mode === 'slow') {
          assert.ok(elapsed >= 3 * 280, 'waited for the timeout each time')
          assert.ok(elapsed < 3 * 1000, `gave up after the configured 300 ms, not the default (${elapsed} ms)`)
        }
        assert.equal((await stack.counter()).total, 0)
        if (mode === 'mismatch') {
          const lines = stack.output().split('\n').filter((l) => /protocol version mismatch/.test(l))
          assert.equal(lines.length, 1, `one clear log line, got:\n${lines.join('\n')}`)
          assert.match(lines[0], /999/, 'the line names the version the sidecar speaks')
          assert.equal(fake.decides(), 0, 'no request is put to a sidecar of another version')
        } else {
          // garbage drops the connection: requests until the reconnect are refused without asking
          const asked = mode === 'slow' ? 3 : 1
          assert.ok(fake.decides() >= asked, `the plugin put the requests to the ${mode} sidecar`)
        }
      })
    }

    it('a working fake proves the fail-closed cases above were the fake, not the wiring', async () => {
      const fake = await startFake('pass')
      const stack = await startStack({ aiohttp, noWait: true, env: { AUTHSVC_SOCKET: fake.socket } })
      cleanups.push(async () => { await destroyStack(stack); fake.child.kill(); rmSync(fake.dir, { recursive: true, force: true }) })
      assert.ok(await poll(async () => (await fetch(`${stack.url}/prompt`)).status === 200, 5000))
      assert.ok((await stack.counter()).total > 0)
    })

    it('an exception in the plugin setup → every request 503 while the host stays up', async () => {
      const stack = await startStack({ aiohttp, noWait: true, env: { AUTHSVC_DECISION_TIMEOUT_MS: 'not-a-number' } })
      cleanups.push(() => destroyStack(stack))
      for (const path of ['/prompt', '/', '/login', '/internal/logs', '/nope']) await expectUnavailable(stack, path)
      const post = await fetch(`${stack.url}/prompt`, { method: 'POST', body: '{"prompt":{}}' })
      assert.equal(post.status, 503)
      assert.equal(stack.host.exitCode, null, 'host still running')
      assert.equal((await stack.counter()).total, 0)
      assert.match(stack.output(), /setup failed/)
    })
  })
}
