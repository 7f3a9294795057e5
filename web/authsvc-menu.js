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
    },
  })
}
