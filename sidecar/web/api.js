// The readable view of the OpenAPI document (/authsvc/api/openapi.json): every operation with its
// method, path, access level, parameters, body and answers, grouped by tag. Schemas are shown as
// short type outlines; a shared schema ($ref) is named and shown once, at the end.
import { $, api, el, say } from './common.js'

const LEVELS = {
  public: 'anyone',
  principal: 'any principal (a user, the guest role, a local anonymous role)',
  user: 'a signed-in account',
  admin: 'the admin role',
}
const METHODS = ['get', 'post', 'put', 'delete', 'patch']

/** A schema as a short outline: `{ name: string, role?: string }`, `A | B`, `T[]`. */
function outline(schema, indent = '') {
  if (!schema || typeof schema !== 'object') return 'any'
  if (schema.$ref) return schema.$ref.split('/').pop()
  const inner = `${indent}  `
  if (Array.isArray(schema.anyOf) || Array.isArray(schema.oneOf)) return (schema.anyOf ?? schema.oneOf).map((s) => outline(s, indent)).join(' | ')
  if (schema.enum) return schema.enum.map((v) => JSON.stringify(v)).join(' | ')
  if ('const' in schema) return JSON.stringify(schema.const)
  const types = Array.isArray(schema.type) ? schema.type : [schema.type]
  if (types.includes('array')) return `${outline(schema.items, indent)}[]`
  if (types.includes('object') || schema.properties) {
    const required = new Set(schema.required ?? [])
    const lines = Object.entries(schema.properties ?? {}).map(([name, s]) => `${inner}${name}${required.has(name) ? '' : '?'}: ${outline(s, inner)}`)
    if (schema.additionalProperties && typeof schema.additionalProperties === 'object') lines.push(`${inner}[key: string]: ${outline(schema.additionalProperties, inner)}`)
    return lines.length === 0 ? 'object' : `{\n${lines.join(',\n')}\n${indent}}`
  }
  return types.filter(Boolean).join(' | ') || 'any'
}

const pre = (text) => el('pre', { class: 'schema', tabindex: '0' }, text)

/** Text of the document, with its `code spans` as code. */
const prose = (text) => (text ?? '').split('`').map((part, i) => (i % 2 === 1 ? el('code', {}, part) : part))

function content(media) {
  return Object.entries(media ?? {}).map(([type, { schema }]) => el('div', {}, el('span', { class: 'tag' }, type), type.startsWith('text/') ? '' : pre(outline(schema))))
}

function parameters(op) {
  if (!op.parameters?.length) return null
  return el('ul', {}, op.parameters.map((p) => el('li', {}, el('code', {}, p.name), ` (${p.in}${p.required ? ', required' : ''}): `, el('code', {}, outline(p.schema)), p.description ? [' · ', ...prose(p.description)] : '')))
}

function responses(op) {
  return el('div', { class: 'table-wrap', tabindex: '0', role: 'region', 'aria-label': 'Answers' },
    el('table', {},
      el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Status'), el('th', { scope: 'col' }, 'Answer'))),
      el('tbody', {}, Object.entries(op.responses ?? {}).map(([status, r]) => el('tr', {},
        el('td', { class: 'mono' }, status),
        // "Default Response" is the generator's filler for an answer described by its schema alone
        el('td', {}, r.description === 'Default Response' ? '' : prose(r.description), r.headers ? el('div', { class: 'hint' }, `headers: ${Object.keys(r.headers).join(', ')}`) : '', content(r.content)))))))
}

function operation(path, method, op) {
  const level = op['x-authsvc-auth']
  const id = `op-${method}-${path.replace(/[^A-Za-z0-9]+/g, '-')}`
  const details = el('details', { class: 'op', id, dataset: { find: `${method} ${path} ${level} ${op.summary ?? ''} ${op['x-authsvc-twin'] ?? ''}`.toLowerCase() } },
    el('summary', {}, el('span', { class: `tag method ${method}` }, method.toUpperCase()), ' ', el('code', {}, path), ' ', el('span', { class: 'tag level' }, level), ' ', prose(op.summary)),
    el('dl', { class: 'facts' },
      el('dt', {}, 'Who'), el('dd', {}, LEVELS[level] ?? level),
      op['x-authsvc-twin'] ? [el('dt', {}, 'Also at'), el('dd', {}, el('code', {}, op['x-authsvc-twin']))] : null,
      op.parameters?.length ? [el('dt', {}, 'Parameters'), el('dd', {}, parameters(op))] : null,
      op.requestBody ? [el('dt', {}, 'Body'), el('dd', {}, content(op.requestBody.content))] : null),
    el('h3', {}, 'Answers'),
    responses(op))
  return details
}

function render(doc) {
  const groups = new Map()
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const method of METHODS) {
      const op = item[method]
      if (!op) continue
      const tag = op.tags?.[0] ?? 'other'
      if (!groups.has(tag)) groups.set(tag, [])
      groups.get(tag).push(operation(path, method, op))
    }
  }
  const sections = [...groups].map(([tag, ops], i) => el('section', { class: 'api-group', 'aria-labelledby': `group-${i}` }, el('h2', { id: `group-${i}` }, tag), ops))
  const shared = Object.entries(doc.components?.schemas ?? {}).flatMap(([name, schema]) => [el('h3', {}, name), el('p', { class: 'hint' }, prose(schema.description)), pre(outline(schema))])
  sections.push(el('section', { class: 'api-group', 'aria-labelledby': 'group-shared' }, el('h2', { id: 'group-shared' }, 'Shared shapes'), shared))
  // in the page's column like its other sections (main.wide > section)
  $('#api-groups').replaceWith(...sections)
}

function filter() {
  const words = $('#api-filter').value.toLowerCase().split(/\s+/).filter(Boolean)
  let shown = 0
  for (const op of document.querySelectorAll('details.op')) {
    op.hidden = !words.every((w) => op.dataset.find.includes(w))
    if (!op.hidden) shown += 1
  }
  for (const section of document.querySelectorAll('section.api-group')) {
    const ops = section.querySelectorAll('details.op')
    section.hidden = ops.length > 0 && [...ops].every((op) => op.hidden)
  }
  $('#api-count').textContent = `${shown} operation${shown === 1 ? '' : 's'}`
}

async function start() {
  try {
    const { data } = await api('/authsvc/api/openapi.json', { sessionPage: true })
    render(data)
    filter()
    $('#api-filter').addEventListener('input', filter)
    document.body.dataset.ready = 'true'
  } catch (error) {
    say($('#api-error'), error.message)
  }
}

start()
