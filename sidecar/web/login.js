// The login page: posts the form as JSON and follows the answer (to /mfa with the temp token
// in the fragment when a second factor is needed).
import { $, api, onSubmit } from './common.js'

const next = new URLSearchParams(location.search).get('next')

onSubmit($('#login-form'), async (data) => {
  const { data: body } = await api('/login', { method: 'POST', body: { ...data, remember_me: data.remember_me === true, ...(next ? { next } : {}) } })
  if (body.mfa_required || body.mfa_setup_required) {
    location.assign(`/mfa#${body.mfa_setup_required ? 'setup' : 'verify'}:${encodeURIComponent(body.mfa_temp_token)}`)
    return
  }
  location.assign(body.redirect_url || '/')
})

// shown by the server only while guest logins are allowed
onSubmit($('#guest-form'), async () => {
  const { data: body } = await api('/login', { method: 'POST', body: { guest_login: true, ...(next ? { next } : {}) } })
  location.assign(body.redirect_url || '/')
})
