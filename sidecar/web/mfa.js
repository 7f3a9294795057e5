// The MFA page: verify a login (`/mfa#verify:<temp token>`), or enrol (`/mfa#setup:<temp token>`
// from a login whose role requires MFA, or `/mfa#setup` from a signed-in session).
// The temp token travels in the fragment, which never reaches a server or its logs.
'use strict'
;(function () {
  const $ = (id) => document.getElementById(id)
  const showError = (text) => { $('error').textContent = text; $('error').hidden = false }
  const [mode, tempToken] = decodeURIComponent(location.hash.slice(1)).split(':')
  history.replaceState(null, '', location.pathname) // do not keep the token in history

  async function post(path, body) {
    const response = await fetch(path, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
      credentials: 'same-origin',
      body: JSON.stringify(body),
    })
    const data = await response.json().catch(() => ({}))
    if (!response.ok) throw new Error(data.error || `Request failed (${response.status})`)
    return data
  }
  const withToken = (body) => (tempToken ? { ...body, mfa_temp_token: tempToken } : body)

  if (mode === 'verify' && tempToken) {
    $('verify').hidden = false
    $('code').focus()
    $('verify-form').addEventListener('submit', async (event) => {
      event.preventDefault()
      $('error').hidden = true
      const code = $('code').value.replace(/\s/g, '')
      const backup = $('backup_code').value.trim()
      try {
        const data = await post('/authsvc/api/mfa/verify', withToken(backup && !code ? { backup_code: backup } : { code }))
        location.assign(data.redirect_url || '/')
      } catch (err) {
        showError(err.message)
      }
    })
  } else if (mode === 'setup') {
    $('setup').hidden = false
    post('/authsvc/api/mfa/setup', withToken({}))
      .then((data) => {
        $('qr').innerHTML = data.qr_svg
        $('secret').textContent = data.secret
        for (const code of data.backup_codes) {
          const li = document.createElement('li')
          li.textContent = code
          $('backup-codes').appendChild(li)
        }
        $('setup-code').focus()
      })
      .catch((err) => showError(err.message))
    $('setup-form').addEventListener('submit', async (event) => {
      event.preventDefault()
      $('error').hidden = true
      try {
        const data = await post('/authsvc/api/mfa/verify-setup', withToken({ code: $('setup-code').value.replace(/\s/g, '') }))
        $('setup').hidden = true
        $('done').hidden = false
        if (data.jwt_token) location.assign(data.redirect_url || '/')
      } catch (err) {
        showError(err.message)
      }
    })
  } else {
    showError('Nothing to do here: sign in first.')
  }
})()
