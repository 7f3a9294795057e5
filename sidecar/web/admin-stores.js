// The admin panel's Data stores section: where users and sessions (GET/PUT
// /authsvc/api/users-db-config) and API tokens (/authsvc/api/token-storage-config) are kept.
// Saved to config.json for the next start. A URL's password is never shown: the page shows the
// redacted URL the service answers, and an empty URL field keeps the saved URL.
import { $, $$, ApiError, api, onSubmit, say, showError } from './common.js'

const call = (path, options = {}) => api(path, { ...options, sessionPage: true })
const USERS = '/authsvc/api/users-db-config'
const TOKENS = '/authsvc/api/token-storage-config'
const LEVELS = { fields: 'secrets (TOTP, backup codes, tokens of other services) are encrypted', all: 'every stored value is encrypted' }

// A file path is a one-line textarea (class path): it wraps a long path at phone width where an
// input would hide its end; Enter submits as in an input, and a line break never reaches the value.
for (const box of $$('textarea.path')) {
  box.addEventListener('keydown', (event) => {
    if (event.key !== 'Enter') return
    event.preventDefault()
    box.form.requestSubmit()
  })
  box.addEventListener('input', () => {
    if (/[\r\n]/.test(box.value)) box.value = box.value.replace(/[\r\n]+/g, '')
  })
}

/** Shows only the fields of the chosen backend. */
function showFieldsOf(form) {
  const backend = form.elements.namedItem('backend').value
  for (const field of $$('[data-for]', form)) field.hidden = field.dataset.for !== backend
}

function savedUrl(slot, redacted) {
  slot.textContent = redacted ? `Saved: ${redacted}. Leave empty to keep it.` : 'None saved.'
}

function restartLine(data) {
  return data.restart_required ? ' Saved settings differ from the running ones: restart ComfyUI to use them.' : ''
}

function renderUsers(data) {
  const form = $('#users-db-form')
  form.elements.namedItem('backend').value = data.backend
  $('#users-db-sqlite').value = data.sqlite_path
  $('#users-db-postgres').value = ''
  $('#users-db-redis').value = ''
  savedUrl($('#users-db-postgres-saved'), data.postgres_url_redacted)
  savedUrl($('#users-db-redis-saved'), data.redis_url_redacted)
  $('#users-db-level').textContent = `Encryption: ${LEVELS[data.encryption_level] ?? data.encryption_level} (set when a store is made).${restartLine(data)}`
  showFieldsOf(form)
}

function renderTokens(data) {
  const form = $('#token-store-form')
  form.elements.namedItem('backend').value = data.same_as_users ? 'users' : data.backend
  $('#token-store-sqlite').value = data.same_as_users ? '' : data.sqlite_path
  $('#token-store-json').value = data.json_path
  $('#token-store-postgres').value = ''
  $('#token-store-redis').value = ''
  savedUrl($('#token-store-postgres-saved'), data.same_as_users ? '' : data.postgres_url_redacted)
  savedUrl($('#token-store-redis-saved'), data.same_as_users ? '' : data.redis_url_redacted)
  showFieldsOf(form)
}

/** The PUT body: the backend and the fields of that backend; an empty URL is left out (kept). */
function bodyOf(values, fields) {
  const body = { backend: values.backend }
  for (const [name, backend] of fields) {
    if (backend !== values.backend) continue
    const value = values[name].trim()
    if (name.endsWith('_url') && value === '') continue
    body[name] = value
  }
  return body
}

const reload = async () => {
  const [users, tokens] = await Promise.all([call(USERS), call(TOKENS)])
  renderUsers(users.data)
  renderTokens(tokens.data)
}

for (const form of [$('#users-db-form'), $('#token-store-form')]) {
  form.elements.namedItem('backend').addEventListener('change', () => showFieldsOf(form))
}

onSubmit($('#users-db-form'), async (values) => {
  const body = bodyOf(values, [['sqlite_path', 'sqlite'], ['postgres_url', 'postgres'], ['redis_url', 'redis']])
  await call(USERS, { method: 'PUT', body })
  await reload()
  say($('#users-db-status'), `Saved: users go to ${body.backend} when ComfyUI restarts.`)
})

onSubmit($('#token-store-form'), async (values) => {
  const body = values.backend === 'users'
    ? { same_as_users: true }
    : bodyOf(values, [['sqlite_path', 'sqlite'], ['postgres_url', 'postgres'], ['redis_url', 'redis'], ['json_path', 'json']])
  await call(TOKENS, { method: 'PUT', body })
  await reload()
  say($('#token-store-status'), `Saved: API tokens go to ${values.backend === 'users' ? 'the users\' store' : body.backend} when ComfyUI restarts.`)
})

reload()
  .then(() => {
    $('#users-db-form').dataset.ready = 'true'
    $('#token-store-form').dataset.ready = 'true'
  })
  .catch((error) => showError($('#users-db-form'), error instanceof ApiError ? error : new ApiError(0, { error: String(error.message || error) })))
