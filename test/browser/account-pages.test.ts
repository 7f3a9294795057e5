/**
 * The account pages by clicking only (issue 26), in chromium through the real stack (the
 * stand-in host with the gate in front): first run (register → signed in as the administrator,
 * what next), the top-bar USER badge's menu inside the ComfyUI page, and on the account page
 * the role's permissions in words, sessions named by device and address (revoke one, sign out everywhere else), API tokens,
 * MFA on with backup codes copied and downloaded, MFA off; all at 1280 px and 390 px. Then
 * every account-side page at 360 and 390 px with data in the tables: nothing scrolls sideways
 * (only code blocks may); axe (light and dark) and screenshots (test-results/screenshots/,
 * `account-*`); and the keyboard alone through each page. Data is seeded through the API
 * before the steps (sessions from several devices and addresses, tokens); no step calls it.
 * TOTP codes come from oathtool, an independent implementation.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import type { Browser, BrowserContext, Page } from 'playwright-core'
import { destroyStack, startStack, type Stack } from '../helpers/stack.js'
import { PASSWORD, bearer, json, login, register } from '../helpers/client.js'
import { launchChromium, shootAndCheck, signInOnPage, watchCsp } from './browser-kit.js'

const ROOT_PASSWORD = 'the-first-admin-password'
const AGENTS = [
  'Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1',
  'Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Mobile Safari/537.36',
  'Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0',
  'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36 Edg/126.0.0.0',
  'Mozilla/5.0 (iPad; CPU OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1',
  'curl/8.5.0',
]
const WIDTHS = [1280, 390] as const

function oathtool(secret: string, offsetSteps = 0): string {
  const at = Math.floor(Date.now() / 1000) + offsetSteps * 30
  return execFileSync('oathtool', ['--totp', '-b', '-N', `@${at}`, secret], { encoding: 'utf8' }).trim()
}

/** Sessions of `username` from several devices and addresses (through the trusted proxy's X-Forwarded-For). */
async function seedSessions(stack: Stack, username: string, password: string, count: number): Promise<string[]> {
  const tokens: string[] = []
  for (let i = 0; i < count; i++) {
    const res = await fetch(`${stack.url}/login`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json', 'User-Agent': AGENTS[i % AGENTS.length], 'X-Forwarded-For': `198.51.100.${10 + i}` },
      body: JSON.stringify({ username, password }),
    })
    assert.equal(res.status, 200)
    tokens.push((await json(res)).jwt_token)
  }
  return tokens
}

async function seedTokens(stack: Stack, jwt: string, count: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    const res = await fetch(`${stack.url}/authsvc/generate_token`, { method: 'POST', headers: { 'Content-Type': 'application/json', ...bearer(jwt) }, body: JSON.stringify({ label: `script number ${i + 1} on the render box`, expire_hours: 24 * (i + 1) }) })
    assert.equal(res.status, 200)
  }
}

async function status(stack: Stack, jwt: string): Promise<number> {
  return (await fetch(`${stack.url}/authsvc/api/me`, { headers: { ...bearer(jwt), Accept: 'application/json' } })).status
}

/** Every element (and the page) whose content is wider than its box at this width; code blocks may scroll. */
async function sidewaysScroll(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const out: string[] = []
    const root = document.documentElement
    if (root.scrollWidth > root.clientWidth) out.push(`the page: ${root.scrollWidth} > ${root.clientWidth}`)
    for (const el of document.body.querySelectorAll('*')) {
      if (el.closest('pre, code') || !(el instanceof HTMLElement)) continue
      // text only for screen readers (.sr-only, a stacked table's header) is clipped to nothing on purpose
      let clipped = false
      for (let x: Element | null = el; x && !clipped; x = x.parentElement) clipped = getComputedStyle(x).clip === 'rect(0px, 0px, 0px, 0px)'
      if (clipped) continue
      if (el.clientWidth === 0 || getComputedStyle(el).display === 'none') continue
      if (el.scrollWidth > el.clientWidth) out.push(`${el.tagName.toLowerCase()}${el.id ? `#${el.id}` : ''}${el.className ? `.${String(el.className).replace(/ /g, '.')}` : ''}: ${el.scrollWidth} > ${el.clientWidth}`)
    }
    return out
  })
}

async function assertNoSidewaysScroll(page: Page, name: string): Promise<void> {
  for (const width of [360, 390]) {
    await page.setViewportSize({ width, height: 800 })
    assert.deepEqual(await sidewaysScroll(page), [], `${name} at ${width} px`)
  }
  await page.setViewportSize({ width: 1280, height: 900 })
}

/** Tabs through the page (at most `limit` presses) and returns what got focus, in order. */
async function tabThrough(page: Page, limit = 200): Promise<string[]> {
  await page.evaluate(() => (document.activeElement as HTMLElement | null)?.blur())
  const seen: string[] = []
  for (let i = 0; i < limit; i++) {
    await page.keyboard.press('Tab')
    const here = await page.evaluate(() => {
      const a = document.activeElement as HTMLElement | null
      if (!a || a === document.body) return null
      return a.id ? `#${a.id}` : `${a.tagName.toLowerCase()}:${(a.getAttribute('aria-label') ?? a.textContent ?? '').trim().slice(0, 40)}`
    })
    if (here === null || (seen.length > 0 && here === seen[0])) break
    seen.push(here)
  }
  return seen
}

/** Every visible control in the page's main part and header, as tabThrough names them. */
async function visibleControls(page: Page): Promise<string[]> {
  return page.evaluate(() => [...document.querySelectorAll('a[href], button, input, select, textarea, summary, [tabindex]:not([tabindex="-1"])')]
    .filter((e) => (e as HTMLElement).offsetParent !== null && !(e as HTMLButtonElement).disabled)
    .map((a) => (a.id ? `#${a.id}` : `${a.tagName.toLowerCase()}:${(a.getAttribute('aria-label') ?? a.textContent ?? '').trim().slice(0, 40)}`)))
}

describe('account pages by clicking, at phone width too', { concurrency: false }, () => {
  let stack: Stack
  let browser: Browser
  const shots: string[] = []
  const csp: string[][] = []
  let rootJwt: string

  const newPage = async (width: number, context?: BrowserContext): Promise<Page> => {
    const ctx = context ?? await browser.newContext({ viewport: { width, height: width < 600 ? 844 : 900 }, permissions: ['clipboard-read', 'clipboard-write'] })
    const page = await ctx.newPage()
    csp.push(watchCsp(page))
    return page
  }

  const signIn = (page: Page, username: string, password: string, next: string) => signInOnPage(page, stack.url, username, password, next)

  before(async () => {
    ;[stack, browser] = await Promise.all([startStack({ config: { trusted_proxies: ['127.0.0.1/32'] } }), launchChromium()])
  })
  after(async () => {
    console.log(`screenshots (${shots.length}):\n${shots.map((f) => `  ${f}`).join('\n')}`)
    await browser?.close()
    if (stack) await destroyStack(stack)
  })

  it('first run at 390 px: registering signs in as the administrator with what next; the USER badge opens the menu; the account page leads back', async () => {
    const page = await newPage(390)
    await page.goto(`${stack.url}/`)
    await page.waitForURL(/\/login\?next=/)
    await page.getByRole('link', { name: 'create it' }).click()
    await page.waitForURL(`${stack.url}/register`)
    shots.push(...(await shootAndCheck(page, 'account-register')))
    await page.getByLabel('Username').fill('root')
    await page.getByLabel('Password').fill(ROOT_PASSWORD)
    await page.getByRole('button', { name: 'Create account' }).click()
    await page.getByRole('heading', { name: 'You are the administrator' }).waitFor()
    assert.match(await page.locator('#welcome').innerText(), /You are signed in as root, the first account of this ComfyUI and its administrator/)
    assert.deepEqual(await page.locator('.next-steps a').allInnerTexts(), ['Create accounts', 'Check the roles', 'Set up two-factor authentication'])
    await assertNoSidewaysScroll(page, 'the welcome')
    shots.push(...(await shootAndCheck(page, 'account-register-welcome')))

    await page.getByRole('link', { name: 'Go to ComfyUI' }).click()
    await page.waitForURL(`${stack.url}/`)
    await page.locator('body[data-extensions~="authsvc.account-menu"]').waitFor()
    const badge = page.getByRole('button', { name: /USER\s*root \(admin\)/ })
    await badge.click()
    const menu = page.getByRole('menu')
    await menu.waitFor()
    assert.deepEqual(await menu.getByRole('menuitem').allInnerTexts(), ['Account…', 'Admin panel…', 'Log out'])
    await menu.getByRole('menuitem', { name: 'Account…' }).click()
    await page.waitForURL(`${stack.url}/authsvc/account`)
    await page.getByRole('link', { name: '← Back to ComfyUI' }).click()
    await page.waitForURL(`${stack.url}/`)
    await page.context().close()
    rootJwt = (await login(stack, 'root', ROOT_PASSWORD)).jwt
  })

  for (const width of WIDTHS) {
    it(`at ${width} px: alice recognises her sessions, revokes one, makes and revokes a token, turns MFA on (codes copied and downloaded) and off, signs out everywhere else`, async () => {
      const username = `alice${width}`
      assert.equal((await register(stack, username, { bearer: rootJwt })).status, 201)
      const seeded = await seedSessions(stack, username, PASSWORD, 19)
      await seedTokens(stack, seeded[0], 3)
      const page = await newPage(width)
      await signIn(page, username, PASSWORD, '/authsvc/account')
      await page.locator('#session-rows tr[data-jti]').nth(19).waitFor()

      // the role's permissions in words (permission-words.js, as the admin's Roles section), never as raw keys
      const perms = page.locator('#me-permissions')
      assert.doesNotMatch(await perms.innerText(), /can_|_items|✓ [a-z]+_/)
      assert.deepEqual(await perms.locator('li').evaluateAll((li) => li.map((x) => `${(x as HTMLElement).dataset.perm}=${(x as HTMLElement).dataset.on}`)), [
        'can_access_api=true', 'can_run=true', 'can_upload=true', 'can_modify_workflows=true', 'can_have_api_tokens=true', 'can_view_all_comfyui_items=true', 'can_download_models=false',
      ])
      // as a screen reader reads it: the mark is hidden from it, the words say allowed or not
      assert.equal(await perms.locator('li[data-perm=can_run]').textContent(), '✓ Run prompts (allowed) Queue prompts, and interrupt or clear your own.')
      assert.equal(await perms.locator('li[data-perm=can_download_models]').textContent(), '✗ Download models (not allowed) Only an administrator adds models.')
      assert.equal(await perms.locator('li[data-perm=can_run] [aria-hidden=true]').textContent(), '✓')
      assert.equal(await page.getByRole('list', { name: 'What your role allows' }).count(), 1)

      // this device first, with its badge; the others by device and address
      const current = page.locator('#session-rows tr[data-current=true]')
      assert.match(await current.innerText(), /This device/)
      assert.equal(await page.locator('#session-rows tr[data-jti]').first().getAttribute('data-current'), 'true')
      const iphone = page.locator('#session-rows tr', { hasText: '198.51.100.10' })
      assert.match(await iphone.innerText(), /iPhone · Safari 17 · iOS 17\.0/)
      assert.match(await page.locator('#session-rows tr', { hasText: '198.51.100.12' }).innerText(), /Desktop · Firefox 128 · Linux/)
      assert.match(await page.locator('#session-rows tr', { hasText: '198.51.100.15' }).innerText(), /Unknown device/)

      await iphone.getByRole('button', { name: /^Sign out iPhone · Safari 17 · iOS 17\.0, signed in .* from 198\.51\.100\.10$/ }).click()
      await page.locator('#sessions-done', { hasText: 'iPhone · Safari 17 · iOS 17.0 is signed out.' }).waitFor()
      assert.equal(await page.locator('#session-rows tr[data-jti]').count(), 19)
      assert.equal(await status(stack, seeded[0]), 401, 'the revoked session ends')
      assert.equal(await status(stack, seeded[1]), 200, 'the others stay')

      // a token: made, copied, revoked
      await page.getByLabel('Label').fill('my phone app')
      await page.getByRole('button', { name: 'Create token' }).click()
      await page.locator('#token-created').waitFor()
      const raw = (await page.locator('#token-value').innerText()).trim()
      assert.equal(await status(stack, raw), 200)
      await page.getByRole('button', { name: 'Copy', exact: true }).click()
      await page.locator('#token-copied', { hasText: 'Copied.' }).waitFor()
      assert.equal(await page.evaluate(() => navigator.clipboard.readText()), raw)
      assert.equal(await page.locator('#token-rows tr[data-prefix]').count(), 4)
      await page.getByRole('button', { name: 'Revoke the token my phone app' }).click()
      await page.locator('#token-rows tr[data-prefix]').nth(2).waitFor()
      await page.waitForFunction(() => document.querySelectorAll('#token-rows tr[data-prefix]').length === 3)
      assert.equal(await status(stack, raw), 401)

      // MFA on: the backup codes copied and downloaded, then confirmed with a code
      await page.getByRole('button', { name: 'Set up two-factor authentication' }).click()
      await page.locator('#qr svg').waitFor()
      const secret = (await page.locator('#secret').innerText()).trim()
      const codes = (await page.locator('#backup-codes li').allInnerTexts()).map((c) => c.trim())
      assert.equal(codes.length, 10)
      await page.getByRole('button', { name: 'Copy the codes' }).click()
      await page.locator('#codes-status', { hasText: 'Copied.' }).waitFor()
      const copied = await page.evaluate(() => navigator.clipboard.readText())
      for (const code of codes) assert.ok(copied.includes(code), `the copy holds ${code}`)
      const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('link', { name: 'Download as a text file' }).click()])
      assert.match(download.suggestedFilename(), new RegExp(`^backup-codes-${username}-127\\.0\\.0\\.1\\.txt$`))
      const file = readFileSync((await download.path())!, 'utf8')
      assert.match(file, new RegExp(`^Backup codes for ${username} at 127\\.0\\.0\\.1:\\d+\\n`))
      assert.deepEqual(file.split('\n').filter((l) => /^\s?\d+\. /.test(l)).map((l) => l.replace(/^\s?\d+\. /, '')), codes)
      if (width === 1280) shots.push(...(await shootAndCheck(page, 'account-page-mfa-setup')))
      await page.getByLabel('Code from the app').fill(oathtool(secret))
      await page.getByRole('button', { name: 'Turn on' }).click()
      await page.locator('#mfa-done', { hasText: 'Two-factor authentication is on.' }).waitFor()

      await page.getByLabel('Current code (or a backup code)').first().fill(codes[3])
      await page.getByRole('button', { name: 'Turn off two-factor authentication' }).click()
      await page.locator('#mfa-done', { hasText: 'Two-factor authentication is off.' }).waitFor()
      // turning MFA off signed the other sessions out; new ones come back for the last step
      const again = await seedSessions(stack, username, PASSWORD, 4)

      await page.reload()
      await page.locator('#session-rows tr[data-jti]').nth(4).waitFor()
      await page.getByRole('button', { name: 'Sign out everywhere else' }).click()
      await page.locator('#sessions-done', { hasText: '4 other sessions were signed out.' }).waitFor()
      assert.equal(await page.locator('#session-rows tr[data-jti]').count(), 1)
      assert.equal(await page.getByRole('button', { name: 'Sign out everywhere else' }).isVisible(), false, 'nothing else to sign out')
      for (const jwt of again) assert.equal(await status(stack, jwt), 401)
      await page.getByRole('button', { name: 'Sign out this device' }).click()
      await page.waitForURL(`${stack.url}/login`)
      await page.context().close()
    })
  }

  it('a role that requires MFA: the setup page says which, offers sign-out, and the codes download; finishing it signs in', async () => {
    const groups = await json(await fetch(`${stack.url}/authsvc/api/groups`, { headers: { ...bearer(rootJwt), Accept: 'application/json' } }))
    groups.groups.secure = { ...groups.groups.user, mfa_required: true }
    assert.equal((await fetch(`${stack.url}/authsvc/api/groups`, { method: 'PUT', headers: { ...bearer(rootJwt), 'Content-Type': 'application/json' }, body: JSON.stringify(groups) })).status, 200)
    for (const name of ['carol', 'dave']) assert.equal((await register(stack, name, { bearer: rootJwt, role: 'secure' })).status, 201)

    for (const [name, width] of [['carol', 390], ['dave', 1280]] as const) {
      const page = await newPage(width)
      await page.goto(`${stack.url}/authsvc/account`)
      await page.waitForURL(/\/login\?next=/)
      await page.getByLabel('Username').fill(name)
      await page.getByLabel('Password').fill(PASSWORD)
      await page.getByRole('button', { name: 'Sign in' }).click()
      await page.waitForURL(`${stack.url}/mfa`)
      await page.locator('#setup-why').waitFor()
      assert.equal(await page.locator('#setup-why').innerText(), `Your role, secure, requires two-factor authentication. Set it up to finish signing in as ${name}.`)
      await page.locator('#backup-codes li').nth(9).waitFor()
      const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('link', { name: 'Download as a text file' }).click()])
      assert.match(readFileSync((await download.path())!, 'utf8'), new RegExp(`^Backup codes for ${name} at `))
      if (name === 'carol') {
        await assertNoSidewaysScroll(page, 'the forced MFA setup')
        shots.push(...(await shootAndCheck(page, 'account-mfa-setup-forced')))
        await page.getByRole('button', { name: 'Sign out' }).click()
        await page.waitForURL(`${stack.url}/login`)
      } else {
        const secret = (await page.locator('#secret').innerText()).trim()
        await page.getByLabel('Code from the app').fill(oathtool(secret))
        await page.getByRole('button', { name: 'Turn on' }).click()
        await page.waitForURL(`${stack.url}/authsvc/account`)
        await page.locator('#me-username', { hasText: 'dave' }).waitFor()
      }
      await page.context().close()
    }
  })

  it('every account-side page at 360 and 390 px with data: nothing scrolls sideways; screenshots and axe light and dark', async () => {
    assert.equal((await register(stack, 'erin', { bearer: rootJwt })).status, 201)
    const erin = await seedSessions(stack, 'erin', PASSWORD, 19)
    await seedTokens(stack, erin[0], 5)
    const page = await newPage(390)
    await signIn(page, 'erin', PASSWORD, '/authsvc/account')
    await page.locator('#session-rows tr[data-jti]').nth(19).waitFor()
    await page.locator('#token-rows tr[data-prefix]').nth(4).waitFor()
    await page.locator('#activity-rows li').first().waitFor()
    await assertNoSidewaysScroll(page, 'the account page')
    shots.push(...(await shootAndCheck(page, 'account-page')))

    const anon = await newPage(390)
    const publicPages: Array<[string, string, string]> = [
      ['/login', '#login-form', 'account-login'],
      ['/authsvc/generate_token', '#token-form', 'account-token'],
      ['/mfa', '#nothing', 'account-mfa-nothing'],
    ]
    for (const [path, ready, name] of publicPages) {
      await anon.goto(`${stack.url}${path}`)
      await anon.locator(ready).waitFor()
      await assertNoSidewaysScroll(anon, path)
      shots.push(...(await shootAndCheck(anon, name)))
    }
    // the second-factor step of a sign-in
    const loginAnswer = await json(await fetch(`${stack.url}/login`, { method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json' }, body: JSON.stringify({ username: 'dave', password: PASSWORD }) }))
    assert.equal(loginAnswer.mfa_required, true)
    await anon.goto('about:blank') // from /mfa, a new fragment alone would not load the page again
    await anon.goto(`${stack.url}/mfa#verify:${encodeURIComponent(loginAnswer.mfa_temp_token)}`)
    await anon.locator('#verify-form').waitFor()
    await assertNoSidewaysScroll(anon, 'the MFA verify step')
    shots.push(...(await shootAndCheck(anon, 'account-mfa-verify')))
    await anon.context().close()
    await page.context().close()

    // the API page (admins): its schemas are code blocks, which alone may scroll
    const api = await newPage(390)
    await signIn(api, 'root', ROOT_PASSWORD, '/authsvc/admin/api')
    await api.locator('body[data-ready=true]').waitFor()
    await assertNoSidewaysScroll(api, 'the API page')
    shots.push(...(await shootAndCheck(api, 'account-api')))
    await api.context().close()
  })

  it('the keyboard alone: the account page\'s every control is reached by Tab and a session is signed out with Enter; the badge menu opens and closes by keys', async () => {
    assert.equal((await register(stack, 'frank', { bearer: rootJwt })).status, 201)
    const frank = await seedSessions(stack, 'frank', PASSWORD, 2)
    const page = await newPage(1280)
    await signIn(page, 'frank', PASSWORD, '/authsvc/account')
    await page.locator('#session-rows tr[data-jti]').nth(2).waitFor()
    const reached = await tabThrough(page)
    const controls = await visibleControls(page)
    assert.deepEqual(controls.filter((c) => !reached.includes(c)), [], 'every visible control is reached by Tab')

    assert.equal(await page.locator('#session-rows tr[data-jti]').count(), 3)
    await page.evaluate(() => (document.activeElement as HTMLElement | null)?.blur())
    for (let i = 0; i < 80; i++) {
      await page.keyboard.press('Tab')
      if ((await page.evaluate(() => document.activeElement?.getAttribute('aria-label') ?? '')).startsWith('Sign out iPhone')) break
    }
    await page.keyboard.press('Enter')
    await page.locator('#sessions-done', { hasText: 'iPhone · Safari 17 · iOS 17.0 is signed out.' }).waitFor()
    assert.equal(await status(stack, frank[0]), 401)
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'revoke-others', 'focus stays in the list\'s actions')
    await page.keyboard.press('Enter')
    await page.locator('#sessions-done', { hasText: '1 other session was signed out.' }).waitFor()
    assert.equal(await status(stack, frank[1]), 401)

    // the ComfyUI page: Tab to the badge, Enter opens the menu on its first entry, Escape closes it
    await page.goto(`${stack.url}/`)
    await page.locator('[data-authsvc-badge]').waitFor()
    await page.evaluate(() => (document.activeElement as HTMLElement | null)?.blur())
    for (let i = 0; i < 30; i++) {
      await page.keyboard.press('Tab')
      if (await page.evaluate(() => document.activeElement?.hasAttribute('data-authsvc-badge'))) break
    }
    assert.equal(await page.evaluate(() => document.activeElement?.hasAttribute('data-authsvc-badge')), true, 'the badge is reached by Tab')
    await page.keyboard.press('Enter')
    await page.getByRole('menu').waitFor()
    assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'Account…')
    await page.keyboard.press('ArrowDown')
    assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'Log out', 'frank is no admin: no admin entry')
    await page.keyboard.press('Escape')
    await page.getByRole('menu').waitFor({ state: 'hidden' })
    assert.equal(await page.evaluate(() => document.activeElement?.hasAttribute('data-authsvc-badge')), true, 'focus back on the badge')
    await page.keyboard.press('Enter')
    await page.keyboard.press('Enter')
    await page.waitForURL(`${stack.url}/authsvc/account`)

    // the register page (an admin adding someone) and the token page by keyboard
    const admin = await newPage(1280)
    await signIn(admin, 'root', ROOT_PASSWORD, '/register')
    const regControls = await visibleControls(admin)
    const regReached = await tabThrough(admin)
    assert.deepEqual(regControls.filter((c) => !regReached.includes(c)), [], 'the register page')
    await admin.locator('#username').focus()
    await admin.keyboard.type('gina')
    await admin.keyboard.press('Tab')
    await admin.keyboard.type(PASSWORD)
    await admin.keyboard.press('Enter')
    await admin.locator('#done-added', { hasText: 'Account gina created.' }).waitFor()
    await admin.context().close()
    await page.context().close()
  })

  it('no page reported a Content-Security-Policy violation', () => {
    assert.deepEqual(csp.flat(), [])
  })
})
