/**
 * SPEC §10 / docs/architecture.md end to end: the data dir and what the
 * sidecar puts in it, created by the code under test (not by the test
 * helper, which pre-creates its own data dir 0700 and would hide a missing
 * chmod): the dir 0700, both sockets 0600, sidecar.pid 0600 holding the
 * sidecar's pid, the secret key and the sqlite store 0600. And an invalid
 * config.json: the sidecar refuses to start, every request is answered 503
 * by the plugin, nothing reaches the host, and every problem is reported
 * together. Run on aiohttp 3.8 and 3.11.
 *
 * The test process's umask is set to 0 (children inherit it), so a file the
 * code creates without an explicit mode would show up as 0666/0777 here,
 * whatever umask the machine running the tests has (with 077 the checks
 * below could not fail).
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { tmpdir } from 'node:os'
import { HOST_AIOHTTP, destroyStack, poll, startStack, type Stack } from '../helpers/stack.js'
import { PASSWORD, login, register } from '../helpers/client.js'
import { alive, parentPid } from '../helpers/processes.js'

process.umask(0)

function mode(path: string): string {
  return (statSync(path).mode & 0o7777).toString(8).padStart(4, '0')
}

function isSocket(path: string): boolean {
  return statSync(path).isSocket()
}

/** A stack whose data dir is `dataDir`, as the plugin and sidecar find it (the helper's own data dir is not used). */
function startWithDataDir(aiohttp: '3.8' | '3.11', dir: string, dataDir: string, noWait = false): Promise<Stack> {
  return startStack({ aiohttp, dir, env: { AUTHSVC_DATA_DIR: dataDir }, noWait })
}

/** What the data dir must look like while the sidecar runs. */
function checkRunningLayout(stack: Stack, dataDir: string): number {
  assert.equal(mode(dataDir), '0700', 'data dir')
  for (const name of ['authsvc.sock', 'authsvc-http.sock']) {
    const path = join(dataDir, name)
    assert.ok(existsSync(path), `${name} is in the data dir`)
    assert.ok(isSocket(path), `${name} is a socket`)
    assert.equal(mode(path), '0600', name)
  }
  assert.equal(mode(join(dataDir, 'authsvc_secret.key')), '0600', 'authsvc_secret.key')
  assert.equal(mode(join(dataDir, 'authsvc.sqlite')), '0600', 'authsvc.sqlite')
  // sqlite's WAL files carry the store's contents too; they take the database file's mode
  for (const name of readdirSync(dataDir).filter((n) => n.startsWith('authsvc.sqlite-'))) {
    assert.equal(mode(join(dataDir, name)), '0600', name)
  }
  // sidecar.pid: the pid of the sidecar the plugin started (a node process, child of the host)
  const pidFile = join(dataDir, 'sidecar.pid')
  assert.equal(mode(pidFile), '0600', 'sidecar.pid')
  const text = readFileSync(pidFile, 'utf8')
  assert.match(text, /^\d+\n$/)
  const pid = Number(text)
  assert.ok(alive(pid), `sidecar pid ${pid} is running`)
  assert.equal(parentPid(pid), stack.host.pid, 'the sidecar is the host\'s child')
  assert.match(readFileSync(`/proc/${pid}/cmdline`, 'utf8'), /sidecar\/dist\/main\.js/)
  // no file in the data dir is readable by others
  for (const name of readdirSync(dataDir)) {
    assert.equal(statSync(join(dataDir, name)).mode & 0o077, 0, `${name} is ${mode(join(dataDir, name))}`)
  }
  return pid
}

for (const aiohttp of [HOST_AIOHTTP]) {
  describe(`data dir, aiohttp ${aiohttp}`, { concurrency: false }, () => {
    const stacks: Stack[] = []
    after(async () => {
      for (const stack of stacks) await destroyStack(stack)
    })

    it('a data dir that does not exist yet is created 0700 with every file 0600 in it', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'as-e2e-'))
      const dataDir = join(dir, 'not', 'yet', 'data') // parents missing too
      assert.equal(existsSync(join(dir, 'not')), false)
      const stack = await startWithDataDir(aiohttp, dir, dataDir)
      stacks.push(stack)
      // a user, a session and a token, so the store has been written
      assert.equal((await register(stack, 'admin')).status, 201)
      await login(stack, 'admin')
      const pid = checkRunningLayout(stack, dataDir)

      // a clean stop: the sidecar exits and takes its pid file and decision socket with it
      await stack.stop()
      assert.ok(await poll(async () => !alive(pid), 5000), `sidecar ${pid} still running after the host stopped`)
      assert.equal(existsSync(join(dataDir, 'sidecar.pid')), false, 'sidecar.pid removed on stop')
      assert.equal(existsSync(join(dataDir, 'authsvc.sock')), false, 'decision socket removed on stop')
    })

    it('an existing data dir with mode 0755 is tightened to 0700 and reused', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'as-e2e-'))
      const dataDir = join(dir, 'shared-data')
      mkdirSync(dataDir)
      chmodSync(dataDir, 0o755)
      assert.equal(mode(dataDir), '0755')
      const stack = await startWithDataDir(aiohttp, dir, dataDir)
      stacks.push(stack)
      assert.equal((await register(stack, 'admin')).status, 201)
      const pid = checkRunningLayout(stack, dataDir)

      // a restart on the same dir keeps the users (the secret and the store were reused, not regenerated)
      const key = readFileSync(join(dataDir, 'authsvc_secret.key'), 'utf8')
      await stack.stop()
      assert.ok(await poll(async () => !alive(pid), 5000))
      chmodSync(dataDir, 0o755)
      const again = await startWithDataDir(aiohttp, dir, dataDir)
      stacks.push(again)
      assert.equal(mode(dataDir), '0700', 'tightened again on every start')
      assert.equal(readFileSync(join(dataDir, 'authsvc_secret.key'), 'utf8'), key)
      const { jwt } = await login(again, 'admin', PASSWORD)
      assert.ok(jwt)
      const newPid = checkRunningLayout(again, dataDir)
      assert.notEqual(newPid, pid)
    })

    it('a stale sidecar.pid is replaced by the new pid', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'as-e2e-'))
      const dataDir = join(dir, 'stale-data')
      mkdirSync(dataDir, { mode: 0o700 })
      writeFileSync(join(dataDir, 'sidecar.pid'), '999999\n', { mode: 0o600 }) // left by a sidecar that was SIGKILLed
      const stack = await startWithDataDir(aiohttp, dir, dataDir)
      stacks.push(stack)
      const pid = Number(readFileSync(join(dataDir, 'sidecar.pid'), 'utf8'))
      assert.notEqual(pid, 999999)
      assert.equal(parentPid(pid), stack.host.pid)
    })

    it('a stale sidecar.pid with a loose mode (0644) is written back 0600', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'as-e2e-'))
      const dataDir = join(dir, 'stale-data')
      mkdirSync(dataDir, { mode: 0o700 })
      writeFileSync(join(dataDir, 'sidecar.pid'), '999999\n', { mode: 0o644 })
      const stack = await startWithDataDir(aiohttp, dir, dataDir)
      stacks.push(stack)
      assert.notEqual(Number(readFileSync(join(dataDir, 'sidecar.pid'), 'utf8')), 999999)
      assert.equal(mode(join(dataDir, 'sidecar.pid')), '0600')
    })

    describe('a config.json with errors', { concurrency: false }, () => {
      let stack: Stack
      let dataDir: string
      const CONFIG = {
        no_such_key: 1,
        require_auth_for_remote_api: 'yes',
        access_token_expiration_hours: -5,
        argon2: { memory_kib: 'lots', extra: true },
        store: { backend: 'mysql' },
        local_network_cidrs: ['not-a-cidr'],
      }
      // one entry per problem: each must be named in the one log record that lists them
      const PROBLEMS: RegExp[] = [
        /^\(root\): .*no_such_key/,
        /^\/require_auth_for_remote_api: must be boolean/,
        /^\/access_token_expiration_hours: must be > 0/,
        /^\/argon2\/memory_kib: must be integer/,
        /^\/argon2: .*extra/,
        /^\/store\/backend: /,
        /^\/local_network_cidrs\/0: not an IP address or CIDR: "not-a-cidr"/,
      ]

      before(async () => {
        const dir = mkdtempSync(join(tmpdir(), 'as-e2e-'))
        dataDir = join(dir, 'fresh-data')
        mkdirSync(dataDir, { mode: 0o700 })
        writeFileSync(join(dataDir, 'config.json'), JSON.stringify(CONFIG, null, 2))
        stack = await startWithDataDir(aiohttp, dir, dataDir, true)
        stacks.push(stack)
        // the plugin's report comes after the sidecar's own record: from then on the page names the cause
        assert.ok(await poll(async () => /cannot start the sidecar: the sidecar refused its configuration/.test(stack.output()), 15_000), stack.output())
        await stack.resetCounter()
      })

      it('the sidecar does not start and reports every problem in one record', async () => {
        const records: Array<{ msg?: string; problems?: string[] }> = []
        for (const line of stack.output().split('\n')) {
          try {
            if (line.startsWith('{')) records.push(JSON.parse(line))
          } catch {
            // a record still being written
          }
        }
        const refusal = records.find((r) => r.msg === 'invalid configuration; not starting')
        assert.ok(refusal?.problems, stack.output())
        const missing = PROBLEMS.filter((p) => !refusal.problems!.some((line) => p.test(line)))
        assert.deepEqual(missing, [], `not reported: ${missing.join(', ')}\nreported: ${refusal.problems.join('\n')}`)
        // it never got as far as listening or writing its pid
        for (const name of ['authsvc.sock', 'authsvc-http.sock', 'sidecar.pid']) {
          assert.equal(existsSync(join(dataDir, name)), false, `${name} exists`)
        }
        assert.equal(stack.host.exitCode, null, 'the host stays up')
      })

      it('every request is answered 503 AUTHSVC_UNAVAILABLE and nothing reaches the host', async () => {
        const rows: Array<[string, string, Record<string, string>]> = [
          ['GET', '/prompt', { Accept: 'application/json' }],
          ['POST', '/prompt', { Accept: 'application/json', 'Content-Type': 'application/json' }],
          ['GET', '/', { Accept: 'text/html', 'Sec-Fetch-Mode': 'navigate' }],
          ['GET', '/login', { Accept: 'text/html' }],
          ['POST', '/register', { 'Content-Type': 'application/json' }],
          ['GET', '/authsvc/health', {}],
          ['GET', '/internal/logs', {}],
          ['GET', '/extensions/authsvc/x.js', {}],
          ['GET', '/no/such/route', {}],
          ['OPTIONS', '/prompt', { Origin: 'http://evil.example' }],
        ]
        for (const [method, path, headers] of rows) {
          const res = await fetch(stack.url + path, {
            method, headers, redirect: 'manual',
            body: method === 'POST' ? JSON.stringify({ username: 'admin', password: PASSWORD, prompt: {} }) : undefined,
          })
          assert.equal(res.status, 503, `${method} ${path}`)
          if (headers.Accept === 'text/html') {
            // a browser navigation gets the page naming the cause (issue 14), everyone else the JSON
            assert.match(await res.text(), /refused its configuration/, `${method} ${path}`)
            continue
          }
          const body = (await res.json()) as { code: string; statusCode: number }
          assert.equal(body.code, 'AUTHSVC_UNAVAILABLE', `${method} ${path}`)
          assert.equal(body.statusCode, 503)
        }
        assert.equal((await stack.counter()).total, 0)
      })

      it('control: once config.json is fixed, the plugin\'s restart picks it up and requests are decided again', async () => {
        rmSync(join(dataDir, 'config.json'))
        await stack.waitReady(20_000)
        const res = await fetch(`${stack.url}/prompt`, { headers: { Accept: 'application/json' } })
        assert.equal(res.status, 401)
        assert.equal(mode(join(dataDir, 'sidecar.pid')), '0600')
      })
    })
  })
}
