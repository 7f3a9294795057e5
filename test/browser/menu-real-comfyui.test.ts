/**
 * The ComfyUI menu on the REAL ComfyUI 0.3.64 (test/helpers/real-host.ts), in chromium: the
 * package's WEB_DIRECTORY is served by ComfyUI itself at /extensions/authsvc/, through the
 * gate; the page is the repo's extension harness (the stand-in frontend, given to ComfyUI with
 * --front-end-root, since the real frontend package is not installable here), which loads
 * extensions as the frontend does (`GET /api/extensions`, `import()` each). The menu shows
 * the user and role with the admin link, the top bar's USER badge opens the same entries, and
 * log out ends the session.
 * Skipped where no real ComfyUI exists.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import type { Browser } from 'playwright-core'
import { ROOT } from '../helpers/stack.js'
import { REAL_HOST_SKIP, destroyRealHost, startRealHost, type RealHost } from '../helpers/real-host.js'
import { PASSWORD, json } from '../helpers/client.js'
import { launchChromium } from './browser-kit.js'

describe('the ComfyUI menu on the real ComfyUI', { skip: REAL_HOST_SKIP, concurrency: false }, () => {
  let host: RealHost
  let browser: Browser

  before(async () => {
    ;[host, browser] = await Promise.all([
      startRealHost({ aiohttp: '3.11', args: ['--front-end-root', join(ROOT, 'test', 'host-standin', 'web')] }),
      launchChromium(),
    ])
  })
  after(async () => {
    await browser?.close()
    if (host) await destroyRealHost(host)
  })

  it('loads through the gate from /extensions/authsvc/, shows the user, and log out ends the session', async () => {
    const anonymous = await fetch(`${host.url}/extensions/authsvc/authsvc-menu.js`)
    assert.equal(anonymous.status, 401, 'not without a session: the script is behind the gate like the frontend')
    assert.equal((await json(anonymous)).code, 'AUTH_REQUIRED')
    const first = await fetch(`${host.url}/register`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ username: 'root', password: PASSWORD }) })
    assert.equal(first.status, 201)

    const context = await browser.newContext()
    const page = await context.newPage()
    await page.goto(`${host.url}/`)
    await page.waitForURL(/\/login\?next=%2F$/)
    await page.getByLabel('Username').fill('root')
    await page.getByLabel('Password').fill(PASSWORD)
    const list = page.waitForResponse((r) => new URL(r.url()).pathname === '/api/extensions')
    const script = page.waitForResponse((r) => new URL(r.url()).pathname === '/extensions/authsvc/authsvc-menu.js')
    await page.getByRole('button', { name: 'Sign in' }).click()
    await page.waitForURL(`${host.url}/`)
    assert.ok(((await (await list).json()) as string[]).includes('/extensions/authsvc/authsvc-menu.js'), 'ComfyUI lists the script of the WEB_DIRECTORY')
    const served = await script
    assert.equal(served.status(), 200)
    assert.match((await served.allHeaders())['content-type'] ?? '', /javascript/)
    await page.locator('body[data-extensions~="authsvc.account-menu"]').waitFor()
    assert.equal(await page.locator('#comfy-menubar summary').innerText(), 'root (admin)')
    await page.locator('#comfy-menubar summary').click()
    assert.deepEqual(await page.locator('#comfy-menubar button').allInnerTexts(), ['Account…', 'Admin panel…', 'Log out'])
    // the top bar's USER badge opens the same entries (issue 26)
    await page.getByRole('button', { name: /USER\s*root \(admin\)/ }).click()
    assert.deepEqual(await page.getByRole('menu').getByRole('menuitem').allInnerTexts(), ['Account…', 'Admin panel…', 'Log out'])
    await page.keyboard.press('Escape')
    await page.getByRole('menu').waitFor({ state: 'hidden' })

    const cookie = (await context.cookies()).find((c) => c.name === 'jwt_token')
    assert.ok(cookie)
    await page.getByRole('button', { name: 'Log out' }).click()
    await page.waitForURL(`${host.url}/login`)
    const replay = await fetch(`${host.url}/authsvc/api/me`, { headers: { Cookie: `jwt_token=${cookie.value}`, Accept: 'application/json' } })
    assert.equal(replay.status, 401)
    assert.equal((await json(replay)).code, 'TOKEN_REVOKED', 'log out ended the session itself')
    await context.close()
  })
})
