// The admin panel's audit view: the stored events (GET /authsvc/api/audit), newest first, filtered
// by user, event kind and time, one page at a time ("Older events" asks for the page before the
// last event shown). The filters are part of the address (#audit?user=...), so a view can be
// bookmarked and the back button returns to it.
import { $, api, el, say, when } from './common.js'

const call = (path) => api(path, { sessionPage: true })
const PAGE = 50
/** The kinds the service emits, in words; an unknown kind is shown as it is. */
export const EVENT_NAMES = {
  server_started: 'Service started',
  user_created: 'User created',
  user_deleted: 'User deleted',
  user_role_changed: 'Role changed',
  user_updated: 'User changed',
  user_login: 'Signed in',
  user_logout: 'Signed out',
  login_failure: 'Sign-in failed',
  login_locked: 'Locked out',
  password_changed: 'Password changed',
  api_token_created: 'API token created',
  api_token_revoked: 'API token revoked',
  session_revoked: 'Session revoked',
  mfa_enabled: 'Two-factor on',
  mfa_disabled: 'Two-factor off',
  mfa_reset_all: 'Two-factor reset (recovery)',
  settings_changed: 'Settings changed',
  model_granted: 'Model granted',
  model_revoked: 'Model grant removed',
  model_cache_refreshed: 'Model list refreshed',
  prompt_queued: 'Prompt queued',
  prompt_refused: 'Prompt refused',
  mfa_code_refused: 'Two-factor code refused',
  user_env_purged: 'Folders emptied',
  workflow_published: 'Workflow shared',
  workflow_unshared: 'Shared workflow removed',
}
const OUTCOMES = { success: 'ok', failure: 'failed', refused: 'refused' }

const details = (d) => Object.entries(d).map(([k, v]) => `${k}: ${typeof v === 'string' ? v : JSON.stringify(v)}`).join(', ')
const isoOf = (local) => (local ? new Date(local).toISOString() : '')
let nextBefore = null
/** the newest view asked (a filter shown from its first page): an answer for an older one is dropped */
let asked = 0
/** the newest "Older events" asked within it: an older page that comes after it is dropped */
let paged = 0
/** the filters of the rows shown (without paging) */
let shown = null

function query() {
  const form = $('#audit-form')
  const q = new URLSearchParams()
  const user = form.user.value.trim()
  if (user) q.set('user', user)
  if (form.kind.value) q.set('kind', form.kind.value)
  if (form.since.value) q.set('since', isoOf(form.since.value))
  if (form.until.value) q.set('until', isoOf(form.until.value))
  q.set('limit', String(PAGE))
  return q
}

function row(e) {
  return el('tr', { dataset: { seq: e.seq, kind: e.kind } },
    el('td', {}, el('time', { datetime: e.at_iso, title: e.at_iso }, when(e.at_iso))),
    el('td', {}, EVENT_NAMES[e.kind] ?? e.kind, el('span', { class: 'sr-only' }, ` (${e.kind})`)),
    el('td', { class: e.outcome === 'success' ? '' : 'warn' }, OUTCOMES[e.outcome] ?? e.outcome),
    el('td', {}, e.actor ?? '—'),
    el('td', {}, e.subject ?? '—'),
    el('td', {}, e.ip ?? '—'),
    el('td', { class: 'details' }, details(e.details)))
}

async function show({ more = false } = {}) {
  const slot = $('#audit-error')
  slot.hidden = true
  // a new view ends what was asked for the old one, its pages too; "Older" waits for the new first page
  if (!more) $('#audit-older').hidden = true
  const view = more ? asked : ++asked
  const page = ++paged
  // a page of the view shown (its filters as they were shown, not as the form may read now)
  const q = more && shown !== null ? new URLSearchParams({ ...Object.fromEntries(shown), limit: String(PAGE), before: String(nextBefore) }) : query()
  try {
    const { data } = await call(`/authsvc/api/audit?${q}`)
    if (view !== asked || (more && page !== paged)) return
    const rows = data.events.map(row)
    if (more) $('#audit-rows').append(...rows)
    else $('#audit-rows').replaceChildren(...rows)
    // what the rows answer (the filters, without paging): a test, or a reader, can tell
    q.delete('limit')
    q.delete('before')
    $('#audit-rows').dataset.for = String(q)
    shown = q
    nextBefore = data.next_before
    $('#audit-older').hidden = nextBefore === null
    $('#audit-empty').hidden = $('#audit-rows').children.length > 0
  } catch (error) {
    if (view === asked) say(slot, error.message)
  }
}

/** The filters as the address says them (#audit?user=alice&kind=login_failure). */
function fromAddress() {
  const [section, search] = location.hash.slice(1).split('?')
  if (section !== 'audit' || !search) return
  const q = new URLSearchParams(search)
  const form = $('#audit-form')
  form.user.value = q.get('user') ?? ''
  form.kind.value = q.get('kind') ?? ''
}

export async function startAudit() {
  const kinds = $('#audit-kind')
  kinds.append(...Object.entries(EVENT_NAMES).map(([kind, name]) => el('option', { value: kind }, name)))
  try {
    const { data } = await call('/authsvc/api/admin/consoles')
    $('#audit-users').replaceChildren(...data.users.map((u) => el('option', { value: u })))
  } catch {
    // the names are a convenience; the view works without them
  }
  $('#audit-form').addEventListener('submit', (event) => {
    event.preventDefault()
    const q = query()
    q.delete('limit')
    history.pushState(null, '', `#audit${q.size > 0 ? `?${q}` : ''}`)
    void show()
  })
  $('#audit-older').addEventListener('click', () => void show({ more: true }))
  addEventListener('popstate', () => {
    fromAddress()
    void show()
  })
  fromAddress()
  await show()
}
