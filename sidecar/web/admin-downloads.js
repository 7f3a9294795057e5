// The admin panel's downloads section: every user's download jobs (GET
// /authsvc/api/model-download/jobs answers an admin with all of them), with cancel.
import { $, api, el, say, size, when } from './common.js'

const call = (path, options = {}) => api(path, { ...options, sessionPage: true })
const STATE_WORDS = { queued: 'Waiting', running: 'Downloading', completed: 'Done', failed: 'Failed', cancelled: 'Cancelled' }
let timer

function row(job) {
  const active = job.status === 'queued' || job.status === 'running'
  return el('tr', { dataset: { job: job.job_id, status: job.status } },
    el('td', {}, job.username),
    el('td', {}, el('div', {}, job.filename || '(asking the source)'), el('div', { class: 'hint' }, `${job.source} → ${job.folder_type} · ${when(job.created_at_iso)}`)),
    el('td', {}, el('progress', { max: '100', value: String(job.progress_pct), 'aria-label': `${job.filename || 'download'}: ${job.progress_pct} %` }),
      el('div', { class: 'hint' }, `${job.progress_pct} %${job.total_bytes > 0 ? ` · ${size(job.bytes_done)} of ${size(job.total_bytes)}` : ''}`)),
    el('td', {}, el('span', { class: 'tag' }, STATE_WORDS[job.status] ?? job.status), job.error ? el('div', { class: job.status === 'failed' ? 'error' : 'hint' }, job.error) : null),
    el('td', { class: 'actions' }, active ? el('button', { type: 'button', class: 'danger small', 'aria-label': `Cancel ${job.username}'s download of ${job.filename || 'a file'}`, onclick: () => cancel(job) }, 'Cancel') : null))
}

async function load() {
  const { data } = await call('/authsvc/api/model-download/jobs')
  $('#admin-download-rows').replaceChildren(...(data.jobs.length ? data.jobs.map(row) : [el('tr', {}, el('td', { colspan: 5 }, 'No downloads yet.'))]))
  $('#downloads-admin').dataset.ready = 'true'
  clearTimeout(timer)
  if (data.stats.queued + data.stats.running > 0) timer = setTimeout(() => load().catch((e) => say($('#admin-downloads-error'), e.message)), 2000)
}

async function cancel(job) {
  try {
    await call(`/authsvc/api/model-download/jobs/${job.job_id}/cancel`, { method: 'POST' })
  } catch (error) {
    say($('#admin-downloads-error'), error.message)
  }
  await load()
}

load().catch((error) => say($('#admin-downloads-error'), error.message))
