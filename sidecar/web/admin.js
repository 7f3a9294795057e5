// The admin panel, organised by task (issue 26): one section at a time, each with its own address
// (#users, #users/<name>, #roles, #models?user=<name> or ?role=<name>, #workflows, #network, and the sections
// of the other modules: #notifications, #audit, #storage, #downloads-admin, #content-safety,
// #stores), so a section can be bookmarked and the back button works.
// Role and IP-list edits are sent with If-Match carrying the ETag of the version shown, so two
// admins never overwrite each other: the second one is refused and reloads. An action the
// service would refuse (the last administrator, the admin's own account, a role still in use)
// is refused here before any confirmation is asked.
import { $, $$, ApiError, api, el, onSubmit, say, when, size } from './common.js'
import { startAudit, EVENT_NAMES } from './admin-audit.js'
import { PERMISSIONS, PERMISSION_BY_KEY, permissionName, roleWarnings } from './permission-words.js'

const call = (path, options = {}) => api(path, { ...options, sessionPage: true })
const enc = encodeURIComponent
const KEYS = PERMISSIONS.map((p) => p.key)
const BUILT_IN = new Set(['admin', 'user', 'guest'])
const state = { users: [], lastSeen: {}, roles: {}, rolesEtag: null, ip: { whitelist: [], blacklist: [] }, ipEtag: null, me: null, page: null }

const ifMatch = (etag) => (etag ? { 'If-Match': etag } : {})
const plural = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`
const hide = (...slots) => slots.forEach((s) => { s.hidden = true })
const userHref = (name) => `#users/${enc(name)}`

// ---- the sections and their addresses

const ALIASES = { 'ip-lists': 'network', settings: 'roles', downloads: 'downloads-admin' }
const LAZY = {}

/** The address as a section, an optional sub-path (a user's name) and its query. */
function where() {
  const raw = location.hash.slice(1)
  const [path, search = ''] = raw.split('?')
  const [head, ...rest] = path.split('/')
  const name = ALIASES[head] ?? head
  const sections = new Set($$('[data-section]').map((s) => s.id))
  if (name === 'users' && rest.length > 0) return { section: 'user-page', nav: 'users', arg: decodeURIComponent(rest.join('/')), query: new URLSearchParams(search) }
  const section = sections.has(name) && name !== 'user-page' ? name : 'users'
  return { section, nav: section, arg: null, query: new URLSearchParams(search) }
}

function route({ focus, load = true }) {
  const at = where()
  for (const section of $$('[data-section]')) section.hidden = section.id !== at.section
  for (const link of $$('.admin-nav a')) {
    if (link.getAttribute('href') === `#${at.nav}`) link.setAttribute('aria-current', 'page')
    else link.removeAttribute('aria-current')
  }
  const section = document.getElementById(at.section)
  document.title = `${section.querySelector('h2').textContent} · Admin · authsvc`
  if (!load) return
  if (at.section === 'user-page') void openUser(at.arg)
  else if (LAZY[at.section]) void LAZY[at.section](at.query)
  if (focus) section.querySelector('h2')?.focus()
}
addEventListener('hashchange', () => route({ focus: true }))

/** Runs an action; its failure is shown in `slot` (a role=alert element next to what it concerns). */
async function act(slot, action) {
  slot.hidden = true
  try { await action() } catch (error) { say(slot, error.message) }
}

// ---- refusals checked before any confirmation (the service refuses the same; issue 26 item 3)

const enabledAdmins = () => state.users.filter((u) => u.role === 'admin' && !u.disabled)
const isLastAdmin = (u) => u.role === 'admin' && !u.disabled && enabledAdmins().length <= 1

/** Why `action` on user `u` cannot be done, in words, or null. */
function refusal(u, action, role) {
  const own = state.me && u.username === state.me.username
  if (action === 'delete') {
    if (isLastAdmin(u)) return `${u.username} is the last enabled administrator: make another user an administrator before deleting this account.`
    if (own) return 'This is your own account: another administrator must delete it, so the panel is never left without the person using it.'
  }
  if (action === 'disable') {
    if (isLastAdmin(u)) return `${u.username} is the last enabled administrator: disabling it would lock everyone out of the admin panel. Make another user an administrator first.`
    if (own) return 'This is your own account: disabling it would sign you out at once. Another administrator can do it.'
  }
  if (action === 'role' && role !== 'admin' && isLastAdmin(u)) return `${u.username} is the last enabled administrator: make another user an administrator before changing this role.`
  return null
}

// ---- users

async function loadUsers() {
  const [{ data: users }, { data: seen }] = await Promise.all([call('/authsvc/api/users'), call('/authsvc/api/admin/last-seen')])
  state.users = users.users
  state.lastSeen = seen.last_seen
  renderUsers()
  fillUserPickers()
}

function filteredUsers() {
  const q = $('#user-search').value.trim().toLowerCase()
  const role = $('#user-role-filter').value
  const status = $('#user-state-filter').value
  return state.users.filter((u) => (!q || u.username.toLowerCase().includes(q)) &&
    (!role || u.role === role) &&
    (!status || (status === 'enabled' && !u.disabled) || (status === 'disabled' && u.disabled) || (status === 'mfa-off' && !u.mfa_enabled) || (status === 'sfw' && u.sfw_check)))
}

function renderUsers() {
  const roles = Object.keys(state.roles)
  const shown = filteredUsers()
  $('#user-rows').replaceChildren(...(shown.length ? shown.map((u) => userRow(u, roles)) : [el('tr', {}, el('td', { colspan: 8 }, 'No user matches.'))]))
  $('#user-count').textContent = shown.length === state.users.length ? `${plural(state.users.length, 'user')}.` : `${shown.length} of ${plural(state.users.length, 'user')} shown.`
}
$('#user-filter').addEventListener('input', renderUsers)
$('#user-filter').addEventListener('submit', (event) => event.preventDefault())

/** Applies a change to a user; `slot` shows a refusal, `done` says what happened. */
async function changeUser(u, body, slot, done) {
  await act(slot, async () => {
    await call(`/authsvc/api/users/${enc(u.username)}`, { method: 'PUT', body })
    await loadUsers()
    if (state.page === u.username) await loadUserPage()
    done?.()
  })
}

function userRow(u, roles) {
  const id = `u-${u.user_id}`
  const rowError = el('p', { class: 'field-error', id: `${id}-error`, role: 'alert', hidden: true })
  const status = (text) => () => say($('#users-status'), text)
  const roleSelect = el('select', { id: `${id}-role`, name: 'role' }, ...(roles.includes(u.role) ? roles : [...roles, u.role]).map((r) => el('option', { value: r, selected: r === u.role }, r)))
  const roleForm = el('form', { class: 'inline-form', dataset: { user: u.username } },
    el('label', { class: 'sr-only', for: `${id}-role` }, `Role of ${u.username}`), roleSelect,
    el('button', { type: 'submit', class: 'secondary small', id: `${id}-set-role`, 'aria-label': `Set ${u.username}'s role` }, 'Set'))
  roleForm.addEventListener('submit', (event) => {
    event.preventDefault()
    const why = refusal(u, 'role', roleSelect.value)
    if (why) return say(rowError, why)
    void changeUser(u, { role: roleSelect.value }, rowError, status(`${u.username} now has the role ${roleSelect.value}; their sessions were signed out.`))
  })
  const sfw = el('input', { type: 'checkbox', id: `${id}-sfw`, checked: u.sfw_check, 'aria-label': `SFW check for ${u.username}` })
  sfw.addEventListener('change', () => changeUser(u, { sfw_check: sfw.checked }, rowError))
  const toggle = () => {
    const why = u.disabled ? null : refusal(u, 'disable')
    if (why) return say(rowError, why)
    void changeUser(u, { disabled: !u.disabled }, rowError, status(`${u.username} is ${u.disabled ? 'enabled' : 'disabled'}.`))
  }
  return el('tr', { dataset: { username: u.username } },
    el('th', { scope: 'row' }, el('a', { href: userHref(u.username), 'aria-label': `Open ${u.username}` }, u.username)),
    el('td', {}, roleForm),
    el('td', {}, u.mfa_enabled ? 'on ' : 'off ', u.mfa_enabled ? el('button', { type: 'button', class: 'secondary small', id: `${id}-mfa-reset`, 'aria-label': `Reset two-factor of ${u.username}`, onclick: () => changeUser(u, { mfa_reset: true }, rowError, status(`Two-factor authentication of ${u.username} was reset.`)) }, 'Reset') : null),
    el('td', {}, sfw),
    el('td', {}, u.disabled ? 'disabled' : 'enabled'),
    el('td', {}, when(u.created_at_iso)),
    el('td', {}, when(state.lastSeen[u.username])),
    el('td', { class: 'actions' },
      el('button', { type: 'button', class: 'secondary small', id: `${id}-toggle`, 'aria-label': `${u.disabled ? 'Enable' : 'Disable'} ${u.username}`, onclick: toggle }, u.disabled ? 'Enable' : 'Disable'),
      el('button', { type: 'button', class: 'danger small', id: `${id}-delete`, 'aria-label': `Delete ${u.username}`, onclick: () => confirmDelete(u, rowError) }, 'Delete'),
      rowError))
}

function confirmDelete(u, slot) {
  const why = refusal(u, 'delete')
  if (why) return say(slot, why)
  slot.hidden = true
  const dialog = $('#confirm-delete')
  dialog.querySelector('.confirm-name').textContent = u.username
  dialog.returnValue = ''
  dialog.onclose = () => {
    if (dialog.returnValue !== 'delete') return
    act(slot, async () => {
      await call(`/authsvc/api/users/${enc(u.username)}`, { method: 'DELETE' })
      await loadUsers()
      say($('#users-status'), `${u.username} was deleted.`)
      if (state.page === u.username) location.hash = '#users'
    })
  }
  dialog.showModal()
  $('#confirm-cancel').focus()
}

onSubmit($('#create-user-form'), async (data) => {
  await call('/register', { method: 'POST', body: { username: data.username, password: data.password, role: data.role } })
  $('#create-user-form').reset()
  $('#new-role').value = 'user'
  await loadUsers()
  say($('#users-status'), `${data.username} was created with the role ${data.role}.`)
})

/** Every user picker of the panel (Models, Workflows), keeping what each had chosen. */
function fillUserPickers() {
  for (const select of [$('#grant-user'), $('#publish-user')]) {
    const chosen = select.value
    select.replaceChildren(...state.users.map((u) => el('option', { value: u.username, selected: u.username === chosen }, `${u.username} (${u.role})`)))
  }
}

// ---- a user's page (#users/<name>)

const device = (s) => {
  const parts = [s.device ?? 'Unknown device', s.browser ? `${s.browser}` : null, s.os ? `on ${s.os}` : null].filter(Boolean)
  return parts.join(' · ')
}

async function openUser(username) {
  state.page = username
  $('#user-title').textContent = username
  hide($('#user-page-error'), $('#user-page-status'))
  if (!state.users.some((u) => u.username === username)) await loadUsers().catch(() => {})
  if (!state.users.some((u) => u.username === username)) {
    $('#user-page-body').hidden = true
    return say($('#user-page-error'), `There is no user named ${username}. They may have been deleted; pick one from the list of users.`)
  }
  await act($('#user-page-error'), loadUserPage)
}

async function loadUserPage() {
  const username = state.page
  const u = state.users.find((x) => x.username === username)
  if (!u) return
  const [{ data: s }, { data: t }, { data: g }, fromRole, activity] = await Promise.all([
    call(`/authsvc/api/users/${enc(username)}/sessions`),
    call(`/authsvc/api/users/${enc(username)}/tokens`),
    call(`/authsvc/api/users/${enc(username)}/shared-items`),
    Object.hasOwn(state.roles, u.role) ? call(`/authsvc/api/roles/${enc(u.role)}/shared-items`).then((r) => r.data.items) : Promise.resolve([]),
    call(`/authsvc/api/audit?user=${enc(username)}&limit=10`).then((r) => r.data.events).catch(() => null),
  ])
  if (state.page !== username) return
  for (const span of $$('.detail-name')) span.textContent = username
  const keys = state.roles[u.role] ?? {}
  $('#user-facts').replaceChildren(
    el('dt', {}, 'Role'), el('dd', {}, u.role),
    el('dt', {}, 'Status'), el('dd', {}, u.disabled ? 'disabled: cannot sign in' : 'enabled'),
    el('dt', {}, 'Two-factor'), el('dd', {}, u.mfa_enabled ? 'on' : keys.mfa_required ? 'off (their role requires it: they set it up at their next sign-in)' : 'off'),
    el('dt', {}, 'SFW check'), el('dd', {}, u.sfw_check ? 'on' : 'off'),
    el('dt', {}, 'Created'), el('dd', {}, when(u.created_at_iso)),
    el('dt', {}, 'Last seen'), el('dd', {}, when(state.lastSeen[u.username])))
  const roles = Object.keys(state.roles)
  $('#user-role').replaceChildren(...(roles.includes(u.role) ? roles : [...roles, u.role]).map((r) => el('option', { value: r, selected: r === u.role }, r)))
  const allowed = u.role === 'admin' ? 'everything' : PERMISSIONS.filter((p) => p.key !== 'mfa_required' && keys[p.key]).map((p) => p.name).join(' · ') || 'nothing yet'
  $('#user-role-hint').textContent = `What the ${u.role} role allows: ${allowed}. A role change signs them out everywhere.`
  $('#user-sfw').checked = u.sfw_check
  $('#user-toggle').textContent = u.disabled ? 'Enable' : 'Disable'
  $('#user-mfa-reset').hidden = !u.mfa_enabled

  const sessions = s.sessions.map((x) => el('tr', { dataset: { jti: x.jti } },
    el('td', {}, device(x)), el('td', { class: 'mono' }, x.ip ?? '—'), el('td', {}, when(x.created_at_iso)), el('td', {}, when(x.last_used_at_iso)), el('td', {}, when(x.exp_at_iso)),
    el('td', { class: 'actions' }, el('button', { type: 'button', class: 'danger small', 'aria-label': `Revoke the session of ${username} on ${device(x)} signed in ${when(x.created_at_iso)}`, onclick: () => act($('#detail-error'), async () => {
      await call(`/authsvc/api/users/${enc(username)}/sessions/${enc(x.jti)}`, { method: 'DELETE' })
      await loadUserPage()
      say($('#user-page-status'), `The session on ${device(x)} was signed out.`)
    }) }, 'Revoke'))))
  $('#detail-sessions').replaceChildren(...(sessions.length ? sessions : [el('tr', {}, el('td', { colspan: 6 }, 'No active session.'))]))
  $('#sessions-revoke-all').hidden = sessions.length === 0
  const tokens = t.tokens.map((x) => el('tr', { dataset: { prefix: x.token_hash_prefix } },
    el('td', {}, x.label || '—'), el('td', { class: 'mono' }, `${x.token_hash_prefix}…`), el('td', {}, when(x.created_at_iso)), el('td', {}, when(x.expires_iso)), el('td', {}, when(x.last_used_at_iso)),
    el('td', { class: 'actions' }, el('button', { type: 'button', class: 'danger small', 'aria-label': `Revoke the token ${x.label || x.token_hash_prefix} of ${username}`, onclick: () => act($('#detail-error'), async () => {
      await call(`/authsvc/api/users/${enc(username)}/tokens`, { method: 'DELETE', body: { token_hash_prefix: x.token_hash_prefix } })
      await loadUserPage()
      say($('#user-page-status'), `The token ${x.label || x.token_hash_prefix} was revoked.`)
    }) }, 'Revoke'))))
  $('#detail-tokens').replaceChildren(...(tokens.length ? tokens : [el('tr', {}, el('td', { colspan: 6 }, 'No API token.'))]))

  $('#user-grants-hint').textContent = u.role === 'admin' || keys.can_view_all_comfyui_items
    ? `The ${u.role} role has "See every model": ${username} sees every model, and the grants below do nothing until it is turned off in Roles.`
    : `${username} sees and uses only these models.`
  const grantLines = [
    ...oneLinePerItem(g.items).map((i) => el('li', {}, el('span', { class: 'mono' }, `${i.folder}/${i.item_name}`), i.host_only ? ` downloaded by ${i.granted_by} on this ComfyUI, ${when(i.created_at_iso)} (granted here only)` : ` granted by ${i.granted_by}, ${when(i.created_at_iso)}`)),
    ...fromRole.map((i) => el('li', {}, el('span', { class: 'mono' }, `${i.folder}/${i.item_name}`), ` through the role ${u.role}, granted by ${i.granted_by}, ${when(i.created_at_iso)}`)),
  ]
  $('#user-grants').replaceChildren(...(grantLines.length ? grantLines : [el('li', {}, 'No model granted.')]))
  $('#user-grants-link').href = `#models?user=${enc(username)}`
  $('#user-activity-link').href = `#audit?user=${enc(username)}`
  $('#user-activity').replaceChildren(...(activity === null ? [el('li', {}, 'The audit could not be read.')] : activity.length ? activity.map((e) => el('li', {}, el('time', { datetime: e.at_iso }, when(e.at_iso)), ` ${EVENT_NAMES[e.kind] ?? e.kind}${e.outcome && e.outcome !== 'success' ? ` (${e.outcome})` : ''}${e.actor && e.actor !== username ? ` by ${e.actor}` : ''}${e.ip ? ` from ${e.ip}` : ''}`)) : [el('li', {}, 'Nothing recorded yet.')]))
  $('#user-page-body').hidden = false
  $('#user-page').dataset.ready = username
}

const pageUser = () => state.users.find((x) => x.username === state.page)
onSubmit($('#user-role-form'), async (data) => {
  const u = pageUser()
  const why = refusal(u, 'role', data.role)
  if (why) throw new ApiError(409, { error: why, code: 'ROLE' })
  await call(`/authsvc/api/users/${enc(u.username)}`, { method: 'PUT', body: { role: data.role } })
  await loadUsers()
  await loadUserPage()
  say($('#user-page-status'), `${u.username} now has the role ${data.role}; their sessions were signed out.`)
})
$('#user-role-form').dataset.errorMap = 'ROLE=role;VALIDATION_FAILED=role'
$('#user-sfw').addEventListener('change', () => changeUser(pageUser(), { sfw_check: $('#user-sfw').checked }, $('#user-actions-error'), () => say($('#user-page-status'), `The SFW check of ${state.page} is ${$('#user-sfw').checked ? 'on' : 'off'}.`)))
$('#user-toggle').addEventListener('click', () => {
  const u = pageUser()
  const why = u.disabled ? null : refusal(u, 'disable')
  if (why) return say($('#user-actions-error'), why)
  void changeUser(u, { disabled: !u.disabled }, $('#user-actions-error'), () => say($('#user-page-status'), `${u.username} is ${u.disabled ? 'enabled' : 'disabled'}.`))
})
$('#user-mfa-reset').addEventListener('click', () => changeUser(pageUser(), { mfa_reset: true }, $('#user-actions-error'), () => say($('#user-page-status'), `Two-factor authentication of ${state.page} was reset.`)))
$('#user-delete').addEventListener('click', () => confirmDelete(pageUser(), $('#user-actions-error')))
$('#sessions-revoke-all').addEventListener('click', () => act($('#detail-error'), async () => {
  const { data } = await call(`/authsvc/api/users/${enc(state.page)}/sessions`, { method: 'DELETE' })
  await loadUserPage()
  say($('#user-page-status'), `${plural(data.revoked, 'session')} of ${state.page} signed out.`)
}))
onSubmit($('#reset-password-form'), async (data) => {
  await call(`/authsvc/api/users/${enc(state.page)}`, { method: 'PUT', body: { password: data.password } })
  $('#reset-password-form').reset()
  await loadUserPage()
  say($('#user-page-status'), `The password of ${state.page} was reset; their sessions and API tokens were revoked.`)
})

// ---- roles

async function loadRoles() {
  const { data, response } = await call('/authsvc/api/groups')
  state.roles = data.groups
  state.rolesEtag = response.headers.get('ETag')
  renderRoles()
}

function renderRoles() {
  $('#perm-help').replaceChildren(...PERMISSIONS.flatMap((p) => [
    el('dt', {}, p.name),
    el('dd', { id: `perm-desc-${p.key}` }, el('span', {}, p.allows), ' ', el('span', { class: 'hint' }, `Off: ${p.off}`)),
  ]))
  $('#role-cards').replaceChildren(...Object.entries(state.roles).map(([role, keys]) => roleCard(role, keys)))
  fillRolePicker()
  const options = Object.keys(state.roles)
  $('#new-role').replaceChildren(...options.map((r) => el('option', { value: r, selected: r === 'user' }, r)))
  const filter = $('#user-role-filter')
  const chosen = filter.value
  filter.replaceChildren(el('option', { value: '' }, 'Every role'), ...options.map((r) => el('option', { value: r, selected: r === chosen }, r)))
}

function roleCard(role, keys) {
  const members = state.users.filter((u) => u.role === role).length
  const warnings = el('div', { class: 'role-warnings', id: `role-warnings-${role}`, 'aria-live': 'polite' })
  const boxes = PERMISSIONS.map((p) => {
    const forced = role === 'admin' && p.key !== 'mfa_required'
    const box = el('input', {
      type: 'checkbox', id: `perm-${role}-${p.key}`, 'aria-describedby': `perm-desc-${p.key}`,
      checked: forced ? true : keys[p.key] === true,
      // the admin role passes every permission whatever the file says
      disabled: forced,
      dataset: { role, key: p.key },
    })
    box.addEventListener('change', () => showWarnings(role, warnings))
    return el('label', { class: 'check', for: box.id }, box, el('span', {}, p.name))
  })
  const remove = BUILT_IN.has(role) ? null : el('button', { type: 'button', class: 'danger small', id: `remove-role-${role}`, 'aria-label': `Remove the role ${role}`, onclick: () => removeRole(role, removeError) }, 'Remove')
  const removeError = el('p', { class: 'field-error', id: `remove-role-${role}-error`, role: 'alert', hidden: true })
  const card = el('fieldset', { class: 'role-card', dataset: { role } },
    el('legend', {}, role, el('span', { class: 'hint' }, ` · ${plural(members, 'member')}${role === 'admin' ? ' · may do everything' : ''}`)),
    el('div', { class: 'perm-grid' }, ...boxes),
    warnings, remove, removeError)
  showWarnings(role, warnings, keys)
  return card
}

function currentKeys(role) {
  const keys = {}
  for (const box of $$(`#role-cards input[data-role="${CSS.escape(role)}"]`)) keys[box.dataset.key] = box.checked
  return keys
}

function showWarnings(role, slot, keys = currentKeys(role)) {
  slot.replaceChildren(...roleWarnings(role, keys).map((w) => el('p', { class: 'warn', dataset: { warning: w.key } }, w.text)))
}

function removeRole(role, slot) {
  const members = state.users.filter((u) => u.role === role)
  if (members.length > 0) return say(slot, `${plural(members.length, 'user has', 'users have')} the role ${role} (${members.slice(0, 5).map((u) => u.username).join(', ')}${members.length > 5 ? '…' : ''}): give them another role first.`)
  state.roles = matrixFromForm()
  delete state.roles[role]
  renderRoles()
  say($('#roles-status'), `${role} removed; save to apply.`)
}

function matrixFromForm() {
  const groups = {}
  for (const role of Object.keys(state.roles)) groups[role] = { ...state.roles[role] }
  for (const box of $$('#role-cards input[type=checkbox]')) {
    if (!box.disabled && groups[box.dataset.role]) groups[box.dataset.role][box.dataset.key] = box.checked
  }
  return groups
}

/** 412: another admin saved since this page read the version it edits. */
const stale = (what) => (error) => {
  if (error.code === 'PRECONDITION_FAILED') throw new ApiError(412, { error: `Another administrator changed the ${what} since this page loaded them. Reload the page to see their change, then make yours again.`, code: error.code })
  throw error
}

onSubmit($('#roles-form'), async () => {
  $('#roles-status').hidden = true
  const { data, response } = await call('/authsvc/api/groups', { method: 'PUT', body: { groups: matrixFromForm() }, headers: ifMatch(state.rolesEtag) }).catch(stale('roles'))
  state.roles = data.groups
  state.rolesEtag = response.headers.get('ETag')
  renderRoles()
  await loadUsers()
  say($('#roles-status'), 'Roles saved.')
})

onSubmit($('#add-role-form'), async (data) => {
  const name = data.name.trim()
  if (!/^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$/.test(name)) throw new ApiError(400, { error: 'A role name is 1 to 64 letters, digits, _ . - (not starting with . or -). Try another name.', code: 'VALIDATION_FAILED' })
  if (state.roles[name]) throw new ApiError(409, { error: `There is a role named ${name} already: pick another name, or change that role above.`, code: 'VALIDATION_FAILED' })
  state.roles = { ...matrixFromForm(), [name]: Object.fromEntries(KEYS.map((k) => [k, false])) }
  renderRoles()
  $('#add-role-form').reset()
  say($('#roles-status'), `${name} added; choose its permissions and save.`)
  $(`#perm-${CSS.escape(name)}-can_access_api`).focus()
})

// ---- guests

async function loadGuest() {
  const { data } = await call('/authsvc/api/settings/guest-jwt')
  $('#allow-guest').checked = data.allow_guest_jwt
}
onSubmit($('#guest-form'), async (data) => {
  const { data: saved } = await call('/authsvc/api/settings/guest-jwt', { method: 'PUT', body: { allow_guest_jwt: data.allow_guest_jwt } })
  $('#allow-guest').checked = saved.allow_guest_jwt
  say($('#guest-status'), saved.allow_guest_jwt ? 'Guest logins are allowed.' : 'Guest logins are off.')
})

// ---- models (#models?user=<name> or #models?role=<name>)

const models = { folders: null, items: [], itemsFolder: null, grants: [], inherited: [], dropped: {} }
/** the newest of each kind of question asked: an answer to an older one that comes later is dropped */
const asked = { grants: 0, items: 0, workflows: 0 }

/** Whom the section grants to: one user, or every user of a role. */
function grantee() {
  const kind = $('#grant-kind').value
  const name = kind === 'role' ? $('#grant-role').value : $('#grant-user').value
  return { kind, name, path: `/authsvc/api/${kind === 'role' ? 'roles' : 'users'}/${enc(name)}/shared-items`, label: kind === 'role' ? `every user of the role ${name}` : name }
}

function showGranteeKind() {
  const role = $('#grant-kind').value === 'role'
  $('#grant-user-field').hidden = role
  $('#grant-role-field').hidden = !role
}

/** The role picker of the Models section, keeping what it had chosen. */
function fillRolePicker() {
  const select = $('#grant-role')
  const chosen = select.value
  select.replaceChildren(...Object.keys(state.roles).map((r) => el('option', { value: r, selected: r === chosen }, r)))
}

async function showModels(query) {
  fillRolePicker()
  const wantedUser = query?.get('user')
  const wantedRole = query?.get('role')
  if (wantedRole && Object.hasOwn(state.roles, wantedRole)) {
    $('#grant-kind').value = 'role'
    $('#grant-role').value = wantedRole
  } else {
    if (wantedUser || !$('#grant-kind').value) $('#grant-kind').value = 'user'
    if (wantedUser && state.users.some((u) => u.username === wantedUser)) $('#grant-user').value = wantedUser
  }
  showGranteeKind()
  await act($('#models-error'), async () => {
    if (models.folders === null) await loadFolders()
    await loadGrants()
  })
  $('#models').dataset.ready = 'true'
}
LAZY.models = showModels

async function loadFolders() {
  const { data } = await call('/authsvc/api/model-cache/folders')
  models.folders = data.folders
  const chosen = $('#grant-folder').value
  $('#grant-folder').replaceChildren(...data.folders.map((f) => el('option', { value: f, selected: f === chosen }, f)))
  await loadItems()
}

async function loadItems() {
  const folder = $('#grant-folder').value
  const mine = ++asked.items
  const items = folder ? (await call(`/authsvc/api/model-cache/folders/${enc(folder)}/items`)).data.items : []
  if (mine !== asked.items) return // asked again meanwhile (another folder, a refresh): that answer is the one
  models.items = items
  models.itemsFolder = folder
  renderItems()
}

async function loadGrants() {
  const who = grantee()
  if (!who.name) return
  const u = who.kind === 'user' ? state.users.find((x) => x.username === who.name) : null
  const mine = ++asked.grants
  const [{ data }, inherited] = await Promise.all([
    call(who.path),
    // a user's role may grant more: shown beside their own grants
    u && Object.hasOwn(state.roles, u.role) ? call(`/authsvc/api/roles/${enc(u.role)}/shared-items`).then((r) => r.data.items) : Promise.resolve([]),
  ])
  // asked again meanwhile (another pick, a grant made): an older answer coming later is dropped
  // (counted per question on the section, for a reader or a test to tell it came)
  if (mine !== asked.grants) {
    models.dropped[who.path] = (models.dropped[who.path] ?? 0) + 1
    $('#models').dataset.dropped = JSON.stringify(models.dropped)
    return
  }
  models.grants = data.items
  models.inherited = inherited
  renderGrants()
  renderItems()
}

/**
 * A user's grants, one line an item: a download's grant (this ComfyUI only) and an admin's of the
 * same name are one grant to take back, and host-only only when every grant of it is.
 */
function oneLinePerItem(grants) {
  const lines = new Map()
  for (const g of grants) {
    const key = `${g.folder}/${g.item_name}`
    const before = lines.get(key)
    lines.set(key, before === undefined ? { ...g, host_only: g.host_only === true } : before.host_only && g.host_only !== true ? { ...g, host_only: false } : before)
  }
  return [...lines.values()]
}

function renderGrants() {
  const who = grantee()
  const u = who.kind === 'user' ? state.users.find((x) => x.username === who.name) : null
  const role = who.kind === 'role' ? who.name : u?.role
  for (const span of $$('.grant-name')) span.textContent = who.label
  const moot = role !== undefined && (role === 'admin' || state.roles[role]?.can_view_all_comfyui_items)
  $('#grant-moot').hidden = !moot
  if (moot) {
    const whoSees = who.kind === 'role' ? 'its users see' : `${who.name} sees`
    $('#grant-moot').replaceChildren(`The ${role} role has "See every model": ${whoSees} every model, and these grants do nothing until it is turned off in `, el('a', { href: '#roles' }, 'Roles'), '.')
  }
  $('#grant-list').dataset.for = `${who.kind}:${who.name}`
  const lines = oneLinePerItem(models.grants)
  $('#grant-list').replaceChildren(...(lines.length ? lines.map((g) => el('li', { dataset: { grant: `${g.folder}/${g.item_name}` } },
    el('span', { class: 'mono' }, `${g.folder}/${g.item_name}`), g.host_only ? ' (downloaded on this ComfyUI: granted here only) ' : ' ',
    el('button', { type: 'button', class: 'danger small', 'aria-label': `Take back ${g.folder}/${g.item_name} from ${who.label}`, onclick: () => changeGrant('DELETE', g.folder, g.item_name) }, 'Take back'))) : [el('li', {}, 'Nothing granted yet.')]))
  $('#grant-inherited').hidden = who.kind !== 'user' || models.inherited.length === 0
  $('#grant-inherited-role').textContent = u?.role ?? ''
  $('#grant-inherited-list').replaceChildren(...models.inherited.map((g) => el('li', { dataset: { grant: `${g.folder}/${g.item_name}` } },
    el('span', { class: 'mono' }, `${g.folder}/${g.item_name}`), ' ', el('a', { href: `#models?role=${enc(u.role)}` }, `change the ${u.role} role's grants`))))
}

function renderItems() {
  const folder = $('#grant-folder').value
  const q = $('#grant-filter').value.trim().toLowerCase()
  // the items of the folder picked, once they came (never another folder's under its name)
  const listed = models.itemsFolder === folder ? models.items : []
  const lines = oneLinePerItem(models.grants).filter((g) => g.folder === folder)
  const granted = new Set(lines.map((g) => g.item_name))
  const hereOnly = new Set(lines.filter((g) => g.host_only).map((g) => g.item_name))
  const items = listed.filter((i) => !q || i.toLowerCase().includes(q))
  const who = grantee()
  $('#grant-items').replaceChildren(...items.slice(0, 200).map((item) => el('li', { dataset: { item } },
    el('span', { class: 'mono' }, item), ' ',
    granted.has(item)
      ? el('span', { class: 'tag' }, hereOnly.has(item) ? 'granted here (downloaded)' : 'granted')
      : el('button', { type: 'button', class: 'secondary small', 'aria-label': `Grant ${folder}/${item} to ${who.label}`, onclick: () => changeGrant('POST', folder, item) }, 'Grant'))))
  $('#grant-items-empty').hidden = listed.length > 0 || !folder || models.itemsFolder !== folder
}

async function changeGrant(method, folder, item) {
  const who = grantee()
  $('#models-status').hidden = true
  await act($('#models-error'), async () => {
    const mine = ++asked.grants
    const { data } = await call(who.path, { method, body: { folder, item_name: item } })
    if (mine === asked.grants) {
      models.grants = data.items
      renderGrants()
      renderItems()
    }
    const subject = who.kind === 'role' ? `Every user of the role ${who.name}` : who.name
    say($('#models-status'), method === 'POST' ? `${subject} may now use ${folder}/${item}.` : `${folder}/${item} was taken back from ${who.label}.`)
  })
}

function granteeChanged() {
  showGranteeKind()
  const who = grantee()
  history.replaceState(null, '', `#models?${who.kind}=${enc(who.name)}`)
  void act($('#models-error'), loadGrants)
}
$('#grant-kind').addEventListener('change', granteeChanged)
$('#grant-user').addEventListener('change', granteeChanged)
$('#grant-role').addEventListener('change', granteeChanged)
$('#grant-folder').addEventListener('change', () => act($('#models-error'), loadItems))
$('#grant-filter').addEventListener('input', renderItems)
$('#cache-refresh').addEventListener('click', () => act($('#models-error'), async () => {
  $('#models-status').hidden = true
  const { data } = await call('/authsvc/api/model-cache/refresh', { method: 'POST' })
  await loadFolders()
  say($('#models-status'), `The model list was refreshed: ${plural(data.folders_count, 'folder')}, ${plural(data.items_count, 'item')} (${when(data.refreshed_at_iso)}).`)
}))

// ---- workflows

async function showWorkflows() {
  await act($('#workflows-error'), async () => {
    await Promise.all([loadShared(), loadUserWorkflows()])
  })
  $('#workflows').dataset.ready = 'true'
}
LAZY.workflows = showWorkflows

async function loadShared() {
  const { data } = await call('/authsvc/api/workflows/shared')
  $('#shared-workflows').replaceChildren(...(data.workflows.length ? data.workflows.map((w) => el('li', { dataset: { workflow: w.filename } },
    el('span', { class: 'mono' }, w.filename), el('span', { class: 'hint' }, ` ${size(w.size)}, ${when(w.modified_iso)} `),
    el('button', { type: 'button', class: 'danger small', 'aria-label': `Remove ${w.filename} from the shared workflows`, onclick: () => confirmUnshare(w.filename) }, 'Remove'))) : [el('li', {}, 'No shared workflow.')]))
}

async function loadUserWorkflows() {
  const username = $('#publish-user').value
  if (!username) return
  const mine = ++asked.workflows
  const { data } = await call(`/authsvc/api/users/${enc(username)}/workflows`)
  if (mine !== asked.workflows) return // another user was picked meanwhile: theirs is on its way
  $('#publish-file').replaceChildren(...(data.workflows.length ? data.workflows.map((w) => el('option', { value: w.filename }, w.filename)) : [el('option', { value: '' }, `${username} has no workflow`)]))
  $('#publish').disabled = data.workflows.length === 0
}
$('#publish-user').addEventListener('change', () => act($('#workflows-error'), loadUserWorkflows))

onSubmit($('#publish-form'), async (data) => {
  $('#workflows-status').hidden = true
  if (!data.filename) throw new ApiError(400, { error: `${data.username} has no workflow to publish: they save one in ComfyUI first.`, code: 'NOT_FOUND' })
  const { data: done } = await call(`/authsvc/api/users/${enc(data.username)}/workflows/publish`, { method: 'POST', body: { filename: data.filename } })
  await loadShared()
  say($('#workflows-status'), `${done.filename} of ${data.username} is now shared with everyone.`)
})

function confirmUnshare(filename) {
  const dialog = $('#confirm-unshare')
  dialog.querySelector('.unshare-name').textContent = filename
  dialog.returnValue = ''
  dialog.onclose = () => {
    if (dialog.returnValue !== 'remove') return
    $('#workflows-status').hidden = true
    act($('#workflows-error'), async () => {
      await call('/authsvc/api/workflows/shared', { method: 'DELETE', body: { filename } })
      await loadShared()
      say($('#workflows-status'), `${filename} is no longer shared. Users' own copies stay.`)
    })
  }
  dialog.showModal()
  $('#unshare-cancel').focus()
}

// ---- network: IP lists (each change saved at once) and the trusted proxies

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
    el('td', {}, entry.expires_at_iso ? when(entry.expires_at_iso) : 'until unblocked'),
    el('td', { class: 'actions' }, el('button', { type: 'button', class: 'danger small', 'aria-label': `Unblock ${entry.ip}`, onclick: () => unblock(i) }, 'Unblock'))))
  $('#blacklist-rows').replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: 3 }, 'No address is blocked.'))]))
}

/** The service's problems ("blacklist[1].ip: loopback can never be blacklisted") in words about the entries sent. */
function ipProblem(message, lists) {
  return message.split('; ').map((problem) => {
    const black = /^blacklist\[(\d+)\]\.ip: (.*)$/.exec(problem)
    if (black) {
      const ip = lists.blacklist[Number(black[1])]?.ip ?? ''
      if (/loopback/.test(black[2])) return `${ip} is this machine (loopback): it is always admitted and can never be blocked.`
      return `"${ip}" is not an address or a range: write it like 203.0.113.9 or 203.0.113.0/24.`
    }
    const white = /^whitelist\[(\d+)\]: (.*)$/.exec(problem)
    if (white) return `Line ${Number(white[1]) + 1} ("${lists.whitelist[Number(white[1])]}") is not an address or a range: write it like 203.0.113.9 or 203.0.113.0/24.`
    return problem
  }).join(' ')
}

/** Saves `lists`; a refusal is thrown in words, with `code` naming the field it concerns. */
async function saveIpLists(lists, code) {
  try {
    const { data, response } = await call('/authsvc/api/ip-lists', { method: 'PUT', body: lists, headers: ifMatch(state.ipEtag) })
    state.ip = { whitelist: data.whitelist, blacklist: data.blacklist }
    state.ipEtag = response.headers.get('ETag')
  } catch (error) {
    if (error.code === 'VALIDATION_FAILED') throw new ApiError(error.status, { error: ipProblem(error.message, lists), code })
    stale('IP lists')(error)
  }
  renderIpLists()
}

onSubmit($('#block-form'), async (data) => {
  hide($('#ip-status'), $('#ip-error'))
  const ip = data.block_ip.trim()
  const hours = data.block_hours.trim()
  if (!ip) throw new ApiError(400, { error: 'Enter the address or range to block, like 203.0.113.9 or 203.0.113.0/24.', code: 'BLOCK_IP' })
  if (hours && !(Number(hours) > 0)) throw new ApiError(400, { error: 'Enter a number of hours above 0, or leave it empty to block until you unblock it.', code: 'BLOCK_HOURS' })
  if (state.ip.blacklist.some((e) => e.ip === ip)) throw new ApiError(409, { error: `${ip} is blocked already.`, code: 'BLOCK_IP' })
  const entry = hours ? { ip, expires_at_iso: new Date(Date.now() + Number(hours) * 3600_000).toISOString() } : { ip, permanent: true }
  await saveIpLists({ whitelist: state.ip.whitelist, blacklist: [...state.ip.blacklist, entry] }, 'BLOCK_IP')
  $('#block-form').reset()
  say($('#ip-status'), `${ip} is blocked${hours ? ` for ${plural(Number(hours), 'hour')}` : ' until you unblock it'}.`)
})
$('#block-form').dataset.errorMap = 'BLOCK_IP=block_ip;BLOCK_HOURS=block_hours'

function unblock(i) {
  const entry = state.ip.blacklist[i]
  hide($('#ip-status'))
  return act($('#ip-error'), async () => {
    await saveIpLists({ whitelist: state.ip.whitelist, blacklist: state.ip.blacklist.filter((_, j) => j !== i) }, 'UNBLOCK')
    say($('#ip-status'), `${entry.ip} is no longer blocked.`)
  })
}

onSubmit($('#ip-form'), async (data) => {
  hide($('#ip-status'), $('#ip-error'))
  const whitelist = data.whitelist.split('\n').map((l) => l.trim()).filter(Boolean)
  await saveIpLists({ whitelist, blacklist: state.ip.blacklist }, 'WHITELIST')
  say($('#ip-status'), whitelist.length ? `Only ${plural(whitelist.length, 'address or range', 'addresses and ranges')} (and this machine) may connect now.` : 'Every address that is not blocked may connect.')
})
$('#ip-form').dataset.errorMap = 'WHITELIST=whitelist'

async function loadNetwork() {
  const { data } = await call('/authsvc/api/admin/network')
  $('#my-ip').textContent = data.your_ip
  $('#trusted-proxies').replaceChildren(...(data.trusted_proxies.length ? data.trusted_proxies.map((p) => el('li', { class: 'mono' }, p)) : [el('li', {}, 'None: every client\'s own address counts, and X-Forwarded-For is ignored.')]))
}

// ---- tables: on a phone each row is a card whose cells say their column (CSS: table.stack)

function labelCells(table) {
  const heads = $$('thead th', table).map((th) => th.textContent.trim())
  for (const row of $$('tbody tr', table)) {
    ;[...row.children].forEach((cell, i) => { if (heads[i] && !cell.hasAttribute('colspan')) cell.dataset.label = heads[i] })
  }
}
for (const table of $$('table')) {
  table.classList.add('stack')
  labelCells(table)
  new MutationObserver(() => labelCells(table)).observe(table.tBodies[0] ?? table, { childList: true })
}

// ---- start

route({ focus: false, load: false })
call('/authsvc/api/me').then(({ data }) => { state.me = data }).catch(() => {})
  .then(loadRoles)
  .then(() => Promise.all([loadUsers(), loadIpLists(), loadGuest(), loadNetwork(), startAudit()]))
  .then(() => {
    renderRoles() // member counts need the users
    document.body.dataset.ready = 'true'
    const at = where()
    if (at.section === 'user-page' || LAZY[at.section]) route({ focus: false })
  })
  .catch((error) => say($('#users-error'), error.message))
