/**
 * authsvc run by clicking (issue 13), in Debian chromium through the stand-in, the real plugin
 * and the real sidecar. Each step is what a person does on the pages; requests made from
 * the test itself stand for a script using an API token, or for a client at another address.
 *
 * The story, in order (the steps share the people and their browsers):
 * 1. the first admin registers, signs in, finds the admin panel in the ComfyUI menu, adds a
 *    role `viewer` (API access and API tokens, no can_run) and creates alice with it;
 * 2. alice signs in, the menu shows her name and role (no admin link), her prompt is refused;
 *    the admin grants can_run in the matrix; her next prompt passes;
 * 3. alice creates an API token on her account page, a script uses it, she revokes it, the
 *    next use is refused;
 * 4. alice turns MFA on from the account page (codes from oathtool, an independent TOTP),
 *    logs out from the ComfyUI menu (the session ends), and her next sign-in asks for a code;
 * 5. the admin revokes alice's session in the admin panel and her open ComfyUI page goes to
 *    the login page by itself (its WebSocket is closed by the gate; the menu script checks);
 *    with no WebSocket, her next request of the page does the same;
 * 6. the admin blacklists 203.0.113.0/24: a client there (X-Forwarded-For through a trusted
 *    proxy, since the stack listens on 127.0.0.1 only) is refused on every route, while
 *    loopback goes on working and cannot be blacklisted.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import type { Browser, BrowserContext, Page } from 'playwright-core'
import { destroyStack, startStack, type Stack } from '../helpers/stack.js'
import { bearer, json, tinyGraph } from '../helpers/client.js'
import { launchChromium, watchCsp } from './browser-kit.js'

const ADMIN_PASSWORD = 'a-long-admin-password'
const ALICE_PASSWORD = 'alice-has-a-long-password'
const REMOTE = '203.0.113.9'

/** A TOTP code from oathtool (not our implementation), `offsetSteps` steps from now. */
function oathtool(secret: string, offsetSteps = 0): string {
  const at = Math.floor(Date.now() / 1000) + offsetSteps * 30
  return execFileSync('oathtool', ['--totp', '-b', '-N', `@${at}`, secret], { encoding: 'utf8' }).trim()
}

async function signIn(page: Page, stack: Stack, username: string, password: string): Promise<void> {
  await page.goto(`${stack.url}/`)
  await page.waitForURL(/\/login\?next=%2F$/)
  await page.getByLabel('Username').fill(username)
  await page.getByLabel('Password').fill(password)
  await page.getByRole('button', { name: 'Sign in' }).click()
}

/** The ComfyUI page after the extensions loaded; returns the text of the menu's title. */
async function comfyMenu(page: Page): Promise<string> {
  await page.locator('body[data-extensions~="authsvc.account-menu"]').waitFor()
  return page.locator('#comfy-menubar summary').innerText()
}

async function menuCommand(page: Page, label: string): Promise<void> {
  await page.locator('#comfy-menubar summary').click()
  await page.getByRole('button', { name: label }).click()
}

async function queuePrompt(page: Page): Promise<{ status: string; text: string }> {
  const answer = page.waitForResponse((r) => new URL(r.url()).pathname === '/api/prompt')
  await page.getByRole('button', { name: 'Queue prompt' }).click()
  const status = String((await answer).status())
  await page.locator(`#queue-status[data-status="${status}"]`).waitFor()
  return { status, text: await page.locator('#queue-status').innerText() }
}

/** Opens a section of the admin panel through its navigation. */
async function section(admin: Page, name: string, id: string): Promise<void> {
  await admin.getByRole('navigation', { name: 'Admin sections' }).getByRole('link', { name, exact: true }).click()
  await admin.locator(`section#${id}:not([hidden])`).waitFor()
}

/** A permission of a role in the Roles section, by its name in words (web/permission-words.js). */
const perm = (admin: Page, role: string, name: string) => admin.locator(`fieldset[data-role="${role}"]`).getByLabel(name, { exact: true })

/** Clicks the admin panel's "Save roles" and waits for the saved answer. */
async function saveRoles(admin: Page): Promise<void> {
  const saved = admin.waitForResponse((r) => new URL(r.url()).pathname === '/authsvc/api/groups' && r.request().method() === 'PUT')
  await admin.getByRole('button', { name: 'Save roles' }).click()
  assert.equal((await saved).status(), 200)
  await admin.locator('#roles-status', { hasText: 'Roles saved.' }).waitFor()
}

describe('authsvc run by clicking (issue 13)', { concurrency: false }, () => {
  let stack: Stack
  let browser: Browser
  let adminContext: BrowserContext
  let admin: Page
  let aliceContext: BrowserContext
  let alice: Page
  const csp: string[][] = []
  // the steps tell one story: after a failed step the rest would only time out
  let broken = false
  const step = (name: string, fn: () => Promise<void>) =>
    it(name, async (t) => {
      if (broken) return t.skip('an earlier step failed')
      try {
        await fn()
      } catch (error) {
        broken = true
        throw error
      }
    })
  let backupCodes: string[] = []
  const secrets: string[] = [ADMIN_PASSWORD, ALICE_PASSWORD]

  before(async () => {
    ;[stack, browser] = await Promise.all([startStack({ config: { trusted_proxies: ['127.0.0.1/32'] } }), launchChromium()])
    adminContext = await browser.newContext()
    admin = await adminContext.newPage()
    csp.push(watchCsp(admin))
  })
  after(async () => {
    await browser?.close()
    if (stack) await destroyStack(stack)
  })

  step('1. the first admin registers, opens the admin panel from the ComfyUI menu, adds a role without can_run and creates alice with it', async () => {
    await admin.goto(`${stack.url}/register`)
    await admin.getByLabel('Username').fill('root')
    await admin.getByLabel('Password').fill(ADMIN_PASSWORD)
    await admin.getByRole('button', { name: 'Create account' }).click()
    // the first account is signed in at once, as the administrator (issue 26)
    await admin.getByRole('heading', { name: 'You are the administrator' }).waitFor()
    await admin.getByRole('link', { name: 'Go to ComfyUI' }).click()
    await admin.waitForURL(`${stack.url}/`)
    assert.equal(await comfyMenu(admin), 'root (admin)', 'the ComfyUI menu names the user and the role')
    assert.match(await admin.locator('#comfy-badges').innerText(), /root \(admin\)/)
    await menuCommand(admin, 'Admin panel…')
    await admin.waitForURL(`${stack.url}/authsvc/admin`)
    await admin.locator('body[data-ready=true]').waitFor()

    await section(admin, 'Roles', 'roles')
    await admin.getByLabel('New role name').fill('viewer')
    await admin.getByRole('button', { name: 'Add role' }).click()
    await perm(admin, 'viewer', 'Use ComfyUI').check()
    await perm(admin, 'viewer', 'Create API tokens').check()
    assert.equal(await perm(admin, 'viewer', 'Run prompts').isChecked(), false)
    await saveRoles(admin)
    const groups = (await json(await fetch(`${stack.url}/authsvc/api/groups`, { headers: { Cookie: await cookieHeader(adminContext), Accept: 'application/json' } }))).groups
    assert.equal(groups.viewer.can_access_api, true, 'the new role is stored')
    assert.equal(groups.viewer.can_run, false)

    await section(admin, 'Users', 'users')
    const create = admin.locator('#create-user-form')
    await create.getByLabel('Username').fill('alice')
    await create.getByLabel('Password').fill(ALICE_PASSWORD)
    await create.getByLabel('Role').selectOption('viewer')
    await create.getByRole('button', { name: 'Create user' }).click()
    await admin.locator('#users-status', { hasText: 'alice was created with the role viewer' }).waitFor()
    const row = admin.locator('tr[data-username=alice]')
    assert.equal(await row.getByLabel('Role of alice').inputValue(), 'viewer')
  })

  step('1b. two admins edit the roles at once: the second save is refused (If-Match), nothing is overwritten', async () => {
    const other = await adminContext.newPage()
    csp.push(watchCsp(other))
    const loaded = other.waitForResponse((r) => new URL(r.url()).pathname === '/authsvc/api/groups' && r.request().method() === 'GET')
    await other.goto(`${stack.url}/authsvc/admin`)
    const etag = (await loaded).headers()['etag']
    assert.ok(etag, 'the roles come with an ETag')
    await other.locator('body[data-ready=true]').waitFor()
    await section(other, 'Roles', 'roles')
    await section(admin, 'Roles', 'roles')

    await perm(admin, 'viewer', 'Upload images').check()
    const first = admin.waitForRequest((r) => new URL(r.url()).pathname === '/authsvc/api/groups' && r.method() === 'PUT')
    await saveRoles(admin)
    assert.equal((await first).headers()['if-match'], etag, 'the save names the version it edits')

    await perm(other, 'viewer', 'Download models').check()
    const second = other.waitForResponse((r) => new URL(r.url()).pathname === '/authsvc/api/groups' && r.request().method() === 'PUT')
    await other.getByRole('button', { name: 'Save roles' }).click()
    assert.equal((await second).status(), 412)
    await other.locator('#roles-error', { hasText: 'Another administrator changed the roles' }).waitFor()
    const groups = (await json(await fetch(`${stack.url}/authsvc/api/groups`, { headers: { Cookie: await cookieHeader(adminContext), Accept: 'application/json' } }))).groups
    assert.equal(groups.viewer.can_upload, true, 'the first save stands')
    assert.equal(groups.viewer.can_download_models, false, 'the stale save changed nothing')
    await other.close()
  })

  step('2. alice is refused a prompt until the admin grants can_run in the matrix', async () => {
    aliceContext = await browser.newContext()
    alice = await aliceContext.newPage()
    csp.push(watchCsp(alice))
    await signIn(alice, stack, 'alice', ALICE_PASSWORD)
    await alice.waitForURL(`${stack.url}/`)
    assert.equal(await comfyMenu(alice), 'alice (viewer)')
    await alice.locator('#comfy-menubar summary').click()
    assert.equal(await alice.getByRole('button', { name: 'Admin panel…' }).count(), 0, 'no admin link for a non-admin')
    await alice.locator('#comfy-menubar summary').click()

    const refused = await queuePrompt(alice)
    assert.equal(refused.status, '403')
    assert.match(refused.text, /PERMISSION_DENIED/)

    await perm(admin, 'viewer', 'Run prompts').check()
    await saveRoles(admin)

    const passed = await queuePrompt(alice)
    assert.equal(passed.status, '200', passed.text)
    assert.match(passed.text, /^Queued: [0-9a-f-]{36}$/)
  })

  step('3. alice creates an API token on her account page, a script uses it, she revokes it and the next use is refused', async () => {
    await menuCommand(alice, 'Account…')
    await alice.waitForURL(`${stack.url}/authsvc/account`)
    await alice.locator('#me-username', { hasText: 'alice' }).waitFor()
    await alice.getByLabel('Label').fill('my script')
    await alice.getByRole('button', { name: 'Create token' }).click()
    await alice.locator('#token-created').waitFor()
    const token = (await alice.locator('#token-value').innerText()).trim()
    assert.match(token, /^ast_[A-Za-z0-9_-]{43}$/, 'the raw token is shown once')
    secrets.push(token)
    const row = alice.locator('#token-rows tr', { hasText: 'my script' })
    await row.waitFor()
    assert.equal(await alice.locator('#token-rows').innerText().then((t) => t.includes(token)), false, 'the list never shows the raw token')

    // the script: curl-like requests with the token
    const me = await fetch(`${stack.url}/authsvc/api/me`, { headers: { ...bearer(token), Accept: 'application/json' } })
    assert.equal(me.status, 200)
    assert.equal((await json(me)).username, 'alice')
    const prompt = await fetch(`${stack.url}/prompt`, { method: 'POST', headers: { ...bearer(token), 'Content-Type': 'application/json' }, body: JSON.stringify({ prompt: tinyGraph('token') }) })
    assert.equal(prompt.status, 200, await prompt.clone().text())

    await row.getByRole('button', { name: /Revoke the token my script/ }).click()
    await alice.locator('#token-rows', { hasText: 'No API token.' }).waitFor()
    const after = await fetch(`${stack.url}/authsvc/api/me`, { headers: { ...bearer(token), Accept: 'application/json' } })
    assert.equal(after.status, 401)
    assert.equal((await json(after)).code, 'TOKEN_REVOKED')
    const promptAfter = await fetch(`${stack.url}/prompt`, { method: 'POST', headers: { ...bearer(token), 'Content-Type': 'application/json' }, body: JSON.stringify({ prompt: tinyGraph('token') }) })
    assert.equal(promptAfter.status, 401)
  })

  step('4. alice turns MFA on from her account page, logs out from the ComfyUI menu, and her next sign-in asks for a code', async () => {
    await alice.getByRole('button', { name: 'Set up two-factor authentication' }).click()
    await alice.locator('#qr svg').waitFor()
    const secret = (await alice.locator('#secret').innerText()).trim()
    assert.match(secret, /^[A-Z2-7]{16,}=*$/)
    secrets.push(secret)
    assert.equal(await alice.locator('#backup-codes li').count(), 10)
    backupCodes = (await alice.locator('#backup-codes li').allInnerTexts()).map((c) => c.trim())
    await alice.getByLabel('Code from the app').fill(oathtool(secret))
    await alice.getByRole('button', { name: 'Turn on' }).click()
    await alice.locator('#mfa-done', { hasText: 'Two-factor authentication is on.' }).waitFor()
    assert.equal(await alice.locator('#mfa-status').innerText(), 'Two-factor authentication is on.')

    await alice.goto(`${stack.url}/`)
    await comfyMenu(alice)
    const oldCookie = await cookieHeader(aliceContext)
    await menuCommand(alice, 'Log out')
    await alice.waitForURL(`${stack.url}/login`)
    assert.equal((await aliceContext.cookies()).some((c) => c.name === 'jwt_token'), false, 'the cookie is cleared')
    const replay = await fetch(`${stack.url}/authsvc/api/me`, { headers: { Cookie: oldCookie, Accept: 'application/json' } })
    assert.equal(replay.status, 401, 'log out ended the session itself')
    assert.equal((await json(replay)).code, 'TOKEN_REVOKED')

    await signIn(alice, stack, 'alice', ALICE_PASSWORD)
    await alice.waitForURL(`${stack.url}/mfa`)
    await alice.locator('#verify').waitFor()
    assert.equal((await aliceContext.cookies()).some((c) => c.name === 'jwt_token'), false, 'no session before the code')
    // the step after the one spent at enrolment (a code is accepted once)
    await alice.getByLabel('Code from your authenticator app').fill(oathtool(secret, 1))
    await alice.getByRole('button', { name: 'Verify' }).click()
    await alice.waitForURL(`${stack.url}/`)
    assert.equal(await comfyMenu(alice), 'alice (viewer)')
    await alice.locator('body[data-socket=open]').waitFor()
  })

  step('5. the admin revokes alice\'s session and her open ComfyUI page lands on the login page', async () => {
    await admin.reload()
    await admin.locator('body[data-ready=true]').waitFor()
    await section(admin, 'Users', 'users')
    await admin.getByRole('link', { name: 'Open alice' }).click()
    await admin.locator('#user-page[data-ready=alice]').waitFor()
    const sessions = admin.locator('#detail-sessions tr[data-jti]')
    await sessions.first().waitFor()
    assert.equal(await sessions.count(), 1, 'alice has one session (the other ended at log out)')
    const revoked = admin.waitForResponse((r) => /\/authsvc\/api\/users\/alice\/sessions\//.test(r.url()) && r.request().method() === 'DELETE')
    await sessions.first().getByRole('button', { name: /Revoke the session of alice/ }).click()
    assert.equal((await revoked).status(), 200)
    await admin.locator('#detail-sessions', { hasText: 'No active session.' }).waitFor()

    // nobody touches alice's page: the gate closes its WebSocket, the menu script asks who it is
    await alice.waitForURL(`${stack.url}/login?next=%2F`, { timeout: 10_000 })
    assert.ok(await alice.getByLabel('Username').isVisible(), 'the login form, not a broken canvas')
  })

  step('5b. without a WebSocket, the next request of the page after a revocation goes to the login page', async () => {
    await alice.getByLabel('Username').fill('alice')
    await alice.getByLabel('Password').fill(ALICE_PASSWORD)
    await alice.getByRole('button', { name: 'Sign in' }).click()
    await alice.waitForURL(`${stack.url}/mfa`)
    // the TOTP step of the last sign-in is spent; a backup code from the enrolment works once
    await alice.getByText('Use a backup code instead').click()
    await alice.getByLabel('Backup code').fill(backupCodes[0])
    await alice.getByRole('button', { name: 'Verify' }).click()
    await alice.waitForURL(`${stack.url}/`)
    await alice.goto(`${stack.url}/?nows`)
    assert.equal(await comfyMenu(alice), 'alice (viewer)')

    await admin.reload()
    await admin.locator('#user-page[data-ready=alice]').waitFor()
    const sessions = admin.locator('#detail-sessions tr[data-jti]')
    await sessions.first().waitFor()
    assert.equal(await sessions.count(), 1)
    await sessions.first().getByRole('button', { name: /Revoke the session of alice/ }).click()
    await admin.locator('#detail-sessions', { hasText: 'No active session.' }).waitFor()

    await alice.getByRole('button', { name: 'Queue prompt' }).click()
    await alice.waitForURL(`${stack.url}/login?next=%2F%3Fnows`)
    assert.ok(await alice.getByLabel('Username').isVisible())
  })

  step('6. a blacklisted address is refused everywhere; loopback goes on working and cannot be blacklisted', async () => {
    await section(admin, 'Network', 'network')
    await admin.getByLabel('Block an address or range').fill('127.0.0.1')
    await admin.getByRole('button', { name: 'Block', exact: true }).click()
    const error = admin.locator('#block-ip-error')
    await error.waitFor()
    assert.match(await error.innerText(), /this machine \(loopback\): it is always admitted and can never be blocked/, 'the error is next to the address field')
    assert.equal(await admin.getByLabel('Block an address or range').getAttribute('aria-invalid'), 'true')
    assert.equal(await admin.locator('#blacklist-rows tr[data-ip]').count(), 0, 'the refused entry is not listed')

    await admin.getByLabel('Block an address or range').fill('203.0.113.0/24')
    await admin.getByLabel('For how many hours').fill('2')
    const saved = admin.waitForResponse((r) => new URL(r.url()).pathname === '/authsvc/api/ip-lists' && r.request().method() === 'PUT')
    await admin.getByRole('button', { name: 'Block', exact: true }).click()
    assert.equal((await saved).status(), 200)
    await admin.locator('#ip-status', { hasText: '203.0.113.0/24 is blocked for 2 hours.' }).waitFor()
    await admin.locator('#blacklist-rows tr[data-ip="203.0.113.0/24"]').waitFor()

    // a browser at the blocked address, behind the trusted proxy
    const remoteContext = await browser.newContext({ extraHTTPHeaders: { 'X-Forwarded-For': REMOTE } })
    const remote = await remoteContext.newPage()
    for (const path of ['/login', '/', '/authsvc/generate_token', '/register', '/extensions/authsvc/authsvc-menu.js']) {
      const answer = await remote.goto(`${stack.url}${path}`)
      assert.equal(answer?.status(), 403, path)
      assert.equal(JSON.parse(await answer!.text()).code, 'IP_DENIED', path)
    }
    await remoteContext.close()
    // and for scripts, even with a valid credential
    const rootSession = await cookieHeader(adminContext)
    for (const [method, path] of [['GET', '/authsvc/api/me'], ['POST', '/prompt'], ['POST', '/login'], ['GET', '/object_info'], ['GET', '/ws']]) {
      const res = await fetch(`${stack.url}${path}`, { method, headers: { Cookie: rootSession, 'X-Forwarded-For': REMOTE, Accept: 'application/json', 'Content-Type': 'application/json' }, body: method === 'POST' ? '{}' : undefined })
      assert.equal(res.status, 403, `${method} ${path}`)
      assert.equal((await json(res)).code, 'IP_DENIED', `${method} ${path}`)
    }
    // an address outside the block is let through, and loopback itself still works
    assert.equal((await fetch(`${stack.url}/login`, { headers: { 'X-Forwarded-For': '198.51.100.7' } })).status, 200)
    await admin.reload()
    await admin.locator('body[data-ready=true]').waitFor()

    // a whitelist admits only its addresses (and loopback, always)
    await admin.getByLabel(/Only these addresses may connect/).fill('198.51.100.0/24')
    await admin.getByRole('button', { name: 'Save allowed addresses' }).click()
    await admin.locator('#ip-status', { hasText: 'Only 1 address or range (and this machine) may connect now.' }).waitFor()
    assert.equal((await fetch(`${stack.url}/login`, { headers: { 'X-Forwarded-For': '198.51.100.7' } })).status, 200, 'on the whitelist')
    const outside = await fetch(`${stack.url}/login`, { headers: { 'X-Forwarded-For': '192.0.2.1' } })
    assert.equal(outside.status, 403, 'not on the whitelist')
    assert.equal((await json(outside)).code, 'IP_DENIED')
    await admin.reload()
    await admin.locator('body[data-ready=true]').waitFor()
    assert.equal(await admin.getByLabel(/Only these addresses may connect/).inputValue(), '198.51.100.0/24', 'loopback is never shut out by its own whitelist')
    assert.deepEqual(csp.flat(), [], 'no Content-Security-Policy violation on any page')
    const output = stack.output()
    assert.deepEqual(secrets.filter((secret) => output.includes(secret)), [], 'no password, token or TOTP secret in the host\'s or the sidecar\'s output')
  })

  step('7. the admin reads the audit view by user and event, the filter is in the address (reload and back keep it), and the account page shows their own recent activity', async () => {
    await admin.goto(`${stack.url}/authsvc/admin#audit`)
    await admin.locator('body[data-ready=true]').waitFor()
    const audit = admin.locator('#audit')
    assert.ok(await admin.locator('#audit-rows tr[data-kind=server_started]').count() >= 1, 'the unfiltered view shows the start')
    await audit.getByLabel('User', { exact: true }).fill('alice')
    await audit.getByLabel('Event', { exact: true }).selectOption({ label: 'API token created' })
    await audit.getByRole('button', { name: 'Show' }).click()
    await admin.waitForURL(/#audit\?user=alice&kind=api_token_created$/)
    const rows = admin.locator('#audit-rows tr')
    // the unfiltered rows stay until the filtered answer replaces them: wait for that answer
    const onlyKind = (kind: string) => admin.waitForFunction((k) => {
      const trs = [...document.querySelectorAll('#audit-rows tr')] as HTMLElement[]
      return trs.length > 0 && trs.every((tr) => tr.dataset.kind === k)
    }, kind)
    await onlyKind('api_token_created')
    assert.deepEqual(await admin.locator('#audit-rows tr').evaluateAll((trs) => trs.map((tr) => (tr as HTMLElement).dataset.kind)), ['api_token_created'])
    assert.match(await rows.first().innerText(), /API token created[\s\S]*alice[\s\S]*127\.0\.0\.1[\s\S]*token_hash_prefix/)
    await admin.reload()
    await admin.locator('body[data-ready=true]').waitFor()
    assert.equal(await audit.getByLabel('User', { exact: true }).inputValue(), 'alice', 'the filter survives a reload')
    await onlyKind('api_token_created')
    assert.deepEqual(await admin.locator('#audit-rows tr').evaluateAll((trs) => trs.map((tr) => (tr as HTMLElement).dataset.kind)), ['api_token_created'])
    // a second view, then back to the first
    await audit.getByLabel('Event', { exact: true }).selectOption({ label: 'Signed in' })
    await audit.getByRole('button', { name: 'Show' }).click()
    await admin.waitForURL(/kind=user_login$/)
    await admin.locator('#audit-rows tr[data-kind=user_login]').first().waitFor()
    await admin.goBack()
    await admin.waitForURL(/kind=api_token_created$/)
    await admin.locator('#audit-rows tr[data-kind=api_token_created]').first().waitFor()
    assert.equal(await admin.locator('#audit-rows tr[data-kind=user_login]').count(), 0)

    await admin.goto(`${stack.url}/authsvc/account`)
    const latest = admin.locator('#activity-rows li').first()
    await latest.waitFor()
    assert.ok(await admin.locator('#activity-rows li[data-kind=user_login]').count() >= 1, 'their sign-in is listed')
    assert.match(await admin.locator('#activity-rows li[data-kind=user_login]').first().innerText(), /Signed in from 127\.0\.0\.1/)
    assert.deepEqual(csp.flat(), [], 'no Content-Security-Policy violation on any page')
  })
})

async function cookieHeader(context: BrowserContext): Promise<string> {
  const cookie = (await context.cookies()).find((c) => c.name === 'jwt_token')
  assert.ok(cookie, 'a session cookie')
  return `jwt_token=${cookie.value}`
}
