// The register page: the first account (then the administrator), or an account an admin adds.
import { $, api, onSubmit } from './common.js'

const form = $('#register-form')
onSubmit(form, async (data) => {
  await api('/register', { method: 'POST', body: data })
  form.hidden = true
  $('#done').hidden = false
  $('#done a').focus()
})
