/**
 * The admin panel organised by task (issue 26), in Debian chromium through the stand-in host, the
 * real plugin and the real sidecar. Data is seeded through the API before the steps (50 users,
 * 22 sessions of alice from different devices (two are revoked by click), an API token, model files, a workflow of alice's);
 * every step is done by clicking (or the keyboard) on the panel, at 1280 px and at 390 px.
 *
 * - each section has its own address; the navigation links to it; the back button returns;
 * - users: search and filter, a user's page (role, sessions with device and address, tokens,
 *   grants, recent activity), revoke a session, change a role;
 * - refusals before any confirmation: the last administrator, the admin's own account, a role
 *   still in use;
 * - roles in words, with the warning that "See every model" makes grants do nothing;
 * - models: grant to a user or to every user of a role and take back by click (a user's view shows
 *   what their role gives them), refresh the model list;
 * - workflows: publish alice's workflow to the shared set, remove it;
 * - network: block and unblock an address, loopback refused in words beside the field with no
 *   "added" message, a wrong whitelist line named, trusted proxies shown read only;
 * - at 360 and 390 px no element of any section scrolls sideways or clips (code blocks aside; an
 *   input whose value overflows counts), with 51 users and 20 sessions in the tables;
 * - axe (no serious or critical violation) and screenshots of every section at 1280 and 390 px,
 *   light and dark (test-results/screenshots/admin-*.png), with the same data;
 * - the keyboard alone reaches every control of each section and operates them.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { mkdirSync, writeFileSync, existsSync } from 'node:fs'
import { join } from 'node:path'
import type { Browser, BrowserContext, Page, Route } from 'playwright-core'
import { destroyStack, startStack, type Stack } from '../helpers/stack.js'
import { PASSWORD, json, login, register } from '../helpers/client.js'
import { adminContext, launchChromium, shootAndCheck, watchCsp } from './browser-kit.js'

const USER_AGENTS = [
  'Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1',
  'Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Mobile Safari/537.36',
  'Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0',
  'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36 Edg/126.0.0.0',
]
const SECTIONS = ['users', 'roles', 'models', 'workflows', 'network', 'notifications', 'audit', 'storage', 'downloads-admin', 'content-safety', 'stores'] as const
const WIDTHS = [1280, 390] as const

/** Elements (and the page) wider inside than their box: each as a short description. Code blocks may scroll. */
async function overflowing(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const out: string[] = []
    const root = document.documentElement
    if (root.scrollWidth > root.clientWidth) out.push(`the page: ${root.scrollWidth} > ${root.clientWidth}`)
    for (const node of document.body.querySelectorAll('*')) {
      const e = node as HTMLElement
      if (e.closest('pre, .sr-only, [hidden], dialog:not([open])')) continue
      if (e.closest('table.stack') && e.closest('thead')) continue // the header row is kept for screen readers only on a phone
      if (e.getClientRects().length === 0 || e.clientWidth === 0) continue
      if (e.scrollWidth > e.clientWidth) out.push(`${e.tagName.toLowerCase()}${e.id ? `#${e.id}` : ''}${e.className ? `.${String(e.className).replace(/ /g, '.')}` : ''} "${(e.textContent ?? '').trim().slice(0, 40)}": ${e.scrollWidth} > ${e.clientWidth}`)
    }
    return out
  })
}

describe('admin panel by task (issue 26)', { concurrency: false }, () => {
  let stack: Stack
  let browser: Browser
  let root: BrowserContext
  let page: Page
  let rootJwt: string
  let csp: string[] = []
  const shots: string[] = []
  let aliceId = ''

  const nav = (name: string) => page.getByRole('navigation', { name: 'Admin sections' }).getByRole('link', { name, exact: true })
  const go = async (name: string, id: string) => {
    await nav(name).click()
    await page.locator(`section#${id}:not([hidden])`).waitFor()
  }
  const auth = () => ({ Authorization: `Bearer ${rootJwt}`, Accept: 'application/json' })

  before(async () => {
    ;[stack, browser] = await Promise.all([startStack({ noWait: true, config: { trusted_proxies: ['10.9.0.0/16'] } }), launchChromium()])
    await stack.waitReady(60_000) // two shared cores: a start can take longer than the default
    assert.equal((await register(stack, 'root')).status, 201)
    rootJwt = (await login(stack, 'root')).jwt
    // 50 users (alice among them), a few at a time
    const names = ['alice', 'bob', ...Array.from({ length: 48 }, (_, i) => `user-${String(i + 1).padStart(2, '0')}`)]
    for (let i = 0; i < names.length; i += 8) {
      const batch = await Promise.all(names.slice(i, i + 8).map((n) => register(stack, n, { bearer: rootJwt })))
      assert.deepEqual(batch.map((r) => r.status), batch.map(() => 201))
    }
    // alice signs in from 22 devices
    // 22 sessions: two are revoked by click below, 20 stay for the width check, axe and screenshots
    for (let i = 0; i < 22; i++) {
      const res = await fetch(`${stack.url}/login`, { method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json', 'User-Agent': USER_AGENTS[i % USER_AGENTS.length] }, body: JSON.stringify({ username: 'alice', password: PASSWORD }) })
      assert.equal(res.status, 200)
    }
    const token = await fetch(`${stack.url}/authsvc/generate_token`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ username: 'alice', password: PASSWORD, label: 'render script' }) })
    assert.equal(token.status, 200)
    const users = (await json(await fetch(`${stack.url}/authsvc/api/users`, { headers: auth() }))).users as Array<{ username: string; user_id: string }>
    aliceId = users.find((u) => u.username === 'alice')!.user_id
    for (const [folder, file] of [['checkpoints', 'dreamy-v1.safetensors'], ['checkpoints', 'photo-xl.safetensors'], ['loras', 'ink-style.safetensors']]) {
      mkdirSync(join(stack.baseDir, 'models', folder), { recursive: true })
      writeFileSync(join(stack.baseDir, 'models', folder, file), 'x')
    }
    mkdirSync(join(stack.baseDir, 'user', aliceId, 'workflows'), { recursive: true })
    writeFileSync(join(stack.baseDir, 'user', aliceId, 'workflows', 'portrait.json'), JSON.stringify({ nodes: [] }))
    root = await adminContext(browser, stack.url, 'root', PASSWORD)
    page = await root.newPage()
    csp = watchCsp(page)
    await page.goto(`${stack.url}/authsvc/admin`)
    await page.locator('body[data-ready=true]').waitFor()
  })
  after(async () => {
    console.log(`screenshots (${shots.length}), e.g. ${shots.slice(0, 3).join(', ')}`)
    await browser?.close()
    if (stack) await destroyStack(stack)
  })

  it('each section has its own address: the navigation links to it, a reload keeps it, the back button returns', async () => {
    assert.equal(await page.locator('section#users').isVisible(), true, 'the panel opens on Users')
    assert.equal(await page.getByRole('link', { name: '← Back to ComfyUI' }).getAttribute('href'), '/')
    for (const [name, id] of [['Roles', 'roles'], ['Models', 'models'], ['Network', 'network'], ['Audit', 'audit']]) {
      await go(name, id)
      assert.equal(new URL(page.url()).hash, `#${id}`)
      assert.equal(await nav(name).getAttribute('aria-current'), 'page')
      assert.deepEqual(await page.locator('section[data-section]:not([hidden])').evaluateAll((s) => s.map((x) => x.id)), [id], 'one section at a time')
    }
    await page.goBack()
    await page.locator('section#network:not([hidden])').waitFor()
    await page.goBack()
    await page.locator('section#models:not([hidden])').waitFor()
    await page.reload()
    await page.locator('body[data-ready=true]').waitFor()
    assert.equal(await page.locator('section#models').isVisible(), true, 'a reload stays on the section')
    await page.goto(`${stack.url}/authsvc/admin#ip-lists`)
    await page.locator('section#network:not([hidden])').waitFor()
    await go('Users', 'users')
  })

  for (const width of WIDTHS) {
    it(`${width} px: users are searched and filtered; a user's page shows sessions by device and address, tokens, grants and activity; a session is revoked and the role changed by click`, async () => {
      await page.setViewportSize({ width, height: 900 })
      await go('Users', 'users')
      await page.locator('#user-rows tr[data-username]').nth(49).waitFor()
      assert.equal(await page.locator('#user-rows tr[data-username]').count(), 51)
      await page.getByLabel('Search by name').fill('user-4')
      assert.deepEqual((await page.locator('#user-rows tr[data-username]').evaluateAll((rows) => rows.map((r) => (r as HTMLElement).dataset.username))).sort(), ['user-40', 'user-41', 'user-42', 'user-43', 'user-44', 'user-45', 'user-46', 'user-47', 'user-48'])
      assert.equal(await page.locator('#user-count').innerText(), '9 of 51 users shown.')
      await page.getByLabel('Search by name').fill('')
      await page.getByLabel('Role', { exact: true }).first().selectOption('admin')
      assert.deepEqual(await page.locator('#user-rows tr[data-username]').evaluateAll((rows) => rows.map((r) => (r as HTMLElement).dataset.username)), ['root'])
      await page.locator('#user-role-filter').selectOption('')

      await page.getByRole('link', { name: 'Open alice' }).click()
      await page.waitForURL(/#users\/alice$/)
      await page.locator('#user-page[data-ready=alice]').waitFor()
      const sessions = page.locator('#detail-sessions tr[data-jti]')
      const before = await sessions.count()
      assert.ok(before >= 21, `alice's sessions are listed (${before})`)
      const rows = await sessions.allInnerTexts()
      assert.ok(rows.some((r) => /iPhone/.test(r) && /Safari/.test(r)), `a session names the iPhone: ${rows[0]}`)
      assert.ok(rows.some((r) => /Firefox 128/.test(r)), 'a session names Firefox 128')
      assert.ok(rows.every((r) => /127\.0\.0\.1/.test(r)), 'each session shows its address')
      assert.match(await page.locator('#detail-tokens').innerText(), /render script/)
      assert.match(await page.locator('#user-grants-hint').innerText(), /See every model/, 'the user role has view-all: grants are said to do nothing')
      await page.locator('#user-activity li').first().waitFor()
      assert.match(await page.locator('#user-activity').innerText(), /Signed in/)

      await sessions.first().getByRole('button', { name: /^Revoke the session of alice/ }).click()
      await page.locator('#user-page-status', { hasText: 'was signed out' }).waitFor()
      assert.equal(await sessions.count(), before - 1)

      // a role change signs the user out everywhere: it is made on another user, alice keeps her sessions
      await page.getByRole('link', { name: '← All users' }).click()
      await page.locator('section#users:not([hidden])').waitFor()
      const other = width === 1280 ? 'user-05' : 'user-06'
      await page.getByRole('link', { name: `Open ${other}` }).click()
      await page.locator(`#user-page[data-ready=${other}]`).waitFor()
      await page.locator('#user-role-form').getByLabel('Role').selectOption('guest')
      await page.getByRole('button', { name: 'Change role' }).click()
      await page.locator('#user-page-status', { hasText: `${other} now has the role guest` }).waitFor()
      assert.match(await page.locator('#user-facts').innerText(), /Role\s+guest/)
      await page.getByRole('link', { name: '← All users' }).click()
      await page.locator('section#users:not([hidden])').waitFor()
    })
  }

  it('refused before any confirmation: deleting or disabling the last administrator, the admin\'s own account, removing a role in use', async () => {
    await page.setViewportSize({ width: 1280, height: 900 })
    await go('Users', 'users')
    await page.getByRole('button', { name: 'Delete root' }).click()
    const rowError = page.locator('tr[data-username=root] .field-error')
    await rowError.waitFor()
    assert.match(await rowError.innerText(), /last enabled administrator: make another user an administrator/)
    assert.equal(await page.locator('#confirm-delete[open]').count(), 0, 'no confirmation was asked')
    await page.getByRole('button', { name: 'Disable root' }).click()
    assert.match(await rowError.innerText(), /would lock everyone out/)
    assert.equal(await page.locator('tr[data-username=root]').innerText().then((t) => t.includes('enabled')), true)

    // with a second admin, root's own account is still refused, bob's delete asks first
    const bobRow = page.locator('tr[data-username=bob]')
    await bobRow.getByLabel('Role of bob', { exact: true }).selectOption('admin')
    await bobRow.getByRole('button', { name: "Set bob's role" }).click()
    await page.locator('#users-status', { hasText: 'bob now has the role admin' }).waitFor()
    await page.getByRole('button', { name: 'Delete root' }).click()
    await page.locator('tr[data-username=root] .field-error', { hasText: 'This is your own account' }).waitFor()
    assert.equal(await page.locator('#confirm-delete[open]').count(), 0)
    await page.getByRole('button', { name: 'Delete bob' }).click()
    await page.locator('#confirm-delete[open]').waitFor()
    await page.getByRole('button', { name: 'Cancel' }).click()
    await page.locator('#confirm-delete').waitFor({ state: 'hidden' })
    assert.equal(await page.locator('tr[data-username=bob]').count(), 1, 'Cancel deletes nothing')

    await go('Roles', 'roles')
    await page.getByLabel('New role name').fill('viewer')
    await page.getByRole('button', { name: 'Add role' }).click()
    const viewer = page.locator('fieldset[data-role=viewer]')
    await viewer.getByLabel('Use ComfyUI').check()
    await page.getByRole('button', { name: 'Save roles' }).click()
    await page.locator('#roles-status', { hasText: 'Roles saved.' }).waitFor()
    await go('Users', 'users')
    const u1 = page.locator('tr[data-username=user-01]')
    await u1.getByLabel('Role of user-01', { exact: true }).selectOption('viewer')
    await u1.getByRole('button', { name: "Set user-01's role" }).click()
    await page.locator('#users-status', { hasText: 'user-01 now has the role viewer' }).waitFor()
    await go('Roles', 'roles')
    await page.getByRole('button', { name: 'Remove the role viewer' }).click()
    await page.locator('#remove-role-viewer-error', { hasText: '1 user has the role viewer (user-01): give them another role first.' }).waitFor()
    assert.equal(await page.locator('fieldset[data-role=viewer]').count(), 1, 'the role stays')
  })

  for (const width of WIDTHS) {
    it(`${width} px: roles in words; "See every model" warns that grants do nothing, and the warning goes when it is turned off`, async () => {
      await page.setViewportSize({ width, height: 900 })
      await go('Roles', 'roles')
      const user = page.locator('fieldset[data-role=user]')
      const viewAll = user.getByLabel('See every model')
      assert.equal(await viewAll.isChecked(), true, 'the default user role has view-all')
      assert.match(await user.locator('.warn').innerText(), /model grants do nothing for the user role/)
      assert.match(await page.locator('#perm-desc-can_view_all_comfyui_items').innerText(), /whatever the grants say[\s\S]*Off: /)
      assert.equal(await viewAll.getAttribute('aria-describedby'), 'perm-desc-can_view_all_comfyui_items')
      await viewAll.uncheck()
      await user.locator('.warn').waitFor({ state: 'detached' })
      await page.getByRole('button', { name: 'Save roles' }).click()
      await page.locator('#roles-status', { hasText: 'Roles saved.' }).waitFor()
      const groups = (await json(await fetch(`${stack.url}/authsvc/api/groups`, { headers: auth() }))).groups
      assert.equal(groups.user.can_view_all_comfyui_items, false)
      await viewAll.check()
      await user.locator('.warn').waitFor()
      await page.getByRole('button', { name: 'Save roles' }).click()
      await page.locator('#roles-status', { hasText: 'Roles saved.' }).waitFor()
    })

    it(`${width} px: models are granted and taken back by click; the model list is refreshed`, async () => {
      await page.setViewportSize({ width, height: 900 })
      await go('Models', 'models')
      await page.locator('#models[data-ready=true]').waitFor()
      await page.locator('#models').getByLabel('Grant to').selectOption('user')
      await page.locator('#models').getByLabel('User', { exact: true }).selectOption('user-02')
      await page.waitForURL(/#models\?user=user-02$/)
      await page.locator('#grant-list[data-for="user:user-02"]').waitFor()
      await page.locator('#grant-moot:not([hidden])').waitFor()
      assert.match(await page.locator('#grant-moot').innerText(), /these grants do nothing until it is turned off/)
      await page.locator('#models').getByLabel('Folder', { exact: true }).selectOption('checkpoints')
      await page.getByRole('button', { name: 'Grant checkpoints/photo-xl.safetensors to user-02' }).click()
      await page.locator('#models-status', { hasText: 'user-02 may now use checkpoints/photo-xl.safetensors.' }).waitFor()
      await page.locator('#grant-list li[data-grant="checkpoints/photo-xl.safetensors"]').waitFor()
      const grants = (await json(await fetch(`${stack.url}/authsvc/api/users/user-02/shared-items`, { headers: auth() }))).items
      assert.deepEqual(grants.map((g: { folder: string; item_name: string }) => `${g.folder}/${g.item_name}`), ['checkpoints/photo-xl.safetensors'])
      await page.getByRole('button', { name: 'Take back checkpoints/photo-xl.safetensors from user-02' }).click()
      await page.locator('#grant-list', { hasText: 'Nothing granted yet.' }).waitFor()

      // every user of a role: the viewer role (user-01 has it, without "See every model")
      const models = page.locator('#models')
      // the user role (which has a grant) is picked just before viewer and answered only after
      // viewer's: its late answer must not be shown as viewer's grants
      const userRoleGrants = `${stack.url}/authsvc/api/roles/user/shared-items`
      const marked = await fetch(userRoleGrants, { method: 'POST', headers: { ...auth(), 'content-type': 'application/json' }, body: JSON.stringify({ folder: 'checkpoints', item_name: 'photo-xl.safetensors' }) })
      assert.equal(marked.status, 200, await marked.text())
      await models.getByLabel('Grant to').selectOption('role')
      await models.getByLabel('Role', { exact: true }).selectOption('admin')
      await page.locator('#grant-list[data-for="role:admin"]').waitFor()
      let release!: () => void
      const held = new Promise<void>((resolve) => { release = resolve })
      let heldOne = false
      const holdFirst = async (route: Route) => {
        heldOne = true
        await held
        await route.continue()
      }
      await page.route(/\/authsvc\/api\/roles\/user\/shared-items$/, holdFirst)
      await models.getByLabel('Role', { exact: true }).selectOption('user')
      await models.getByLabel('Role', { exact: true }).selectOption('viewer')
      await page.waitForURL(/#models\?role=viewer$/)
      assert.equal(await models.getByLabel('User', { exact: true }).isVisible(), false, 'the user picker steps aside')
      await page.locator('#grant-list[data-for="role:viewer"]', { hasText: 'Nothing granted yet.' }).waitFor()
      assert.equal(heldOne, true, "the user role's answer is held until viewer's is shown")
      try {
        release()
        // the page counts the answers it dropped, per question: the held one is the user role's first
        await page.waitForFunction(() => JSON.parse((document.querySelector('#models') as HTMLElement).dataset.dropped ?? '{}')['/authsvc/api/roles/user/shared-items'] === 1)
        await page.unroute(/\/authsvc\/api\/roles\/user\/shared-items$/, holdFirst)
        assert.equal(await page.locator('#grant-list[data-for="role:viewer"] li[data-grant]').count(), 0, "the user role's late answer is dropped, not shown as viewer's")
      } finally {
        assert.equal((await fetch(userRoleGrants, { method: 'DELETE', headers: { ...auth(), 'content-type': 'application/json' }, body: JSON.stringify({ folder: 'checkpoints', item_name: 'photo-xl.safetensors' }) })).status, 200)
      }
      assert.equal(await page.locator('#grant-moot').isVisible(), false, 'the viewer role limits models: its grants count')
      await models.getByLabel('Folder', { exact: true }).selectOption('checkpoints')
      await page.getByRole('button', { name: 'Grant checkpoints/dreamy-v1.safetensors to every user of the role viewer' }).click()
      await page.locator('#models-status', { hasText: 'Every user of the role viewer may now use checkpoints/dreamy-v1.safetensors.' }).waitFor()
      await page.locator('#grant-list li[data-grant="checkpoints/dreamy-v1.safetensors"]').waitFor()
      const roleGrants = (await json(await fetch(`${stack.url}/authsvc/api/roles/viewer/shared-items`, { headers: auth() }))).items
      assert.deepEqual(roleGrants.map((g: { folder: string; item_name: string }) => `${g.folder}/${g.item_name}`), ['checkpoints/dreamy-v1.safetensors'])
      // user-01's grants show what the role gives them, with a way to the role's grants
      await models.getByLabel('Grant to').selectOption('user')
      await models.getByLabel('User', { exact: true }).selectOption('user-01')
      await page.waitForURL(/#models\?user=user-01$/)
      await page.locator('#grant-list[data-for="user:user-01"]').waitFor()
      await page.locator('#grant-inherited li[data-grant="checkpoints/dreamy-v1.safetensors"]').waitFor()
      assert.equal(await page.locator('#grant-inherited-title').innerText(), 'Also granted through the role viewer')
      await page.locator('#grant-inherited').getByRole('link', { name: 'change the viewer role\'s grants' }).first().click()
      await page.waitForURL(/#models\?role=viewer$/)
      await page.getByRole('button', { name: 'Take back checkpoints/dreamy-v1.safetensors from every user of the role viewer' }).click()
      await page.locator('#models-status', { hasText: 'checkpoints/dreamy-v1.safetensors was taken back from every user of the role viewer.' }).waitFor()
      await page.locator('#grant-list', { hasText: 'Nothing granted yet.' }).waitFor()
      assert.deepEqual((await json(await fetch(`${stack.url}/authsvc/api/roles/viewer/shared-items`, { headers: auth() }))).items, [])
      await models.getByLabel('Grant to').selectOption('user')

      const added = `added-${width}.safetensors`
      writeFileSync(join(stack.baseDir, 'models', 'loras', added), 'x')
      await page.locator('#models').getByLabel('Folder', { exact: true }).selectOption('loras')
      await page.getByRole('button', { name: 'Refresh the model list' }).click()
      await page.locator('#models-status', { hasText: 'The model list was refreshed' }).waitFor()
      await page.locator(`#grant-items li[data-item="${added}"]`).waitFor()
      await page.getByLabel('Filter the items').fill('ink')
      assert.deepEqual(await page.locator('#grant-items li').evaluateAll((li) => li.map((x) => (x as HTMLElement).dataset.item)), ['ink-style.safetensors'])
      await page.getByLabel('Filter the items').fill('')
    })

    it(`${width} px: alice's workflow is published to the shared set and removed from it`, async () => {
      await page.setViewportSize({ width, height: 900 })
      await go('Workflows', 'workflows')
      await page.locator('#workflows[data-ready=true]').waitFor()
      await page.locator('#publish-form').getByLabel('User').selectOption('alice')
      await page.locator('#publish-file option[value="portrait.json"]').waitFor({ state: 'attached' })
      await page.getByRole('button', { name: 'Publish' }).click()
      await page.locator('#workflows-status', { hasText: 'portrait.json of alice is now shared with everyone.' }).waitFor()
      await page.locator('#shared-workflows li[data-workflow="portrait.json"]').waitFor()
      assert.ok(existsSync(join(stack.baseDir, 'user', 'default', 'workflows', 'portrait.json')), 'the shared copy is on disk')
      await page.getByRole('button', { name: 'Remove portrait.json from the shared workflows' }).click()
      await page.locator('#confirm-unshare[open]').waitFor()
      await page.getByRole('button', { name: 'Remove from shared' }).click()
      await page.locator('#workflows-status', { hasText: 'portrait.json is no longer shared' }).waitFor()
      assert.equal(existsSync(join(stack.baseDir, 'user', 'default', 'workflows', 'portrait.json')), false)
      assert.ok(existsSync(join(stack.baseDir, 'user', aliceId, 'workflows', 'portrait.json')), 'alice keeps hers')
    })

    it(`${width} px: network: loopback is refused in words beside the field (no "added" message), an address is blocked and unblocked, a wrong whitelist line is named, trusted proxies are shown`, async () => {
      await page.setViewportSize({ width, height: 900 })
      await go('Network', 'network')
      assert.equal(await page.locator('#trusted-proxies').innerText(), '10.9.0.0/16')
      assert.equal(await page.locator('#my-ip').innerText(), '127.0.0.1')
      await page.getByLabel('Block an address or range').fill('127.0.0.1')
      await page.getByRole('button', { name: 'Block', exact: true }).click()
      await page.locator('#block-ip-error:not([hidden])').waitFor()
      assert.equal(await page.locator('#block-ip-error').innerText(), '127.0.0.1 is this machine (loopback): it is always admitted and can never be blocked.')
      assert.equal(await page.locator('#block-ip').getAttribute('aria-invalid'), 'true')
      assert.equal(await page.locator('#ip-status').isVisible(), false, 'no "added" message beside the refusal')
      assert.equal(await page.locator('#blacklist-rows tr[data-ip]').count(), 0)

      await page.getByLabel('Block an address or range').fill('203.0.113.0/24')
      await page.getByLabel('For how many hours').fill('2')
      await page.getByRole('button', { name: 'Block', exact: true }).click()
      await page.locator('#ip-status', { hasText: '203.0.113.0/24 is blocked for 2 hours.' }).waitFor()
      assert.equal(await page.locator('#block-ip-error').isVisible(), false, 'the old error is gone')
      const lists = await json(await fetch(`${stack.url}/authsvc/api/ip-lists`, { headers: auth() }))
      assert.deepEqual(lists.blacklist.map((e: { ip: string }) => e.ip), ['203.0.113.0/24'])
      const blocked = await fetch(`${stack.url}/authsvc/health`, { headers: { 'X-Forwarded-For': '203.0.113.7' } })
      assert.equal(blocked.status, 200, 'loopback is no trusted proxy here: the header does not count')
      await page.getByRole('button', { name: 'Unblock 203.0.113.0/24' }).click()
      await page.locator('#ip-status', { hasText: '203.0.113.0/24 is no longer blocked.' }).waitFor()

      await page.getByLabel(/Only these addresses may connect/).fill('10.0.0.0/8\nnot-an-address')
      await page.getByRole('button', { name: 'Save allowed addresses' }).click()
      await page.locator('#whitelist-error:not([hidden])').waitFor()
      assert.equal(await page.locator('#whitelist-error').innerText(), 'Line 2 ("not-an-address") is not an address or a range: write it like 203.0.113.9 or 203.0.113.0/24.')
      await page.getByLabel(/Only these addresses may connect/).fill('')
      await page.getByRole('button', { name: 'Save allowed addresses' }).click()
      await page.locator('#ip-status', { hasText: 'Every address that is not blocked may connect.' }).waitFor()
    })
  }

  it('390 px: the other sections by click: guest logins, notifications, the audit filtered, a user\'s storage, the users store', async () => {
    await page.setViewportSize({ width: 390, height: 844 })
    await go('Roles', 'roles')
    await page.getByLabel('Allow guest logins').check()
    await page.getByRole('button', { name: 'Save', exact: true }).click()
    await page.locator('#guest-status', { hasText: 'Guest logins are allowed.' }).waitFor()
    await page.getByLabel('Allow guest logins').uncheck()
    await page.getByRole('button', { name: 'Save', exact: true }).click()
    await page.locator('#guest-status', { hasText: 'Guest logins are off.' }).waitFor()

    await go('Notifications', 'notifications')
    await page.locator('#ntfy-form[data-ready=true]').waitFor()
    await page.getByLabel('Topic').fill('panel-phone')
    await page.getByLabel('Failed sign-in').check()
    await page.getByRole('button', { name: 'Save notifications' }).click()
    await page.locator('#ntfy-status', { hasText: 'Saved: 1 kind(s) of event go to panel-phone.' }).waitFor()
    await page.getByLabel('Topic').fill('')
    await page.getByRole('button', { name: 'Save notifications' }).click()
    await page.locator('#ntfy-status', { hasText: 'Saved: notifications are off (no topic).' }).waitFor()

    await go('Audit', 'audit')
    const audit = page.locator('#audit')
    await audit.getByLabel('User', { exact: true }).fill('root')
    await audit.getByLabel('Event', { exact: true }).selectOption({ label: 'Settings changed' })
    await audit.getByRole('button', { name: 'Show' }).click()
    await page.waitForURL(/#audit\?user=root&kind=settings_changed$/)
    // the rows of this filter (the unfiltered answer asked when the section opened may come later: it is dropped)
    await page.locator('#audit-rows[data-for="user=root&kind=settings_changed"] tr[data-kind=settings_changed]').first().waitFor()
    assert.deepEqual([...new Set(await page.locator('#audit-rows tr').evaluateAll((trs) => trs.map((tr) => (tr as HTMLElement).dataset.kind)))], ['settings_changed'])

    await go('Storage', 'storage')
    await page.locator('#storage').getByLabel('User', { exact: true }).selectOption('alice')
    await page.getByRole('button', { name: 'Show storage' }).click()
    await page.locator('#storage-detail-title', { hasText: 'Storage of alice' }).waitFor()
    assert.match(await page.locator('#storage-workflows').innerText(), /^1 workflow/)

    await go('Data stores', 'stores')
    await page.locator('#users-db-form').getByRole('button', { name: 'Save users store' }).click()
    await page.locator('#users-db-status', { hasText: 'Saved: users go to sqlite when ComfyUI restarts.' }).waitFor()
  })

  /** Every section, a user's page, and the Models section granting to a role (with a grant seeded for it). */
  const views: Array<[string, string]> = [...SECTIONS.map((s) => [s, `#${s}`] as [string, string]), ['user-page', '#users/alice'], ['models-role', '#models?role=viewer']]
  /** Waits until the view has its data. */
  const viewReady = async (name: string) => {
    if (name === 'user-page') await page.locator('#user-page[data-ready=alice]').waitFor()
    if (name === 'models' || name === 'workflows') await page.locator(`#${name}[data-ready=true]`).waitFor()
    if (name === 'models-role') await page.locator('#grant-list li[data-grant="checkpoints/dreamy-v1.safetensors"]').waitFor()
    await page.locator(`section#${name === 'models-role' ? 'models' : name}:not([hidden])`).waitFor()
  }

  it('at 360 and 390 px no section scrolls sideways or clips (inputs included), with 51 users and 20 sessions in the tables', async () => {
    const seeded = await fetch(`${stack.url}/authsvc/api/roles/viewer/shared-items`, { method: 'POST', headers: { ...auth(), 'Content-Type': 'application/json' }, body: JSON.stringify({ folder: 'checkpoints', item_name: 'dreamy-v1.safetensors' }) })
    assert.equal(seeded.status, 200, await seeded.text())
    for (const width of [360, 390]) {
      await page.setViewportSize({ width, height: 800 })
      for (const [name, hash] of views) {
        await page.goto(`${stack.url}/authsvc/admin${hash}`)
        await page.locator('body[data-ready=true]').waitFor()
        await viewReady(name)
        if (name === 'user-page') assert.equal(await page.locator('#detail-sessions tr[data-jti]').count(), 20)
        if (name === 'users') assert.equal(await page.locator('#user-rows tr[data-username]').count(), 51)
        assert.deepEqual(await overflowing(page), [], `${name} at ${width} px`)
      }
    }
  })

  it('axe finds no serious or critical violation in any section, light and dark; screenshots at 1280 and 390 px (51 users, 20 sessions)', async () => {
    await page.goto(`${stack.url}/authsvc/admin#users`)
    await page.locator('body[data-ready=true]').waitFor()
    // with every user in the table (51) and alice's 20 sessions on her page
    for (const [name, hash] of views) {
      await page.goto(`${stack.url}/authsvc/admin${hash}`)
      await viewReady(name)
      shots.push(...(await shootAndCheck(page, `admin-${name}`)))
    }
    await page.goto(`${stack.url}/authsvc/admin#users`)
    await page.getByRole('button', { name: 'Delete user-13' }).click()
    await page.locator('#confirm-delete[open]').waitFor()
    shots.push(...(await shootAndCheck(page, 'admin-confirm-delete')))
    await page.keyboard.press('Escape')
    assert.equal(shots.length, (SECTIONS.length + 3) * 4)
  })

  it('the keyboard alone reaches every control of each section and operates them', async () => {
    await page.setViewportSize({ width: 1280, height: 900 })
    for (const [name, hash] of [['roles', '#roles'], ['network', '#network'], ['models', '#models'], ['workflows', '#workflows'], ['user-page', '#users/bob'], ['users', '#users']]) {
      await page.goto(`${stack.url}/authsvc/admin${hash}`)
      await page.locator('body[data-ready=true]').waitFor()
      // a change of the fragment alone is no new page: the section switches on the hashchange event,
      // which may come after goto returns; the controls are counted once it is the only one shown
      await page.waitForFunction((id) => [...document.querySelectorAll('[data-section]')].filter((s) => !(s as HTMLElement).hidden).map((s) => s.id).join() === id, name)
      // ten rows of users stand for fifty: each row has the same controls
      if (name === 'users') await page.getByLabel('Search by name').fill('user-1')
      if (name === 'user-page') await page.locator('#user-page[data-ready=bob]').waitFor()
      if (name === 'models' || name === 'workflows') await page.locator(`#${name}[data-ready=true]`).waitFor()
      // each control by what it is (tag, id, name, label, text, link), not by its node: a list drawn
      // again meanwhile (an answer that came late under load) has the same controls in new nodes
      const wanted: string[] = await page.evaluate(() => {
        const w = window as unknown as { kbdKey: (e: Element) => string; kbdWanted: Set<string> }
        w.kbdKey = (e: Element) => [e.tagName, e.id, e.getAttribute('name'), e.getAttribute('aria-label'), e.getAttribute('href'), (e.textContent ?? '').trim().slice(0, 40)].join('|')
        const focusable = document.querySelectorAll('main a[href], main button:not([disabled]), main input:not([disabled]), main select:not([disabled]), main textarea, main summary, main [tabindex="0"]')
        w.kbdWanted = new Set([...focusable].filter((e) => (e as HTMLElement).getClientRects().length > 0 && !e.closest('[hidden], dialog')).map((e) => w.kbdKey(e)))
        return [...w.kbdWanted]
      })
      await page.evaluate(() => (document.activeElement as HTMLElement | null)?.blur())
      await page.evaluate(() => {
        const seen: string[] = []
        const w = window as unknown as { kbdSeen: string[]; kbdKey: (e: Element) => string; kbdWanted: Set<string> }
        w.kbdSeen = seen
        document.addEventListener('focusin', (event) => {
          const key = w.kbdKey(event.target as Element)
          if (w.kbdWanted.has(key)) seen.push(key)
        })
      })
      // Tab until every control was reached, or three times round the page (the header's links
      // and the browser's own stops count too): a control never reached is a failure either way
      let reached = new Set<string>()
      for (let i = 0; i < (wanted.length + 30) * 3 && reached.size < wanted.length; i++) {
        await page.keyboard.press('Tab')
        if (i % 10 === 9 || i >= wanted.length) reached = new Set(await page.evaluate(() => (window as unknown as { kbdSeen: string[] }).kbdSeen))
      }
      reached = new Set(await page.evaluate(() => (window as unknown as { kbdSeen: string[] }).kbdSeen))
      const missing = wanted.filter((k) => !reached.has(k))
      assert.deepEqual(missing, [], `${name}: every control is reached by Tab`)
    }

    // operated by keyboard: to Roles through the navigation, a permission toggled with Space, saved with Enter
    await page.goto(`${stack.url}/authsvc/admin#users`)
    await page.locator('body[data-ready=true]').waitFor()
    await nav('Roles').focus()
    await page.keyboard.press('Enter')
    await page.locator('section#roles:not([hidden])').waitFor()
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'roles-title', 'the section\'s heading takes the focus')
    const box = page.locator('#perm-guest-can_upload')
    const was = await box.isChecked()
    await box.focus()
    await page.keyboard.press('Space')
    assert.equal(await box.isChecked(), !was)
    await page.locator('#roles-save').focus()
    await page.keyboard.press('Enter')
    await page.locator('#roles-status', { hasText: 'Roles saved.' }).waitFor()
    const groups = (await json(await fetch(`${stack.url}/authsvc/api/groups`, { headers: auth() }))).groups
    assert.equal(groups.guest.can_upload, !was)
    // a block by keyboard: type, Enter submits
    await nav('Network').focus()
    await page.keyboard.press('Enter')
    await page.locator('section#network:not([hidden])').waitFor()
    await page.locator('#block-ip').focus()
    await page.keyboard.type('198.51.100.4')
    await page.keyboard.press('Enter')
    await page.locator('#ip-status', { hasText: '198.51.100.4 is blocked until you unblock it.' }).waitFor()
    await page.getByRole('button', { name: 'Unblock 198.51.100.4' }).focus()
    await page.keyboard.press('Enter')
    await page.locator('#ip-status', { hasText: '198.51.100.4 is no longer blocked.' }).waitFor()
    assert.deepEqual(csp, [], 'no Content-Security-Policy violation')
  })
})
