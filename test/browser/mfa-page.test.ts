/**
 * The /mfa page in a real browser (Debian chromium via playwright-core),
 * through the stand-in, the real plugin and the real sidecar:
 * - a user with MFA signs in on /login, is sent to /mfa with the temp token
 *   in the URL fragment only (never a query string, never seen by a server or
 *   its logs), a wrong code shows an error, the right one lands on `/`;
 * - a user whose role requires MFA signs in and gets the setup view (QR SVG,
 *   secret, 10 backup codes); the QR, decoded from a screenshot by Debian's
 *   `zbarimg`, is the provisioning URI of the secret shown; a code from the
 *   app turns MFA on and lands on `/`.
 * Codes come from the independent RFC 6238 generator in totp-reference.ts.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import type { Browser, Page } from 'playwright-core'
import { destroyStack, poll, startStack, type Stack } from '../helpers/stack.js'
import { PASSWORD, bearer, json, login, register } from '../helpers/client.js'
import { totpAt } from '../integration/totp-reference.js'
import { launchChromium } from './browser-kit.js'

const SCREENSHOT = '/tmp/mfa-setup.png'
const QR_SHOT = '/tmp/mfa-setup-qr.png'
/** Debian's zbar-tools: an independent QR decoder. */
const ZBARIMG = '/usr/bin/zbarimg'

/** A 6-digit code none of the steps around now would accept. */
function wrongCode(secret: string, now: number): string {
  const valid = new Set([-2, -1, 0, 1, 2].map((o) => totpAt(secret, now, o)))
  for (let n = 0; ; n++) {
    const code = String(n).padStart(6, '0')
    if (!valid.has(code)) return code
  }
}

/** Every URL the page requested or navigated to (main frame), for the "never in a query string" checks. */
function recordUrls(page: Page): { requests: string[]; navigations: string[] } {
  const seen = { requests: [] as string[], navigations: [] as string[] }
  page.on('request', (r) => seen.requests.push(r.url()))
  page.on('framenavigated', (f) => {
    if (f === page.mainFrame()) seen.navigations.push(f.url())
  })
  return seen
}

/** The temp token as the page received it: `/mfa#<mode>:<token>` (read from the navigation, since the body of /login is gone by then). */
async function tempTokenFromFragment(page: Page, seen: { navigations: string[] }, mode: 'verify' | 'setup'): Promise<string> {
  await page.waitForURL(/\/mfa/)
  const url = seen.navigations.find((u) => new URL(u).pathname === '/mfa' && new URL(u).hash.startsWith(`#${mode}:`))
  assert.ok(url, `navigated to /mfa#${mode}:<token>: ${seen.navigations.join(' ')}`)
  const token = decodeURIComponent(new URL(url).hash.slice(mode.length + 2))
  assert.match(token, /^mfa_[A-Za-z0-9_-]{40,}$/, 'an opaque temp token')
  return token
}

async function assertTokenNeverSent(stack: Stack, seen: { requests: string[]; navigations: string[] }, token: string, finalUrl: string): Promise<void> {
  assert.ok(token.length > 20)
  for (const url of seen.requests) assert.equal(url.includes(token) || url.includes(encodeURIComponent(token)), false, `a request carried the temp token: ${url}`)
  for (const url of [...seen.navigations, finalUrl]) {
    const u = new URL(url)
    assert.equal(u.search.includes(token) || decodeURIComponent(u.search).includes(token), false, `temp token in a query string: ${url}`)
    assert.equal(u.pathname.includes(token), false, `temp token in a path: ${url}`)
  }
  assert.ok(seen.navigations.some((url) => new URL(url).pathname === '/mfa'), `went through /mfa: ${seen.navigations.join(' ')}`)
  // a marker request last: once its log line is in the output, every line before it is too
  const marker = `log-marker-${randomUUID()}`
  await (await fetch(`${stack.url}/authsvc/health?${marker}`)).arrayBuffer()
  assert.ok(await poll(async () => stack.output().includes(marker), 10_000), 'the marker line reached the output')
  assert.equal(stack.output().includes(token), false, 'the stand-in / sidecar output never contains the temp token')
}

describe('/mfa page in chromium', { concurrency: false }, () => {
  let stack: Stack
  let browser: Browser
  let admin: string
  let bobSecret: string

  before(async () => {
    // the access log: every request is logged, so the no-token check has lines to search (and a marker to wait for)
    ;[stack, browser] = await Promise.all([startStack({ env: { AUTHSVC_LOG_LEVEL: 'info', AUTHSVC_ACCESS_LOG: '1' } }), launchChromium()])
    assert.equal((await register(stack, 'root')).status, 201)
    admin = (await login(stack, 'root')).jwt
    assert.equal((await register(stack, 'bob', { bearer: admin })).status, 201)
    const bob = (await login(stack, 'bob')).jwt
    const post = (path: string, body: unknown) =>
      fetch(stack.url + path, { method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json', ...bearer(bob) }, body: JSON.stringify(body) })
    const setup = await json(await post('/authsvc/api/mfa/setup', {}))
    bobSecret = setup.secret
    const enabled = await post('/authsvc/api/mfa/verify-setup', { code: totpAt(bobSecret, Date.now()) })
    assert.equal(enabled.status, 200, await enabled.text())
  })
  after(async () => {
    await browser?.close()
    if (stack) await destroyStack(stack)
  })

  it('a user with MFA: /login → /mfa (token only in the fragment); a wrong code shows an error; the right one lands on /', async () => {
    const context = await browser.newContext()
    const page = await context.newPage()
    const seen = recordUrls(page)
    await page.goto(`${stack.url}/login`)
    await page.fill('#username', 'bob')
    await page.fill('#password', PASSWORD)
    const loginAnswer = page.waitForResponse((r) => new URL(r.url()).pathname === '/login' && r.request().method() === 'POST')
    await page.click('#submit')
    assert.equal((await loginAnswer).status(), 200)
    const token = await tempTokenFromFragment(page, seen, 'verify')

    await page.locator('#verify').waitFor({ state: 'visible' })
    assert.equal(page.url(), `${stack.url}/mfa`, 'the page drops the fragment from the address bar and history')
    assert.ok(seen.navigations.some((url) => url.includes('#verify:')), 'the token came in the fragment')
    assert.equal((await context.cookies()).some((c) => c.name === 'jwt_token'), false, 'no session before the code')

    await page.fill('#code', wrongCode(bobSecret, Date.now()))
    await page.click('#verify-submit')
    await page.locator('#code-error').waitFor({ state: 'visible' })
    assert.match(await page.locator('#code-error').innerText(), /Invalid MFA code/)
    assert.equal(page.url(), `${stack.url}/mfa`, 'still on the MFA page')

    // the step after the one used at enrolment: within the ±1 window, and newer
    await page.fill('#code', totpAt(bobSecret, Date.now(), 1))
    await page.click('#verify-submit')
    await page.waitForURL(`${stack.url}/`)
    assert.match(await page.content(), /ComfyUI/i, 'the ComfyUI page is served')
    const session = (await context.cookies()).find((c) => c.name === 'jwt_token')
    assert.ok(session?.httpOnly, 'an HttpOnly session cookie')

    await new Promise((r) => setTimeout(r, 200)) // let the sidecar's log lines arrive through the host's output
    await assertTokenNeverSent(stack, seen, token, page.url())
    await context.close()
  })

  it('a role that requires MFA: login → setup view (QR, secret, 10 backup codes) → code → MFA on, lands on /', async () => {
    const put = async (path: string, body: unknown) =>
      fetch(stack.url + path, { method: 'PUT', headers: { 'Content-Type': 'application/json', Accept: 'application/json', ...bearer(admin) }, body: JSON.stringify(body) })
    const groups = (await json(await fetch(`${stack.url}/authsvc/api/groups`, { headers: { Accept: 'application/json', ...bearer(admin) } }))).groups
    groups.user.mfa_required = true
    const saved = await put('/authsvc/api/groups', { groups })
    assert.equal(saved.status, 200, await saved.text())
    assert.equal((await register(stack, 'carol', { bearer: admin })).status, 201)

    const context = await browser.newContext({ viewport: { width: 900, height: 1100 } })
    const page = await context.newPage()
    const seen = recordUrls(page)
    await page.goto(`${stack.url}/login`)
    await page.fill('#username', 'carol')
    await page.fill('#password', PASSWORD)
    const loginAnswer = page.waitForResponse((r) => new URL(r.url()).pathname === '/login' && r.request().method() === 'POST')
    const setupAnswer = page.waitForResponse((r) => new URL(r.url()).pathname.endsWith('/api/mfa/setup') && r.request().method() === 'POST')
    await page.click('#submit')
    assert.equal((await loginAnswer).status(), 200)
    const token = await tempTokenFromFragment(page, seen, 'setup')
    const setup = await (await setupAnswer).json()

    await page.locator('#setup').waitFor({ state: 'visible' })
    await page.locator('#qr svg').waitFor({ state: 'visible' })
    assert.equal(page.url(), `${stack.url}/mfa`)
    const box = await page.locator('#qr svg').boundingBox()
    assert.ok(box && box.width >= 100 && box.height >= 100, `the QR code is drawn at a scannable size: ${JSON.stringify(box)}`)
    const secret = (await page.locator('#secret').innerText()).trim()
    assert.match(secret, /^[A-Z2-7]{16,}=*$/, `a base32 secret is shown: ${secret}`)
    assert.equal(secret, setup.secret, 'the secret shown is the one enrolled')
    // the QR as drawn on the page, read back by an independent decoder, is the provisioning URI
    await page.locator('#qr svg').screenshot({ path: QR_SHOT })
    const decoded = execFileSync(ZBARIMG, ['--raw', '-q', QR_SHOT], { encoding: 'utf8' }).trim()
    assert.equal(decoded, setup.provisioning_uri, 'the QR code encodes the provisioning URI')
    const uri = new URL(decoded)
    assert.equal(uri.protocol, 'otpauth:')
    assert.equal(uri.searchParams.get('secret'), secret, 'an app scanning the QR gets the secret shown')
    assert.match(decodeURIComponent(uri.pathname), /carol$/, 'labelled with the account')
    const codes = await page.locator('#backup-codes li').allInnerTexts()
    assert.equal(codes.length, 10, 'ten backup codes')
    assert.equal(new Set(codes).size, 10, 'all different')
    for (const code of codes) assert.match(code.trim(), /^[A-Za-z0-9-]{10,12}$/)
    assert.equal(await page.locator('#setup-error').isVisible(), false)
    assert.equal((await context.cookies()).some((c) => c.name === 'jwt_token'), false, 'no session before MFA is set up')
    await page.screenshot({ path: SCREENSHOT, fullPage: true })

    await page.fill('#setup-code', totpAt(secret, Date.now()))
    await page.click('#setup-submit')
    await page.waitForURL(`${stack.url}/`)
    assert.match(await page.content(), /ComfyUI/i)
    assert.ok((await context.cookies()).find((c) => c.name === 'jwt_token')?.httpOnly, 'signed in with an HttpOnly session cookie')

    const users = (await json(await fetch(`${stack.url}/authsvc/api/users`, { headers: { Accept: 'application/json', ...bearer(admin) } }))).users
    assert.equal(users.find((u: { username: string }) => u.username === 'carol').mfa_enabled, true, 'MFA is on')

    await assertTokenNeverSent(stack, seen, token, page.url())
    await context.close()
  })
})
