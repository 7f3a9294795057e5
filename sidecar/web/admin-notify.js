// The admin panel's Notifications section: the ntfy topic, server, events and access token, and
// "Send a test notification". The token is write only: the page shows whether one is saved, never
// the token; an empty field keeps it. The test notification goes to the saved settings, so the
// page asks for a save first when the form has changes.
import { $, $$, ApiError, api, clearErrors, el, onSubmit, say, showError, when } from './common.js'

const call = (path, options = {}) => api(path, { ...options, sessionPage: true })
const SETTINGS = '/authsvc/api/settings/ntfy'

/** SPEC §8, in its order (notify/notifiable-events.ts; the browser suite checks they agree). */
const EVENTS = [
  ['user_created', 'User created'],
  ['user_deleted', 'User deleted'],
  ['user_role_changed', 'Role changed'],
  ['user_login', 'Sign-in'],
  ['user_logout', 'Sign-out'],
  ['login_failure', 'Failed sign-in'],
  ['login_locked', 'Sign-ins locked out'],
  ['api_token_created', 'API token created'],
  ['mfa_enabled', 'Two-factor turned on'],
  ['mfa_disabled', 'Two-factor turned off'],
  ['nsfw_block', 'NSFW image blocked'],
  ['download_completed', 'Download finished'],
  ['download_failed', 'Download failed'],
  ['settings_changed', 'Settings changed'],
  ['server_started', 'authsvc started'],
]

const form = $('#ntfy-form')
let saved = null

function render(settings) {
  saved = settings
  $('#ntfy-topic').value = settings.topic ?? ''
  $('#ntfy-server').value = settings.base_url
  for (const box of $$('#ntfy-event-boxes input')) box.checked = settings.enabled_events.includes(box.value)
  $('#ntfy-token').value = ''
  $('#ntfy-token-remove').checked = false
  $('#ntfy-token-state').textContent = settings.has_api_token ? 'set' : 'not set'
  $('#ntfy-token-remove').disabled = !settings.has_api_token
}

function fromForm() {
  const body = {
    topic: $('#ntfy-topic').value.trim(),
    base_url: $('#ntfy-server').value.trim(),
    enabled_events: $$('#ntfy-event-boxes input').filter((b) => b.checked).map((b) => b.value),
  }
  if ($('#ntfy-token-remove').checked) body.api_token = ''
  else if ($('#ntfy-token').value !== '') body.api_token = $('#ntfy-token').value
  return body
}

function changed() {
  const now = fromForm()
  return now.api_token !== undefined || now.topic !== (saved.topic ?? '') || now.base_url !== saved.base_url ||
    now.enabled_events.join() !== saved.enabled_events.join()
}

async function loadQueue() {
  const { data: s } = await call(`${SETTINGS}/status`)
  const parts = [`Delivered ${s.delivered}`, `waiting ${s.queued + s.in_flight}`, `dropped ${s.dropped}`, `failed ${s.failed}`]
  if (s.last_delivered_at_iso) parts.push(`last delivered ${when(s.last_delivered_at_iso)}`)
  if (s.last_error) parts.push(`last error: ${s.last_error}`)
  $('#ntfy-queue').textContent = `${parts.join(' · ')}. ${s.source === 'config' ? 'These settings come from config.json until you save them here.' : ''}`
}

$('#ntfy-event-boxes').replaceChildren(...EVENTS.map(([kind, label]) =>
  el('div', { class: 'field' }, el('label', { class: 'check' }, el('input', { type: 'checkbox', id: `ntfy-event-${kind}`, value: kind }), label))))
$('#ntfy-token-remove').addEventListener('change', (event) => {
  $('#ntfy-token').disabled = event.target.checked
})

onSubmit(form, async () => {
  const { data } = await call(SETTINGS, { method: 'PUT', body: fromForm() })
  render(data)
  $('#ntfy-token').disabled = false
  say($('#ntfy-status'), data.topic === '' ? 'Saved: notifications are off (no topic).' : `Saved: ${data.enabled_events.length} kind(s) of event go to ${data.topic}.`)
  await loadQueue()
})

$('#ntfy-test').addEventListener('click', async () => {
  clearErrors(form)
  $('#ntfy-status').hidden = true
  const button = $('#ntfy-test')
  button.disabled = true
  try {
    if (changed()) throw new ApiError(409, { error: 'Save your changes first: the test goes to the saved settings.', code: 'UNSAVED' })
    await call(`${SETTINGS}/test`, { method: 'POST' })
    say($('#ntfy-status'), `ntfy took the test notification: check ${saved.topic} in the ntfy app.`)
  } catch (error) {
    showError(form, error instanceof ApiError ? error : new ApiError(0, { error: String(error.message || error) }))
  } finally {
    button.disabled = false
    await loadQueue().catch(() => {}) // the status line is a convenience: its failure leaves the answer above in place
  }
})

call(SETTINGS)
  .then(({ data }) => {
    render(data)
    return loadQueue()
  })
  .then(() => { form.dataset.ready = 'true' })
  .catch((error) => showError(form, error instanceof ApiError ? error : new ApiError(0, { error: String(error.message || error) })))
