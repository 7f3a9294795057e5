/**
 * The Storage section of the admin panel, the update line at its top, and the storage block of
 * the account page (issue 24 items 4 and 5), clicked in chromium through the real stack (the
 * stand-in host, the real plugin and sidecar; the update source a loopback stand-in).
 *
 * alice's files are written by the host itself (a workflow through /userdata, an image through
 * /upload/image); her account page shows them; the admin picks her, sees her folders, and
 * empties them through a dialog that names her and what goes, whose button stays off until her
 * name is typed; afterwards her files are gone and bob's are not. No CSP violation, no serious
 * axe finding on either page.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { once } from 'node:events'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { existsSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import type { Browser, Page } from 'playwright-core'
import { destroyStack, poll, startStack, type Stack } from '../helpers/stack.js'
import { PASSWORD, apiToken, bearer, json, register } from '../helpers/client.js'
import { SCREENSHOTS, axeViolations, launchChromium, shootAndCheck, signedInPage, watchCsp } from './browser-kit.js'

const NEWER = '98.7.6'

const serious = async (page: Page) => (await axeViolations(page)).map((v) => `${v.id}: ${v.help} at ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`)

describe('storage in the admin panel and on the account page, in chromium', { concurrency: false }, () => {
  let stack: Stack
  let browser: Browser
  const source = createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ 'dist-tags': { latest: NEWER } })))
  const token: Record<string, string> = {}
  const id: Record<string, string> = {}
  const csp: string[][] = []

  before(async () => {
    source.listen(0, '127.0.0.1')
    await once(source, 'listening')
    const url = `http://127.0.0.1:${(source.address() as AddressInfo).port}/authsvc`
    ;[stack, browser] = await Promise.all([startStack({ multiUser: true, config: { update_check: { url } } }), launchChromium()])
    assert.equal((await register(stack, 'root')).status, 201)
    token.root = await apiToken(stack, 'root')
    for (const name of ['alice', 'bob']) {
      assert.equal((await register(stack, name, { bearer: token.root })).status, 201)
      token[name] = await apiToken(stack, name)
      id[name] = (await json(await fetch(`${stack.url}/authsvc/api/me`, { headers: bearer(token[name]) }))).user_id
      const save = await fetch(`${stack.url}/userdata/${encodeURIComponent(`workflows/${name}.json`)}`, { method: 'POST', headers: bearer(token[name]), body: `{"owner":"${name}"}` })
      assert.equal(save.status, 200, await save.text())
    }
    const form = new FormData()
    form.append('image', new Blob([Buffer.from('not really a png')], { type: 'image/png' }), 'mine.png')
    const upload = await fetch(`${stack.url}/upload/image`, { method: 'POST', headers: bearer(token.alice), body: form })
    assert.equal(upload.status, 200, await upload.text())
  })
  after(async () => {
    await browser?.close()
    source.closeAllConnections()
    source.close()
    if (stack) await destroyStack(stack)
  })

  it('alice\'s account page shows her own storage', async () => {
    const page = await signedInPage(await browser.newContext(), stack.url, 'alice', PASSWORD, '/authsvc/account')
    csp.push(watchCsp(page))
    await page.locator('#storage[data-ready=true]').waitFor()
    assert.equal(await page.locator('#storage-workflows').innerText(), '1 (17 B)')
    assert.equal(await page.locator('#storage-input').innerText(), '1 file, 16 B')
    assert.equal(await page.locator('#storage-output').innerText(), 'none yet')
    assert.equal(await page.locator('#storage-userdata').innerText(), '1 file, 17 B')
    assert.ok(!(await page.locator('#storage').innerText()).includes(stack.baseDir), 'no host path on her page')
    await page.locator('#storage').scrollIntoViewIfNeeded()
    await shootAndCheck(page, 'account-storage')
  })

  it('the admin panel says an update is available once the background check learned it', async () => {
    const status = async () => json(await fetch(`${stack.url}/authsvc/api/update-status`, { headers: bearer(token.root) }))
    assert.ok(await poll(async () => (await status()).mode === 'online', 15_000), 'the job asked the source')
    const page = await signedInPage(await browser.newContext(), stack.url, 'root', PASSWORD, '/authsvc/admin')
    csp.push(watchCsp(page))
    await page.locator('#update-status[data-mode=online]').waitFor()
    assert.match(await page.locator('#update-status').innerText(), new RegExp(`^authsvc ${NEWER.replace(/\./g, '\\.')} is available; this server runs \\d+\\.\\d+\\.\\d+\\.$`))
    await page.close()
  })

  it('the admin sees alice\'s folders and empties them after typing her name (1280 px); bob\'s stay, and are emptied at 390 px', async () => {
    const page = await signedInPage(await browser.newContext(), stack.url, 'root', PASSWORD, '/authsvc/admin')
    csp.push(watchCsp(page))
    await page.locator('#storage[data-ready=true]').waitFor({ state: 'attached' })
    await page.getByRole('navigation', { name: 'Admin sections' }).getByRole('link', { name: 'Storage', exact: true }).click()
    assert.equal(await page.locator('#storage-owners').innerText(), 'Users with folders of their own: alice, bob.')
    await page.locator('#storage').getByLabel('User', { exact: true }).selectOption('alice')
    await page.getByRole('button', { name: 'Show storage' }).click()
    await page.locator('#storage-detail-title', { hasText: 'Storage of alice' }).waitFor()
    assert.equal(await page.locator('#storage-rows tr[data-kind=input] td').nth(1).innerText(), '1')
    assert.match(await page.locator('#storage-rows tr[data-kind=input] td').first().innerText(), new RegExp(`/input/u_${id.alice}$`), 'the admin sees the host path')
    assert.equal(await page.locator('#storage-workflows').innerText(), '1 workflow (17 B); 2 files in all.')
    await shootAndCheck(page, 'admin-storage') // axe in every view, and screenshots to look at

    await page.getByRole('button', { name: 'Empty these folders…' }).click()
    const dialog = page.getByRole('dialog', { name: 'Empty the folders of alice?' })
    await dialog.waitFor()
    assert.equal(await page.locator('#purge-what').innerText(), '2 files (33 B) are removed from the folders of alice, 1 of them a workflow: workflows and settings, uploads (input).')
    const ok = page.getByRole('button', { name: 'Empty the folders' })
    assert.equal(await ok.isDisabled(), true)
    await page.getByLabel('Type alice to confirm').fill('alic')
    assert.equal(await ok.isDisabled(), true, 'not until her whole name is typed')
    await page.getByLabel('Type alice to confirm').fill('bob')
    assert.equal(await ok.isDisabled(), true)
    assert.deepEqual(await serious(page), [])
    await page.screenshot({ path: join(SCREENSHOTS, 'admin-storage-purge-dialog.png') })
    await page.getByLabel('Type alice to confirm').fill('alice')
    await ok.click()
    await page.locator('#storage-status', { hasText: 'The folders of alice were emptied: 2 files (33 B) removed.' }).waitFor()
    await page.locator('#storage-workflows', { hasText: '0 workflows (0 B); 0 files in all.' }).waitFor()
    assert.equal(await page.getByRole('button', { name: 'Empty these folders…' }).isDisabled(), true, 'nothing left to empty')

    assert.deepEqual(readdirSync(join(stack.baseDir, 'user', id.alice)), [])
    assert.deepEqual(readdirSync(join(stack.baseDir, 'input', `u_${id.alice}`)), [])
    assert.ok(existsSync(join(stack.baseDir, 'user', id.bob, 'workflows', 'bob.json')), 'bob\'s workflow stays')

    // the same at phone width: bob's folders, emptied after typing his name
    await page.setViewportSize({ width: 390, height: 844 })
    await page.locator('#storage').getByLabel('User', { exact: true }).selectOption('bob')
    await page.getByRole('button', { name: 'Show storage' }).click()
    await page.locator('#storage-detail-title', { hasText: 'Storage of bob' }).waitFor()
    await page.locator('#storage-workflows', { hasText: '1 workflow (15 B); 1 file in all.' }).waitFor()
    await page.getByRole('button', { name: 'Empty these folders…' }).click()
    await page.getByRole('dialog', { name: 'Empty the folders of bob?' }).waitFor()
    const confirm = page.getByRole('button', { name: 'Empty the folders' })
    assert.equal(await confirm.isDisabled(), true)
    await page.getByLabel('Type bob to confirm').fill('bob')
    await confirm.click()
    await page.locator('#storage-status', { hasText: /^The folders of bob were emptied: 1 file \(15 B\) removed\.$/ }).waitFor()
    assert.deepEqual(readdirSync(join(stack.baseDir, 'user', id.bob)), [])
    assert.deepEqual(csp.flat(), [])
  })
})
