// The admin panel's Storage section: pick a user, see their own folders on the host (files,
// size, workflows), and empty them after a confirmation that names the user and what goes.
// The service requires the username repeated (`confirm`), so the dialog asks for exactly that.
import { $, api, el, onSubmit, say, size } from './common.js'

const call = (body) => api('/authsvc/api/user-env', { method: 'POST', body, sessionPage: true })
const KIND = { userdata: 'Workflows and settings', input: 'Uploads (input)', output: 'Outputs', temp: 'Previews (temp)' }
const state = { shown: null }

const files = (n) => `${n} ${n === 1 ? 'file' : 'files'}`

async function loadUsers() {
  const [{ data: users }, { data: owners }] = await Promise.all([api('/authsvc/api/users', { sessionPage: true }), call({ action: 'list' })])
  const chosen = $('#storage-user').value
  $('#storage-user').replaceChildren(...users.users.map((u) => el('option', { value: u.username, selected: u.username === chosen }, u.username)))
  const names = owners.users.map((u) => u.username)
  $('#storage-owners').textContent = names.length ? `Users with folders of their own: ${names.join(', ')}.` : 'No user has folders of their own yet.'
  $('#storage-owners').hidden = false
}

function render(status) {
  state.shown = status
  $('#storage-detail-title').textContent = `Storage of ${status.username}`
  $('#storage-rows').replaceChildren(...status.folders.map((f) => el('tr', { dataset: { kind: f.kind } },
    el('th', { scope: 'row' }, KIND[f.kind]),
    el('td', { class: 'mono' }, f.host_path ?? f.path, f.state === 'none' ? ' (none yet)' : f.state === 'not_own' ? ' (not a plain folder: left alone)' : f.state === 'unknown' ? ' (the host has not said where)' : ''),
    el('td', {}, String(f.files)),
    el('td', {}, size(f.bytes)))))
  const total = status.folders.reduce((n, f) => n + f.files, 0)
  $('#storage-workflows').textContent = `${status.workflows.count} ${status.workflows.count === 1 ? 'workflow' : 'workflows'} (${size(status.workflows.bytes)}); ${files(total)} in all${status.truncated ? ' (at least: the count stopped early)' : ''}.`
  $('#storage-purge').disabled = total === 0
  $('#storage-detail').hidden = false
}

async function show(username) {
  render((await call({ action: 'status', user: username })).data)
}

onSubmit($('#storage-form'), async (data) => {
  $('#storage-status').hidden = true
  await show(data.user)
})

$('#storage-purge').addEventListener('click', () => {
  const status = state.shown
  if (!status) return
  const dialog = $('#confirm-purge')
  for (const span of dialog.querySelectorAll('.purge-name')) span.textContent = status.username
  const total = status.folders.reduce((n, f) => n + f.files, 0)
  const bytes = status.folders.reduce((n, f) => n + f.bytes, 0)
  $('#purge-what').textContent = `${files(total)} (${size(bytes)}) are removed from the folders of ${status.username}, ${status.workflows.count} of them ${status.workflows.count === 1 ? 'a workflow' : 'workflows'}: ${status.folders.filter((f) => f.files > 0).map((f) => KIND[f.kind].toLowerCase()).join(', ')}.`
  const input = $('#purge-confirm')
  input.value = ''
  $('#purge-ok').disabled = true
  input.oninput = () => { $('#purge-ok').disabled = input.value.trim().toLowerCase() !== status.username.toLowerCase() }
  dialog.returnValue = ''
  dialog.onclose = async () => {
    if (dialog.returnValue !== 'purge') return
    $('#storage-error').hidden = true
    try {
      const { data } = await call({ action: 'purge', user: status.username, confirm: input.value.trim() })
      say($('#storage-status'), `The folders of ${data.username} were emptied: ${files(data.removed.files)} (${size(data.removed.bytes)}) removed.`)
      await Promise.all([show(status.username), loadUsers()])
    } catch (error) { say($('#storage-error'), error.message) }
  }
  dialog.showModal()
  input.focus()
})

loadUsers()
  .then(() => { $('#storage').dataset.ready = 'true' })
  .catch((error) => say($('#storage-error'), error.message))
