/**
 * Every page, as people see it: screenshots at 1280 px and 390 px in light and dark
 * (test-results/screenshots/), axe-core with no serious or critical violation in any of those
 * views, the page's Content-Security-Policy (no inline script, nothing from another origin)
 * with no violation reported, every asset served by the sidecar, and the keyboard alone
 * reaching the sign-in form.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import type { Browser, BrowserContext, Page, Response as PwResponse } from 'playwright-core'
import { destroyStack, startStack, type Stack } from '../helpers/stack.js'
import { PASSWORD, json, login, register } from '../helpers/client.js'
import { adminContext, launchChromium, shootAndCheck, watchCsp } from './browser-kit.js'

/** The answer carries the pages' CSP, and the document has no inline script or style. */
async function assertCsp(page: Page, answer: PwResponse | null): Promise<void> {
  assert.ok(answer, 'a response')
  const csp = (await answer.allHeaders())['content-security-policy'] ?? ''
  assert.match(csp, /script-src 'self'(;|$)/, csp)
  assert.match(csp, /style-src 'self'(;|$)/, csp)
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|https?:/, csp)
  const inline = await page.evaluate(() => ({
    scripts: [...document.scripts].filter((s) => !s.src).length,
    styles: document.querySelectorAll('style, [style]').length,
    foreign: [...document.querySelectorAll('script[src], link[href]')].map((e) => (e as HTMLScriptElement).src || (e as HTMLLinkElement).href).filter((u) => new URL(u).origin !== location.origin),
  }))
  assert.deepEqual(inline, { scripts: 0, styles: 0, foreign: [] }, 'no inline script or style, no foreign asset')
}

describe('every page: screenshots, axe, CSP', { concurrency: false }, () => {
  let stack: Stack
  let browser: Browser
  const shots: string[] = []
  const violations: string[] = []
  let anon: BrowserContext
  let bob: BrowserContext
  let root: BrowserContext

  const open = async (context: BrowserContext, path: string, ready: string): Promise<Page> => {
    const page = await context.newPage()
    const seen = watchCsp(page)
    page.on('close', () => violations.push(...seen))
    const answer = await page.goto(`${stack.url}${path}`)
    await page.locator(ready).first().waitFor()
    if (new URL(page.url()).pathname !== '/') await assertCsp(page, answer)
    return page
  }

  before(async () => {
    ;[stack, browser] = await Promise.all([startStack(), launchChromium()])
    anon = await browser.newContext({ permissions: ['clipboard-read', 'clipboard-write'] })
  })
  after(async () => {
    console.log(`screenshots (${shots.length}):\n${shots.map((f) => `  ${f}`).join('\n')}`)
    await browser?.close()
    if (stack) await destroyStack(stack)
  })

  it('sign-in family: login (first run), register, keyboard only', async () => {
    const page = await open(anon, '/login', '#login-form')
    assert.ok(await page.locator('#register-hint').isVisible())
    shots.push(...(await shootAndCheck(page, 'login')))
    // keyboard alone: the skip link, then the fields in order, Enter submits
    await page.keyboard.press('Tab')
    assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'Skip to content')
    await page.keyboard.press('Enter')
    await page.keyboard.press('Tab')
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'username')
    await page.keyboard.type('nobody-here')
    await page.keyboard.press('Tab')
    await page.keyboard.type('not-the-password')
    await page.keyboard.press('Enter')
    await page.locator('#password-error').waitFor()
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'password', 'focus moves to the control in error')
    shots.push(...(await shootAndCheck(page, 'login-error')))
    await page.close()

    const reg = await open(anon, '/register', '#register-form')
    await reg.getByLabel('Username').fill('x')
    await reg.getByLabel('Password').fill('short')
    await reg.getByRole('button', { name: 'Create account' }).click()
    await reg.locator('#username-error').waitFor()
    assert.match(await reg.locator('#username-error').innerText(), /username/i, 'VALIDATION_FAILED about the username is shown next to it')
    shots.push(...(await shootAndCheck(reg, 'register')))
    await reg.close()
  })

  it('API token page, loading page, MFA page (public)', async () => {
    assert.equal((await register(stack, 'root')).status, 201)
    const rootJwt = (await login(stack, 'root')).jwt
    assert.equal((await register(stack, 'bob', { bearer: rootJwt })).status, 201)

    const token = await open(anon, '/authsvc/generate_token', '#token-form')
    shots.push(...(await shootAndCheck(token, 'generate-token')))
    await token.getByLabel('Username').fill('bob')
    await token.getByLabel('Password').fill(PASSWORD)
    await token.getByLabel('Label').fill('phone')
    await token.getByRole('button', { name: 'Create token' }).click()
    await token.locator('#created').waitFor()
    const raw = (await token.locator('#token-value').innerText()).trim()
    assert.match(raw, /^ast_/)
    const me = await fetch(`${stack.url}/authsvc/api/me`, { headers: { Authorization: `Bearer ${raw}`, Accept: 'application/json' } })
    assert.equal((await json(me)).username, 'bob', 'the token from the page works')
    await token.getByRole('button', { name: 'Copy' }).click()
    await token.locator('#copied', { hasText: 'Copied.' }).waitFor()
    assert.equal(await token.evaluate(() => navigator.clipboard.readText()), raw, 'the copy button puts the token on the clipboard')
    shots.push(...(await shootAndCheck(token, 'generate-token-created')))
    await token.close()

    // /loading goes on at once when the service answers; held here by a failing /api/me to be seen
    const loading = await anon.newPage()
    await loading.route('**/authsvc/api/me', (route) => route.abort())
    const answer = await loading.goto(`${stack.url}/loading?next=%2F`)
    await loading.locator('#status', { hasText: 'could not be reached' }).waitFor()
    await assertCsp(loading, answer)
    shots.push(...(await shootAndCheck(loading, 'loading')))
    await loading.close()
    const onward = await anon.newPage()
    await onward.goto(`${stack.url}/loading?next=%2Fsomewhere`)
    await onward.waitForURL(`${stack.url}/login?next=%2Fsomewhere`)
    await onward.close()

    // pages that need a session send an anonymous browser to the login page, and back after it
    const probe = await anon.newPage()
    for (const path of ['/authsvc/account', '/authsvc/admin', '/api/authsvc/admin']) {
      await probe.goto(`${stack.url}${path}`)
      await probe.waitForURL(`${stack.url}/login?next=${encodeURIComponent(path)}`)
    }
    const twin = await probe.goto(`${stack.url}/api/authsvc/generate_token`)
    assert.equal(twin?.status(), 200, 'the /api/authsvc twin of a page is the same page')
    await probe.locator('#token-form').waitFor()
    await probe.close()

    const mfa = await open(anon, '/mfa', '#nothing:not([hidden])')
    shots.push(...(await shootAndCheck(mfa, 'mfa-signed-out')))
    await mfa.close()
    const verify = await open(anon, '/mfa#verify:mfa_placeholder', '#verify:not([hidden])')
    shots.push(...(await shootAndCheck(verify, 'mfa-verify')))
    await verify.close()
  })

  it('bob: the ComfyUI page with the menu, the account page, /mfa leads to the account page, the admin panel is refused', async () => {
    bob = await browser.newContext()
    const signIn = await bob.newPage()
    await signIn.goto(`${stack.url}/login`)
    await signIn.getByLabel('Username').fill('bob')
    await signIn.getByLabel('Password').fill(PASSWORD)
    const menuScript = signIn.waitForResponse((r) => new URL(r.url()).pathname === '/extensions/authsvc/authsvc-menu.js')
    await signIn.getByRole('button', { name: 'Sign in' }).click()
    await signIn.waitForURL(`${stack.url}/`)
    assert.equal((await menuScript).status(), 200, 'the menu script is loaded through the gate from /extensions/authsvc/')
    await signIn.locator('body[data-extensions~="authsvc.account-menu"]').waitFor()
    await signIn.locator('#comfy-menubar summary').click()
    shots.push(...(await shootAndCheck(signIn, 'comfyui-menu')))
    await signIn.close()
    const anonymousScript = await fetch(`${stack.url}/extensions/authsvc/authsvc-menu.js`)
    assert.equal(anonymousScript.status, 401, 'the menu script needs a principal like the rest of the frontend')

    const account = await open(bob, '/authsvc/account', '#session-rows tr[data-jti]')
    assert.equal(await account.locator('[data-current]').count(), 1, 'the current session is marked')
    shots.push(...(await shootAndCheck(account, 'account')))
    await account.getByRole('button', { name: 'Set up two-factor authentication' }).click()
    await account.locator('#qr svg').waitFor()
    await account.getByLabel('Code from the app').fill('000000')
    await account.getByRole('button', { name: 'Turn on' }).click()
    await account.locator('#mfa-confirm-code-error').waitFor()
    shots.push(...(await shootAndCheck(account, 'account-mfa-setup')))
    await account.getByLabel('Current password').fill('not-my-password')
    await account.getByLabel('New password', { exact: true }).fill('another-long-password')
    await account.getByLabel('New password again').fill('another-long-password')
    await account.getByRole('button', { name: 'Change password' }).click()
    await account.locator('#current_password-error', { hasText: 'Invalid username or password' }).waitFor()
    await account.close()

    const mfa = await bob.newPage()
    await mfa.goto(`${stack.url}/mfa`)
    await mfa.waitForURL(`${stack.url}/authsvc/account#mfa`)
    await mfa.close()

    const refused = await bob.newPage()
    const answer = await refused.goto(`${stack.url}/authsvc/admin`)
    assert.equal(answer?.status(), 403)
    await refused.locator('#refusal').waitFor()
    shots.push(...(await shootAndCheck(refused, 'admin-refused')))
    await refused.close()
  })

  it('the MFA setup view a role that requires MFA leads to, and /register refused to a non-admin', async () => {
    const rootJwt = (await login(stack, 'root')).jwt
    const auth = { Authorization: `Bearer ${rootJwt}`, Accept: 'application/json', 'Content-Type': 'application/json' }
    const groups = (await json(await fetch(`${stack.url}/authsvc/api/groups`, { headers: auth }))).groups
    groups.secure = { can_access_api: true, mfa_required: true }
    assert.equal((await fetch(`${stack.url}/authsvc/api/groups`, { method: 'PUT', headers: auth, body: JSON.stringify({ groups }) })).status, 200)
    assert.equal((await register(stack, 'carol', { bearer: rootJwt, role: 'secure' })).status, 201)
    const context = await browser.newContext()
    const page = await context.newPage()
    const seen = watchCsp(page)
    await page.goto(`${stack.url}/login`)
    await page.getByLabel('Username').fill('carol')
    await page.getByLabel('Password').fill(PASSWORD)
    await page.getByRole('button', { name: 'Sign in' }).click()
    await page.waitForURL(`${stack.url}/mfa`)
    await page.locator('#qr svg').waitFor()
    shots.push(...(await shootAndCheck(page, 'mfa-setup')))
    violations.push(...seen)
    await context.close()

    const refused = await open(bob, '/register', '#refusal')
    shots.push(...(await shootAndCheck(refused, 'register-refused')))
    await refused.close()
  })

  it('root: the admin panel with a user\'s sessions and tokens open, the delete confirmation', async () => {
    root = await adminContext(browser, stack.url, 'root', PASSWORD)
    const admin = await open(root, '/authsvc/admin', 'body[data-ready=true]')
    await admin.getByRole('link', { name: 'Open bob' }).click()
    await admin.locator('#detail-tokens tr[data-prefix]').waitFor()
    shots.push(...(await shootAndCheck(admin, 'admin')))
    await admin.getByRole('link', { name: '← All users' }).click()
    await admin.getByRole('button', { name: 'Delete bob' }).click()
    await admin.locator('#confirm-delete[open]').waitFor()
    assert.equal(await admin.evaluate(() => document.activeElement?.id), 'confirm-cancel', 'the safe choice has the focus')
    shots.push(...(await shootAndCheck(admin, 'admin-confirm-delete')))
    await admin.keyboard.press('Escape')
    await admin.locator('#confirm-delete').waitFor({ state: 'hidden' })
    assert.equal(await admin.locator('tr[data-username=bob]').count(), 1, 'Escape deletes nothing')
    await admin.close()
    assert.deepEqual(violations, [], 'no Content-Security-Policy violation')
  })
})
