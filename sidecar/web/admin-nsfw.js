// The admin panel's Content safety section (issue 23): the NSFW tags, the scan's progress, and a
// manual mark or unmark of any image (a manual tag wins over the detector). While a scan runs the
// numbers are read again every two seconds. With the policy off (nsfw.enabled false) the section
// says so and offers nothing.
import { $, ApiError, api, el, onSubmit, say } from './common.js'

const manage = (body) => api('/authsvc/api/nsfw-management', { method: 'POST', body, sessionPage: true })
const mark = (body) => api('/authsvc-gallery/mark-nsfw', { method: 'POST', body, sessionPage: true })
let timer = null

const SOURCE = { manual: 'marked', detector: 'detector', metadata: 'image metadata' }

function progress(stats) {
  const s = stats.scan
  const tags = `${stats.tags_total} tagged images, ${stats.tags_nsfw} of them NSFW (${stats.by_source.manual} marked, ${stats.by_source.detector} by the detector, ${stats.by_source.metadata} by their metadata).`
  const scan = s.running
    ? `Scan running: ${s.done} of ${s.total || '?'} images${s.force ? ' (classifying again)' : ''}, ${s.nsfw} NSFW, ${s.failed} unreadable.`
    : s.finished_at_iso ? `Last scan: ${s.done} images, ${s.nsfw} NSFW, ${s.failed} unreadable.` : 'No scan yet.'
  return `${tags} ${scan}`
}

function top(scores) {
  if (!scores) return ''
  const [name, value] = Object.entries(scores).sort((a, b) => b[1] - a[1])[0]
  return `${name} ${Math.round(value * 100)}%`
}

function row(t) {
  const where = [t.type, t.subfolder, t.filename].filter(Boolean).join('/')
  const toggle = () => act(async () => {
    await mark({ filename: t.filename, subfolder: t.subfolder, type: t.type, is_nsfw: !t.is_nsfw })
    await load()
    say($('#nsfw-status'), `${where} is now marked ${t.is_nsfw ? 'safe' : 'NSFW'}.`)
  })
  return el('tr', { dataset: { file: where } },
    el('th', { scope: 'row', class: 'mono' }, where),
    el('td', {}, t.is_nsfw ? 'NSFW' : 'safe'),
    el('td', {}, SOURCE[t.source] ?? t.source, t.marked_by ? ` (${t.marked_by})` : ''),
    el('td', {}, top(t.scores)),
    el('td', {}, el('button', { type: 'button', class: 'secondary small', 'aria-label': `${t.is_nsfw ? 'Mark safe' : 'Mark NSFW'}: ${where}`, onclick: toggle }, t.is_nsfw ? 'Mark safe' : 'Mark NSFW')))
}

async function act(action) {
  $('#nsfw-error').hidden = true
  try { await action() } catch (error) { say($('#nsfw-error'), error.message) }
}

async function load() {
  let data
  try {
    data = (await manage({ action: 'list_tags' })).data
  } catch (error) {
    if (error instanceof ApiError && error.code === 'CONFLICT') {
      $('#nsfw-off').hidden = false
      $('#nsfw-on').hidden = true
      return
    }
    throw error
  }
  $('#nsfw-off').hidden = true
  $('#nsfw-on').hidden = false
  $('#nsfw-progress').textContent = progress(data.stats)
  $('#nsfw-rows').replaceChildren(...data.tags.map(row))
  $('#nsfw-empty').hidden = data.tags.length > 0
  clearTimeout(timer)
  if (data.stats.scan.running) timer = setTimeout(() => act(load), 2000)
}

onSubmit($('#nsfw-scan-form'), async (data) => {
  await manage({ action: 'scan_all', force_rescan: data.force_rescan === true })
  await load()
  say($('#nsfw-status'), 'The scan started; its progress shows above.')
})

$('#nsfw-clear').addEventListener('click', () => act(async () => {
  const { data } = await manage({ action: 'clear_all_tags' })
  await load()
  say($('#nsfw-status'), `${data.stats.cleared} tags made by the detector or by metadata were removed; marked ones stay.`)
}))

onSubmit($('#nsfw-mark-form'), async (data, submitter) => {
  const is_nsfw = submitter?.value !== 'safe'
  await mark({ filename: data.filename, subfolder: data.subfolder ?? '', type: data.type, is_nsfw })
  await load()
  say($('#nsfw-status'), `${data.filename} is now marked ${is_nsfw ? 'NSFW' : 'safe'}.`)
})

act(load)
