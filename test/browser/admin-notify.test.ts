/**
 * The admin panel's Notifications section (issue 24 item 3), in Debian chromium through the
 * stand-in host, the real plugin and the real sidecar, with a local ntfy stand-in: an admin sets
 * the topic, server, events and token, sends a test notification and sees what ntfy answered;
 * the events they chose reach the topic; the token is never shown again, in the page or in the
 * processes' output (at debug level); mistakes are shown next to the field that caused them.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import type { Browser, Page } from 'playwright-core'
import { destroyStack, startStack, type Stack } from '../helpers/stack.js'
import { PASSWORD, register } from '../helpers/client.js'
import { startNtfyStandin, type NtfyStandin } from '../helpers/ntfy-standin.js'
import { NOTIFIABLE_EVENTS } from '../../sidecar/src/notify/notifiable-events.js'
import { launchChromium, shootAndCheck, watchCsp } from './browser-kit.js'

describe('admin panel: notifications', { concurrency: false }, () => {
  let stack: Stack
  let browser: Browser
  let ntfy: NtfyStandin
  let page: Page
  let csp: string[]
  const token = `tk_${randomBytes(15).toString('hex')}`

  before(async () => {
    ;[stack, browser, ntfy] = await Promise.all([startStack({ env: { AUTHSVC_LOG_LEVEL: 'debug' } }), launchChromium(), startNtfyStandin({ token })])
    assert.equal((await register(stack, 'root')).status, 201)
    const context = await browser.newContext()
    page = await context.newPage()
    csp = watchCsp(page)
    await page.goto(`${stack.url}/login?next=%2Fauthsvc%2Fadmin`)
    await page.getByLabel('Username').fill('root')
    await page.getByLabel('Password').fill(PASSWORD)
    await page.getByRole('button', { name: 'Sign in' }).click()
    await page.waitForURL(`${stack.url}/authsvc/admin`)
    await page.locator('#ntfy-form[data-ready=true]').waitFor({ state: 'attached' })
    await page.getByRole('navigation', { name: 'Admin sections' }).getByRole('link', { name: 'Notifications', exact: true }).click()
    await page.locator('#notifications:not([hidden])').waitFor()
  })
  after(async () => {
    await browser?.close()
    await ntfy?.close()
    if (stack) await destroyStack(stack)
  })

  it('offers every notifiable kind, nothing set yet', async () => {
    const kinds = await page.locator('#ntfy-event-boxes input[type=checkbox]').evaluateAll((boxes) => boxes.map((b) => (b as HTMLInputElement).value))
    assert.deepEqual(kinds, [...NOTIFIABLE_EVENTS])
    assert.equal(await page.locator('#ntfy-token-state').innerText(), 'not set')
    assert.equal(await page.getByLabel('Server').inputValue(), 'https://ntfy.sh')
    assert.match(await page.locator('#ntfy-queue').innerText(), /Delivered 0 · waiting 0 · dropped 0 · failed 0\. These settings come from config\.json/)
  })

  it('a server ntfy cannot be trusted with is refused next to its field', async () => {
    await page.getByLabel('Topic').fill('authsvc-ops')
    await page.getByLabel('Server').fill('http://ntfy.example.net')
    await page.getByRole('button', { name: 'Save notifications' }).click()
    const server = page.getByLabel('Server')
    await page.locator('#ntfy-server[aria-invalid=true]').waitFor()
    assert.match(await page.locator('#ntfy-server-error').innerText(), /http:\/\/ is allowed only for a loopback host/)
    assert.equal(await server.evaluate((e) => e === document.activeElement), true, 'the field has the focus')
  })

  it('saves topic, server, events and token; the token is shown as "set", never itself', async () => {
    await page.getByLabel('Server').fill(ntfy.url)
    await page.getByLabel('Sign-in', { exact: true }).check()
    await page.getByLabel('Failed sign-in').check()
    await page.getByLabel(/Access token/).fill(token)
    await page.getByRole('button', { name: 'Save notifications' }).click()
    await page.locator('#ntfy-status:not([hidden])').waitFor()
    assert.equal(await page.locator('#ntfy-status').innerText(), 'Saved: 2 kind(s) of event go to authsvc-ops.')
    assert.equal(await page.locator('#ntfy-token-state').innerText(), 'set')
    assert.equal(await page.getByLabel(/Access token/).inputValue(), '')
    assert.ok(!(await page.content()).includes(token), 'the token is nowhere in the page')
    await page.reload()
    await page.locator('#ntfy-form[data-ready=true]').waitFor()
    assert.deepEqual([await page.getByLabel('Topic').inputValue(), await page.getByLabel('Server').inputValue(), await page.locator('#ntfy-token-state').innerText()], ['authsvc-ops', ntfy.url, 'set'])
    assert.deepEqual(await page.locator('#ntfy-event-boxes input:checked').evaluateAll((b) => b.map((x) => (x as HTMLInputElement).value)), ['user_login', 'login_failure'])
  })

  it('1280 px: sends a test notification and says ntfy took it', async () => {
    await page.setViewportSize({ width: 1280, height: 900 })
    await page.getByRole('button', { name: 'Send a test notification' }).click()
    await page.locator('#ntfy-status:not([hidden])').waitFor()
    assert.equal(await page.locator('#ntfy-status').innerText(), 'ntfy took the test notification: check authsvc-ops in the ntfy app.')
    const [message] = await ntfy.waitForMessages(1)
    assert.deepEqual([message.title, message.topic, message.authorization], ['authsvc test notification', 'authsvc-ops', `Bearer ${token}`])
  })

  it('the chosen events reach the topic through the real gate; the others do not', async () => {
    const failed = await fetch(`${stack.url}/login`, { method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json' }, body: JSON.stringify({ username: 'root', password: 'not-the-password' }) })
    assert.equal(failed.status, 401)
    // an event of a kind the admin left out, between two they chose
    const created = await fetch(`${stack.url}/authsvc/generate_token`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ username: 'root', password: PASSWORD, label: 'script' }) })
    assert.equal(created.status, 200)
    const ok = await fetch(`${stack.url}/login`, { method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json' }, body: JSON.stringify({ username: 'root', password: PASSWORD }) })
    assert.equal(ok.status, 200)
    const got = await ntfy.waitForMessages(3)
    assert.deepEqual(got.map((m) => m.title), ['authsvc test notification', 'Login failed for root', 'root signed in'])
    assert.ok(got.every((m) => m.authorization === `Bearer ${token}`))
  })

  it('390 px: says what went wrong when ntfy refuses or is gone; asks for a save before testing changes', async () => {
    await page.setViewportSize({ width: 390, height: 844 })
    ntfy.answerNext({ kind: 'error', http: 403, code: 40301, error: 'forbidden' })
    await page.getByRole('button', { name: 'Send a test notification' }).click()
    await page.locator('#ntfy-error:not([hidden])').waitFor()
    assert.equal(await page.locator('#ntfy-error').innerText(), 'ntfy answered 403: forbidden (40301)')
    await ntfy.gone()
    await page.getByRole('button', { name: 'Send a test notification' }).click()
    await page.locator('#ntfy-error:not([hidden])').getByText(/not reached/).waitFor()
    assert.match(await page.locator('#ntfy-error').innerText(), /^ntfy at http:\/\/127\.0\.0\.1:\d+: not reached \((ECONNREFUSED|UND_ERR_SOCKET)\)$/)
    await ntfy.back()
    await page.getByLabel('Topic').fill('another-topic')
    await page.getByRole('button', { name: 'Send a test notification' }).click()
    await page.locator('#ntfy-error:not([hidden])').getByText(/Save your changes first/).waitFor()
    await page.getByLabel('Topic').fill('authsvc-ops')
  })

  it('removes the token at 1280 px, saves a new one, removes it at 390 px; looks right in every view (axe, both widths, light and dark)', async () => {
    const remove = async () => {
      await page.getByLabel('Remove the saved token').check()
      assert.equal(await page.getByLabel(/Access token/).isDisabled(), true)
      await page.getByRole('button', { name: 'Save notifications' }).click()
      await page.locator('#ntfy-token-state').getByText('not set', { exact: true }).waitFor()
    }
    await page.setViewportSize({ width: 1280, height: 900 })
    await remove()
    await page.getByLabel(/Access token/).fill(token)
    await page.getByRole('button', { name: 'Save notifications' }).click()
    await page.locator('#ntfy-token-state').getByText('set', { exact: true }).waitFor()
    await page.setViewportSize({ width: 390, height: 844 })
    await remove()
    await page.locator('#notifications').scrollIntoViewIfNeeded()
    await shootAndCheck(page, 'admin-notifications')
    assert.deepEqual(csp, [], 'no Content-Security-Policy violation')
  })

  it('the token is in no line the host, the plugin or the sidecar wrote (debug level)', () => {
    assert.ok(stack.output().includes('"ntfy"'), 'the sidecar\'s lines are in the output')
    assert.deepEqual(stack.output().split('\n').filter((l) => l.includes(token)), [])
  })
})
