// The account page: who am I, my sessions, my API tokens, two-factor authentication and my
// password. Every change is one request to the service's own API; the lists are read again
// after each change, so the page shows what the service holds, not what the script guessed.
import { $, ApiError, api, copyText, el, onSubmit, say, when } from './common.js'
import { EVENT_NAMES } from './admin-audit.js'
import { showBackupCodes } from './account-codes.js'
import { PERMISSIONS } from './permission-words.js'

const call = (path, options = {}) => api(path, { ...options, sessionPage: true })
const digits = (value) => String(value || '').replace(/\s/g, '')
/** A TOTP code is digits; anything else typed into the same box is a backup code. */
const factor = (value) => (/^\d{6}$/.test(digits(value)) ? { code: digits(value) } : { backup_code: String(value || '').trim() })

function listError(slot, error) {
  say(slot, error.message)
}

async function loadMe() {
  const { data } = await call('/authsvc/api/me')
  $('#me-username').textContent = data.username
  $('#me-role').textContent = data.role
  $('#me-auth').textContent = data.auth_type === 'session' ? 'a browser session' : data.auth_type === 'api_token' ? 'an API token' : data.auth_type
  $('#me-permissions').replaceChildren(...permissionLines(data.permissions))
  $('#mfa-status').textContent = data.mfa_enabled ? 'Two-factor authentication is on.' : 'Two-factor authentication is off.'
  $('#mfa-on').hidden = !data.mfa_enabled
  $('#mfa-off').hidden = data.mfa_enabled
  return data
}

/** Each permission of the role in words (permission-words.js, as the admin's Roles section): what it allows, or what its absence means. */
function permissionLines(permissions) {
  const known = PERMISSIONS.filter((p) => p.key in permissions)
  const unknown = Object.keys(permissions).filter((k) => !known.some((p) => p.key === k)).map((key) => ({ key, name: key, mine: '', mineOff: '' }))
  return [...known, ...unknown].map((p) => {
    const on = permissions[p.key] === true
    return el('li', { dataset: { perm: p.key, on: String(on) } },
      el('span', { class: on ? 'perm-mark ok' : 'perm-mark', 'aria-hidden': 'true' }, on ? '✓' : '✗'), ' ',
      el('strong', {}, p.name), el('span', { class: 'sr-only' }, on ? ' (allowed)' : ' (not allowed)'),
      (on ? p.mine : p.mineOff) ? el('span', { class: 'hint' }, ` ${on ? p.mine : p.mineOff}`) : '')
  })
}

/** "iPhone · Safari 17 · iOS 17.0": what the device told the server, in words. */
const deviceWords = (s) => [s.device, s.browser, s.os].filter(Boolean).join(' · ')

async function loadSessions() {
  const { data } = await call('/authsvc/me/sessions')
  const sessions = data.sessions.sort((a, b) => Number(b.is_current) - Number(a.is_current) || b.last_used_at_iso.localeCompare(a.last_used_at_iso))
  const rows = sessions.map((s) => el('tr', { dataset: s.is_current ? { jti: s.jti, current: 'true' } : { jti: s.jti } },
    el('td', { class: 'device' }, el('span', {}, deviceWords(s)), s.is_current ? el('span', { class: 'tag this-device' }, 'This device') : null),
    el('td', { 'data-label': 'Address' }, s.ip ?? 'unknown'),
    el('td', { 'data-label': 'Signed in' }, when(s.created_at_iso)),
    el('td', { 'data-label': 'Last used' }, when(s.last_used_at_iso)),
    el('td', { class: 'actions' }, el('button', {
      type: 'button', class: 'danger small',
      'aria-label': s.is_current ? 'Sign out this device' : `Sign out ${deviceWords(s)}, signed in ${when(s.created_at_iso)}${s.ip ? ` from ${s.ip}` : ''}`,
      onclick: () => revokeSession(s),
    }, 'Sign out'))))
  $('#session-rows').replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: 5 }, 'No active session.'))]))
  $('#revoke-others').hidden = !sessions.some((s) => !s.is_current)
}

async function revokeSession(session) {
  $('#sessions-error').hidden = true
  $('#sessions-done').hidden = true
  try {
    await call('/authsvc/me/sessions/revoke', { method: 'POST', body: { jti: session.jti } })
    if (session.is_current) { location.assign('/login'); return }
    await loadSessions()
    say($('#sessions-done'), `${deviceWords(session)} is signed out.`)
    if ($('#revoke-others').hidden) $('#sessions-title').focus()
    else $('#revoke-others').focus()
  } catch (error) { listError($('#sessions-error'), error) }
}

$('#revoke-others').addEventListener('click', async () => {
  $('#sessions-error').hidden = true
  try {
    const { data } = await call('/authsvc/me/sessions/revoke-others', { method: 'POST', body: {} })
    await loadSessions()
    say($('#sessions-done'), data.revoked === 1 ? '1 other session was signed out.' : `${data.revoked} other sessions were signed out.`)
  } catch (error) { listError($('#sessions-error'), error) }
})

async function loadTokens() {
  const { data } = await call('/authsvc/api/tokens')
  const rows = data.tokens.map((t) => el('tr', { dataset: { prefix: t.token_hash_prefix } },
    el('td', { class: 'device' }, t.label || '(no label)'),
    el('td', { class: 'mono', 'data-label': 'Id' }, `${t.token_hash_prefix}…`),
    el('td', { 'data-label': 'Created' }, when(t.created_at_iso)),
    el('td', { 'data-label': 'Expires' }, when(t.expires_iso)),
    el('td', { 'data-label': 'Last used' }, t.last_used_at_iso ? when(t.last_used_at_iso) : 'never'),
    el('td', { class: 'actions' }, el('button', {
      type: 'button', class: 'danger small', 'aria-label': `Revoke the token ${t.label || t.token_hash_prefix}`,
      onclick: () => revokeToken(t),
    }, 'Revoke'))))
  $('#token-rows').replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: 6 }, 'No API token.'))]))
}

async function revokeToken(token) {
  $('#tokens-error').hidden = true
  try {
    await call('/authsvc/api/tokens', { method: 'DELETE', body: { token_hash_prefix: token.token_hash_prefix } })
    await loadTokens()
  } catch (error) { listError($('#tokens-error'), error) }
}

onSubmit($('#token-form'), async (data) => {
  const { data: answer } = await call('/authsvc/generate_token', { method: 'POST', body: { label: data.label, expire_hours: data.expire_hours.trim() } })
  $('#token-value').textContent = answer.token
  $('#token-copied').hidden = true
  $('#token-created').hidden = false
  $('#token-form').reset()
  await loadTokens()
  $('#token-copy').focus()
})
$('#token-copy').addEventListener('click', () => copyText($('#token-value'), $('#token-copied')))

function showSetup(setup) {
  $('#qr').innerHTML = setup.qr_svg
  $('#secret').textContent = setup.secret
  showBackupCodes($('#account-codes'), setup.backup_codes, setup.username)
  $('#mfa-setup').hidden = false
  $('#mfa-done').hidden = true
  $('#mfa-confirm-code').focus()
}

$('#mfa-start').addEventListener('click', async () => {
  try {
    showSetup((await call('/authsvc/api/mfa/setup', { method: 'POST', body: {} })).data)
    $('#mfa-off').hidden = true
  } catch (error) { say($('#mfa-done'), error.message) }
})
onSubmit($('#mfa-renew-form'), async (data) => {
  showSetup((await call('/authsvc/api/mfa/setup', { method: 'POST', body: factor(data.code) })).data)
  $('#mfa-renew-form').reset()
})
onSubmit($('#mfa-confirm-form'), async (data) => {
  await call('/authsvc/api/mfa/verify-setup', { method: 'POST', body: { code: digits(data.code) } })
  $('#mfa-setup').hidden = true
  $('#mfa-confirm-form').reset()
  await loadMe()
  say($('#mfa-done'), 'Two-factor authentication is on. Your next sign-in asks for a code.')
})
onSubmit($('#mfa-disable-form'), async (data) => {
  await call('/authsvc/api/mfa/disable', { method: 'POST', body: factor(data.code) })
  $('#mfa-disable-form').reset()
  $('#mfa-setup').hidden = true
  await Promise.all([loadMe(), loadSessions()])
  say($('#mfa-done'), 'Two-factor authentication is off. Your other sessions were signed out.')
})

onSubmit($('#password-form'), async (data) => {
  if (data.new_password !== data.confirm_password) throw new ApiError(400, { error: 'The two new passwords differ.', code: 'PASSWORD_MISMATCH' })
  const { data: answer } = await call('/authsvc/api/me/password', { method: 'POST', body: { current_password: data.current_password, new_password: data.new_password } })
  $('#password-form').reset()
  const others = answer.sessions_revoked
  // the list first, then the words: when the page says it, the list already shows it
  await loadSessions()
  say($('#password-done'), `Password changed. ${others === 1 ? '1 other session was' : `${others} other sessions were`} signed out; this one stays signed in.`)
})

// ---- recent activity (GET /authsvc/me/console: newest last; shown newest first)

const ACTIVITY_SHOWN = 20
async function loadActivity() {
  const { data } = await call(`/authsvc/me/console?limit=${ACTIVITY_SHOWN}`)
  const rows = [...data.events].reverse().map((e) => {
    const by = e.actor && e.actor !== e.subject ? ` by ${e.actor}` : ''
    const outcome = e.outcome === 'success' ? '' : ` (${e.outcome})`
    const extra = e.details.code ? ` — ${e.details.code}` : e.details.setting ? ` — ${e.details.setting}` : ''
    return el('li', { dataset: { kind: e.kind } }, el('time', { datetime: e.at_iso }, when(e.at_iso)), ` ${EVENT_NAMES[e.kind] ?? e.kind}${outcome}${by}${e.ip ? ` from ${e.ip}` : ''}${extra}`)
  })
  $('#activity-rows').replaceChildren(...rows)
  $('#activity-empty').hidden = rows.length > 0
}

loadMe()
  .then(() => Promise.all([loadSessions(), loadTokens(), loadActivity().catch((error) => say($('#activity-error'), error.message))]))
  .then(() => { if (location.hash === '#mfa') $('#mfa').scrollIntoView() })
  .catch((error) => say($('#sessions-error'), error.message))
