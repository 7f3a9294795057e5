/**
 * Configuration (SPEC §10, STYLE habit 4): one schema with its defaults,
 * unknown keys refused, wrong types refused, every problem reported at once,
 * env overrides on top of config.json.
 */
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { ConfigError, UNBUILT_KEYS, loadConfig, operatorDataDir, parseBoolean, validateConfig } from '../../sidecar/src/kernel/config/load.js'
import { ConfigSchema } from '../../sidecar/src/kernel/config/schema.js'
import { tempDir } from './fixtures.js'

const dirs: string[] = []
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

function dataDir(configJson?: string): string {
  const dir = tempDir('authsvc-config-')
  dirs.push(dir)
  if (configJson !== undefined) writeFileSync(join(dir, 'config.json'), configJson)
  return dir
}

function problemsOf(fn: () => unknown): string[] {
  try {
    fn()
  } catch (err) {
    assert.ok(err instanceof ConfigError, `expected a ConfigError, got ${String(err)}`)
    return err.problems
  }
  assert.fail('expected a ConfigError')
}

describe('config defaults (SPEC §10)', () => {
  it('an empty config gets the documented defaults', () => {
    const c = validateConfig({})
    assert.equal(c.require_auth_for_remote_api, true)
    assert.deepEqual(c.local_network_cidrs, ['127.0.0.0/8', '::1/128'])
    assert.deepEqual(c.trusted_proxies, [])
    assert.equal(c.local_anonymous_role, null)
    assert.equal(c.seperate_users, true)
    assert.equal(c.force_https, false)
    assert.equal(c.allow_guest_jwt, false)
    assert.equal(c.access_token_expiration_hours, 12)
    assert.equal(c.session_idle_minutes, 60)
    assert.equal(c.max_token_expiration_hours, 8760)
    assert.deepEqual(c.argon2, { memory_kib: 19456, time_cost: 2, parallelism: 1, max_concurrent_hashes: 4 })
    assert.equal(c.ntfy.base_url, 'https://ntfy.sh')
    assert.deepEqual(c.ntfy.enabled_events, [])
    assert.equal(c.model_download.max_active_total, 3)
    assert.equal(c.model_download.max_active_per_source, 2)
    assert.equal(c.store.backend, 'sqlite')
    assert.equal(c.store.encryption_level, 'fields')
    assert.deepEqual(c.admin_route_patterns, [])
    assert.deepEqual(c.inert_route_patterns, ['/vhs/viewvideo', '/viewvideo', '/vhs/viewaudio'])
    assert.deepEqual(c.frame_ancestors, [])
  })

  it('a missing config.json with no env is the defaults', () => {
    assert.deepEqual(loadConfig(dataDir(), {}), validateConfig({}))
  })

  it('nested objects keep given values and fill the rest with defaults', () => {
    const c = validateConfig({ argon2: { memory_kib: 64 }, store: { sqlite_path: '/x.sqlite' } })
    assert.deepEqual(c.argon2, { memory_kib: 64, time_cost: 2, parallelism: 1, max_concurrent_hashes: 4 })
    assert.equal(c.store.sqlite_path, '/x.sqlite')
    assert.equal(c.store.encryption_level, 'fields')
  })

  it('does not mutate the raw object it validates', () => {
    const raw = { argon2: { memory_kib: 64 } }
    validateConfig(raw)
    assert.deepEqual(raw, { argon2: { memory_kib: 64 } })
  })
})

describe('config refusals', () => {
  const cases: Array<[string, unknown, RegExp]> = [
    ['unknown top-level key', { bogus: 1 }, /additional properties.*bogus/],
    ['unknown nested key (argon2)', { argon2: { salt: 'x' } }, /\/argon2.*additional properties.*salt/],
    ['unknown nested key (store)', { store: { engine: 'x' } }, /\/store.*additional properties.*engine/],
    ['boolean as string', { seperate_users: 'yes' }, /\/seperate_users: must be boolean/],
    ['boolean as number', { force_https: 1 }, /\/force_https: must be boolean/],
    ['number as string', { access_token_expiration_hours: '12' }, /\/access_token_expiration_hours/],
    ['zero lifetime', { access_token_expiration_hours: 0 }, /\/access_token_expiration_hours/],
    ['negative idle minutes', { session_idle_minutes: -1 }, /\/session_idle_minutes/],
    ['non-integer argon2 memory', { argon2: { memory_kib: 1.5 } }, /\/argon2\/memory_kib/],
    ['list as string', { trusted_proxies: '10.0.0.1' }, /\/trusted_proxies/],
    ['list of numbers', { local_network_cidrs: [10] }, /\/local_network_cidrs\/0/],
    ['unknown store backend', { store: { backend: 'mysql' } }, /\/store\/backend/],
    ['empty local_anonymous_role', { local_anonymous_role: '' }, /\/local_anonymous_role/],
    ['admin pattern not a path', { admin_route_patterns: ['manager'] }, /\/admin_route_patterns\/0/],
    ['inert pattern not a path', { inert_route_patterns: ['vhs/viewvideo'] }, /\/inert_route_patterns\/0/],
    // the frontend's own page as a sandbox would run no script: never listed
    ['inert pattern of the frontend page', { inert_route_patterns: ['/'] }, /\/inert_route_patterns\/0/],
    ['inert pattern of the frontend page\'s /api twin', { inert_route_patterns: ['/ok', '/api'] }, /\/inert_route_patterns\/1/],
    ['inert pattern of the frontend page\'s /api/ twin', { inert_route_patterns: ['/api/'] }, /\/inert_route_patterns\/0/],
    ['inert pattern starting with //', { inert_route_patterns: ['//x'] }, /\/inert_route_patterns\/0/],
    // frame_ancestors goes into a CSP header as written: origins only, nothing that ends the directive
    ['frame ancestor without a scheme', { frame_ancestors: ['portal.example.com'] }, /\/frame_ancestors\/0/],
    ['frame ancestor with a path', { frame_ancestors: ['https://portal.example.com/x'] }, /\/frame_ancestors\/0/],
    ['frame ancestor that ends the directive', { frame_ancestors: ['https://a.example; script-src *'] }, /\/frame_ancestors\/0/],
    ['frame ancestor keyword', { frame_ancestors: ["'unsafe-inline'"] }, /\/frame_ancestors\/0/],
    ['frame ancestor with a wildcard host', { frame_ancestors: ['https://*.example.com', 'https://ok.example'] }, /\/frame_ancestors\/0/],
  ]
  for (const [name, raw, pattern] of cases) {
    it(`refuses ${name}`, () => {
      const problems = problemsOf(() => validateConfig(raw))
      assert.ok(problems.some((p) => pattern.test(p)), `${JSON.stringify(problems)} should match ${pattern}`)
    })
  }

  for (const raw of [null, [], 'x', 42]) {
    it(`refuses a non-object config ${JSON.stringify(raw)}`, () => {
      assert.deepEqual(problemsOf(() => validateConfig(raw)), ['config must be a JSON object'])
    })
  }

  const badCidrs = ['nope', '10.0.0.0/33', '1.2.3.4/8/1', '::1/129', '10.0.0.1/x', '999.1.1.1', '10.0.0.0/-1']
  for (const cidr of badCidrs) {
    it(`refuses the invalid CIDR ${JSON.stringify(cidr)} in both lists`, () => {
      for (const key of ['local_network_cidrs', 'trusted_proxies']) {
        const problems = problemsOf(() => validateConfig({ [key]: [cidr] }))
        assert.ok(problems.some((p) => p.startsWith(`/${key}/0`)), `${key}: ${JSON.stringify(problems)}`)
      }
    })
  }

  it('accepts valid CIDRs and bare addresses, v4, v6 and v4-mapped', () => {
    const c = validateConfig({ trusted_proxies: ['10.0.0.1', '192.168.0.0/16', 'fd00::/8', '::ffff:10.1.2.3'], local_network_cidrs: ['127.0.0.0/8'] })
    assert.equal(c.trusted_proxies.length, 4)
  })
})

describe('every problem is reported at once', () => {
  it('several schema problems land in one ConfigError', () => {
    const problems = problemsOf(() =>
      validateConfig({ bogus: 1, seperate_users: 'yes', argon2: { memory_kib: 'x', extra: 1 }, session_idle_minutes: -5 }),
    )
    assert.ok(problems.length >= 4, JSON.stringify(problems))
    for (const part of ['bogus', '/seperate_users', '/argon2/memory_kib', 'extra', '/session_idle_minutes']) {
      assert.ok(problems.some((p) => p.includes(part)), `${part} missing from ${JSON.stringify(problems)}`)
    }
  })

  it('every invalid CIDR of both lists is reported together', () => {
    const problems = problemsOf(() => validateConfig({ trusted_proxies: ['nope', '10.0.0.0/33'], local_network_cidrs: ['::1/129'] }))
    assert.equal(problems.length, 3, JSON.stringify(problems))
  })

  it('an invalid CIDR is reported together with a schema problem', () => {
    const problems = problemsOf(() => validateConfig({ seperate_users: 'yes', trusted_proxies: ['nope'] }))
    assert.ok(problems.some((p) => p.includes('/seperate_users')), JSON.stringify(problems))
    assert.ok(problems.some((p) => p.startsWith('/trusted_proxies/0')), JSON.stringify(problems))
  })

  it('config.json that is not JSON is reported together with a bad env value', () => {
    const dir = dataDir('{ "seperate_users": true, ')
    const problems = problemsOf(() => loadConfig(dir, { FORCE_HTTPS: 'maybe' }))
    assert.ok(problems.some((p) => p.includes('config.json') && p.includes('not valid JSON')), JSON.stringify(problems))
    assert.ok(problems.some((p) => p.includes('FORCE_HTTPS')), JSON.stringify(problems))
  })

  it('a config.json problem and a schema problem are reported together', () => {
    const dir = dataDir(JSON.stringify({ bogus: true }))
    const problems = problemsOf(() => loadConfig(dir, { SEPERATE_USERS: 'nah' }))
    assert.ok(problems.some((p) => p.includes('bogus')), JSON.stringify(problems))
    assert.ok(problems.some((p) => p.includes('SEPERATE_USERS')), JSON.stringify(problems))
  })

  it('the error message lists every problem', () => {
    try {
      validateConfig({ a: 1, force_https: 'x' })
      assert.fail('expected an error')
    } catch (err) {
      assert.ok(err instanceof ConfigError)
      for (const p of err.problems) assert.ok(err.message.includes(p))
    }
  })
})

describe('config.json and env', () => {
  it('config.json that is not JSON is refused', () => {
    const problems = problemsOf(() => loadConfig(dataDir('not json at all'), {}))
    assert.equal(problems.length, 1)
    assert.match(problems[0], /config\.json: not valid JSON/)
  })

  for (const text of ['[]', '"x"', '42', 'null']) {
    it(`config.json holding ${text} is refused`, () => {
      const problems = problemsOf(() => loadConfig(dataDir(text), {}))
      assert.match(problems.join('\n'), /must hold a JSON object/)
    })
  }

  it('config.json values are applied', () => {
    const c = loadConfig(dataDir(JSON.stringify({ local_anonymous_role: 'guest', trusted_proxies: ['10.0.0.1'] })), {})
    assert.equal(c.local_anonymous_role, 'guest')
    assert.deepEqual(c.trusted_proxies, ['10.0.0.1'])
  })

  it('REQUIRE_AUTH_FOR_REMOTE_API=false turns remote auth off, and beats config.json', () => {
    assert.equal(loadConfig(dataDir(), { REQUIRE_AUTH_FOR_REMOTE_API: 'false' }).require_auth_for_remote_api, false)
    const dir = dataDir(JSON.stringify({ require_auth_for_remote_api: true }))
    assert.equal(loadConfig(dir, { REQUIRE_AUTH_FOR_REMOTE_API: 'false' }).require_auth_for_remote_api, false)
  })

  it('SEPERATE_USERS and FORCE_HTTPS override config.json both ways', () => {
    const dir = dataDir(JSON.stringify({ seperate_users: true, force_https: false }))
    const c = loadConfig(dir, { SEPERATE_USERS: '0', FORCE_HTTPS: 'TRUE' })
    assert.equal(c.seperate_users, false)
    assert.equal(c.force_https, true)
    const d = loadConfig(dataDir(JSON.stringify({ seperate_users: false })), { SEPERATE_USERS: 'yes' })
    assert.equal(d.seperate_users, true)
  })

  it('an empty env value is ignored (config.json stands)', () => {
    const c = loadConfig(dataDir(JSON.stringify({ force_https: true })), { FORCE_HTTPS: '' })
    assert.equal(c.force_https, true)
  })

  for (const bad of ['maybe', 'enabled', '2', 'tru', 'false!']) {
    it(`a bad env boolean ${JSON.stringify(bad)} is an error, never a guess`, () => {
      const problems = problemsOf(() => loadConfig(dataDir(), { REQUIRE_AUTH_FOR_REMOTE_API: bad }))
      assert.equal(problems.length, 1)
      assert.match(problems[0], /env REQUIRE_AUTH_FOR_REMOTE_API: expected true or false/)
    })
  }

  it('parseBoolean accepts the usual spellings, case- and space-insensitively', () => {
    for (const t of ['1', 'true', 'TRUE', ' yes ', 'On']) assert.equal(parseBoolean(t), true, t)
    for (const f of ['0', 'false', 'False', 'no', 'OFF ']) assert.equal(parseBoolean(f), false, f)
    for (const u of ['', 'y', 'n', 'maybe']) assert.equal(parseBoolean(u), undefined, u)
  })

  it('unrelated env variables are not config', () => {
    const c = loadConfig(dataDir(), { ALLOW_GUEST_JWT: 'true', LOCAL_ANONYMOUS_ROLE: 'user' })
    assert.equal(c.allow_guest_jwt, false)
    assert.equal(c.local_anonymous_role, null)
  })
})

// Issue 9, hole 8: force_https was accepted and read by nothing. Every key the schema accepts must
// be read somewhere in the sidecar, or be refused as not built yet.
describe('no configuration key is accepted but ignored', () => {
  /** Every leaf key of the schema, as `section.key` paths. */
  function schemaPaths(schema: { properties?: Record<string, unknown> }, prefix = ''): string[] {
    return Object.entries(schema.properties ?? {}).flatMap(([key, sub]) => {
      const path = prefix ? `${prefix}.${key}` : key
      const nested = sub as { properties?: Record<string, unknown> }
      return nested.properties ? schemaPaths(nested, path) : [path]
    })
  }
  /** The sidecar's sources outside config/ (where the schema and its loader live). */
  function sources(dir: string): string {
    return readdirSync(dir, { withFileTypes: true })
      .flatMap((e) => {
        const path = join(dir, e.name)
        if (e.isDirectory()) return e.name === 'config' ? [] : [sources(path)]
        return e.name.endsWith('.ts') ? [readFileSync(path, 'utf8')] : []
      })
      .join('\n')
  }
  const code = sources(fileURLToPath(new URL('../../sidecar/src', import.meta.url)))
  const unbuilt = (path: string) => Object.keys(UNBUILT_KEYS).some((k) => path === k || path.startsWith(`${k}.`))

  it('every schema key is read outside config/ (as `.key` or a destructured `key`), or refused as unbuilt', () => {
    const unread = schemaPaths(ConfigSchema as unknown as { properties: Record<string, unknown> })
      .filter((path) => !unbuilt(path))
      .filter((path) => {
        const key = path.split('.').pop() as string
        return !new RegExp(`\\.${key}\\b|[{,]\\s*${key}\\s*[,}:]`).test(code)
      })
    assert.deepEqual(unread, [])
  })

  for (const [path, why] of Object.entries(UNBUILT_KEYS)) {
    it(`setting ${path} is refused, naming it and why`, () => {
      const [section, key] = path.split('.')
      const raw = key === undefined ? { [section]: {} } : { [section]: { [key]: '' } }
      const problems = problemsOf(() => validateConfig(raw))
      assert.deepEqual(problems, [`/${path.replace('.', '/')}: ${why}; remove it from the configuration`])
    })
  }
})

// Issue 9, hole 11: a bad enum value read "must be equal to constant" three times.
describe('a value outside a union is one line naming the key, the value and what is allowed', () => {
  const rows: Array<[string, unknown, string[]]> = [
    ['store.backend "mysql"', { store: { backend: 'mysql' } }, ['/store/backend: got "mysql", must be one of "sqlite", "postgres", "redis"']],
    ['store.encryption_level "none"', { store: { encryption_level: 'none' } }, ['/store/encryption_level: got "none", must be one of "fields", "all"']],
    ['store.backend 3 (not even a string)', { store: { backend: 3 } }, ['/store/backend: got 3, must be one of "sqlite", "postgres", "redis"']],
    ['local_anonymous_role 5 (string or null)', { local_anonymous_role: 5 }, ['/local_anonymous_role: got 5, must be string or null']],
    ['two bad enums at once', { store: { backend: 'x', encryption_level: 'y' } }, ['/store/backend: got "x", must be one of "sqlite", "postgres", "redis"', '/store/encryption_level: got "y", must be one of "fields", "all"']],
  ]
  for (const [name, raw, expected] of rows) {
    it(name, () => {
      assert.deepEqual(problemsOf(() => validateConfig(raw)), expected)
    })
  }
})

// Issue 28, item 9: an operator's command finds the data dir the plugin uses inside ComfyUI.
describe('operatorDataDir: where `npx authsvc` looks without --data-dir', () => {
  const layout = (): { comfy: string; pkg: string } => {
    const comfy = dataDir()
    const pkg = join(comfy, 'custom_nodes', 'authsvc')
    mkdirSync(pkg, { recursive: true })
    return { comfy, pkg }
  }
  it('AUTHSVC_DATA_DIR first', () => {
    const { pkg } = layout()
    assert.equal(operatorDataDir({ AUTHSVC_DATA_DIR: '/x/y' }, pkg), '/x/y')
  })
  it('inside <ComfyUI>/custom_nodes with <ComfyUI>/user/authsvc present: that folder', () => {
    const { comfy, pkg } = layout()
    mkdirSync(join(comfy, 'user', 'authsvc'), { recursive: true })
    assert.equal(operatorDataDir({}, pkg), join(comfy, 'user', 'authsvc'))
  })
  it('inside custom_nodes but no such folder (another --user-directory, or never started): <package>/users', () => {
    const { pkg } = layout()
    assert.equal(operatorDataDir({}, pkg), join(pkg, 'users'))
  })
  it('not inside custom_nodes (the stand-in demo, a checkout): <package>/users', () => {
    const root = dataDir()
    mkdirSync(join(root, 'user', 'authsvc'), { recursive: true })
    const pkg = join(root, 'src', 'checkout') // <root>/user/authsvc would be its ComfyUI folder, were src custom_nodes
    mkdirSync(pkg, { recursive: true })
    assert.equal(operatorDataDir({}, pkg), join(pkg, 'users'))
  })
})

// Issue 28, item 8: the store's URLs are accepted (the backends are the store's work), checked,
// and never quoted in a problem line (they may hold a password).
describe('store URLs and the token store in the configuration', () => {
  it('postgres and redis URLs are accepted, and a backend with its URL', () => {
    const c = validateConfig({ store: { backend: 'redis', redis_url: 'rediss://:pw@cache.example:6380/0', postgres_url: 'postgresql://u:pw@db.example/x', tokens: { backend: 'json', json_path: '/var/lib/authsvc/tokens.json' } } })
    assert.deepEqual([c.store.backend, c.store.redis_url, c.store.tokens.backend, c.store.tokens.json_path], ['redis', 'rediss://:pw@cache.example:6380/0', 'json', '/var/lib/authsvc/tokens.json'])
    assert.equal(validateConfig({}).store.tokens.backend, 'users', 'tokens stay with the users by default')
  })
  const rows: Array<[string, Record<string, unknown>, string[]]> = [
    ['postgres without its URL', { store: { backend: 'postgres' } }, ['/store/backend is postgres: set store.postgres_url too']],
    ['redis tokens without their URL', { store: { tokens: { backend: 'redis' } } }, ['/store/tokens/backend is redis: set store.tokens.redis_url too']],
    ['a postgres URL of another scheme', { store: { postgres_url: 'mysql://u:Hidden1@db/x' } }, ['/store/postgres_url: must start with postgres:// or postgresql://']],
    ['a redis URL without a host', { store: { redis_url: 'redis://:Hidden2@' } }, ['/store/redis_url: names no host']],
    ['a token store URL that does not parse', { store: { tokens: { postgres_url: 'postgres://u:Hidden3@db:notaport/x' } } }, ['/store/tokens/postgres_url: is not a valid URL']],
    ['an unknown token backend', { store: { tokens: { backend: 'mongo' } } }, ['/store/tokens/backend: got "mongo", must be one of "users", "sqlite", "postgres", "redis", "json"']],
  ]
  for (const [name, raw, expected] of rows) {
    it(`refused: ${name}, without quoting the URL`, () => {
      const problems = problemsOf(() => validateConfig(raw))
      assert.deepEqual(problems, expected)
      assert.ok(!problems.join('\n').includes('Hidden'), 'no password in a problem line')
    })
  }
})

// Issue 22: the source base URLs are where a user's key goes; the first request of a download goes nowhere else.
describe('model_download base URLs: https, or http to this machine', () => {
  const rows: Array<[string, Record<string, unknown>, string[]]> = [
    ['the defaults', {}, []],
    ['a loopback stand-in over http', { civitai_base_url: 'http://127.0.0.1:9000' }, []],
    ['plain http elsewhere', { civitai_base_url: 'http://civitai.example' }, ['/model_download/civitai_base_url: plain http is allowed only to this machine (127.0.0.1, ::1, localhost); use https']],
    ['a user name in the URL', { huggingface_base_url: 'https://me:pw@huggingface.co' }, ['/model_download/huggingface_base_url: a URL may not carry a user name or password']],
    ['not a URL', { huggingface_base_url: 'huggingface.co' }, ['/model_download/huggingface_base_url: not an absolute URL']],
  ]
  for (const [name, section, expected] of rows) {
    it(name, () => {
      if (expected.length === 0) assert.doesNotThrow(() => validateConfig({ model_download: section }))
      else assert.deepEqual(problemsOf(() => validateConfig({ model_download: section })), expected)
    })
  }
})
