// The ComfyUI stand-in frontend: a small page that provides the part of the ComfyUI frontend's
// extension API that custom nodes use, and loads extensions the way the real frontend does:
// `GET /api/extensions` (a list of script URLs), `import()` each, then `init` and `setup` of every
// registered extension. It renders their `menuCommands` as a menu and their `topbarBadges`.
// Like the real `api`, it keeps a WebSocket on /ws and fires `reconnecting` when it drops.
export const standin = true

class ComfyApi extends EventTarget {
  constructor() {
    super()
    this.api_base = ''
    this.clientId = crypto.randomUUID().replace(/-/g, '')
  }
  apiURL(route) { return `${this.api_base}/api${route}` }
  fileURL(route) { return `${this.api_base}${route}` }
  fetchApi(route, options) { return fetch(this.apiURL(route), options) }
  async getExtensions() { return (await this.fetchApi('/extensions', { cache: 'no-store' })).json() }
  async queuePrompt(prompt) {
    const response = await this.fetchApi('/prompt', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ client_id: this.clientId, prompt }) })
    return { status: response.status, body: await response.json().catch(() => ({})) }
  }
  connect() {
    const socket = new WebSocket(`${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/ws?clientId=${this.clientId}`)
    let opened = false
    socket.addEventListener('open', () => { opened = true; document.body.dataset.socket = 'open' })
    socket.addEventListener('close', () => {
      document.body.dataset.socket = 'closed'
      if (opened) this.dispatchEvent(new CustomEvent('reconnecting'))
    })
  }
}

class ComfyApp {
  constructor() { this.extensions = [] }
  registerExtension(extension) {
    if (!extension?.name) throw new Error("Extensions must have a 'name' property.")
    if (this.extensions.some((e) => e.name === extension.name)) throw new Error(`Extension named '${extension.name}' already registered.`)
    this.extensions.push(extension)
  }
}

const api = new ComfyApi()
const app = new ComfyApp()
window.comfyAPI = { api: { api }, app: { app } }

const text = (value) => (typeof value === 'function' ? value() : value)

function renderMenus() {
  const commands = new Map(app.extensions.flatMap((e) => e.commands ?? []).map((c) => [c.id, c]))
  const bar = document.getElementById('comfy-menubar')
  for (const group of app.extensions.flatMap((e) => e.menuCommands ?? [])) {
    const list = document.createElement('ul')
    for (const id of group.commands) {
      const command = commands.get(id)
      if (!command) continue
      const button = document.createElement('button')
      button.type = 'button'
      button.dataset.command = id
      button.textContent = text(command.menubarLabel) ?? text(command.label) ?? id
      button.addEventListener('click', () => command.function())
      const item = document.createElement('li')
      item.append(button)
      list.append(item)
    }
    const menu = document.createElement('details')
    const summary = document.createElement('summary')
    summary.textContent = group.path.join(' › ')
    menu.append(summary, list)
    bar.append(menu)
  }
  const badges = document.getElementById('comfy-badges')
  for (const badge of app.extensions.flatMap((e) => e.topbarBadges ?? [])) {
    const span = document.createElement('span')
    span.className = 'comfy-badge'
    if (badge.tooltip) span.title = badge.tooltip
    if (badge.label) span.append(Object.assign(document.createElement('b'), { textContent: badge.label }))
    span.append(badge.text)
    badges.append(span)
  }
}

document.getElementById('queue-button').addEventListener('click', async () => {
  const status = document.getElementById('queue-status')
  status.textContent = ''
  const { status: code, body } = await api.queuePrompt({
    '1': { class_type: 'EmptyImage', inputs: { width: 8, height: 8, batch_size: 1, color: 0 } },
    '2': { class_type: 'SaveImage', inputs: { images: ['1', 0], filename_prefix: 'standin' } },
  })
  status.textContent = code === 200 ? `Queued: ${body.prompt_id}` : `Refused (${code}): ${body.code ?? body.error?.message ?? ''}`
  status.dataset.status = String(code)
})

// `?nows`: no WebSocket, so a test can exercise what the page's own requests do alone
if (!new URLSearchParams(location.search).has('nows')) api.connect()
const urls = await api.getExtensions()
await Promise.all(urls.map((url) => import(api.fileURL(url)).catch((error) => console.error('error loading extension', url, error))))
for (const extension of app.extensions) await extension.init?.(app)
for (const extension of app.extensions) await extension.setup?.(app)
renderMenus()
document.body.dataset.extensions = app.extensions.map((e) => e.name).join(' ')
