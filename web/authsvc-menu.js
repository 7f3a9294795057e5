// authsvc's ComfyUI frontend extension (ComfyUI serves this folder, the package's WEB_DIRECTORY,
// at /extensions/<folder>/ and the frontend imports every .js file in it).
//
// It shows who is signed in (name and role) in ComfyUI's menu and top bar, with links to the
// account page, the admin panel (admins only) and log out; and when a request of the page
// answers 401 because the session ended (revoked, expired, idle), the page goes to the login
// page with `next` set instead of leaving a broken canvas behind.
//
// Extension API used (ComfyUI frontend, types in @comfyorg/comfyui-frontend-types):
// `app.registerExtension({ name, commands, menuCommands, topbarBadges, setup })` and `api`
// (an EventTarget that fires `reconnecting` when its WebSocket drops).

const SESSION_ENDED = new Set(['AUTH_REQUIRED', 'TOKEN_EXPIRED', 'TOKEN_REVOKED', 'TOKEN_INVALID'])
const CHECK_EVERY_MS = 60_000
const pageFetch = window.fetch.bind(window)
let leaving = false

function toLogin() {
  if (leaving) return
  leaving = true
  location.assign(`/login?next=${encodeURIComponent(location.pathname + location.search + location.hash)}`)
}

const sameOrigin = (input) => {
  try {
    const url = new URL(input instanceof Request ? input.url : String(input), location.href)
    return url.origin === location.origin
  } catch {
    return false
  }
}

/** 401 with a code that means the session is gone (not, say, a wrong password typed into a form). */
async function sessionEnded(response) {
  if (response.status !== 401) return false
  const body = await response.clone().json().catch(() => ({}))
  return SESSION_ENDED.has(body.code)
}

// Every request the page makes through fetch (ComfyUI's api.fetchApi uses it) is watched.
window.fetch = async (input, init) => {
  const response = await pageFetch(input, init)
  if (sameOrigin(input) && (await sessionEnded(response))) toLogin()
  return response
}

/** Who is signed in; null when the session has ended (the page is then on its way to the login page). */
async function whoAmI() {
  const response = await pageFetch('/authsvc/api/me', { credentials: 'same-origin', headers: { Accept: 'application/json' } })
  if (await sessionEnded(response)) {
    toLogin()
    return null
  }
  return response.ok ? response.json() : null
}

async function logOut() {
  // Logging out closes the page's WebSocket and makes its requests answer 401; the page is
  // leaving for the plain login page, not for one that would sign back in to this canvas.
  leaving = true
  await pageFetch('/logout', { method: 'POST', credentials: 'same-origin', headers: { Accept: 'application/json' } })
  location.assign('/login')
}

// Frontend versions have exposed the app as `comfyAPI.app.app` (the usual shape), as
// `comfyAPI.app` itself, or only as the legacy `window.app`; the api likewise.
const isApp = (x) => typeof x?.registerExtension === 'function'
const comfyApp = [window.comfyAPI?.app?.app, window.comfyAPI?.app, window.app].find(isApp)
const comfyApi = [window.comfyAPI?.api?.api, window.comfyAPI?.api, comfyApp?.api].find((x) => typeof x?.addEventListener === 'function')

/**
 * The top bar's USER badge opens the same entries as a small menu. The frontend's badges take no
 * click handler (TopbarBadge is text, label, variant, tooltip), so the badge is found in the page
 * once rendered, by its exact text beside the USER label, and made a button.
 */
function findBadge(label) {
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT)
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.textContent.trim() !== label) continue
    // the badge is the nearest ancestor that holds the USER label too, and little else
    for (let box = node.parentElement; box && box !== document.body; box = box.parentElement) {
      const text = box.textContent.replace(/\s+/g, '')
      if (text.length > label.replace(/\s+/g, '').length + 'USER'.length) break
      if (text.includes('USER')) return box
    }
  }
  return null
}

function badgeMenu(badge, commands) {
  const menu = document.createElement('div')
  menu.id = 'authsvc-badge-menu'
  menu.setAttribute('role', 'menu')
  menu.setAttribute('aria-label', badge.textContent.trim())
  menu.hidden = true
  Object.assign(menu.style, {
    position: 'fixed', zIndex: '10000', minWidth: '12rem', padding: '0.3rem', display: 'none',
    background: 'var(--comfy-menu-bg, #202020)', color: 'var(--fg-color, #ffffff)',
    border: '1px solid var(--border-color, #4e4e4e)', borderRadius: '8px', boxShadow: '0 4px 16px #0008',
  })
  const items = commands.map((command) => {
    const item = document.createElement('button')
    item.type = 'button'
    item.setAttribute('role', 'menuitem')
    item.dataset.command = command.id
    item.textContent = command.menubarLabel ?? command.label
    Object.assign(item.style, { display: 'block', width: '100%', padding: '0.45rem 0.7rem', textAlign: 'left', font: 'inherit', color: 'inherit', background: 'transparent', border: '0', borderRadius: '6px', cursor: 'pointer' })
    item.addEventListener('click', () => { close(); command.function() })
    return item
  })
  menu.append(...items)
  document.body.append(menu)

  const open = () => {
    const box = badge.getBoundingClientRect()
    menu.hidden = false
    menu.style.display = 'block'
    menu.style.top = `${Math.round(box.bottom + 4)}px`
    menu.style.left = `${Math.max(4, Math.round(Math.min(box.left, innerWidth - menu.offsetWidth - 4)))}px`
    badge.setAttribute('aria-expanded', 'true')
    items[0]?.focus()
  }
  function close() {
    menu.hidden = true
    menu.style.display = 'none'
    badge.setAttribute('aria-expanded', 'false')
  }
  const toggle = () => (menu.hidden ? open() : close())

  badge.setAttribute('role', 'button')
  badge.setAttribute('tabindex', '0')
  badge.setAttribute('aria-haspopup', 'menu')
  badge.setAttribute('aria-expanded', 'false')
  badge.setAttribute('aria-controls', menu.id)
  badge.dataset.authsvcBadge = ''
  badge.style.cursor = 'pointer'
  badge.addEventListener('click', (event) => { event.stopPropagation(); toggle() })
  badge.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' || event.key === ' ' || event.key === 'ArrowDown') { event.preventDefault(); open() }
  })
  menu.addEventListener('keydown', (event) => {
    const at = items.indexOf(document.activeElement)
    if (event.key === 'Escape') { event.preventDefault(); close(); badge.focus() }
    else if (event.key === 'ArrowDown') { event.preventDefault(); items[(at + 1) % items.length].focus() }
    else if (event.key === 'ArrowUp') { event.preventDefault(); items[(at - 1 + items.length) % items.length].focus() }
    else if (event.key === 'Tab') close()
  })
  document.addEventListener('click', (event) => { if (!menu.hidden && !menu.contains(event.target)) close() })
}

/** Waits for the frontend to render the badge (it does so after the extensions' setup), then wires it once. */
function wireBadge(label, commands) {
  const wire = () => {
    const badge = findBadge(label)
    if (!badge || badge.dataset.authsvcBadge !== undefined) return false
    badgeMenu(badge, commands)
    return true
  }
  if (wire()) return
  const watcher = new MutationObserver(() => { if (wire()) watcher.disconnect() })
  watcher.observe(document.body, { childList: true, subtree: true, characterData: true })
}

const me = await whoAmI()
if (me && comfyApp) {
  const label = `${me.username} (${me.role})`
  const commands = [
    // a guest session has no account of its own
    ...(me.user_id ? [{ id: 'authsvc.account', label: 'Account', menubarLabel: 'Account…', icon: 'pi pi-user', tooltip: 'Sessions, API tokens, two-factor authentication, password', function: () => location.assign('/authsvc/account') }] : []),
    ...(me.is_admin ? [{ id: 'authsvc.admin', label: 'Admin panel', menubarLabel: 'Admin panel…', icon: 'pi pi-users', tooltip: 'Users, roles, IP lists, settings', function: () => location.assign('/authsvc/admin') }] : []),
    { id: 'authsvc.logout', label: 'Log out', icon: 'pi pi-sign-out', function: logOut },
  ]
  comfyApp.registerExtension({
    name: 'authsvc.account-menu',
    commands,
    menuCommands: [{ path: [label], commands: commands.map((c) => c.id) }],
    topbarBadges: [{ text: label, label: 'USER', variant: 'info', tooltip: `Signed in as ${me.username}, role ${me.role}` }],
    setup() {
      // A dropped WebSocket is often the first sign of a revoked session; so is coming back to the tab.
      comfyApi?.addEventListener('reconnecting', () => { void whoAmI() })
      document.addEventListener('visibilitychange', () => { if (document.visibilityState === 'visible') void whoAmI() })
      setInterval(() => { void whoAmI() }, CHECK_EVERY_MS)
      wireBadge(label, commands)
    },
  })
}
