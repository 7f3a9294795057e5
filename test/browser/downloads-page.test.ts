/**
 * The downloads block of the account page and the Downloads section of the admin panel
 * (issue 22 item 7), clicked in chromium through the real stack (the stand-in host, the real
 * plugin and sidecar) against the stand-ins of Civitai and Hugging Face: a key saved is never
 * shown again; a pasted URL becomes a job with a progress bar that ends Done; a paused one is
 * cancelled from its row (at 1280 and at 390 px); a failed one says why in words; a user without can_download_models
 * never sees the block; the admin sees everyone's jobs with whose they are. Light and dark, 1280
 * and 390 px, no serious axe finding, no CSP violation.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { once } from 'node:events'
import type { Browser } from 'playwright-core'
import { destroyStack, startStack, type Stack } from '../helpers/stack.js'
import { PASSWORD, apiToken, bearer, json, register } from '../helpers/client.js'
import { launchChromium, shootAndCheck, signedInPage, watchCsp } from './browser-kit.js'
import { startDownloadStandins, type DownloadStandins } from '../helpers/download-sources.js'

describe('the downloads page in chromium', { concurrency: false }, () => {
  let stack: Stack
  let browser: Browser
  let src: DownloadStandins
  const token: Record<string, string> = {}
  const csp: string[][] = []

  before(async () => {
    src = await startDownloadStandins()
    ;[stack, browser] = await Promise.all([
      startStack({ config: { model_download: { civitai_base_url: src.civitaiUrl, huggingface_base_url: src.huggingfaceUrl, allow_private_hosts: true, max_retries: 0 } } }),
      launchChromium(),
    ])
    assert.equal((await register(stack, 'root')).status, 201)
    token.root = await apiToken(stack, 'root')
    const groups = (await json(await fetch(`${stack.url}/authsvc/api/groups`, { headers: bearer(token.root) }))).groups
    const put = await fetch(`${stack.url}/authsvc/api/groups`, { method: 'PUT', headers: { ...bearer(token.root), 'content-type': 'application/json' }, body: JSON.stringify({ groups: { ...groups, downloader: { ...groups.user, can_download_models: true } } }) })
    assert.equal(put.status, 200, await put.text())
    assert.equal((await register(stack, 'alice', { bearer: token.root, role: 'downloader' })).status, 201)
    assert.equal((await register(stack, 'bob', { bearer: token.root })).status, 201)
  })
  after(async () => {
    await browser?.close()
    if (stack) await destroyStack(stack)
    await src?.close()
  })

  it('alice saves a key (never shown again), downloads from a pasted URL, cancels a paused one and reads why one failed', async () => {
    src.civitai.set(1, [{ id: 1, name: 'done.safetensors', size: 200 * 1024, seed: 1 }])
    src.civitai.set(2, [{ id: 2, name: 'paused.safetensors', size: 2 * 1024 * 1024, seed: 2, pauseAt: 1024 * 1024 }])
    src.civitai.set(3, [{ id: 3, name: 'early.safetensors', size: 1000, seed: 3, error: { status: 403 } }])
    src.civitai.set(4, [{ id: 4, name: 'phone-paused.safetensors', size: 2 * 1024 * 1024, seed: 4, pauseAt: 1024 * 1024 }])
    const page = await signedInPage(await browser.newContext(), stack.url, 'alice', PASSWORD, '/authsvc/account')
    csp.push(watchCsp(page))
    await page.locator('#downloads[data-ready=true]').waitFor()
    assert.equal(await page.locator('#download-folder').inputValue(), 'checkpoints')

    await page.getByLabel('Key', { exact: true }).fill('civ-key-shown-never')
    await page.getByRole('button', { name: 'Save key' }).click()
    await page.locator('#download-key-saved', { hasText: 'Civitai key saved.' }).waitFor()
    await page.locator('#download-keys li[data-key-source=civitai]', { hasText: 'a key is stored' }).waitFor()
    assert.equal(await page.getByLabel('Key', { exact: true }).inputValue(), '')
    assert.ok(!(await page.content()).includes('civ-key-shown-never'))

    await page.getByLabel('Paste a URL').fill(`${src.civitaiUrl}/models/9?modelVersionId=1`)
    await page.getByRole('button', { name: 'Download', exact: true }).click()
    const done = page.locator('#download-rows tr', { hasText: 'done.safetensors' })
    await done.locator('.tag', { hasText: 'Done' }).waitFor()
    assert.equal(await done.locator('progress').getAttribute('value'), '100')

    const paused = once(src.events, 'paused')
    await page.getByLabel('Paste a URL').fill(`${src.civitaiUrl}/api/download/models/2`)
    await page.getByRole('button', { name: 'Download', exact: true }).click()
    await paused
    const running = page.locator('#download-rows tr', { hasText: 'paused.safetensors' })
    await running.locator('.tag', { hasText: 'Downloading' }).waitFor()
    await running.locator('progress[value="50"]').waitFor()

    await page.getByLabel('Paste a URL').fill(`${src.civitaiUrl}/api/download/models/3`)
    await page.getByRole('button', { name: 'Download', exact: true }).click()
    const failed = page.locator('#download-rows tr', { hasText: 'early.safetensors' })
    await failed.locator('.tag', { hasText: 'Failed' }).waitFor()
    assert.match(await failed.locator('[data-job-error]').innerText(), /early access/)

    await page.locator('#downloads').scrollIntoViewIfNeeded()
    await shootAndCheck(page, 'account-downloads')
    await running.getByRole('button', { name: 'Cancel the download of paused.safetensors' }).click()
    await running.locator('.tag', { hasText: 'Cancelled' }).waitFor()

    // the same at phone width: a paused download cancelled from its row
    await page.setViewportSize({ width: 390, height: 844 })
    const pausedAgain = once(src.events, 'paused')
    await page.getByLabel('Paste a URL').fill(`${src.civitaiUrl}/api/download/models/4`)
    await page.getByRole('button', { name: 'Download', exact: true }).click()
    await pausedAgain
    const phone = page.locator('#download-rows tr', { hasText: 'phone-paused.safetensors' })
    await phone.locator('progress[value="50"]').waitFor()
    await phone.getByRole('button', { name: 'Cancel the download of phone-paused.safetensors' }).click()
    await phone.locator('.tag', { hasText: 'Cancelled' }).waitFor()

    await page.getByRole('button', { name: 'Clear key' }).click()
    await page.locator('#download-keys li[data-key-source=civitai]', { hasText: 'no key' }).waitFor()
    await page.close()
  })

  it('bob, without can_download_models, has no downloads block', async () => {
    const page = await signedInPage(await browser.newContext(), stack.url, 'bob', PASSWORD, '/authsvc/account')
    const answered = page.waitForResponse((r) => r.url().includes('/authsvc/api/model-download/folders'))
    await page.reload()
    assert.equal((await answered).status(), 403)
    await page.locator('#me-username', { hasText: 'bob' }).waitFor()
    assert.equal(await page.locator('#downloads').isHidden(), true)
    await page.close()
  })

  it('the admin panel lists everyone\'s jobs with whose they are, and cancels one of alice\'s at 1280 px and one at 390 px', async () => {
    // two downloads of alice's that hold at half way (seeded through her API token; the admin's steps are clicks)
    const alice = await apiToken(stack, 'alice')
    for (const id of [5, 6]) {
      src.civitai.set(id, [{ id, name: `held-${id}.safetensors`, size: 2 * 1024 * 1024, seed: id, pauseAt: 1024 * 1024 }])
      const res = await fetch(`${stack.url}/authsvc/api/model-download/download`, { method: 'POST', headers: { ...bearer(alice), 'content-type': 'application/json' }, body: JSON.stringify({ url: `${src.civitaiUrl}/api/download/models/${id}`, folder_type: 'checkpoints' }) })
      assert.ok(res.status < 300, await res.text())
    }
    const page = await signedInPage(await browser.newContext(), stack.url, 'root', PASSWORD, '/authsvc/admin')
    csp.push(watchCsp(page))
    await page.locator('#downloads-admin[data-ready=true]').waitFor({ state: 'attached' })
    await page.getByRole('navigation', { name: 'Admin sections' }).getByRole('link', { name: 'Downloads', exact: true }).click()
    await page.locator('#downloads-admin:not([hidden])').waitFor()
    const rows = page.locator('#admin-download-rows tr')
    assert.equal(await rows.count(), 6)
    for (const name of ['done.safetensors', 'paused.safetensors', 'early.safetensors', 'phone-paused.safetensors', 'held-5.safetensors', 'held-6.safetensors']) {
      assert.equal(await page.locator('#admin-download-rows tr', { hasText: name }).locator('td').first().innerText(), 'alice')
    }
    await shootAndCheck(page, 'admin-downloads')
    for (const [width, id] of [[1280, 5], [390, 6]]) {
      await page.setViewportSize({ width, height: width < 600 ? 844 : 900 })
      const row = page.locator('#admin-download-rows tr', { hasText: `held-${id}.safetensors` })
      await row.getByRole('button', { name: `Cancel alice's download of held-${id}.safetensors` }).click()
      await row.locator('.tag', { hasText: 'Cancelled' }).waitFor()
    }
    // alice's page: the model she downloaded is hers on this ComfyUI only, and says so
    await page.setViewportSize({ width: 1280, height: 900 })
    await page.goto(`${stack.url}/authsvc/admin#users/alice`)
    await page.locator('#user-page[data-ready=alice]').waitFor()
    assert.match(await page.locator('#user-grants li', { hasText: 'checkpoints/done.safetensors' }).innerText(), /downloaded by alice on this ComfyUI, .* \(granted here only\)$/)
    assert.deepEqual(csp.flat(), [])
  })
})
