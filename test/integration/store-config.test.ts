/**
 * Issue 28, item 8: `users-db-config` and `token-storage-config` (SPEC §5.4) through a real
 * sidecar on a loopback port and the real config.json in its data dir: who may read and change
 * them; what GET shows (never a password: the redaction attack table); what PUT accepts (the
 * validation attack table: schemes, hosts, paths the host serves) and how it stores (config.json
 * written whole and atomically, the operator's other keys kept, 0600, accepted by the loader of
 * the next start); a redacted URL sent back keeps the stored one; a config.json that does not
 * parse is never overwritten; parallel saves leave one whole file.
 */
import { describe, it, after, before } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import { adminAndUsers, openNtfySidecar, type NtfySidecar } from './ntfy-kit.js'
import { loadConfig } from '../../sidecar/src/kernel/config/load.js'
import { redactUrl } from '../../sidecar/src/store-config/rules.js'
import { PACKAGE_WEB_DIR } from '../../sidecar/src/store-config/routes.js'

const USERS = '/authsvc/api/users-db-config'
const TOKENS = '/authsvc/api/token-storage-config'

interface World {
  sc: NtfySidecar
  admin: string
  alice: string
  events: Array<Record<string, unknown>>
  file(): any
  fileText(): string
  /** every text the sidecar let out so far: its log lines and the events */
  outside(): string
}

async function world(): Promise<World> {
  const sc = await openNtfySidecar()
  const { admin, sessions } = await adminAndUsers(sc, 'alice')
  const events: Array<Record<string, unknown>> = []
  sc.services.events.onAny((record) => {
    events.push(record as unknown as Record<string, unknown>)
  })
  // the host's folders, as its hello reports them: a store file must stay out of them
  const base = mkdtempSync(join(tmpdir(), 'as-storecfg-host-'))
  for (const d of ['output', 'input', 'temp', 'user', 'models/loras']) mkdirSync(join(base, d), { recursive: true })
  sc.services.host.facts = {
    output_dir: join(base, 'output'), input_dir: join(base, 'input'), temp_dir: join(base, 'temp'), user_dir: join(base, 'user'),
    model_folders: { loras: [join(base, 'models/loras')] },
  }
  const path = join(sc.dir, 'config.json')
  return {
    sc, admin, alice: sessions.alice, events,
    file: () => JSON.parse(readFileSync(path, 'utf8')),
    fileText: () => (existsSync(path) ? readFileSync(path, 'utf8') : ''),
    outside: () => sc.logs.lines.join('') + JSON.stringify(events),
  }
}

describe('users-db-config and token-storage-config (SPEC §5.4)', () => {
  let w: World
  before(async () => {
    w = await world()
  })
  after(async () => {
    await w.sc.close()
    rmSync(join(w.sc.services.host.facts.output_dir!, '..'), { recursive: true, force: true })
  })
  const put = (path: string, body: unknown, bearer = w.admin) => w.sc.call('PUT', path, { bearer, body })
  const get = (path: string, bearer = w.admin) => w.sc.call('GET', path, { bearer })
  const reset = () => writeFileSync(join(w.sc.dir, 'config.json'), JSON.stringify({ admin_route_patterns: ['/operator-kept'] }))

  it('the defaults: sqlite in the data dir, tokens with the users, nothing to restart for', async () => {
    assert.deepEqual((await get(USERS)).body, {
      backend: 'sqlite', sqlite_path: join(w.sc.dir, 'authsvc.sqlite'), postgres_url_redacted: '', redis_url_redacted: '', encryption_level: 'fields', restart_required: false,
    })
    assert.deepEqual((await get(TOKENS)).body, {
      backend: 'sqlite', same_as_users: true, sqlite_path: join(w.sc.dir, 'authsvc.sqlite'), postgres_url_redacted: '', redis_url_redacted: '',
      json_path: join(w.sc.dir, 'authsvc_tokens.json'), encryption_level: 'fields', restart_required: false,
    })
  })

  it('admins only: a user gets 403 ADMIN_REQUIRED, anonymous 401, on both prefixes; nothing is written', async () => {
    for (const route of [USERS, TOKENS, `/api${USERS}`, `/api${TOKENS}`]) {
      const body = route.includes('users-db') ? { backend: 'sqlite' } : { same_as_users: true }
      for (const method of ['GET', 'PUT']) {
        const asUser = await w.sc.call(method, route, { bearer: w.alice, body: method === 'PUT' ? body : undefined })
        assert.deepEqual([asUser.status, asUser.body.code], [403, 'ADMIN_REQUIRED'], `${method} ${route}`)
        const anonymous = await w.sc.call(method, route, { body: method === 'PUT' ? body : undefined })
        assert.deepEqual([anonymous.status, anonymous.body.code], [401, 'AUTH_REQUIRED'], `${method} ${route}`)
      }
    }
    assert.equal(existsSync(join(w.sc.dir, 'config.json')), false)
  })

  it('PUT stores into config.json (0600, the operator\'s keys kept, accepted by the next start\'s loader) and answers restart_required', async () => {
    reset()
    const url = 'postgres://authsvc:pg-Secret-1@db.internal:5432/authsvc?sslmode=require'
    const res = await put(USERS, { backend: 'postgres', postgres_url: url })
    assert.equal(res.status, 200, JSON.stringify(res.body))
    assert.deepEqual(res.body, { status: 'ok', restart_required: true })
    assert.deepEqual(w.file(), { admin_route_patterns: ['/operator-kept'], store: { backend: 'postgres', postgres_url: url } })
    assert.equal(statSync(join(w.sc.dir, 'config.json')).mode & 0o777, 0o600)
    const next = loadConfig(w.sc.dir, {})
    assert.deepEqual([next.store.backend, next.store.postgres_url], ['postgres', url])
    const shown = (await get(USERS)).body
    assert.equal(shown.postgres_url_redacted, 'postgres://authsvc:***@db.internal:5432/authsvc?sslmode=require')
    assert.equal(shown.backend, 'postgres')
    assert.equal(shown.restart_required, true)
    // with the users: the token store follows
    assert.equal((await get(TOKENS)).body.postgres_url_redacted, shown.postgres_url_redacted)
    assert.ok(!w.outside().includes('pg-Secret-1'), 'no log line or event holds the password')
    const changed = w.events.filter((e) => e.kind === 'settings_changed' && e.setting === 'users_db_config')
    assert.equal(changed.length, 1)
    assert.equal(changed[0].actor, 'root')
  })

  it('a redacted URL sent back keeps the stored one; an empty one clears it', async () => {
    reset()
    const url = 'redis://default:rd-Secret-2@cache.internal:6379/2'
    assert.equal((await put(USERS, { backend: 'redis', redis_url: url })).status, 200)
    const shown = (await get(USERS)).body.redis_url_redacted
    assert.equal(shown, 'redis://default:***@cache.internal:6379/2')
    assert.equal((await put(USERS, { backend: 'redis', redis_url: shown })).status, 200)
    assert.equal(w.file().store.redis_url, url)
    const cleared = await put(USERS, { backend: 'sqlite', redis_url: '' })
    assert.equal(cleared.status, 200)
    assert.equal(w.file().store.redis_url, '')
    // a redacted form of another URL is not the stored one: it is validated as given (and refused: no host)
    assert.equal((await put(USERS, { backend: 'redis', redis_url: 'redis://default:***@' })).status, 400)
  })

  // [what, url, the redacted form, secrets that must appear nowhere]
  const redactions: Array<[string, string, string, string[]]> = [
    ['user and password', 'postgres://app:Tr0ub4dor@db.example/authsvc', 'postgres://app:***@db.example/authsvc', ['Tr0ub4dor']],
    ['password only', 'postgres://:OnlyPass9@db.example/authsvc', 'postgres://:***@db.example/authsvc', ['OnlyPass9']],
    ['percent-encoded password with @ / : in it', 'postgresql://app:p%40ss%2Fw%3Ard7@db.example:6432/x', 'postgresql://app:***@db.example:6432/x', ['p%40ss%2Fw%3Ard7', 'p@ss/w:rd7', 'p%40ss']],
    ['password in the query', 'postgres://app@db.example/x?password=QueryPass8&sslmode=verify-full', 'postgres://app@db.example/x?password=***&sslmode=verify-full', ['QueryPass8']],
    ['sslpassword and a password both', 'postgres://app:Both1@db.example/x?sslpassword=KeyPass2', 'postgres://app:***@db.example/x?sslpassword=***', ['Both1', 'KeyPass2']],
    ['a Unix socket host in the query', 'postgres://app:Sock3t@/authsvc?host=/run/postgresql', 'postgres://app:***@/authsvc?host=%2Frun%2Fpostgresql', ['Sock3t']],
    ['rediss with only a password', 'rediss://:TlsPass4@cache.example:6380/0', 'rediss://:***@cache.example:6380/0', ['TlsPass4']],
    ['redis with a user that is the password', 'redis://UserIsPass5@cache.example/1', 'redis://***@cache.example/1', ['UserIsPass5']],
    ['redis on IPv6', 'redis://default:V6Pass6@[::1]:6379', 'redis://default:***@[::1]:6379', ['V6Pass6']],
    ['redis with a token in the query', 'redis://cache.example:6379/0?token=Tok7', 'redis://cache.example:6379/0?token=***', ['Tok7']],
  ]
  for (const [what, url, shown, secrets] of redactions) {
    it(`redaction: ${what}`, async () => {
      assert.equal(redactUrl(url), shown)
      reset()
      const kind = url.startsWith('redis') ? 'redis' : 'postgres'
      const res = await put(USERS, { backend: kind, [`${kind}_url`]: url })
      assert.equal(res.status, 200, JSON.stringify(res.body))
      assert.equal(w.file().store[`${kind}_url`], url, 'stored as given')
      const users = await get(USERS)
      assert.equal(users.body[`${kind}_url_redacted`], shown)
      // the token store, of its own, shows it the same way
      assert.equal((await put(TOKENS, { backend: kind, [`${kind}_url`]: url })).status, 200)
      const tokens = await get(TOKENS)
      assert.equal(tokens.body[`${kind}_url_redacted`], shown)
      const seen = JSON.stringify(users.body) + JSON.stringify(tokens.body) + w.outside()
      for (const secret of secrets) assert.ok(!seen.includes(secret), `${secret} was let out`)
    })
  }

  const password = 'Never-Echo-Me-9'
  // [what, route, body] → 400 VALIDATION_FAILED, config.json unchanged, the password nowhere
  const refused: Array<[string, string, Record<string, unknown>]> = [
    ['an unknown backend', USERS, { backend: 'mysql' }],
    ['json for users (tokens only)', USERS, { backend: 'json' }],
    ['an unknown field', USERS, { backend: 'sqlite', password }],
    ['postgres without a URL', USERS, { backend: 'postgres' }],
    ['redis without a URL', USERS, { backend: 'redis' }],
    ['an http URL for postgres', USERS, { backend: 'postgres', postgres_url: `http://u:${password}@db/x` }],
    ['a redis URL for postgres', USERS, { backend: 'postgres', postgres_url: `redis://u:${password}@db/0` }],
    ['a URL with no host', USERS, { backend: 'postgres', postgres_url: `postgres://u:${password}@/x` }],
    ['not a URL', USERS, { backend: 'postgres', postgres_url: `u:${password} at db` }],
    ['a newline in the URL', USERS, { backend: 'postgres', postgres_url: `postgres://u:${password}@db/x\nhost=evil` }],
    ['a fragment', USERS, { backend: 'redis', redis_url: `redis://:${password}@cache/0#x` }],
    ['a redis path that is no database number', USERS, { backend: 'redis', redis_url: `redis://:${password}@cache/keys` }],
    ['a relative sqlite path', USERS, { backend: 'sqlite', sqlite_path: 'authsvc.sqlite' }],
    ['a sqlite path that is a folder', USERS, { backend: 'sqlite', sqlite_path: '/var/lib/authsvc/' }],
    ['a sqlite path in the output folder (served by /view)', USERS, { backend: 'sqlite', sqlite_path: '@output/a.sqlite' }],
    ['a sqlite path in the input folder', USERS, { backend: 'sqlite', sqlite_path: '@input/sub/a.sqlite' }],
    ['a sqlite path in the temp folder', USERS, { backend: 'sqlite', sqlite_path: '@temp/a.sqlite' }],
    ['a sqlite path in a user\'s userdata', USERS, { backend: 'sqlite', sqlite_path: '@user/alice/a.sqlite' }],
    ['a sqlite path out of the data dir by .. into the user directory', USERS, { backend: 'sqlite', sqlite_path: '@data/../@userbase/default/a.sqlite' }],
    ['a sqlite path in a model folder', USERS, { backend: 'sqlite', sqlite_path: '@loras/a.sqlite' }],
    ['a sqlite path in the package\'s web/ (served at /extensions/authsvc/)', USERS, { backend: 'sqlite', sqlite_path: '@web/a.sqlite' }],
    ['a NUL in a path', USERS, { backend: 'sqlite', sqlite_path: '/var/lib/a\u0000.sqlite' }],
    ['tokens: neither a backend nor same_as_users', TOKENS, {}],
    ['tokens: same_as_users with a backend', TOKENS, { same_as_users: true, backend: 'json' }],
    ['tokens: users is not a backend one names', TOKENS, { backend: 'users' }],
    ['tokens: a json path in the output folder', TOKENS, { backend: 'json', json_path: '@output/tokens.json' }],
    ['tokens: a relative json path', TOKENS, { backend: 'json', json_path: 'tokens.json' }],
    ['tokens: redis with a bad URL', TOKENS, { backend: 'redis', redis_url: `http://:${password}@cache` }],
  ]
  for (const [what, route, raw] of refused) {
    it(`refused (400 VALIDATION_FAILED, nothing stored): ${what}`, async () => {
      reset()
      const before = w.fileText()
      const f = w.sc.services.host.facts
      const place: Record<string, string> = {
        '@output': f.output_dir!, '@input': f.input_dir!, '@temp': f.temp_dir!, '@user': f.user_dir!, '@loras': f.model_folders!.loras[0], '@data': w.sc.dir,
        '@userbase': relative(join(w.sc.dir, '..'), f.user_dir!), '@web': PACKAGE_WEB_DIR,
      }
      const body = JSON.parse(JSON.stringify(raw).replace(/@(output|input|temp|userbase|user|loras|data|web)/g, (m) => place[m]))
      const res = await put(route, body)
      assert.deepEqual([res.status, res.body.code], [400, 'VALIDATION_FAILED'], JSON.stringify(res.body))
      assert.equal(w.fileText(), before)
      assert.ok(!JSON.stringify(res.body).includes(password) && !w.outside().includes(password), 'the password is not echoed')
    })
  }

  it('a sqlite path inside the data dir, or outside every host folder, is accepted', async () => {
    reset()
    for (const path of [join(w.sc.dir, 'stores', 'users.sqlite'), '/var/lib/authsvc/users.sqlite']) {
      const res = await put(USERS, { backend: 'sqlite', sqlite_path: path })
      assert.equal(res.status, 200, `${path}: ${JSON.stringify(res.body)}`)
      assert.equal((await get(USERS)).body.sqlite_path, path)
    }
  })

  it('encryption_level: the same level is accepted, another is 409 CONFLICT (a store is not resealed by a setting)', async () => {
    reset()
    const before = w.fileText()
    assert.equal((await put(USERS, { backend: 'sqlite', encryption_level: 'fields' })).status, 200)
    const other = await put(USERS, { backend: 'sqlite', encryption_level: 'all' })
    assert.deepEqual([other.status, other.body.code], [409, 'CONFLICT'])
    assert.equal(w.file().store.encryption_level, undefined)
    assert.notEqual(w.fileText(), before, 'the accepted PUT wrote backend: sqlite')
  })

  it('token storage: its own store, the json file, and back to the users\' store', async () => {
    reset()
    const tokenEvents = () => w.events.filter((e) => e.kind === 'settings_changed' && e.setting === 'token_storage_config').length
    const eventsBefore = tokenEvents()
    const jsonPath = join(w.sc.dir, 'tokens', 'legacy.json')
    assert.equal((await put(TOKENS, { backend: 'json', json_path: jsonPath })).status, 200)
    assert.deepEqual(w.file().store, { tokens: { backend: 'json', json_path: jsonPath } })
    const shown = (await get(TOKENS)).body
    assert.deepEqual([shown.backend, shown.same_as_users, shown.json_path, shown.restart_required], ['json', false, jsonPath, true])
    assert.equal(loadConfig(w.sc.dir, {}).store.tokens.backend, 'json')
    assert.equal((await put(TOKENS, { same_as_users: true })).status, 200)
    assert.deepEqual(w.file().store, { tokens: {} })
    const back = (await get(TOKENS)).body
    assert.deepEqual([back.backend, back.same_as_users, back.restart_required], ['sqlite', true, false])
    assert.equal(tokenEvents() - eventsBefore, 2)
  })

  it('a config.json that does not parse is never overwritten: GET and PUT answer 409 CONFLICT', async () => {
    const path = join(w.sc.dir, 'config.json')
    writeFileSync(path, '{"store": {"backend": "sqlite",')
    assert.deepEqual([(await get(USERS)).status, (await get(USERS)).body.code], [409, 'CONFLICT'])
    const res = await put(USERS, { backend: 'sqlite', sqlite_path: '/var/lib/authsvc/x.sqlite' })
    assert.deepEqual([res.status, res.body.code], [409, 'CONFLICT'])
    assert.equal(readFileSync(path, 'utf8'), '{"store": {"backend": "sqlite",')
    // a file the next start would refuse for another key is not made worse either
    writeFileSync(path, JSON.stringify({ no_such_key: 1 }))
    const refused = await put(USERS, { backend: 'sqlite' })
    assert.deepEqual([refused.status, refused.body.code], [409, 'CONFLICT'])
    assert.match(refused.body.error, /no_such_key/)
  })

  it('20 parallel saves leave one whole file: the last one taken, no temp file left', async () => {
    reset()
    const paths = Array.from({ length: 20 }, (_, i) => `/var/lib/authsvc/p${i}.sqlite`)
    const answers = await Promise.all(paths.map((p) => put(USERS, { backend: 'sqlite', sqlite_path: p })))
    assert.deepEqual(answers.map((a) => a.status), paths.map(() => 200))
    const stored = w.file()
    assert.ok(paths.includes(stored.store.sqlite_path), stored.store.sqlite_path)
    assert.deepEqual(stored.admin_route_patterns, ['/operator-kept'])
    const { readdirSync } = await import('node:fs')
    assert.deepEqual(readdirSync(w.sc.dir).filter((n) => n.includes('.tmp')), [])
  })
})
