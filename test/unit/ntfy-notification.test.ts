/**
 * An event record as an ntfy notification (notify/notification.ts): readable titles, tags and
 * priorities per kind, failures raised; only named fields are written, each cut short, without
 * control characters, and anything shaped like a credential is hidden (a table of leak shapes).
 */
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { notificationOf, type AnyEventRecord } from '../../sidecar/src/notify/notification.js'
import { NOTIFIABLE_EVENTS } from '../../sidecar/src/notify/notifiable-events.js'

const AT = Date.parse('2026-06-01T10:20:30.000Z')
const rec = (kind: string, fields: Record<string, unknown> = {}): AnyEventRecord => ({ kind, at: AT, ...fields })

describe('titles, tags and priorities', () => {
  const rows: Array<[AnyEventRecord, string, string[], number]> = [
    [rec('user_created', { subject: 'alice', actor: 'root', role: 'user', ip: '127.0.0.1' }), 'User alice created', ['bust_in_silhouette'], 3],
    [rec('user_deleted', { subject: 'alice', actor: 'root' }), 'User alice deleted', ['wastebasket'], 4],
    [rec('user_role_changed', { subject: 'alice', actor: 'root', role: 'admin' }), 'alice is now admin', ['busts_in_silhouette'], 4],
    [rec('user_login', { subject: 'alice', ip: '203.0.113.9', mfa: true }), 'alice signed in', ['key'], 2],
    [rec('user_logout', { subject: 'alice', ip: '203.0.113.9' }), 'alice signed out', ['wave'], 2],
    [rec('login_failure', { ip: '203.0.113.9' }), 'Login failed', ['warning', 'lock'], 4],
    [rec('login_failure', { subject: 'alice', ip: '203.0.113.9', outcome: 'failure' }), 'Login failed for alice', ['warning', 'lock'], 4],
    [rec('login_locked', { ip: '203.0.113.9' }), 'Logins from 203.0.113.9 locked out', ['rotating_light', 'lock'], 5],
    [rec('login_locked', { subject: 'alice', ip: '203.0.113.9' }), 'alice locked out', ['rotating_light', 'lock'], 5],
    [rec('api_token_created', { subject: 'alice', token_hash_prefix: '0a1b2c3d' }), 'API token created for alice', ['key'], 3],
    [rec('mfa_enabled', { subject: 'alice' }), 'Two-factor sign-in on for alice', ['closed_lock_with_key'], 3],
    [rec('mfa_disabled', { subject: 'alice' }), 'Two-factor sign-in off for alice', ['warning', 'unlock'], 4],
    [rec('nsfw_block', { subject: 'bob', outcome: 'refused' }), 'NSFW image blocked for bob', ['warning', 'no_entry'], 4],
    [rec('download_completed', { subject: 'root', filename: 'sdxl.safetensors' }), 'Download finished: sdxl.safetensors', ['white_check_mark', 'arrow_down'], 3],
    [rec('download_failed', { subject: 'root', filename: 'sdxl.safetensors', outcome: 'failure' }), 'Download failed: sdxl.safetensors', ['warning', 'x', 'arrow_down'], 4],
    [rec('settings_changed', { actor: 'root', setting: 'ntfy' }), 'Settings changed: ntfy', ['gear'], 3],
    [rec('server_started', { version: '0.1.0' }), 'authsvc started', ['rocket'], 3],
    [rec('a_kind_from_the_future', { subject: 'alice' }), 'a kind from the future', ['information_source'], 3],
  ]
  for (const [record, title, tags, priority] of rows) {
    it(`${record.kind}${record.outcome ? ` (${String(record.outcome)})` : ''}: "${title}"`, () => {
      const n = notificationOf(record, 'gpu-box')
      assert.deepEqual([n.title, n.tags, n.priority], [title, tags, priority])
    })
  }

  it('every notifiable kind has a title of its own', () => {
    const titles = NOTIFIABLE_EVENTS.map((kind) => notificationOf(rec(kind, { subject: 'alice' }), 'gpu-box').title)
    assert.equal(new Set(titles).size, NOTIFIABLE_EVENTS.length, titles.join(' | '))
    for (const [i, kind] of NOTIFIABLE_EVENTS.entries()) assert.notEqual(titles[i], kind.replaceAll('_', ' '), `${kind} falls back to its name`)
  })

  it('the message: who, by whom, from where, the outcome, the named details, when, which machine', () => {
    const n = notificationOf(rec('user_role_changed', { subject: 'alice', actor: 'root', ip: '127.0.0.1', role: 'admin', outcome: 'success' }), 'gpu-box')
    assert.equal(n.message, 'User: alice\nBy: root\nFrom: 127.0.0.1\nOutcome: success\nRole: admin\nAt: 2026-06-01T10:20:30.000Z\nServer: gpu-box')
    const self = notificationOf(rec('user_logout', { subject: 'alice', actor: 'alice' }), 'gpu-box')
    assert.ok(!self.message.includes('By:'), 'no "By" when one did it to oneself')
  })
})

describe('what never reaches ntfy', () => {
  const TOKEN = 'ast_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefg'
  const JWT = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1LTEiLCJ0eXAiOiJzZXNzaW9uIn0.c2lnbmF0dXJlLXNpZ25hdHVyZQ'
  const NTFY = 'tk_9f8e7d6c5b4a3f2e1d0c9b8a7f6e5'
  const rows: Array<[string, AnyEventRecord, string]> = [
    ['a field it does not name (a password)', rec('user_created', { subject: 'alice', password: 'hunter2-hunter2' }), 'hunter2-hunter2'],
    ['a field it does not name (a raw token)', rec('api_token_created', { subject: 'alice', token: TOKEN }), TOKEN],
    ['a field it does not name (a TOTP secret)', rec('mfa_enabled', { subject: 'alice', secret: 'JBSWY3DPEHPK3PXP' }), 'JBSWY3DPEHPK3PXP'],
    ['an API token inside a named field', rec('download_failed', { reason: `GET /x?token=${TOKEN} failed` }), TOKEN],
    ['a JWT inside a named field', rec('download_failed', { reason: `refused ${JWT}` }), JWT],
    ['an ntfy token inside a named field', rec('settings_changed', { setting: NTFY }), NTFY],
    ['a token as the subject', rec('user_login', { subject: TOKEN }), TOKEN],
    ['nested objects', rec('download_failed', { reason: { api_key: 'sk-nested-secret' } }), 'sk-nested-secret'],
  ]
  for (const [name, record, secret] of rows) {
    it(name, () => {
      const text = JSON.stringify(notificationOf(record, 'gpu-box'))
      assert.ok(!text.includes(secret), text)
    })
  }

  it('control characters and line breaks in a value become spaces; long values are cut', () => {
    const n = notificationOf(rec('download_failed', { filename: 'a\r\nTitle: forged\u0000\u2028b', reason: 'x'.repeat(500) }), 'gpu-box')
    assert.equal(n.title, 'Download failed: a Title: forged b')
    const reason = n.message.split('\n').find((l) => l.startsWith('Reason: '))!
    assert.equal(reason.length, 'Reason: '.length + 200)
    assert.ok(reason.endsWith('…'))
    assert.equal(n.message.split('\n').length, 4, 'one line per field: File, Reason, At, Server')
  })
})
