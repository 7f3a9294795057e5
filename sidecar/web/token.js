// The API token page (SPEC §5.1, §5.2): username, password, label, expiry and, for a user with
// two-factor authentication, a code. The token is shown once, with a copy button.
import { $, ApiError, api, copyText, onSubmit, when } from './common.js'

const form = $('#token-form')
let tempToken = null

api('/authsvc/api/me').then(({ data }) => { if (data.user_id && data.auth_type === 'session') $('#signed-in-hint').hidden = false }).catch(() => {})

onSubmit(form, async (data) => {
  const body = { label: data.label, expire_hours: data.expire_hours.trim() }
  const code = data.code.replace(/\s/g, '')
  if (tempToken && code) Object.assign(body, { mfa_temp_token: tempToken, code })
  else Object.assign(body, { username: data.username, password: data.password }, code ? { code } : {})
  const { data: answer } = await api('/authsvc/generate_token', { method: 'POST', body })
  if (answer.mfa_required) {
    tempToken = answer.mfa_temp_token
    throw new ApiError(200, { error: 'Enter the code from your authenticator app.', code: 'MFA_REQUIRED' })
  }
  tempToken = null
  form.hidden = true
  $('#token-value').textContent = answer.token
  $('#token-expiry').textContent = `Expires ${when(answer.expires_iso)}.`
  $('#created').hidden = false
  $('#copy').focus()
})

$('#copy').addEventListener('click', () => copyText($('#token-value'), $('#copied')))
