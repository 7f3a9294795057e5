// Pages' script: posts the form as JSON and follows the answer. No secrets are kept in script:
// the session lives in the HttpOnly cookie the server sets.
'use strict'
;(function () {
  const form = document.querySelector('form[data-endpoint]')
  if (!form) return
  const errorBox = document.getElementById('error')
  const showError = (text) => { errorBox.textContent = text; errorBox.hidden = false }
  form.addEventListener('submit', async (event) => {
    event.preventDefault()
    errorBox.hidden = true
    const data = Object.fromEntries(new FormData(form).entries())
    if (data.remember_me !== undefined) data.remember_me = true
    const next = new URLSearchParams(location.search).get('next')
    if (next && form.id === 'login-form') data.next = next
    let response
    try {
      response = await fetch(form.dataset.endpoint, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
        credentials: 'same-origin',
        body: JSON.stringify(data),
      })
    } catch {
      showError('The server could not be reached.')
      return
    }
    const body = await response.json().catch(() => ({}))
    if (!response.ok) { showError(body.error || `Request failed (${response.status})`); return }
    if (form.id === 'login-form') {
      if (body.mfa_required || body.mfa_setup_required) {
        location.assign(`/mfa#${body.mfa_setup_required ? 'setup' : 'verify'}:${encodeURIComponent(body.mfa_temp_token)}`)
        return
      }
      location.assign(body.redirect_url || '/')
    } else {
      form.querySelectorAll('input, button').forEach((el) => { el.disabled = true })
      document.getElementById('done').hidden = false
    }
  })
})()
