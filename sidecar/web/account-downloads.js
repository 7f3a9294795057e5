// The account page's downloads block (SPEC §9): start a download from a pasted URL or the
// source's fields, follow each job (progress, speed, time left, state, the error in words),
// cancel, and set or clear the caller's source keys (never shown back). Shown only to a
// principal with can_download_models; the list is read again every 2 s while a job is active.
import { $, $$, api, el, onSubmit, say, size, when } from './common.js'

const call = (path, options = {}) => api(path, { ...options, sessionPage: true })
const section = $('#downloads')
const SOURCE_NAMES = { civitai: 'Civitai', huggingface: 'Hugging Face' }
const STATE_WORDS = { queued: 'Waiting', running: 'Downloading', completed: 'Done', failed: 'Failed', cancelled: 'Cancelled' }
let timer

const duration = (s) => (s === null || s === undefined ? '' : s < 60 ? `${s} s` : s < 3600 ? `${Math.round(s / 60)} min` : `${(s / 3600).toFixed(1)} h`)

function progressCell(job) {
  const bar = el('progress', { max: '100', value: String(job.progress_pct), 'aria-label': `${job.filename || 'download'}: ${job.progress_pct} %` })
  const parts = [`${job.progress_pct} %`]
  if (job.total_bytes > 0) parts.push(`${size(job.bytes_done)} of ${size(job.total_bytes)}`)
  if (job.status === 'running' && job.speed_bps > 0) parts.push(`${size(job.speed_bps)}/s`)
  if (job.eta_seconds !== null && job.status === 'running') parts.push(`${duration(job.eta_seconds)} left`)
  return el('td', { 'data-label': 'Progress' }, bar, el('div', { class: 'hint' }, parts.join(' · ')))
}

function row(job) {
  const active = job.status === 'queued' || job.status === 'running'
  return el('tr', { dataset: { job: job.job_id, status: job.status } },
    el('td', { class: 'device' }, el('div', {}, job.filename || '(asking the source)'), el('div', { class: 'hint' }, `${SOURCE_NAMES[job.source]} → ${job.folder_type} · ${when(job.created_at_iso)}`)),
    progressCell(job),
    el('td', { 'data-label': 'State' }, el('span', { class: 'tag', dataset: { state: job.status } }, STATE_WORDS[job.status] ?? job.status),
      job.error ? el('div', { class: job.status === 'failed' ? 'error' : 'hint', dataset: { jobError: '' } }, job.error) : null,
      job.status === 'completed' && job.sha256 ? el('div', { class: 'hint mono' }, `SHA-256 ${job.sha256.slice(0, 16)}…`) : null),
    el('td', { class: 'actions' }, active ? el('button', { type: 'button', class: 'danger small', 'aria-label': `Cancel the download of ${job.filename || 'this file'}`, onclick: () => cancel(job) }, 'Cancel') : null))
}

async function loadJobs() {
  const { data } = await call('/authsvc/api/model-download/jobs')
  $('#download-rows').replaceChildren(...(data.jobs.length ? data.jobs.map(row) : [el('tr', {}, el('td', { colspan: 4 }, 'No downloads yet.'))]))
  clearTimeout(timer)
  if (data.stats.queued + data.stats.running > 0) timer = setTimeout(() => loadJobs().catch((e) => say($('#downloads-error'), e.message)), 2000)
  section.dataset.ready = 'true'
}

async function cancel(job) {
  $('#downloads-error').hidden = true
  try {
    await call(`/authsvc/api/model-download/jobs/${job.job_id}/cancel`, { method: 'POST' })
  } catch (error) {
    say($('#downloads-error'), error.message)
  }
  await loadJobs()
}

async function loadKeys() {
  const { data } = await call('/authsvc/api/model-download/sources')
  $('#download-keys').replaceChildren(...data.sources.map((s) => el('li', { dataset: { keySource: s } }, `${SOURCE_NAMES[s]}: ${data.sources_with_keys.includes(s) ? 'a key is stored' : 'no key'}`)))
}

function showSourceFields() {
  const source = $('#download-source').value
  for (const field of $$('[data-source]', section)) field.hidden = field.dataset.source !== source
}

async function start() {
  const folders = await call('/authsvc/api/model-download/folders')
  $('#download-folder').replaceChildren(...folders.data.folders.map((f) => el('option', { value: f, ...(f === folders.data.default_folder ? { selected: '' } : {}) }, f)))
  section.hidden = false
  $('#download-source').addEventListener('change', showSourceFields)
  onSubmit($('#download-form'), async (values) => {
    const body = { folder_type: values.folder_type }
    if (values.url) body.url = values.url
    else if (values.source === 'civitai') Object.assign(body, { source: 'civitai', model_version_id: Number(values.model_version_id) || values.model_version_id })
    else Object.assign(body, { source: 'huggingface', repo_id: values.repo_id, filename: values.filename, ...(values.revision ? { revision: values.revision } : {}) })
    await call('/authsvc/api/model-download/download', { method: 'POST', body })
    $('#download-url').value = ''
    await loadJobs()
  })
  onSubmit($('#download-key-form'), async ({ source, api_key }) => {
    await call('/authsvc/api/model-download/api-keys', { method: 'PUT', body: { source, api_key } })
    $('#download-key').value = ''
    say($('#download-key-saved'), `${SOURCE_NAMES[source]} key saved.`)
    await loadKeys()
  })
  $('#download-key-clear').addEventListener('click', async () => {
    const source = $('#download-key-source').value
    await call('/authsvc/api/model-download/api-keys', { method: 'PUT', body: { source, api_key: '' } })
    say($('#download-key-saved'), `${SOURCE_NAMES[source]} key cleared.`)
    await loadKeys()
  })
  await Promise.all([loadJobs(), loadKeys()])
}

start().catch((error) => {
  // a role without can_download_models: the block stays hidden
  if (error.status !== 403) {
    section.hidden = false
    say($('#downloads-error'), error.message)
  }
})
