/**
 * Kept /view decisions inside the REAL ComfyUI 0.3.64 (issue 23's bench: /view of a classified
 * image for an sfw_check user as fast as the bare host). The plugin repeats a /view pass while the
 * path the host opens names the very file it was decided on, unchanged (`cache.file`), and the
 * access epoch moves with everything else the decision read. Attack rows: each first proves its
 * decision was kept (the same /view passes with the sidecar stopped), then makes one change and
 * asks again: the next /view is refused, long before the kept time (5 s here) runs out.
 *
 * With the deterministic test classifier (nsfw/engines.ts: a marker in a PNG text chunk is
 * "NSFW"). alice has sfw_check (every new user has it), bob has not, root is the admin.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { mkdirSync, renameSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { HOST_AIOHTTP } from '../helpers/stack.js'
import { REAL_HOST_SKIP, destroyRealHost, startRealHost, type RealHost } from '../helpers/real-host.js'
import { bearer, login, registerUsers } from '../helpers/client.js'
import { hostRequests } from '../helpers/host-requests.js'
import { cleanPng, nsfwPng } from '../helpers/nsfw-images.js'

const KEPT_MS = 5000
const BLOCKED_TEXT = 'NSFW content blocked for this user.'

for (const aiohttp of [HOST_AIOHTTP]) {
  describe(`kept /view decisions on the real ComfyUI (aiohttp ${aiohttp})`, { skip: REAL_HOST_SKIP }, () => {
    let host: RealHost
    let admin: string
    let alice: string
    let bob: string

    const view = async (token: string, filename: string, subfolder = '') => {
      const res = await fetch(`${host.url}/view?filename=${encodeURIComponent(filename)}&type=input&subfolder=${encodeURIComponent(subfolder)}`, { headers: bearer(token) })
      const body = Buffer.from(await res.arrayBuffer())
      return { status: res.status, body, text: body.toString('utf8'), code: res.headers.get('content-type')?.includes('json') ? JSON.parse(body.toString('utf8')).code : undefined }
    }
    const admin_ = (method: string, path: string, body: unknown) =>
      fetch(`${host.url}${path}`, { method, headers: { 'Content-Type': 'application/json', ...bearer(admin) }, body: JSON.stringify(body) })
    const input = (rel: string) => join(host.inputDir, rel)

    /** `token`'s /view passes, and passes again with the sidecar stopped, at once, with the same bytes: it was kept. */
    async function assertKept(token: string, filename: string, subfolder = ''): Promise<Buffer> {
      // the first view of an unclassified image classifies it (the tag moves the epoch): decided again once
      assert.equal((await view(token, filename, subfolder)).status, 200, `${filename}: passes`)
      const first = await view(token, filename, subfolder)
      assert.equal(first.status, 200, `${filename}: passes again`)
      const pid = host.sidecarPid()
      process.kill(pid, 'SIGSTOP')
      try {
        const started = performance.now()
        const again = await view(token, filename, subfolder)
        assert.equal(again.status, 200, `${filename}: answered from the kept decision`)
        assert.deepEqual(again.body, first.body, `${filename}: the same file`)
        assert.ok(performance.now() - started < 1000, `${filename}: without waiting for the stopped sidecar`)
      } finally {
        process.kill(pid, 'SIGCONT')
      }
      return first.body
    }

    before(async () => {
      host = await startRealHost({
        aiohttp,
        env: { AUTHSVC_NSFW_TEST_CLASSIFIER: '1', AUTHSVC_DECISION_CACHE_MS: String(KEPT_MS), AUTHSVC_DECISION_TIMEOUT_MS: '1000' },
        config: { nsfw: { enabled: true, classifier: 'test', view_deadline_ms: 2000 } },
        files: {
          'input/marked.png': cleanPng(11),
          'input/cleared.png': nsfwPng(12),
          'input/bobs.png': nsfwPng(13),
          'input/logout.png': cleanPng(14),
          'input/rewritten.png': cleanPng(15),
          'input/renamed.png': cleanPng(16),
          'input/la/x.png': cleanPng(17),
          'input/lb/x.png': nsfwPng(18),
          'input/operators.png': cleanPng(19),
        },
      })
      symlinkSync(input('la'), input('link'))
      const jwt = await registerUsers(host, 'alice', 'bob')
      admin = jwt.root
      alice = jwt.alice
      bob = jwt.bob
      assert.equal((await admin_('PUT', '/authsvc/api/users/bob', { sfw_check: false })).status, 200)
    })
    after(async () => {
      if (host) await destroyRealHost(host)
    })

    it('an image marked NSFW by the admin after alice viewed it: her next /view is blocked', async () => {
      await assertKept(alice, 'marked.png')
      const res = await admin_('POST', '/authsvc-gallery/mark-nsfw', { filename: 'marked.png', subfolder: '', type: 'input', is_nsfw: true })
      assert.equal(res.status, 200, await res.text())
      const next = await view(alice, 'marked.png')
      assert.deepEqual([next.status, next.text], [403, BLOCKED_TEXT])
    })

    it('every tag cleared (a manual "safe" on a detected image gone): alice\'s next /view is blocked', async () => {
      assert.equal((await view(alice, 'cleared.png')).status, 403, 'detected')
      assert.equal((await admin_('POST', '/authsvc-gallery/mark-nsfw', { filename: 'cleared.png', subfolder: '', type: 'input', is_nsfw: false })).status, 200)
      await assertKept(alice, 'cleared.png')
      const res = await admin_('POST', '/authsvc/api/nsfw-management', { action: 'clear_all_tags', include_manual: true })
      assert.equal(res.status, 200, await res.text())
      const next = await view(alice, 'cleared.png')
      assert.deepEqual([next.status, next.text], [403, BLOCKED_TEXT])
    })

    it('sfw_check turned on for bob after he viewed a detected image: his next /view is blocked', async () => {
      await assertKept(bob, 'bobs.png')
      assert.equal((await admin_('PUT', '/authsvc/api/users/bob', { sfw_check: true })).status, 200)
      try {
        const next = await view(bob, 'bobs.png')
        assert.deepEqual([next.status, next.text], [403, BLOCKED_TEXT])
      } finally {
        assert.equal((await admin_('PUT', '/authsvc/api/users/bob', { sfw_check: false })).status, 200)
      }
    })

    it('an admin (sees every file; the pass is kept on the principal alone) gets sfw_check: the next /view is blocked', async () => {
      assert.equal((await admin_('PUT', '/authsvc/api/users/bob', { role: 'admin' })).status, 200)
      try {
        const bobAdmin = (await login(host, 'bob')).jwt // a role change ends his sessions
        await assertKept(bobAdmin, 'bobs.png')
        assert.equal((await admin_('PUT', '/authsvc/api/users/bob', { sfw_check: true })).status, 200)
        const next = await view(bobAdmin, 'bobs.png')
        assert.deepEqual([next.status, next.text], [403, BLOCKED_TEXT])
      } finally {
        assert.equal((await admin_('PUT', '/authsvc/api/users/bob', { sfw_check: false, role: 'user' })).status, 200)
        bob = (await login(host, 'bob')).jwt
      }
    })

    it('alice logs out: the next /view with that session is refused (401)', async () => {
      const session = (await login(host, 'alice')).jwt
      await assertKept(session, 'logout.png')
      const out = await fetch(`${host.url}/logout`, { method: 'POST', headers: { ...bearer(session), Accept: 'application/json' } })
      assert.ok(out.status >= 200 && out.status < 300, `logout: ${out.status}`)
      const next = await view(session, 'logout.png')
      assert.deepEqual([next.status, next.code], [401, 'TOKEN_REVOKED'])
    })

    it('the file rewritten in place with NSFW bytes: not served from the kept decision (no epoch moved), then blocked', async () => {
      await assertKept(alice, 'rewritten.png')
      const pid = host.sidecarPid()
      process.kill(pid, 'SIGSTOP')
      try {
        writeFileSync(input('rewritten.png'), nsfwPng(15))
        // with the sidecar stopped nothing can tell the plugin: only the file's stamp does; no decision in 1 s is a 503
        const stopped = await view(alice, 'rewritten.png')
        assert.equal(stopped.status, 503, 'the plugin asked the (stopped) sidecar instead of reusing the pass')
      } finally {
        process.kill(pid, 'SIGCONT')
      }
      const next = await view(alice, 'rewritten.png')
      assert.deepEqual([next.status, next.text], [403, BLOCKED_TEXT])
    })

    it('another file renamed over it: blocked', async () => {
      await assertKept(alice, 'renamed.png')
      writeFileSync(input('renamed.tmp'), nsfwPng(16))
      renameSync(input('renamed.tmp'), input('renamed.png'))
      const next = await view(alice, 'renamed.png')
      assert.deepEqual([next.status, next.text], [403, BLOCKED_TEXT])
    })

    it('a link in the path moved to a folder holding an NSFW file of the same name: blocked', async () => {
      await assertKept(alice, 'x.png', 'link')
      unlinkSync(input('link'))
      symlinkSync(input('lb'), input('link'))
      const next = await view(alice, 'x.png', 'link')
      assert.deepEqual([next.status, next.text], [403, BLOCKED_TEXT])
    })

    it('a shared input that becomes the admin\'s (an owner change, the file untouched): alice\'s next /view is 404', async () => {
      const bytes = await assertKept(alice, 'operators.png')
      const { upload } = hostRequests(() => host.url)
      const again = await upload(admin, 'operators.png', bytes)
      assert.deepEqual([again.status, again.body.name, again.body.subfolder], [200, 'operators.png', ''], 'a duplicate keeps its name and file')
      const next = await view(alice, 'operators.png')
      assert.deepEqual([next.status, next.code], [404, 'NOT_FOUND'])
    })

    it('a file that goes: the next /view is not passed on the kept decision', async () => {
      mkdirSync(input('gone'), { recursive: true })
      writeFileSync(input('gone/g.png'), cleanPng(20))
      await assertKept(alice, 'g.png', 'gone')
      unlinkSync(input('gone/g.png'))
      const next = await view(alice, 'g.png', 'gone')
      assert.equal(next.status, 404)
    })
  })
}
