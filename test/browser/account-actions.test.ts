/**
 * The account page's and the admin panel's other actions, clicked in chromium through the
 * real stack: change password (other sessions signed out, and the page says so); MFA
 * enrol → new secret and backup codes (a current code needed) → turn off with a backup code of
 * the new set; the admin disables and enables a user, resets a password (sessions and tokens
 * end), resets MFA, switches guest logins on, and deletes a user after confirming. Everything at
 * 1280 px (bob) and again at 390 px (carol).
 * TOTP codes come from oathtool, an independent implementation.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import type { Browser, BrowserContext, Page } from 'playwright-core'
import { destroyStack, startStack, type Stack } from '../helpers/stack.js'
import { PASSWORD, apiToken, bearer, json, login, register } from '../helpers/client.js'
import { launchChromium, watchCsp } from './browser-kit.js'

const NEW_PASSWORD = 'bob-picked-a-new-long-one'

function oathtool(secret: string, offsetSteps = 0): string {
  const at = Math.floor(Date.now() / 1000) + offsetSteps * 30
  return execFileSync('oathtool', ['--totp', '-b', '-N', `@${at}`, secret], { encoding: 'utf8' }).trim()
}

async function me(stack: Stack, credential: string): Promise<{ status: number; code?: string }> {
  const res = await fetch(`${stack.url}/authsvc/api/me`, { headers: { ...bearer(credential), Accept: 'application/json' } })
  return { status: res.status, code: res.status === 200 ? undefined : (await json(res)).code }
}

async function signIn(context: BrowserContext, stack: Stack, username: string, password: string, next: string): Promise<Page> {
  const page = await context.newPage()
  await page.goto(`${stack.url}${next}`)
  await page.waitForURL(/\/login\?next=/)
  await page.getByLabel('Username').fill(username)
  await page.getByLabel('Password').fill(password)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.waitForURL(`${stack.url}${next}`)
  return page
}

describe('account and admin actions in chromium', { concurrency: false }, () => {
  let stack: Stack
  let browser: Browser
  let admin: Page
  const csp: string[][] = []

  before(async () => {
    ;[stack, browser] = await Promise.all([startStack(), launchChromium()])
    assert.equal((await register(stack, 'root')).status, 201)
    const root = (await login(stack, 'root')).jwt
    for (const name of ['bob', 'carol']) assert.equal((await register(stack, name, { bearer: root })).status, 201)
  })
  after(async () => {
    await browser?.close()
    if (stack) await destroyStack(stack)
  })

  for (const [width, name] of [[1280, 'bob'], [390, 'carol']] as const) {
    const viewport = { width, height: width < 600 ? 844 : 900 }
    let own: Page
    it(`${width} px: ${name} changes their password: their other sessions end, this one stays, and the page says so`, async () => {
      const phone = (await login(stack, name)).jwt
      own = await signIn(await browser.newContext({ viewport }), stack, name, PASSWORD, '/authsvc/account')
      csp.push(watchCsp(own))
      await own.locator('#session-rows tr[data-jti]').nth(1).waitFor()
      await own.getByLabel('Current password').fill(PASSWORD)
      await own.getByLabel('New password', { exact: true }).fill(NEW_PASSWORD)
      await own.getByLabel('New password again').fill(NEW_PASSWORD + 'x')
      await own.getByRole('button', { name: 'Change password' }).click()
      await own.locator('#confirm_password-error', { hasText: 'The two new passwords differ.' }).waitFor()
      await own.getByLabel('New password again').fill(NEW_PASSWORD)
      await own.getByRole('button', { name: 'Change password' }).click()
      await own.locator('#password-done', { hasText: 'Password changed. 1 other session was signed out; this one stays signed in.' }).waitFor()
      assert.deepEqual(await me(stack, phone), { status: 401, code: 'TOKEN_REVOKED' }, 'the other session ended')
      assert.equal(await own.locator('#session-rows tr[data-jti]').count(), 1, 'the list shows only this session now')
      await own.reload()
      await own.locator('#me-username', { hasText: name }).waitFor()
      assert.equal((await login(stack, name, NEW_PASSWORD)).jwt.split('.').length, 3, 'the new password signs in')
    })

    it(`${width} px: ${name} turns MFA on, makes a new secret and backup codes with a current code, and turns MFA off with a backup code of the new set`, async () => {
      await own.getByRole('button', { name: 'Set up two-factor authentication' }).click()
      await own.locator('#qr svg').waitFor()
      const first = (await own.locator('#secret').innerText()).trim()
      await own.getByLabel('Code from the app').fill(oathtool(first))
      await own.getByRole('button', { name: 'Turn on' }).click()
      await own.locator('#mfa-done', { hasText: 'Two-factor authentication is on.' }).waitFor()

      await own.getByLabel('Current code (or a backup code)').last().fill(oathtool(first, 1))
      await own.getByRole('button', { name: 'Make new secret and backup codes' }).click()
      await own.locator('#mfa-setup').waitFor()
      const second = (await own.locator('#secret').innerText()).trim()
      assert.notEqual(second, first, 'a new secret')
      const codes = (await own.locator('#backup-codes li').allInnerTexts()).map((c) => c.trim())
      assert.equal(codes.length, 10)
      await own.getByLabel('Code from the app').fill(oathtool(second))
      await own.getByRole('button', { name: 'Turn on' }).click()
      await own.locator('#mfa-done', { hasText: 'Two-factor authentication is on.' }).waitFor()

      await own.getByLabel('Current code (or a backup code)').first().fill(codes[0])
      await own.getByRole('button', { name: 'Turn off two-factor authentication' }).click()
      await own.locator('#mfa-done', { hasText: 'Two-factor authentication is off.' }).waitFor()
      assert.equal(await own.locator('#mfa-status').innerText(), 'Two-factor authentication is off.')
      assert.equal(await own.getByRole('button', { name: 'Set up two-factor authentication' }).isVisible(), true)
    })

    it(`${width} px: the admin disables and enables ${name}, resets their password, switches guest logins on, and deletes them after confirming`, async () => {
      const token = await apiToken(stack, name, NEW_PASSWORD)
      admin = await signIn(await browser.newContext({ viewport }), stack, 'root', PASSWORD, '/authsvc/admin')
      csp.push(watchCsp(admin))
      await admin.locator('body[data-ready=true]').waitFor()
      const row = () => admin.locator(`tr[data-username=${name}]`)

      await admin.getByRole('button', { name: `Disable ${name}` }).click()
      await row().getByText('disabled', { exact: true }).waitFor()
      assert.deepEqual(await me(stack, token), { status: 401, code: 'TOKEN_REVOKED' }, 'disabling ends his tokens')
      await own.reload()
      await own.waitForURL(/\/login\?next=%2Fauthsvc%2Faccount/)
      await admin.getByRole('button', { name: `Enable ${name}` }).click()
      await row().getByText('enabled', { exact: true }).waitFor()

      const second = await apiToken(stack, name, NEW_PASSWORD)
      await admin.getByRole('link', { name: `Open ${name}` }).click()
      await admin.locator('#detail-tokens tr[data-prefix]').waitFor()
      await admin.getByLabel(`New password for ${name}`).fill('short')
      await admin.getByRole('button', { name: 'Reset password' }).click()
      await admin.locator('#reset-password-error').waitFor()
      await admin.getByLabel(`New password for ${name}`).fill('an-admin-chosen-password')
      await admin.getByRole('button', { name: 'Reset password' }).click()
      await admin.locator('#user-page-status', { hasText: `The password of ${name} was reset` }).waitFor()
      await admin.locator('#detail-tokens', { hasText: 'No API token.' }).waitFor()
      assert.deepEqual(await me(stack, second), { status: 401, code: 'TOKEN_REVOKED' })
      assert.equal((await login(stack, name, 'an-admin-chosen-password')).jwt.split('.').length, 3)

      // a role added and removed again in the Roles section
      await admin.getByRole('navigation', { name: 'Admin sections' }).getByRole('link', { name: 'Roles', exact: true }).click()
      await admin.getByLabel('New role name').fill('temp')
      await admin.getByRole('button', { name: 'Add role' }).click()
      await admin.getByRole('button', { name: 'Save roles' }).click()
      await admin.locator('#roles-status', { hasText: 'Roles saved.' }).waitFor()
      await admin.getByRole('button', { name: 'Remove the role temp' }).click()
      const removed = admin.waitForResponse((r) => new URL(r.url()).pathname === '/authsvc/api/groups' && r.request().method() === 'PUT')
      await admin.getByRole('button', { name: 'Save roles' }).click()
      assert.equal((await removed).status(), 200)
      assert.equal(Object.keys((await (await removed).json()).groups).includes('temp'), false, 'the role is gone')
      assert.equal(await admin.locator('fieldset[data-role=temp]').count(), 0)

      await admin.getByLabel('Allow guest logins').check()
      await admin.getByRole('button', { name: 'Save', exact: true }).click()
      await admin.locator('#guest-status', { hasText: 'Guest logins are allowed.' }).waitFor()
      const guest = await fetch(`${stack.url}/login`, { method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json' }, body: '{"guest_login":true}' })
      assert.equal(guest.status, 200, 'a guest session can be had now')
      const visitor = await (await browser.newContext()).newPage()
      await visitor.goto(`${stack.url}/`)
      await visitor.getByRole('button', { name: 'Continue as guest' }).click()
      await visitor.waitForURL(`${stack.url}/`)
      await visitor.locator('body[data-extensions~="authsvc.account-menu"]').waitFor()
      assert.equal(await visitor.locator('#comfy-menubar summary').innerText(), 'guest (guest)')
      await visitor.locator('#comfy-menubar summary').click()
      assert.deepEqual(await visitor.locator('#comfy-menubar button').allInnerTexts(), ['Log out'], 'a guest has no account page and no admin panel')

      await admin.getByRole('navigation', { name: 'Admin sections' }).getByRole('link', { name: 'Users', exact: true }).click()
      await admin.getByRole('button', { name: `Delete ${name}` }).click()
      await admin.locator('#confirm-delete[open]').waitFor()
      await admin.locator('#confirm-delete').getByRole('button', { name: 'Delete' }).click()
      await admin.locator('#users-status', { hasText: `${name} was deleted.` }).waitFor()
      assert.equal(await row().count(), 0)
      const gone = await fetch(`${stack.url}/login`, { method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json' }, body: JSON.stringify({ username: name, password: 'an-admin-chosen-password' }) })
      assert.equal(gone.status, 401)
      assert.deepEqual(csp.flat(), [], 'no Content-Security-Policy violation')
    })
  }
})
