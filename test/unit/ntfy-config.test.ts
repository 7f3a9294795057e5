/**
 * config.json's `ntfy` section (SPEC §10) is validated at start by the rules the admin's PUT follows
 * (notify/settings-rules.ts), every problem reported with the others at once.
 */
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { ConfigError, validateConfig } from '../../sidecar/src/kernel/config/load.js'

function problemsOf(raw: unknown): string[] {
  try {
    validateConfig(raw)
  } catch (err) {
    if (err instanceof ConfigError) return err.problems
    throw err
  }
  return []
}

describe('config.json: ntfy', () => {
  it('accepted: the defaults, and a full section', () => {
    assert.deepEqual(validateConfig({}).ntfy, { topic: '', base_url: 'https://ntfy.sh', enabled_events: [], api_token: '' })
    const full = { topic: 'ops', base_url: 'http://127.0.0.1:2586', enabled_events: ['login_failure', 'login_locked'], api_token: 'tk_abc' }
    assert.deepEqual(validateConfig({ ntfy: full }).ntfy, full)
  })

  const rows: Array<[string, Record<string, unknown>, string[]]> = [
    ['http to another host', { base_url: 'http://ntfy.example.net' }, ['/ntfy/base_url: http:// is allowed only for a loopback host (localhost, 127.0.0.1, [::1]); use https:// for ntfy.example.net']],
    ['a bad topic', { topic: 'my topic' }, ['/ntfy/topic: must be 1 to 64 letters, digits, _ or - (or empty to turn notifications off)']],
    ['an unknown kind', { enabled_events: ['user_login', 'lunch'] }, [`/ntfy/enabled_events: unknown event kind "lunch"; known kinds: user_created, user_deleted, user_role_changed, user_login, user_logout, login_failure, login_locked, api_token_created, mfa_enabled, mfa_disabled, nsfw_block, download_completed, download_failed, settings_changed, server_started`]],
    ['a token with a line break', { api_token: 'tk\nX' }, ['/ntfy/api_token: must be visible ASCII characters without spaces, at most 1024']],
    ['an unknown key', { token: 'x' }, ['/ntfy: must not have additional properties ({"additionalProperties":["token"]})']],
  ]
  for (const [name, ntfy, expected] of rows) {
    it(`refused: ${name}`, () => {
      assert.deepEqual(problemsOf({ ntfy }), expected)
    })
  }

  it('every problem at once, with the others of the file', () => {
    const problems = problemsOf({ force_https: 'yes', ntfy: { topic: 'a b', base_url: 'ftp://x' } })
    assert.equal(problems.length, 3, problems.join('\n'))
    assert.ok(problems.some((p) => p.startsWith('/force_https')))
    assert.ok(problems.some((p) => p.startsWith('/ntfy/topic')))
    assert.ok(problems.some((p) => p.startsWith('/ntfy/base_url')))
  })
})
