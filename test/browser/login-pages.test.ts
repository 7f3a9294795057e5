/**
 * The plain pages in a real browser (Debian chromium via playwright-core):
 * register the first admin, log in, land on the ComfyUI page, log out.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import type { Browser } from 'playwright-core'
import { destroyStack, startStack, type Stack } from '../helpers/stack.js'
import { launchChromium } from './browser-kit.js'

describe('login pages in chromium', () => {
  let stack: Stack
  let browser: Browser
  before(async () => {
    stack = await startStack()
    browser = await launchChromium()
  })
  after(async () => {
    await browser?.close()
    await destroyStack(stack)
  })

  it('register the first admin, log in, land on ComfyUI, log out', async () => {
    let page = await browser.newPage()
    await page.goto(`${stack.url}/`)
    assert.match(page.url(), /\/login\?next=%2F$/, 'an anonymous visit is sent to the login page')
    assert.ok(await page.locator('#register-hint').isVisible(), 'first run points at /register')

    await page.goto(`${stack.url}/register`)
    await page.fill('#username', 'admin')
    await page.fill('#password', 'a-long-admin-password')
    await page.click('#submit')
    // the first account is signed in at once and told it is the administrator (issue 26);
    // this test signs in by hand, so it goes on in a browser of its own
    await page.locator('#welcome').waitFor({ state: 'visible' })
    await page.close()
    page = await browser.newPage()

    await page.goto(`${stack.url}/`)
    await page.fill('#username', 'admin')
    await page.fill('#password', 'wrong-password-here')
    await page.click('#submit')
    // shown next to the password field (INVALID_CREDENTIALS), which is marked invalid
    await page.locator('#password-error').waitFor({ state: 'visible' })
    assert.match(await page.locator('#password-error').innerText(), /Invalid username or password/)
    assert.equal(await page.locator('#password').getAttribute('aria-invalid'), 'true')

    await page.fill('#password', 'a-long-admin-password')
    await page.click('#submit')
    await page.waitForURL(`${stack.url}/`)
    // the stand-in's frontend (test/host-standin/web/index.html), not the login page ("Sign in · authsvc")
    assert.equal(await page.title(), 'ComfyUI', 'the ComfyUI page is served')
    assert.equal(await page.locator('#app').innerText(), 'ComfyUI stand-in frontend')
    assert.equal(await page.locator('#username').count(), 0, 'no login form on the ComfyUI page')
    const cookies = await page.context().cookies()
    const session = cookies.find((c) => c.name === 'jwt_token')
    assert.ok(session?.httpOnly, 'the session cookie is HttpOnly')
    assert.equal(session?.sameSite, 'Lax')
    const hidden = await page.evaluate(() => document.cookie)
    assert.doesNotMatch(hidden, /jwt_token/, 'script cannot read the session')

    // Logging out closes this page's WebSocket (4401) and the menu then sends the page to the login
    // page by itself, which can abort a navigation to /logout still under way: leave the page
    // with the socket first (the stand-in frontend opens none with ?nows), then log out.
    await page.goto(`${stack.url}/?nows`)
    await page.goto(`${stack.url}/logout`)
    await page.waitForURL(/\/login/)
    assert.equal((await page.context().cookies()).find((c) => c.name === 'jwt_token'), undefined, 'the session cookie is cleared')
    const replay = await fetch(`${stack.url}/authsvc/api/me`, { headers: { Cookie: `jwt_token=${session!.value}`, Accept: 'application/json' } })
    assert.equal(replay.status, 401, 'the session itself is revoked, not only its cookie dropped')
    assert.equal((await replay.json()).code, 'TOKEN_REVOKED')
    const revisit = await page.goto(`${stack.url}/`)
    assert.equal(page.url(), `${stack.url}/login?next=%2F`, 'a navigation to / after logout is sent to the login page')
    assert.equal(revisit?.request().redirectedFrom()?.url(), `${stack.url}/`, 'by a redirect from /')
    assert.equal(await page.title(), 'Sign in · authsvc')
    assert.ok(await page.locator('#username').isVisible(), 'the login form is shown')
    assert.equal(await page.locator('#app').count(), 0, 'not the ComfyUI page')
    await page.close()
  })
})
