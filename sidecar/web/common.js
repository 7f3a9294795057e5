// Shared by every page's script: JSON requests to the service, and errors shown next to the
// control that caused them, chosen by the error code of the answer (docs/errors.md).
// No secret is kept in script: the session lives in the HttpOnly cookie the server sets.

/** Codes that mean the session is over: a page that needs one goes back to the login page. */
export const SESSION_ENDED = new Set(['AUTH_REQUIRED', 'TOKEN_EXPIRED', 'TOKEN_REVOKED', 'TOKEN_INVALID'])

/** The control an error code points at, when the form has a control of that name. */
const CODE_FIELDS = {
  INVALID_CREDENTIALS: ['password', 'current_password'],
  MFA_INVALID_CODE: ['code', 'backup_code'],
  MFA_REQUIRED: ['code'],
  CONFLICT: ['username'],
}

export class ApiError extends Error {
  constructor(status, body) {
    super(body.error || `Request failed (${status})`)
    this.status = status
    this.code = body.code || 'UNKNOWN'
  }
}

export const $ = (selector, root = document) => root.querySelector(selector)
export const $$ = (selector, root = document) => [...root.querySelectorAll(selector)]

export function loginUrl() {
  return `/login?next=${encodeURIComponent(location.pathname + location.search + location.hash)}`
}

/**
 * A JSON request to the service. Throws ApiError for an error answer; a page that needs a
 * session (`sessionPage`) goes to the login page when the answer says the session ended.
 */
export async function api(path, { method = 'GET', body, headers = {}, sessionPage = false } = {}) {
  let response
  try {
    response = await fetch(path, {
      method,
      credentials: 'same-origin',
      headers: { Accept: 'application/json', ...(body === undefined ? {} : { 'Content-Type': 'application/json' }), ...headers },
      body: body === undefined ? undefined : JSON.stringify(body),
    })
  } catch {
    throw new ApiError(0, { error: 'The server could not be reached.', code: 'NETWORK' })
  }
  const data = await response.json().catch(() => ({}))
  if (!response.ok) {
    const error = new ApiError(response.status, data)
    if (sessionPage && response.status === 401 && SESSION_ENDED.has(error.code)) location.assign(loginUrl())
    throw error
  }
  return { data, response }
}

/** The error element of a control: `<p class="field-error" id="<control id>-error">`, made when missing. */
function errorSlot(control) {
  const id = `${control.id || control.name}-error`
  let slot = document.getElementById(id)
  if (!slot) {
    slot = document.createElement('p')
    slot.className = 'field-error'
    slot.id = id
    slot.setAttribute('role', 'alert')
    const field = control.closest('.field')
    if (field) field.append(slot)
    else (control.closest('label') ?? control).after(slot)
  }
  return slot
}

export function clearErrors(form) {
  for (const control of $$('[aria-invalid=true]', form)) {
    control.removeAttribute('aria-invalid')
    if (control.dataset.describedby) control.setAttribute('aria-describedby', control.dataset.describedby)
    else control.removeAttribute('aria-describedby')
  }
  for (const slot of $$('.field-error, [data-form-error]', form)) {
    slot.textContent = ''
    slot.hidden = true
  }
}

/** The control a failed request points at: by the form's own map, the code, or a name in the message. */
function controlFor(form, error) {
  const named = (name) => form.elements.namedItem(name)
  const own = Object.fromEntries((form.dataset.errorMap || '').split(';').filter(Boolean).map((p) => p.split('=')))
  if (own[error.code]) return named(own[error.code])
  for (const name of CODE_FIELDS[error.code] || []) {
    const control = named(name)
    if (control instanceof HTMLElement && !control.closest('[hidden]')) return control
  }
  if (error.code === 'VALIDATION_FAILED') {
    const message = error.message.toLowerCase()
    const controls = [...form.elements].filter((c) => c.name && c.type !== 'submit' && c.type !== 'hidden')
    return controls.find((c) => message.includes(c.name.toLowerCase())) ?? controls.find((c) => message.includes((c.dataset.errorWord || c.name.split('_')[0]).toLowerCase()))
  }
  return null
}

/** Shows `error` next to the control that caused it, or next to the form's submit button. */
export function showError(form, error) {
  const control = controlFor(form, error)
  if (control instanceof HTMLElement) {
    const slot = errorSlot(control)
    slot.textContent = error.message
    slot.hidden = false
    control.setAttribute('aria-invalid', 'true')
    const own = control.getAttribute('aria-describedby')
    if (own && !own.includes(slot.id)) control.dataset.describedby = own
    control.setAttribute('aria-describedby', [control.dataset.describedby, slot.id].filter(Boolean).join(' '))
    control.focus()
    return
  }
  let slot = $('[data-form-error]', form)
  if (!slot) {
    slot = document.createElement('p')
    slot.className = 'error'
    slot.setAttribute('role', 'alert')
    slot.dataset.formError = ''
    form.append(slot)
  }
  slot.textContent = error.message
  slot.hidden = false
}

/** The form's fields as an object (checkboxes as booleans). */
export function formData(form) {
  const data = {}
  for (const control of form.elements) {
    if (!control.name || control.disabled || control.type === 'submit') continue
    if (control.type === 'checkbox') data[control.name] = control.checked
    else data[control.name] = control.value
  }
  return data
}

/** Submit handling: clears old errors, disables the form while the request runs, shows the error where it belongs. */
export function onSubmit(form, handler) {
  form.addEventListener('submit', async (event) => {
    event.preventDefault()
    clearErrors(form)
    const buttons = $$('button', form)
    buttons.forEach((b) => { b.disabled = true })
    try {
      await handler(formData(form), event.submitter)
    } catch (error) {
      showError(form, error instanceof ApiError ? error : new ApiError(0, { error: String(error.message || error) }))
    } finally {
      buttons.forEach((b) => { b.disabled = false })
    }
  })
}

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag)
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue
    if (key === 'class') node.className = value
    else if (key === 'dataset') Object.assign(node.dataset, value)
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value)
    else if (value === true) node.setAttribute(key, '')
    else node.setAttribute(key, String(value))
  }
  for (const child of children.flat()) if (child !== null && child !== undefined && child !== false) node.append(child instanceof Node ? child : String(child))
  return node
}

/** A date for people: "2026-11-23 12:40" in local time; "—" for none. */
export function when(iso) {
  if (!iso) return '—'
  const d = new Date(iso)
  const pad = (n) => String(n).padStart(2, '0')
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}`
}

/** Shows a short status line in `slot` (a polite live region). */
export function say(slot, text) {
  slot.textContent = text
  slot.hidden = false
}

/**
 * Copies the text of `source`; without the clipboard API (plain HTTP on another machine is not
 * a secure context) it selects the text so the person can copy it themselves.
 */
export async function copyText(source, status) {
  try {
    await navigator.clipboard.writeText(source.textContent)
    say(status, 'Copied.')
  } catch {
    getSelection().selectAllChildren(source)
    say(status, 'Selected: copy it with Ctrl+C (⌘C).')
  }
}

/** A size for people: "812 B", "1.2 MB". */
export function size(bytes) {
  if (bytes < 1024) return `${bytes} B`
  const units = ['KB', 'MB', 'GB', 'TB']
  let value = bytes / 1024
  let unit = 0
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit++ }
  return `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`
}
