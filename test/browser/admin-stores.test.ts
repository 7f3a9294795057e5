/**
 * The admin panel's Data stores section (issue 28 item 8), in Debian chromium through the
 * stand-in host, the real plugin and the real sidecar: an admin sees where users and tokens are
 * kept, picks PostgreSQL for users (a bad URL is refused next to its field), saves a URL with a
 * password and never sees the password again (the page, the reload, the processes' output at
 * debug level), keeps it by leaving the field empty, moves API tokens to the legacy JSON file and
 * back to the users' store (at 1280 and at 390 px); config.json holds what was saved.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Browser, Page } from 'playwright-core'
import { destroyStack, startStack, type Stack } from '../helpers/stack.js'
import { PASSWORD, register } from '../helpers/client.js'
import { adminContext, launchChromium, shootAndCheck, watchCsp } from './browser-kit.js'

const PG_PASSWORD = 'Pg-Panel-Secret-7'
const PG_URL = `postgres://app:${PG_PASSWORD}@db.example:5432/authsvc`

describe('admin panel: data stores', { concurrency: false }, () => {
  let stack: Stack
  let browser: Browser
  let page: Page
  let csp: string[]
  const config = () => JSON.parse(readFileSync(join(stack.dataDir, 'config.json'), 'utf8'))

  before(async () => {
    ;[stack, browser] = await Promise.all([startStack({ env: { AUTHSVC_LOG_LEVEL: 'debug' } }), launchChromium()])
    assert.equal((await register(stack, 'root')).status, 201)
    const context = await adminContext(browser, stack.url, 'root', PASSWORD)
    page = await context.newPage()
    csp = watchCsp(page)
    await page.goto(`${stack.url}/authsvc/admin#stores`)
    await page.locator('#token-store-form[data-ready=true]').waitFor()
  })
  after(async () => {
    await browser?.close()
    if (stack) await destroyStack(stack)
  })

  const section = () => page.locator('#stores')
  const usersForm = () => page.locator('#users-db-form')
  const tokensForm = () => page.locator('#token-store-form')

  it('shows the defaults: SQLite in the data dir, tokens with the users; a jump link leads here', async () => {
    assert.equal(await page.locator('a[href="#stores"]').innerText(), 'Data stores')
    assert.equal(await usersForm().getByLabel('Backend').inputValue(), 'sqlite')
    assert.equal(await usersForm().getByLabel('SQLite file').inputValue(), join(stack.dataDir, 'authsvc.sqlite'))
    assert.equal(await usersForm().getByLabel('PostgreSQL URL').isVisible(), false, 'only the chosen backend\'s fields')
    assert.equal(await tokensForm().getByLabel('Backend').inputValue(), 'users')
    assert.match(await section().locator('#users-db-level').innerText(), /^Encryption: secrets .* are encrypted \(set when a store is made\)\.$/)
    await shootAndCheck(page, 'admin-stores')
    assert.deepEqual(csp, [], 'no Content-Security-Policy violation')
  })

  it('a URL of the wrong kind is refused next to its field, nothing saved', async () => {
    await usersForm().getByLabel('Backend').selectOption('postgres')
    const url = usersForm().getByLabel('PostgreSQL URL')
    assert.equal(await url.isVisible(), true)
    await url.fill(`http://app:${PG_PASSWORD}@db.example/authsvc`)
    await page.getByRole('button', { name: 'Save users store' }).click()
    await page.locator('#users-db-postgres[aria-invalid=true]').waitFor()
    assert.match(await page.locator('#users-db-postgres-error').innerText(), /postgres_url must start with postgres:\/\/ or postgresql:\/\//)
    assert.ok(!(await page.locator('#users-db-postgres-error').innerText()).includes(PG_PASSWORD))
    assert.equal(await url.evaluate((e) => e === document.activeElement), true, 'the field has the focus')
  })

  it('saves PostgreSQL for users; the password is never shown again, the restart is asked for', async () => {
    await usersForm().getByLabel('PostgreSQL URL').fill(PG_URL)
    await page.getByRole('button', { name: 'Save users store' }).click()
    await page.locator('#users-db-status:not([hidden])').waitFor()
    assert.equal(await page.locator('#users-db-status').innerText(), 'Saved: users go to postgres when ComfyUI restarts.')
    assert.equal(await usersForm().getByLabel('PostgreSQL URL').inputValue(), '')
    assert.equal(await page.locator('#users-db-postgres-saved').innerText(), 'Saved: postgres://app:***@db.example:5432/authsvc. Leave empty to keep it.')
    assert.match(await page.locator('#users-db-level').innerText(), /restart ComfyUI to use them/)
    assert.deepEqual(config().store, { backend: 'postgres', postgres_url: PG_URL })
    assert.ok(!(await page.content()).includes(PG_PASSWORD), 'the password is nowhere in the page')
    await page.reload()
    await page.locator('#token-store-form[data-ready=true]').waitFor()
    assert.equal(await usersForm().getByLabel('Backend').inputValue(), 'postgres')
    assert.ok(!(await page.content()).includes(PG_PASSWORD), 'nor after a reload')
  })

  it('saving with the URL field left empty keeps the saved URL', async () => {
    await page.getByRole('button', { name: 'Save users store' }).click()
    await page.locator('#users-db-status:not([hidden])').waitFor()
    assert.equal(config().store.postgres_url, PG_URL)
  })

  for (const width of [1280, 390]) {
    it(`${width} px: API tokens to the legacy JSON file, then back to the users' store`, async () => {
      await page.setViewportSize({ width, height: width < 600 ? 844 : 900 })
      const jsonPath = join(stack.dataDir, `tokens-${width}.json`)
      await tokensForm().getByLabel('Backend').selectOption('json')
      await tokensForm().getByLabel('JSON file').fill(jsonPath)
      await page.getByRole('button', { name: 'Save token store' }).click()
      await page.locator('#token-store-status', { hasText: 'Saved: API tokens go to json when ComfyUI restarts.' }).waitFor()
      assert.deepEqual(config().store.tokens, { backend: 'json', json_path: jsonPath })
      await tokensForm().getByLabel('Backend').selectOption('users')
      await page.getByRole('button', { name: 'Save token store' }).click()
      await page.locator('#token-store-status:has-text("the users\' store")').waitFor()
      assert.deepEqual(config().store.tokens, {})
      assert.equal(config().store.postgres_url, PG_URL, 'the users\' store is untouched')
    })
  }

  it('the password never reached the processes\' output, even at debug level', () => {
    assert.ok(!stack.output().includes(PG_PASSWORD))
  })
})
