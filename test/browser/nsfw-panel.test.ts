/**
 * The Content safety section of the admin panel (issue 23), clicked in chromium through the real
 * stack (the stand-in host, the real plugin and sidecar, the deterministic test classifier): the
 * admin marks an input image NSFW by name, sees its row, unmarks it from the row (at 1280 and 390 px),
 * starts a scan and sees its finished count and the detector's tags; at 390 px clears the detector's
 * tags and scans again, classifying anew. No CSP violation, no serious axe finding.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Browser, BrowserContext, Page } from 'playwright-core'
import { destroyStack, startStack, type Stack } from '../helpers/stack.js'
import { PASSWORD, register } from '../helpers/client.js'
import { cleanPng, nsfwPng } from '../helpers/nsfw-images.js'
import { adminContext, axeViolations, launchChromium, watchCsp } from './browser-kit.js'

describe('the Content safety section of the admin panel, in chromium', { concurrency: false }, () => {
  let stack: Stack
  let browser: Browser
  let context: BrowserContext
  let page: Page
  let csp: string[]

  before(async () => {
    ;[stack, browser] = await Promise.all([
      startStack({ env: { AUTHSVC_NSFW_TEST_CLASSIFIER: '1' }, config: { nsfw: { enabled: true, classifier: 'test' } } }),
      launchChromium(),
    ])
    const input = join(stack.baseDir, 'input')
    mkdirSync(input, { recursive: true })
    writeFileSync(join(input, 'beach.png'), cleanPng(1))
    writeFileSync(join(input, 'flagged.png'), nsfwPng(2))
    assert.equal((await register(stack, 'root')).status, 201)
    context = await adminContext(browser, stack.url, 'root', PASSWORD)
    page = await context.newPage()
    csp = watchCsp(page)
    await page.goto(`${stack.url}/authsvc/admin#content-safety`)
  })
  after(async () => {
    await context?.close()
    await browser?.close()
    if (stack) await destroyStack(stack)
  })

  const section = () => page.locator('#content-safety')

  for (const width of [1280, 390]) {
    it(`${width} px: marks an image by name, shows it, and unmarks it from its row`, async () => {
      await page.setViewportSize({ width, height: width < 600 ? 844 : 900 })
      if (width === 1280) await section().getByText('No image is tagged yet.').waitFor()
      await section().getByLabel('Folder', { exact: true }).selectOption('input')
      await section().getByLabel('File name').fill('beach.png')
      await section().getByRole('button', { name: 'Mark NSFW', exact: true }).click()
      await section().getByText('beach.png is now marked NSFW.').waitFor()
      const row = section().locator('tr[data-file="input/beach.png"]')
      assert.deepEqual(await row.locator('td').allInnerTexts(), ['NSFW', 'marked (root)', '', 'Mark safe'])
      await row.getByRole('button', { name: 'Mark safe: input/beach.png' }).click()
      await section().getByText('input/beach.png is now marked safe.').waitFor()
      assert.equal(await row.locator('td').first().innerText(), 'safe')
    })
  }

  it('an unknown file is refused at its field', async () => {
    await section().getByLabel('File name').fill('nothing-here.png')
    await section().getByRole('button', { name: 'Mark NSFW', exact: true }).click()
    await section().locator('#nsfw-filename[aria-invalid="true"]').waitFor()
  })

  it('1280 px: a scan tags every image and shows its count', async () => {
    await page.setViewportSize({ width: 1280, height: 900 })
    await section().getByRole('button', { name: 'Scan all images' }).click()
    await section().getByText(/Last scan: 2 images, 1 NSFW, 0 unreadable\./).waitFor({ timeout: 20_000 })
    const flagged = section().locator('tr[data-file="input/flagged.png"]')
    assert.deepEqual((await flagged.locator('td').allInnerTexts()).slice(0, 3), ['NSFW', 'detector', 'Porn 97%'])
    // the manual "safe" of the row before stays
    assert.equal(await section().locator('tr[data-file="input/beach.png"] td').first().innerText(), 'safe')
  })

  it('390 px: detector tags are cleared (marked ones stay), and a scan that classifies again tags them anew', async () => {
    await page.setViewportSize({ width: 390, height: 844 })
    await section().getByRole('button', { name: 'Clear detector tags' }).click()
    await section().getByText('1 tags made by the detector or by metadata were removed; marked ones stay.').waitFor()
    await section().locator('tr[data-file="input/flagged.png"]').waitFor({ state: 'detached' })
    assert.equal(await section().locator('tr[data-file="input/beach.png"] td').first().innerText(), 'safe', 'the marked one stays')
    writeFileSync(join(stack.baseDir, 'input', 'dunes.png'), nsfwPng(3))
    await section().getByLabel('Classify tagged images again').check()
    await section().getByRole('button', { name: 'Scan all images' }).click()
    await section().getByText(/Last scan: 3 images, 2 NSFW, 0 unreadable\./).waitFor({ timeout: 20_000 })
    for (const file of ['input/flagged.png', 'input/dunes.png']) {
      assert.deepEqual((await section().locator(`tr[data-file="${file}"] td`).allInnerTexts()).slice(0, 2), ['NSFW', 'detector'], file)
    }
    assert.equal(await section().locator('tr[data-file="input/beach.png"] td').first().innerText(), 'safe', 'a marked image is not classified over')
  })

  it('no CSP violation, no serious accessibility finding', async () => {
    assert.deepEqual(csp, [])
    const serious = (await axeViolations(page)).map((v) => `${v.id}: ${v.help}`)
    assert.deepEqual(serious, [])
  })
})
