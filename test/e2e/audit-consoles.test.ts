/**
 * The audit log through the gate (issue 24, items 1 and 2): real plugin, real sidecar, the
 * stand-in host, real HTTP. Each kind of event is caused once by a real request; then each
 * appears exactly once in the actor's own console (`/authsvc/me/console`), in the admin's console
 * of that actor (`/authsvc/api/admin/consoles/{actor}`) and in the audit view filtered by its kind,
 * with its actor, subject, address and outcome. No stored byte (the sqlite file and its WAL) and
 * no line the host printed holds a password, a session JWT, an API token or the TOTP secret used.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { destroyStack, startStack, type Stack } from '../helpers/stack.js'
import { PASSWORD, bearer, json, login, register } from '../helpers/client.js'

const oathtool = (secret: string, unixMs: number): string =>
  execFileSync('/usr/bin/oathtool', ['--totp', '-b', secret, '-N', `@${Math.floor(unixMs / 1000)}`], { encoding: 'utf8' }).trim()

interface Entry {
  seq: number
  at_iso: string
  kind: string
  actor: string | null
  subject: string | null
  ip: string | null
  outcome: string
  details: Record<string, unknown>
}

describe('audit log and consoles through the gate', () => {
  let stack: Stack
  const secrets: string[] = [PASSWORD]
  let root = ''
  let alice = ''

  const api = async (method: string, path: string, token: string | null, body?: unknown): Promise<Response> =>
    fetch(`${stack.url}${path}`, {
      method,
      headers: { Accept: 'application/json', ...(body === undefined ? {} : { 'Content-Type': 'application/json' }), ...(token ? bearer(token) : {}) },
      body: body === undefined ? undefined : JSON.stringify(body),
    })
  const ok = async (res: Response, status = 200): Promise<any> => {
    const text = await res.text()
    assert.equal(res.status, status, text)
    return text ? JSON.parse(text) : undefined
  }

  before(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'as-audit-'))
    mkdirSync(join(dir, 'host', 'models', 'checkpoints'), { recursive: true })
    writeFileSync(join(dir, 'host', 'models', 'checkpoints', 'granted.safetensors'), 'x')
    writeFileSync(join(dir, 'host', 'models', 'checkpoints', 'other.safetensors'), 'x')
    stack = await startStack({ dir })
  })
  after(async () => {
    if (stack) await destroyStack(stack)
  })

  it('each kind of event, caused once, appears once in the actor\'s console, the admin console and the audit view; nothing stored or logged holds a secret', async () => {
    // accounts: the first is the admin
    await ok(await register(stack, 'root'), 201)
    root = (await login(stack, 'root')).jwt
    await ok(await register(stack, 'alice', { bearer: root }), 201)
    // a failed sign-in on alice's account, then a good one
    assert.equal((await api('POST', '/login', null, { username: 'alice', password: 'not-her-password-1' })).status, 401)
    secrets.push('not-her-password-1')
    alice = (await login(stack, 'alice')).jwt
    secrets.push(root, alice)
    // five failures on an unknown name start its delays: one lockout event, no name stored
    for (let i = 0; i < 5; i++) assert.equal((await api('POST', '/login', null, { username: 'nobody-here', password: `guess-${i}-secret` })).status, 401)
    secrets.push('guess-4-secret')
    // a token, made and revoked
    const made = await ok(await api('POST', '/authsvc/generate_token', alice, { label: 'phone', expire_hours: 1 }))
    secrets.push(made.token)
    await ok(await api('DELETE', '/authsvc/api/tokens', alice, { token_hash_prefix: made.token_hash_prefix }))
    // MFA on with a code, then off with another step's code
    const setup = await ok(await api('POST', '/authsvc/api/mfa/setup', alice, {}))
    secrets.push(setup.secret, ...setup.backup_codes)
    const now = Date.now()
    await ok(await api('POST', '/authsvc/api/mfa/verify-setup', alice, { code: oathtool(setup.secret, now) }))
    await ok(await api('POST', '/authsvc/api/mfa/disable', alice, { code: oathtool(setup.secret, now + 30_000) }))
    // the admin: settings, groups (users no longer see every model), a grant, a role change
    await ok(await api('PUT', '/authsvc/api/settings/guest-jwt', root, { allow_guest_jwt: false }))
    const groups = (await ok(await api('GET', '/authsvc/api/groups', root))).groups
    groups.user.can_view_all_comfyui_items = false
    await ok(await api('PUT', '/authsvc/api/groups', root, { groups }))
    await ok(await api('PUT', '/authsvc/api/ip-lists', root, { whitelist: [], blacklist: [{ ip: '198.51.100.7', permanent: true }] }))
    await ok(await api('POST', '/authsvc/api/users/alice/shared-items', root, { folder: 'checkpoints', item_name: 'granted.safetensors' }))
    await ok(await api('DELETE', '/authsvc/api/users/alice/shared-items', root, { folder: 'checkpoints', item_name: 'granted.safetensors' }))
    // alice's prompts: one queued, one refused for a model she may not use
    const queued = await api('POST', '/prompt', alice, { prompt: { '1': { class_type: 'EmptyImage', inputs: { width: 8, height: 8, batch_size: 1, color: 0 } }, '2': { class_type: 'SaveImage', inputs: { images: ['1', 0], filename_prefix: 'audit' } } } })
    assert.equal(queued.status, 200, await queued.clone().text())
    const promptId = (await queued.json()).prompt_id
    const refused = await api('POST', '/prompt', alice, { prompt: { '1': { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'other.safetensors' } } } })
    assert.equal(refused.status, 403)
    assert.equal((await refused.json()).code, 'MODEL_NOT_ALLOWED')
    // and one that reads a file in root's own folder
    const rootId = (await ok(await api('GET', '/authsvc/api/me', root))).user_id
    const foreign = await api('POST', '/prompt', alice, { prompt: { '1': { class_type: 'LoadImage', inputs: { image: `u_${rootId}/x.png` } }, '2': { class_type: 'PreviewImage', inputs: { images: ['1', 0] } } } })
    assert.equal(foreign.status, 403)
    assert.equal((await foreign.json()).code, 'NOT_OWNER')
    // a session revoked, a logout; then the admin changes, disables and finally deletes bob
    const second = (await login(stack, 'alice')).jwt
    const third = (await login(stack, 'alice')).jwt
    secrets.push(second, third)
    const jti = JSON.parse(Buffer.from(third.split('.')[1], 'base64url').toString()).jti as string
    await ok(await api('POST', '/authsvc/me/sessions/revoke', alice, { jti }))
    assert.equal((await api('POST', '/logout', second)).status, 200)
    await ok(await register(stack, 'bob', { bearer: root }), 201)
    const bobJwt = (await login(stack, 'bob')).jwt
    secrets.push(bobJwt, 'bobs-new-passphrase-9')
    await ok(await api('POST', '/authsvc/api/me/password', bobJwt, { current_password: PASSWORD, new_password: 'bobs-new-passphrase-9' }))
    await ok(await api('POST', '/authsvc/api/model-cache/refresh', root))
    await ok(await api('POST', '/authsvc/api/user-env', root, { action: 'purge', user: 'bob', confirm: 'bob' }))
    await ok(await api('PUT', '/authsvc/api/users/bob', root, { role: 'guest' }))
    await ok(await api('PUT', '/authsvc/api/users/bob', root, { disabled: true }))
    await ok(await api('DELETE', '/authsvc/api/users/bob', root))

    const ip = '127.0.0.1'
    /** kind → the one record expected: its actor (whose console shows it), subject, outcome, details it must carry */
    const expected: Array<{ kind: string; actor: string | null; subject: string | null; outcome: string; details?: Record<string, unknown>; user?: string; filter?: (e: Entry) => boolean }> = [
      { kind: 'server_started', actor: null, subject: null, outcome: 'success' },
      { kind: 'login_failure', actor: null, subject: 'alice', outcome: 'failure', details: { attempt: 'password' }, user: 'alice' },
      { kind: 'login_locked', actor: null, subject: null, outcome: 'refused', details: { locked: 'username', attempt: 'password' } },
      { kind: 'api_token_created', actor: 'alice', subject: 'alice', outcome: 'success', details: { token_hash_prefix: made.token_hash_prefix.slice(0, 8) } },
      { kind: 'api_token_revoked', actor: 'alice', subject: 'alice', outcome: 'success' },
      { kind: 'mfa_enabled', actor: 'alice', subject: 'alice', outcome: 'success' },
      { kind: 'mfa_disabled', actor: 'alice', subject: 'alice', outcome: 'success' },
      { kind: 'model_granted', actor: 'root', subject: 'alice', outcome: 'success', details: { folder: 'checkpoints', item_name: 'granted.safetensors' } },
      { kind: 'model_revoked', actor: 'root', subject: 'alice', outcome: 'success' },
      { kind: 'prompt_queued', actor: 'alice', subject: 'alice', outcome: 'success', details: { prompt_id: promptId } },
      { kind: 'prompt_refused', actor: 'alice', subject: 'alice', outcome: 'refused', details: { code: 'MODEL_NOT_ALLOWED', status: 403 }, filter: (e) => e.details.code === 'MODEL_NOT_ALLOWED' },
      { kind: 'prompt_refused', actor: 'alice', subject: 'alice', outcome: 'refused', details: { code: 'NOT_OWNER', status: 403 }, filter: (e) => e.details.code === 'NOT_OWNER' },
      { kind: 'session_revoked', actor: 'alice', subject: 'alice', outcome: 'success', details: { sessions: 1 } },
      { kind: 'user_logout', actor: 'alice', subject: 'alice', outcome: 'success' },
      { kind: 'password_changed', actor: 'bob', subject: 'bob', outcome: 'success', details: { sessions_revoked: 0 } },
      { kind: 'model_cache_refreshed', actor: 'root', subject: null, outcome: 'success' },
      { kind: 'user_env_purged', actor: 'root', subject: 'bob', outcome: 'success' },
      { kind: 'user_role_changed', actor: 'root', subject: 'bob', outcome: 'success', details: { role: 'guest' } },
      { kind: 'user_updated', actor: 'root', subject: 'bob', outcome: 'success', details: { changes: ['disabled'] } },
      { kind: 'user_deleted', actor: 'root', subject: 'bob', outcome: 'success' },
    ]
    const view = async (kind: string, user?: string): Promise<Entry[]> => (await ok(await api('GET', `/authsvc/api/audit?kind=${kind}${user ? `&user=${user}` : ''}`, root))).events
    for (const want of expected) {
      const rows = (await view(want.kind, want.user)).filter(want.filter ?? (() => true))
      assert.equal(rows.length, 1, `${want.kind}: one record in the audit view, got ${JSON.stringify(rows)}`)
      const [row] = rows
      assert.equal(row.actor, want.actor, `${want.kind} actor`)
      assert.equal(row.subject, want.subject, `${want.kind} subject`)
      assert.equal(row.outcome, want.outcome, `${want.kind} outcome`)
      assert.equal(row.ip, want.kind === 'server_started' ? null : ip, `${want.kind} address`)
      assert.ok(Math.abs(Date.parse(row.at_iso) - Date.now()) < 120_000, `${want.kind} time`)
      for (const [key, value] of Object.entries(want.details ?? {})) assert.deepEqual(row.details[key], value, `${want.kind} ${key}`)
      if (want.actor !== null) {
        // bob is deleted by now: no session of his reads his own console; the admin's console of him does
        if (want.actor !== 'bob') {
          const token = want.actor === 'root' ? root : alice
          const own = (await ok(await api('GET', '/authsvc/me/console', token))) as { lines: string[]; events: Entry[] }
          assert.equal(own.events.filter((e) => e.seq === row.seq).length, 1, `${want.kind} in ${want.actor}'s own console`)
          assert.equal(own.lines.length, own.events.length)
        }
        const adminView = (await ok(await api('GET', `/authsvc/api/admin/consoles/${want.actor}`, root))) as { username: string; events: Entry[] }
        assert.equal(adminView.events.filter((e) => e.seq === row.seq).length, 1, `${want.kind} in the admin console of ${want.actor}`)
      }
    }
    // the guesses at a name nobody has: five failures, none of them naming what was typed
    const guesses = (await view('login_failure')).filter((e) => e.subject === null)
    assert.equal(guesses.length, 5)
    // settings: three changes, each named
    const settings = await view('settings_changed')
    assert.deepEqual(settings.map((e) => e.details.setting).sort(), ['allow_guest_jwt', 'groups', 'ip_lists'])
    assert.ok(settings.every((e) => e.actor === 'root' && e.ip === ip))
    // logins: root twice (the first account is signed in by its registration, then logs in),
    // alice three times (both consoles show their own, and only their own)
    const logins = await view('user_login')
    assert.deepEqual(logins.map((e) => e.subject).sort(), ['alice', 'alice', 'alice', 'bob', 'root', 'root'])
    const created = await view('user_created')
    assert.deepEqual(created.map((e) => [e.subject, e.actor]).sort(), [['alice', 'root'], ['bob', 'root'], ['root', null]])

    // alice's console is hers: nothing bob or root did to others
    const aliceConsole = (await ok(await api('GET', '/authsvc/me/console', alice))) as { lines: string[]; events: Entry[] }
    assert.ok(aliceConsole.events.every((e) => e.actor === 'alice' || e.subject === 'alice'), 'only her own lines')
    assert.ok(aliceConsole.events.length >= 10)
    const times = aliceConsole.events.map((e) => e.seq)
    assert.deepEqual(times, [...times].sort((a, b) => a - b), 'newest last')
    assert.match(aliceConsole.lines.find((l) => l.includes('prompt_refused'))!, /prompt_refused \[refused\] by alice from 127\.0\.0\.1 code=MODEL_NOT_ALLOWED/)
    // the names with lines; a user's console is the admin's only
    const names = (await ok(await api('GET', '/authsvc/api/admin/consoles', root))).users
    assert.deepEqual(names, ['alice', 'bob', 'root'])
    assert.equal((await api('GET', '/authsvc/api/admin/consoles', alice)).status, 403)
    assert.equal((await api('GET', '/authsvc/api/audit', alice)).status, 403)
    assert.equal((await api('GET', '/authsvc/me/console', null)).status, 401)

    // no secret in any stored byte or any printed line
    const stored = readdirSync(stack.dataDir).filter((f) => f.startsWith('authsvc.sqlite')).map((f) => readFileSync(join(stack.dataDir, f)).toString('latin1')).join('\n')
    assert.ok(stored.includes('prompt_refused'), 'the audit rows are in the file read')
    const printed = stack.output()
    for (const secret of secrets) {
      assert.ok(!stored.includes(secret), `a secret (${secret.slice(0, 4)}...) is stored in clear`)
      assert.ok(!printed.includes(secret), `a secret (${secret.slice(0, 4)}...) was printed`)
    }
  })
})
