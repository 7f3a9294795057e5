/**
 * The readable API page (/authsvc/admin/api) in a real browser, through the real gate: the admin
 * reaches it from the panel and sees every operation of the document with its access level, the
 * filter narrows the list, each operation opens to its body and answers; the page passes axe in
 * every view and its CSP reports nothing. A user is refused with the 403 page, and gets the JSON.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import type { Browser, BrowserContext } from 'playwright-core'
import { destroyStack, startStack, type Stack } from '../helpers/stack.js'
import { PASSWORD, bearer, json, login, register } from '../helpers/client.js'
import { adminContext, launchChromium, shootAndCheck, signInOnPage, watchCsp } from './browser-kit.js'

describe('the API page', { concurrency: false }, () => {
  let stack: Stack
  let browser: Browser
  let root: BrowserContext
  let rootJwt: string
  let bobJwt: string
  before(async () => {
    ;[stack, browser] = await Promise.all([startStack(), launchChromium()])
    assert.equal((await register(stack, 'root')).status, 201)
    rootJwt = (await login(stack, 'root')).jwt
    assert.equal((await register(stack, 'bob', { bearer: rootJwt })).status, 201)
    bobJwt = (await login(stack, 'bob')).jwt
    root = await adminContext(browser, stack.url, 'root', PASSWORD)
  })
  after(async () => {
    await browser?.close()
    if (stack) await destroyStack(stack)
  })

  it('the admin: from the panel to every operation, filtered, opened; axe and CSP clean', async () => {
    const doc = await json(await fetch(`${stack.url}/authsvc/api/openapi.json`, { headers: { ...bearer(rootJwt), Accept: 'application/json' } }))
    const operations = Object.entries(doc.paths as Record<string, Record<string, { 'x-authsvc-auth': string }>>)
      .flatMap(([path, item]) => Object.entries(item).map(([method, op]) => ({ path, method, level: op['x-authsvc-auth'] })))
    assert.ok(operations.length > 40)

    const page = await root.newPage()
    const csp = watchCsp(page)
    await page.goto(`${stack.url}/authsvc/admin`)
    await page.locator('body[data-ready=true]').waitFor()
    await page.getByRole('link', { name: 'API' }).click()
    await page.waitForURL(`${stack.url}/authsvc/admin/api`)
    await page.locator('body[data-ready=true]').waitFor()
    assert.equal(await page.locator('details.op').count(), operations.length, 'one entry per operation of the document')
    assert.equal(await page.locator('#api-count').innerText(), `${operations.length} operations`)
    const levels = await page.locator('details.op summary .level').allInnerTexts()
    assert.deepEqual(levels.sort(), operations.map((o) => o.level).sort(), 'each shows its access level')
    await shootAndCheck(page, 'api')

    // a user's shared items (a role's have routes of their own: /api/roles/{role}/shared-items)
    await page.getByLabel('Path, method, access level or words of the summary').fill('{username}/shared-items')
    assert.equal(await page.locator('#api-count').innerText(), '3 operations')
    assert.equal(await page.locator('details.op:not([hidden])').count(), 3)
    const grant = page.locator('details.op:not([hidden])', { hasText: 'POST' })
    await grant.locator('summary').click()
    const opened = await grant.innerText()
    assert.match(opened, /the admin role/)
    assert.match(opened, /\/api\/authsvc\/api\/users\/\{username\}\/shared-items/, 'the twin is named')
    assert.match(opened, /item_name: string/, 'the body outline')
    assert.match(opened, /4XX/)
    await shootAndCheck(page, 'api-filtered')
    await page.close()
    assert.deepEqual(csp, [], 'no Content-Security-Policy violation')
  })

  it('a user: the 403 page in the browser, the JSON with a token', async () => {
    const bob = await browser.newContext()
    const signIn = await bob.newPage()
    await signInOnPage(signIn, stack.url, 'bob', PASSWORD)
    const answer = await signIn.goto(`${stack.url}/authsvc/admin/api`)
    assert.equal(answer?.status(), 403)
    assert.match(await signIn.locator('#refusal').innerText(), /admin/)
    await bob.close()
    const doc = await fetch(`${stack.url}/api/authsvc/api/openapi.json`, { headers: { ...bearer(bobJwt), Accept: 'application/json' } })
    assert.equal(doc.status, 200)
    assert.equal((await json(doc)).openapi, '3.1.0')
  })
})
