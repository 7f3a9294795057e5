// The admin panel: users (create, role, SFW check, disable, password and MFA reset, delete,
// sessions and API tokens), the roles matrix, IP lists and guest logins. Role and IP-list
// edits are sent with If-Match carrying the ETag of the version shown, so two admins never
// overwrite each other: the second one is refused and reloads.
import { $, ApiError, api, el, onSubmit, say, showError, clearErrors, when } from './common.js'
import { startAudit } from './admin-audit.js'

const call = (path, options = {}) => api(path, { ...options, sessionPage: true })
const enc = encodeURIComponent
const KEYS = ['can_run', 'can_access_api', 'can_upload', 'can_modify_workflows', 'can_have_api_tokens', 'can_view_all_comfyui_items', 'can_download_models', 'mfa_required']
const BUILT_IN = new Set(['admin', 'user', 'guest'])
const state = { users: [], roles: {}, rolesEtag: null, ip: { whitelist: [], blacklist: [] }, ipEtag: null, detail: null, me: null }

/** Runs an action of a table row; its failure is shown under the table it belongs to. */
async function act(slot, action) {
  slot.hidden = true
  try { await action() } catch (error) { say(slot, error.message) }
}
const ifMatch = (etag) => (etag ? { 'If-Match': etag } : {})

// ---- users

async function loadUsers() {
  const [{ data: users }, { data: seen }] = await Promise.all([call('/authsvc/api/users'), call('/authsvc/api/admin/last-seen')])
  state.users = users.users
  const roles = Object.keys(state.roles)
  $('#user-rows').replaceChildren(...state.users.map((u) => userRow(u, roles, seen.last_seen[u.username])))
}

function userRow(u, roles, lastSeen) {
  const id = `u-${u.user_id}`
  const roleSelect = el('select', { id: `${id}-role`, name: 'role' }, ...(roles.includes(u.role) ? roles : [...roles, u.role]).map((r) => el('option', { value: r, selected: r === u.role }, r)))
  const roleForm = el('form', { class: 'inline-form', dataset: { user: u.username } },
    el('label', { class: 'sr-only', for: `${id}-role` }, `Role of ${u.username}`), roleSelect,
    el('button', { type: 'submit', class: 'secondary small', id: `${id}-set-role` }, 'Set'))
  roleForm.addEventListener('submit', (event) => {
    event.preventDefault()
    act($('#users-error'), async () => {
      await call(`/authsvc/api/users/${enc(u.username)}`, { method: 'PUT', body: { role: roleSelect.value } })
      await loadUsers()
      say($('#users-status'), `${u.username} now has the role ${roleSelect.value}; their sessions were signed out.`)
    })
  })
  const sfw = el('input', { type: 'checkbox', id: `${id}-sfw`, checked: u.sfw_check, 'aria-label': `SFW check for ${u.username}` })
  sfw.addEventListener('change', () => act($('#users-error'), async () => {
    await call(`/authsvc/api/users/${enc(u.username)}`, { method: 'PUT', body: { sfw_check: sfw.checked } })
    await loadUsers()
  }))
  const put = (body, message) => act($('#users-error'), async () => {
    await call(`/authsvc/api/users/${enc(u.username)}`, { method: 'PUT', body })
    await loadUsers()
    say($('#users-status'), message)
  })
  return el('tr', { dataset: { username: u.username } },
    el('th', { scope: 'row' }, u.username),
    el('td', {}, roleForm),
    el('td', {}, u.mfa_enabled ? 'on ' : 'off ', u.mfa_enabled ? el('button', { type: 'button', class: 'secondary small', id: `${id}-mfa-reset`, 'aria-label': `Reset MFA of ${u.username}`, onclick: () => put({ mfa_reset: true }, `Two-factor authentication of ${u.username} was reset.`) }, 'Reset') : null),
    el('td', {}, sfw),
    el('td', {}, u.disabled ? 'disabled' : 'enabled'),
    el('td', {}, when(u.created_at_iso)),
    el('td', {}, when(lastSeen)),
    el('td', { class: 'actions' },
      el('button', { type: 'button', class: 'secondary small', id: `${id}-detail`, 'aria-label': `Sessions and tokens of ${u.username}`, onclick: () => openDetail(u.username) }, 'Sessions and tokens'),
      el('button', { type: 'button', class: 'secondary small', id: `${id}-toggle`, 'aria-label': `${u.disabled ? 'Enable' : 'Disable'} ${u.username}`, onclick: () => put({ disabled: !u.disabled }, `${u.username} is ${u.disabled ? 'enabled' : 'disabled'}.`) }, u.disabled ? 'Enable' : 'Disable'),
      el('button', { type: 'button', class: 'danger small', id: `${id}-delete`, 'aria-label': `Delete ${u.username}`, onclick: () => confirmDelete(u.username) }, 'Delete')))
}

function confirmDelete(username) {
  const dialog = $('#confirm-delete')
  dialog.querySelector('.confirm-name').textContent = username
  dialog.returnValue = ''
  dialog.onclose = () => {
    if (dialog.returnValue !== 'delete') return
    act($('#users-error'), async () => {
      await call(`/authsvc/api/users/${enc(username)}`, { method: 'DELETE' })
      if (state.detail === username) $('#user-detail').hidden = true
      await loadUsers()
      say($('#users-status'), `${username} was deleted.`)
    })
  }
  dialog.showModal()
  $('#confirm-cancel').focus()
}

async function openDetail(username) {
  state.detail = username
  $('#detail-title').textContent = `Sessions and API tokens of ${username}`
  for (const span of document.querySelectorAll('.detail-name')) span.textContent = username
  $('#user-detail').hidden = false
  await act($('#detail-error'), loadDetail)
  $('#detail-title').scrollIntoView()
}

async function loadDetail() {
  const username = state.detail
  const [{ data: s }, { data: t }] = await Promise.all([call(`/authsvc/api/users/${enc(username)}/sessions`), call(`/authsvc/api/users/${enc(username)}/tokens`)])
  const sessions = s.sessions.map((x) => el('tr', { dataset: { jti: x.jti } },
    el('td', {}, when(x.created_at_iso)), el('td', {}, when(x.last_used_at_iso)), el('td', {}, when(x.exp_at_iso)),
    el('td', { class: 'actions' }, el('button', { type: 'button', class: 'danger small', 'aria-label': `Revoke the session of ${username} signed in ${when(x.created_at_iso)}`, onclick: () => act($('#detail-error'), async () => {
      await call(`/authsvc/api/users/${enc(username)}/sessions/${enc(x.jti)}`, { method: 'DELETE' })
      await loadDetail()
    }) }, 'Revoke'))))
  $('#detail-sessions').replaceChildren(...(sessions.length ? sessions : [el('tr', {}, el('td', { colspan: 4 }, 'No active session.'))]))
  const tokens = t.tokens.map((x) => el('tr', { dataset: { prefix: x.token_hash_prefix } },
    el('td', {}, x.label || '—'), el('td', { class: 'mono' }, `${x.token_hash_prefix}…`), el('td', {}, when(x.created_at_iso)), el('td', {}, when(x.expires_iso)), el('td', {}, when(x.last_used_at_iso)),
    el('td', { class: 'actions' }, el('button', { type: 'button', class: 'danger small', 'aria-label': `Revoke the token ${x.label || x.token_hash_prefix} of ${username}`, onclick: () => act($('#detail-error'), async () => {
      await call(`/authsvc/api/users/${enc(username)}/tokens`, { method: 'DELETE', body: { token_hash_prefix: x.token_hash_prefix } })
      await loadDetail()
    }) }, 'Revoke'))))
  $('#detail-tokens').replaceChildren(...(tokens.length ? tokens : [el('tr', {}, el('td', { colspan: 6 }, 'No API token.'))]))
}

onSubmit($('#reset-password-form'), async (data) => {
  await call(`/authsvc/api/users/${enc(state.detail)}`, { method: 'PUT', body: { password: data.password } })
  $('#reset-password-form').reset()
  await loadDetail()
  say($('#users-status'), `The password of ${state.detail} was reset; their sessions and API tokens were revoked.`)
})

onSubmit($('#create-user-form'), async (data) => {
  await call('/register', { method: 'POST', body: { username: data.username, password: data.password, role: data.role } })
  $('#create-user-form').reset()
  await loadUsers()
  say($('#users-status'), `${data.username} was created with the role ${data.role}.`)
})

// ---- roles

async function loadRoles() {
  const { data, response } = await call('/authsvc/api/groups')
  state.roles = data.groups
  state.rolesEtag = response.headers.get('ETag')
  renderRoles()
}

function renderRoles() {
  $('#matrix-head').replaceChildren(el('tr', {}, el('th', { scope: 'col' }, 'Role'), ...KEYS.map((k) => el('th', { scope: 'col' }, k.replaceAll('_', '_\u200b'))) /* a line may break after each _ */, el('th', { scope: 'col' }, 'Actions')))
  $('#matrix-rows').replaceChildren(...Object.entries(state.roles).map(([role, keys]) => el('tr', { dataset: { role } },
    el('th', { scope: 'row' }, role),
    ...KEYS.map((key) => el('td', {}, el('input', {
      type: 'checkbox', id: `perm-${role}-${key}`, 'aria-label': `${role}: ${key}`,
      checked: role === 'admin' && key !== 'mfa_required' ? true : keys[key] === true,
      // the admin role passes every permission whatever the file says
      disabled: role === 'admin' && key !== 'mfa_required',
      dataset: { role, key },
    }))),
    el('td', { class: 'actions' }, BUILT_IN.has(role) ? '—' : el('button', { type: 'button', class: 'danger small', id: `remove-role-${role}`, 'aria-label': `Remove the role ${role}`, onclick: () => { delete state.roles[role]; renderRoles(); say($('#roles-status'), `${role} removed; save to apply.`) } }, 'Remove')))))
  const options = Object.keys(state.roles)
  $('#new-role').replaceChildren(...options.map((r) => el('option', { value: r, selected: r === 'user' }, r)))
}

function matrixFromForm() {
  const groups = {}
  for (const role of Object.keys(state.roles)) groups[role] = { ...state.roles[role] }
  for (const box of document.querySelectorAll('#matrix-rows input[type=checkbox]')) {
    if (!box.disabled) groups[box.dataset.role][box.dataset.key] = box.checked
  }
  return groups
}

/** 412: another admin saved since this page read the version it edits. */
const stale = (what) => (error) => {
  if (error.code === 'PRECONDITION_FAILED') throw new ApiError(412, { error: `Another administrator changed the ${what} since this page loaded them. Reload the page to see their change, then make yours again.`, code: error.code })
  throw error
}

onSubmit($('#roles-form'), async () => {
  const { data, response } = await call('/authsvc/api/groups', { method: 'PUT', body: { groups: matrixFromForm() }, headers: ifMatch(state.rolesEtag) }).catch(stale('roles'))
  state.roles = data.groups
  state.rolesEtag = response.headers.get('ETag')
  renderRoles()
  await loadUsers()
  say($('#roles-status'), 'Roles saved.')
})

onSubmit($('#add-role-form'), async (data) => {
  const name = data.name.trim()
  if (!/^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$/.test(name)) throw new ApiError(400, { error: 'A role name is 1 to 64 letters, digits, _ . -', code: 'VALIDATION_FAILED' })
  if (state.roles[name]) throw new ApiError(409, { error: `${name} exists already`, code: 'VALIDATION_FAILED' })
  state.roles = { ...matrixFromForm(), [name]: Object.fromEntries(KEYS.map((k) => [k, false])) }
  renderRoles()
  $('#add-role-form').reset()
  say($('#roles-status'), `${name} added; choose its permissions and save.`)
  $(`#perm-${CSS.escape(name)}-can_run`).focus()
})

// ---- IP lists

async function loadIpLists() {
  const { data, response } = await call('/authsvc/api/ip-lists')
  state.ip = { whitelist: data.whitelist, blacklist: data.blacklist }
  state.ipEtag = response.headers.get('ETag')
  renderIpLists()
}

function renderIpLists() {
  $('#whitelist').value = state.ip.whitelist.join('\n')
  const rows = state.ip.blacklist.map((entry, i) => el('tr', { dataset: { ip: entry.ip } },
    el('td', { class: 'mono' }, entry.ip),
    el('td', {}, entry.expires_at_iso ? when(entry.expires_at_iso) : 'permanently'),
    el('td', { class: 'actions' }, el('button', { type: 'button', class: 'danger small', 'aria-label': `Unblock ${entry.ip}`, onclick: () => { state.ip.blacklist.splice(i, 1); renderIpLists(); say($('#ip-status'), `${entry.ip} removed; save to apply.`) } }, 'Unblock'))))
  $('#blacklist-rows').replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: 3 }, 'Nobody is blocked.'))]))
}

$('#block-add').addEventListener('click', () => {
  const form = $('#ip-form')
  clearErrors(form)
  const ip = $('#block-ip').value.trim()
  const hours = $('#block-hours').value.trim()
  if (!ip) return showError(form, new ApiError(400, { error: 'Enter an address or a CIDR to block.', code: 'BLOCK_IP' }))
  if (hours && !(Number(hours) > 0)) return showError(form, new ApiError(400, { error: 'Hours must be a positive number, or empty.', code: 'BLOCK_HOURS' }))
  state.ip.blacklist.push(hours ? { ip, expires_at_iso: new Date(Date.now() + Number(hours) * 3600_000).toISOString() } : { ip, permanent: true })
  $('#block-ip').value = ''
  $('#block-hours').value = ''
  renderIpLists()
  say($('#ip-status'), `${ip} added; save to apply.`)
})
$('#ip-form').dataset.errorMap = 'BLOCK_IP=block_ip;BLOCK_HOURS=block_hours'

onSubmit($('#ip-form'), async (data) => {
  const whitelist = data.whitelist.split('\n').map((l) => l.trim()).filter(Boolean)
  try {
    const { data: saved, response } = await call('/authsvc/api/ip-lists', { method: 'PUT', body: { whitelist, blacklist: state.ip.blacklist }, headers: ifMatch(state.ipEtag) })
    state.ip = { whitelist: saved.whitelist, blacklist: saved.blacklist }
    state.ipEtag = response.headers.get('ETag')
  } catch (error) {
    // "blacklist[2].ip: loopback can never be blacklisted" points at the row the admin just added
    if (error.code === 'VALIDATION_FAILED' && /blacklist/.test(error.message)) throw new ApiError(error.status, { error: error.message, code: 'BLOCK_IP' })
    if (error.code === 'VALIDATION_FAILED' && /whitelist/.test(error.message)) throw new ApiError(error.status, { error: error.message, code: 'WHITELIST' })
    stale('IP lists')(error)
  }
  renderIpLists()
  say($('#ip-status'), 'IP lists saved.')
})
$('#ip-form').dataset.errorMap += ';WHITELIST=whitelist'

// ---- settings

async function loadGuest() {
  const { data } = await call('/authsvc/api/settings/guest-jwt')
  $('#allow-guest').checked = data.allow_guest_jwt
}
onSubmit($('#guest-form'), async (data) => {
  const { data: saved } = await call('/authsvc/api/settings/guest-jwt', { method: 'PUT', body: { allow_guest_jwt: data.allow_guest_jwt } })
  $('#allow-guest').checked = saved.allow_guest_jwt
  say($('#guest-status'), saved.allow_guest_jwt ? 'Guest logins are allowed.' : 'Guest logins are off.')
})

loadRoles()
  .then(() => Promise.all([loadUsers(), loadIpLists(), loadGuest(), startAudit()]))
  .then(() => { document.body.dataset.ready = 'true' })
  .catch((error) => say($('#users-error'), error.message))
