/**
 * The operator command (`node bin/authsvc.mjs user ...`) as a real child
 * process against a data dir while no sidecar runs: create-admin, list,
 * reset-password, reset-mfa, unknown users, and the refusal while a sidecar
 * holds the data dir. What the command changed is checked by opening a
 * harness on the same dir afterwards (the harness uses the dir's own
 * authsvc_secret.key, as the command does).
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync, unlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { PASSWORD, bearer, clockAt, openHarness, type Harness } from './harness.js'
import { totpAt } from './totp-reference.js'

const ROOT = resolve(import.meta.dirname, '..', '..')
const ADMIN_PASSWORD = 'cli-admin-password-1'

interface Run {
  code: number | null
  stdout: string
  stderr: string
}

function cli(args: string[], stdin?: string, extraEnv: NodeJS.ProcessEnv = {}): Promise<Run> {
  const env = { ...process.env }
  delete env.AUTHSVC_SECRET
  delete env.AUTHSVC_DATA_DIR
  Object.assign(env, extraEnv)
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [join(ROOT, 'bin/authsvc.mjs'), ...args], { cwd: ROOT, env, stdio: ['pipe', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()))
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
    child.on('error', reject)
    child.on('close', (code) => resolvePromise({ code, stdout, stderr }))
    child.stdin.end(stdin ?? '')
  })
}

describe('operator command: authsvc user ...', () => {
  let dir: string
  const clock = clockAt()
  const user = (args: string[], stdin?: string) => cli(['user', ...args, '--data-dir', dir], stdin)
  /** A harness on the command's data dir, with the dir's own secret file (as the sidecar would use). */
  const open = () => openHarness({ dir, clock, env: { AUTHSVC_SECRET: '' } })
  const withHarness = async <T>(fn: (h: Harness) => Promise<T>): Promise<T> => {
    const h = await open()
    try {
      return await fn(h)
    } finally {
      await h.close()
    }
  }
  const login = (h: Harness, username: string, password: string) => h.call('POST', '/login', { body: { username, password }, peer: '192.0.2.10' })

  before(() => {
    assert.ok(existsSync(join(ROOT, 'sidecar/dist/cli.js')), 'build the sidecar first: npx tsc -p sidecar/tsconfig.json')
    dir = mkdtempSync(join(tmpdir(), 'as-cli-'))
  })
  after(() => {
    rmSync(dir, { recursive: true, force: true })
  })

  it('create-admin --password-stdin creates an administrator without printing the password', async () => {
    const run = await user(['create-admin', 'root', '--password-stdin'], ADMIN_PASSWORD + '\n')
    assert.equal(run.code, 0, run.stderr)
    assert.match(run.stdout, /created administrator root/)
    assert.equal(run.stdout.includes(ADMIN_PASSWORD), false, 'a password read from stdin is not echoed')

    const again = await user(['create-admin', 'root', '--password-stdin'], ADMIN_PASSWORD + '\n')
    assert.equal(again.code, 2, 'an existing name is refused')
    assert.match(again.stderr, /already exists/)

    await withHarness(async (h) => {
      const res = await login(h, 'root', ADMIN_PASSWORD)
      assert.equal(res.status, 200, JSON.stringify(res.body))
      const me = await h.call('GET', '/authsvc/api/me', { headers: bearer(res.body.jwt_token) })
      assert.equal(me.body.role, 'admin')
      assert.equal(me.body.is_admin, true)
    })
  })

  it('list shows every user with role and MFA state', async () => {
    await withHarness(async (h) => {
      const admin = (await login(h, 'root', ADMIN_PASSWORD)).body.jwt_token
      assert.equal((await h.call('POST', '/register', { headers: bearer(admin), body: { username: 'bob', password: PASSWORD } })).status, 201)
    })
    const run = await user(['list'])
    assert.equal(run.code, 0, run.stderr)
    const lines = run.stdout.trim().split('\n')
    assert.equal(lines.length, 2, run.stdout)
    assert.match(run.stdout, /^root\trole=admin\tmfa=false\tdisabled=false\tcreated=\S+$/m)
    assert.match(run.stdout, /^bob\trole=user\tmfa=false\tdisabled=false\tcreated=\S+$/m)
  })

  it('reset-password prints a generated password; the old one stops working, the new one works, sessions are revoked', async () => {
    const [oldSession, oldToken] = await withHarness(async (h) => {
      const session = (await login(h, 'root', ADMIN_PASSWORD)).body.jwt_token as string
      const token = await h.call('POST', '/authsvc/generate_token', { body: { username: 'root', password: ADMIN_PASSWORD }, peer: '192.0.2.10' })
      assert.match(token.body.token, /^ast_/)
      return [session, token.body.token as string]
    })
    const run = await user(['reset-password', 'root'])
    assert.equal(run.code, 0, run.stderr)
    const generated = /new password: (\S+)/.exec(run.stdout)?.[1]
    assert.ok(generated, `no generated password in: ${run.stdout}`)
    assert.ok(generated.length >= 16, 'a generated password is long')
    await withHarness(async (h) => {
      const old = await login(h, 'root', ADMIN_PASSWORD)
      assert.equal(old.status, 401, 'the old password no longer logs in')
      assert.equal(old.body.code, 'INVALID_CREDENTIALS')
      const fresh = await login(h, 'root', generated)
      assert.equal(fresh.status, 200, JSON.stringify(fresh.body))
      assert.ok(fresh.body.jwt_token)
      assert.equal((await h.call('GET', '/authsvc/api/me', { headers: bearer(oldSession) })).status, 401, 'the session from before the reset is revoked')
      assert.equal((await h.call('GET', '/authsvc/api/me', { headers: bearer(oldToken) })).status, 401, 'the API token from before the reset is revoked')
    })

    // and with --password-stdin, back to a known password
    const chosen = await user(['reset-password', 'root', '--password-stdin'], ADMIN_PASSWORD + '\n')
    assert.equal(chosen.code, 0, chosen.stderr)
    assert.equal(chosen.stdout.includes(ADMIN_PASSWORD), false)
    assert.equal(chosen.stdout.includes('new password'), false)
    await withHarness(async (h) => {
      assert.equal((await login(h, 'root', ADMIN_PASSWORD)).status, 200)
      assert.equal((await login(h, 'root', generated)).status, 401)
    })
  })

  it('reset-mfa turns off MFA of a user enrolled through the service; the password alone logs in again', async () => {
    await withHarness(async (h) => {
      const bob = (await login(h, 'bob', PASSWORD)).body.jwt_token
      const setup = await h.call('POST', '/authsvc/api/mfa/setup', { headers: bearer(bob), body: {} })
      assert.equal(setup.status, 200)
      const ok = await h.call('POST', '/authsvc/api/mfa/verify-setup', { headers: bearer(bob), body: { code: totpAt(setup.body.secret, h.clock()) } })
      assert.equal(ok.status, 200, JSON.stringify(ok.body))
      const asks = await login(h, 'bob', PASSWORD)
      assert.equal(asks.body.mfa_required, true, 'enrolled: the password alone is not enough')
    })
    assert.match((await user(['list'])).stdout, /^bob\trole=user\tmfa=true\t/m)

    const run = await user(['reset-mfa', 'bob'])
    assert.equal(run.code, 0, run.stderr)
    assert.match(run.stdout, /MFA of bob turned off/)
    assert.match((await user(['list'])).stdout, /^bob\trole=user\tmfa=false\t/m)

    await withHarness(async (h) => {
      const res = await login(h, 'bob', PASSWORD)
      assert.equal(res.status, 200)
      assert.equal(res.body.mfa_required, undefined)
      assert.ok(res.body.jwt_token, 'a session from the password alone')
      const me = await h.call('GET', '/authsvc/api/me', { headers: bearer(res.body.jwt_token) })
      assert.equal(me.body.mfa_enabled, false)
      // and bob can enrol again
      const setup = await h.call('POST', '/authsvc/api/mfa/setup', { headers: bearer(res.body.jwt_token), body: {} })
      assert.equal(setup.status, 200, JSON.stringify(setup.body))
    })
  })

  it('an unknown user is a usage error (exit 2) for every command', async () => {
    for (const command of ['reset-password', 'reset-mfa']) {
      const run = await user([command, 'nobody'])
      assert.equal(run.code, 2, `${command}: ${run.stdout} ${run.stderr}`)
      assert.match(run.stderr, /no user nobody/)
      assert.equal(run.stdout.includes('password'), false, 'no password generated for nobody')
    }
    const usage = await user(['frobnicate', 'root'])
    assert.equal(usage.code, 2, 'an unknown command')
  })

  it('with a live sidecar.pid it refuses with exit 3 and changes nothing', async () => {
    const before = (await user(['list'])).stdout
    const pidFile = join(dir, 'sidecar.pid')
    writeFileSync(pidFile, `${process.pid}\n`)
    try {
      const runs = [
        await user(['reset-password', 'root']),
        await user(['reset-password', 'root', '--password-stdin'], 'another-password-9\n'),
        await user(['reset-mfa', 'bob']),
        await user(['create-admin', 'intruder', '--password-stdin'], 'intruder-password-1\n'),
        await user(['list']),
      ]
      for (const run of runs) {
        assert.equal(run.code, 3, `${run.stdout} ${run.stderr}`)
        assert.match(run.stdout, new RegExp(`sidecar pid ${process.pid}`))
        assert.equal(/new password|password:/.test(run.stdout), false, 'no password printed')
      }
    } finally {
      unlinkSync(pidFile)
    }
    assert.equal((await user(['list'])).stdout, before, 'users unchanged')
    await withHarness(async (h) => {
      assert.equal((await login(h, 'root', ADMIN_PASSWORD)).status, 200, 'the password is unchanged')
      assert.equal((await login(h, 'intruder', 'intruder-password-1')).status, 401, 'no admin was created')
    })
  })

  it('without --data-dir it works on $AUTHSVC_DATA_DIR, as the sidecar does', async () => {
    const run = await cli(['user', 'list'], undefined, { AUTHSVC_DATA_DIR: dir })
    assert.equal(run.code, 0, run.stderr)
    assert.match(run.stdout, /^root\trole=admin\t/m)
    assert.match(run.stdout, /^bob\trole=user\t/m)
  })

  it('a stale sidecar.pid (no such process) does not block the command', async () => {
    const pidFile = join(dir, 'sidecar.pid')
    // pid_max is at most 2^22 on Linux: this pid cannot be alive
    writeFileSync(pidFile, '4194305\n')
    try {
      const run = await user(['list'])
      assert.equal(run.code, 0, run.stderr)
      assert.match(run.stdout, /^root\t/m)
    } finally {
      unlinkSync(pidFile)
    }
  })
})
