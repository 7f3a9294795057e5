// The register page: the first account (then the administrator, signed in at once), or an
// account an admin adds. The first account goes on to the MFA setup when its role requires it.
import { $, api, onSubmit } from './common.js'

const form = $('#register-form')
onSubmit(form, async (data) => {
  const { data: answer } = await api('/register', { method: 'POST', body: data })
  if (answer.mfa_setup_required) {
    location.assign(`/mfa#setup:${encodeURIComponent(answer.mfa_temp_token)}`)
    return
  }
  form.hidden = true
  $('#done').hidden = false
  if (answer.signed_in) {
    $('#title').hidden = true
    $('#welcome-name').textContent = answer.username
    $('#welcome').hidden = false
    $('#welcome-title').focus()
  } else {
    $('#done-name').textContent = answer.username
    $('#done-added').hidden = false
    $('#done-added a').focus()
  }
})
