// The MFA page: verify a login (`/mfa#verify:<temp token>`), or enrol (`/mfa#setup:<temp token>`
// from a login whose role requires MFA). The temp token travels in the fragment, which never
// reaches a server or its logs. A signed-in user without a temp token is sent to the account
// page's MFA section, where enrolment and its changes live.
import { $, api, onSubmit, showError } from './common.js'
import { showBackupCodes } from './account-codes.js'

const [mode, tempToken] = decodeURIComponent(location.hash.slice(1)).split(':')
history.replaceState(null, '', location.pathname) // do not keep the token in history
const withToken = (body) => (tempToken ? { ...body, mfa_temp_token: tempToken } : body)
const digits = (value) => String(value || '').replace(/\s/g, '')

if (mode === 'verify' && tempToken) {
  $('#verify').hidden = false
  $('#code').focus()
  onSubmit($('#verify-form'), async (data) => {
    const code = digits(data.code)
    const backup = (data.backup_code || '').trim()
    const { data: body } = await api('/authsvc/api/mfa/verify', { method: 'POST', body: withToken(backup && !code ? { backup_code: backup } : { code }) })
    location.assign(body.redirect_url || '/')
  })
} else if (mode === 'setup' && tempToken) {
  $('#setup').hidden = false
  api('/authsvc/api/mfa/setup', { method: 'POST', body: withToken({}) })
    .then(({ data }) => {
      if (data.required_by_role) {
        $('#setup-role').textContent = data.required_by_role
        $('#setup-user').textContent = data.username
        $('#setup-why').hidden = false
      }
      $('#qr').innerHTML = data.qr_svg
      $('#secret').textContent = data.secret
      showBackupCodes($('#setup-codes'), data.backup_codes, data.username)
      $('#setup-code').focus()
    })
    .catch((error) => showError($('#setup-form'), error))
  onSubmit($('#setup-form'), async (data) => {
    const { data: body } = await api('/authsvc/api/mfa/verify-setup', { method: 'POST', body: withToken({ code: digits(data.code) }) })
    $('#setup').hidden = true
    $('#done').hidden = false
    location.assign(body.redirect_url || '/')
  })
} else {
  api('/authsvc/api/me')
    .then(({ data }) => {
      if (data.user_id) location.replace('/authsvc/account#mfa')
      else $('#nothing').hidden = false
    })
    .catch(() => { $('#nothing').hidden = false })
}
