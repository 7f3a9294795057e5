/**
 * Workflows and settings per user (issue 12, SPEC §6 userdata rows and §6.1) inside the
 * REAL ComfyUI 0.3.64, started once without and once with `--multi-user` (the plugin turns
 * ComfyUI's per-user storage on in both): alice and bob save, list (every shape), load,
 * move and delete their own workflows and settings and never see or touch the other's;
 * the workflows a single-user install had in user/default/workflows/ (written before the
 * host and authsvc start) are the shared set, listed for everyone; an admin publishes one
 * and deletes a shared one, a user cannot (403 WORKFLOW_DENIED); roles without
 * can_modify_workflows (the built-in guest role, a custom role) read but never write; the
 * traversal, encoded-slash, absolute, backslash, case-variant and hidden-file shapes answer
 * what the bare host answers, but for the names that leave the caller's space, which the gate
 * refuses itself with 403 (issue 28) (statuses pinned from the bare ComfyUI 0.3.64 with
 * --multi-user and a known comfy-user, identical on aiohttp 3.8 and 3.11) and reach no
 * file outside the caller's own space; the /api/cpe family answers the SPEC §6.1 shapes
 * over the same files. Last, an admin's user-env purge empties alice's space and nothing else
 * (issue 24), and ComfyUI goes on serving and writing it.
 *
 * One ComfyUI start per mode: without --multi-user on aiohttp 3.11, with it on aiohttp
 * 3.8 (AUTHSVC_TEST_AIOHTTP narrows both to the one version named). Rows run in order and
 * build on what earlier rows saved. Requests go out through node:http so that paths reach
 * the host exactly as written (no client-side normalisation of `..`).
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { request } from 'node:http'
import { createHash, randomUUID } from 'node:crypto'
import { existsSync, readFileSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { AIOHTTP_VERSIONS, HOST_AIOHTTP, type AiohttpVersion } from '../helpers/stack.js'
import { REAL_HOST_SKIP, destroyRealHost, startRealHost, type RealHost } from '../helpers/real-host.js'
import { apiToken, login, register } from '../helpers/client.js'
import { assertRefused } from '../helpers/host-requests.js'

interface Answer {
  status: number
  text: string
  headers: Record<string, string | string[] | undefined>
  json(): any
}

/** One request, the path sent byte for byte as written. */
function send(base: string, method: string, path: string, opts: { token?: string; body?: string | object; headers?: Record<string, string> } = {}): Promise<Answer> {
  const url = new URL(base)
  const body = opts.body === undefined ? undefined : typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body)
  const headers: Record<string, string> = { Accept: 'application/json', ...(opts.headers ?? {}) }
  if (opts.token) headers.Authorization = `Bearer ${opts.token}`
  if (body !== undefined) {
    headers['Content-Type'] ??= 'application/json'
    headers['Content-Length'] = String(Buffer.byteLength(body))
  }
  return new Promise((resolve, reject) => {
    const req = request({ host: url.hostname, port: url.port, method, path, headers }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (d: Buffer) => chunks.push(d))
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8')
        resolve({
          status: res.statusCode ?? 0,
          text,
          headers: res.headers,
          json() {
            try {
              return JSON.parse(text)
            } catch {
              throw new Error(`${method} ${path}: not JSON (${res.statusCode}): ${text.slice(0, 300)}`)
            }
          },
        })
      })
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(body)
  })
}

const enc = (name: string) => encodeURIComponent(name)
/** The host user of a guest session: `authsvc-guest-` and the first 16 hex of sha256(its jti) (identity/host-user.ts). */
function guestHostUser(jwt: string): string {
  const { jti } = JSON.parse(Buffer.from(jwt.split('.')[1], 'base64url').toString()) as { jti: string }
  return `authsvc-guest-${createHash('sha256').update(jti).digest('hex').slice(0, 16)}`
}
const sorted = (xs: string[]) => [...xs].sort()

/** Every file under `dir`, relative, `/` separators ('' when the folder does not exist). */
function tree(dir: string): string[] {
  if (!existsSync(dir)) return []
  return (readdirSync(dir, { recursive: true, withFileTypes: true }) as import('node:fs').Dirent[])
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name).slice(dir.length + 1))
    .filter((f) => !f.startsWith('comfyui.db')) // ComfyUI's own database and its journal
    .sort()
}

// What user/default/ held before authsvc (and ComfyUI) first started.
const LEGACY = '{"legacy":true,"nodes":[]}'
const BRIEF = '{"from":"shared team"}'
const SHARED_CLASH = '{"from":"shared"}'
const DOOMED = '{"doomed":true}'
const HIDDEN = '{"hidden":true}'
const LEGACY_SETTINGS = '{\n    "Comfy.Legacy": "kept"\n}'
const SECRET = '{"secret":"outside every user space"}'

const MODES: Array<{ multiUser: boolean; aiohttp: AiohttpVersion }> = [
  { multiUser: false, aiohttp: HOST_AIOHTTP },
  { multiUser: true, aiohttp: AIOHTTP_VERSIONS.includes('3.8') ? '3.8' : AIOHTTP_VERSIONS[0] },
]

for (const mode of MODES) {
  describe(`workflows and settings per user in the real ComfyUI, ${mode.multiUser ? 'with' : 'without'} --multi-user (aiohttp ${mode.aiohttp})`, { skip: REAL_HOST_SKIP }, () => {
    let host: RealHost
    let guestSpace = ''
    const token: Record<'root' | 'alice' | 'bob' | 'viewer' | 'reader', string> = { root: '', alice: '', bob: '', viewer: '', reader: '' }
    const id: Record<string, string> = {}
    const call = (who: keyof typeof token, method: string, path: string, opts: { body?: string | object; headers?: Record<string, string> } = {}) =>
      send(host.url, method, path, { ...opts, token: token[who] })
    const userDir = () => host.userDir
    const own = (who: string, ...rel: string[]) => join(host.userDir, id[who], ...rel)
    const shared = (...rel: string[]) => join(host.userDir, 'default', ...rel)
    /** `GET /userdata?dir=workflows&...` for one caller: 200 and the parsed list. */
    const list = async (who: keyof typeof token, query = ''): Promise<any[]> => {
      const res = await call(who, 'GET', `/userdata?dir=workflows${query}`)
      assert.equal(res.status, 200, `${who} /userdata?dir=workflows${query}: ${res.text}`)
      const body = res.json()
      assert.ok(Array.isArray(body), res.text)
      return body
    }

    before(async () => {
      host = await startRealHost({
        aiohttp: mode.aiohttp,
        multiUser: mode.multiUser,
        files: {
          'user/default/workflows/legacy.json': LEGACY,
          'user/default/workflows/team/brief.json': BRIEF,
          'user/default/workflows/clash.json': SHARED_CLASH,
          'user/default/workflows/doomed.json': DOOMED,
          'user/default/workflows/.hidden.json': HIDDEN,
          'user/default/comfy.settings.json': LEGACY_SETTINGS,
          'user/secret.json': SECRET,
        },
      })
      assert.equal((await register(host, 'root')).status, 201)
      token.root = await apiToken(host, 'root')
      for (const name of ['alice', 'bob', 'viewer']) {
        const res = await register(host, name, { bearer: token.root })
        assert.equal(res.status, 201, await res.text())
      }
      // the built-in guest role (no can_modify_workflows, no API tokens: a session)
      const demote = await call('root', 'PUT', '/authsvc/api/users/viewer', { body: { role: 'guest' } })
      assert.equal(demote.status, 200, demote.text)
      token.viewer = (await login(host, 'viewer')).jwt
      // a custom role: the user role without can_modify_workflows
      const groups = await call('root', 'GET', '/authsvc/api/groups')
      assert.equal(groups.status, 200, groups.text)
      const etag = groups.headers.etag
      assert.equal(typeof etag, 'string')
      const current = groups.json().groups
      const put = await call('root', 'PUT', '/authsvc/api/groups', {
        body: { groups: { ...current, reader: { ...current.user, can_modify_workflows: false } } },
        headers: { 'If-Match': etag as string },
      })
      assert.equal(put.status, 200, put.text)
      assert.equal((await register(host, 'reader', { bearer: token.root, role: 'reader' })).status, 201)
      token.alice = await apiToken(host, 'alice')
      token.bob = await apiToken(host, 'bob')
      token.reader = await apiToken(host, 'reader')
      for (const who of Object.keys(token) as Array<keyof typeof token>) {
        const me = await call(who, 'GET', '/authsvc/api/me')
        assert.equal(me.status, 200, me.text)
        id[who] = me.json().user_id
      }
    })
    after(async () => {
      if (host) await destroyRealHost(host)
    })

    it(`is ComfyUI 0.3.64 ${mode.multiUser ? 'with' : 'without'} --multi-user, and GET /users answers the single-user shape`, async () => {
      const stats = await call('root', 'GET', '/system_stats')
      assert.equal(stats.status, 200)
      assert.equal(stats.json().system.comfyui_version, '0.3.64')
      assert.equal(stats.json().system.argv.includes('--multi-user'), mode.multiUser)
      assert.match(String(stats.headers.server), new RegExp(`aiohttp/${mode.aiohttp.replace('.', '\\.')}\\.`))
      for (const who of ['alice', 'bob', 'viewer'] as const) {
        const users = await call(who, 'GET', '/users')
        assert.equal(users.status, 200, users.text)
        assert.deepEqual(users.json(), { storage: 'server', migrated: true })
      }
      assertRefused(await call('alice', 'POST', '/users', { body: { username: 'mallory' } }), 403, 'PERMISSION_DENIED', 'POST /users')
    })

    it('the workflows in user/default/workflows/ from before authsvc are listed and loaded for everyone', async () => {
      for (const who of ['root', 'alice', 'bob', 'viewer', 'reader'] as const) {
        // the host's glob: no hidden files, no folders, not recursive
        assert.deepEqual(sorted(await list(who)), ['clash.json', 'doomed.json', 'legacy.json'], who)
        assert.deepEqual(sorted(await list(who, '&recurse=true')), ['clash.json', 'doomed.json', 'legacy.json', 'team/brief.json'], who)
        const legacy = await call(who, 'GET', `/userdata/${enc('workflows/legacy.json')}`)
        assert.equal(legacy.status, 200, `${who}: ${legacy.text}`)
        assert.equal(legacy.text, LEGACY)
        const brief = await call(who, 'GET', `/api/userdata/${enc('workflows/team/brief.json')}`)
        assert.equal(brief.status, 200, `${who}: ${brief.text}`)
        assert.equal(brief.text, BRIEF)
      }
    })

    it('alice and bob each save their own workflows (subfolders too) into their own space', async () => {
      const saves: Array<[keyof typeof token, string, string]> = [
        ['alice', 'workflows/alice-flow.json', '{"owner":"alice"}'],
        ['alice', 'workflows/sub/nested.json', '{"owner":"alice","nested":true}'],
        ['alice', 'workflows/clash.json', '{"from":"alice"}'],
        ['alice', 'workflows/team/own-team.json', '{"owner":"alice","folder":"team"}'],
        ['bob', 'workflows/bob-flow.json', '{"owner":"bob"}'],
        ['bob', 'workflows/clash.json', '{"from":"bob, longer than the others"}'],
      ]
      for (const [who, name, body] of saves) {
        const res = await call(who, 'POST', `/userdata/${enc(name)}`, { body })
        assert.equal(res.status, 200, `${who} ${name}: ${res.text}`)
        assert.equal(res.json(), name)
        assert.equal(readFileSync(own(who, name), 'utf8'), body)
      }
      // the /api twin, with the host's full_info answer
      const twin = await call('alice', 'POST', `/api/userdata/${enc('workflows/twin.json')}?full_info=true`, { body: '{"twin":1}' })
      assert.equal(twin.status, 200, twin.text)
      assert.deepEqual(Object.keys(twin.json()), ['path', 'size', 'modified', 'created'])
      assert.equal(twin.json().path, 'workflows/twin.json')
      // overwrite=false on an existing own file: the host's 409
      const again = await call('alice', 'POST', `/userdata/${enc('workflows/alice-flow.json')}?overwrite=false`, { body: '{}' })
      assert.equal(again.status, 409, again.text)
      assert.deepEqual(tree(own('alice', 'workflows')), ['alice-flow.json', 'clash.json', 'sub/nested.json', 'team/own-team.json', 'twin.json'])
      assert.deepEqual(tree(own('bob', 'workflows')), ['bob-flow.json', 'clash.json'])
      // the shared set is untouched by users' saves
      assert.deepEqual(tree(shared('workflows')), ['.hidden.json', 'clash.json', 'doomed.json', 'legacy.json', 'team/brief.json'])
      assert.equal(readFileSync(shared('workflows', 'clash.json'), 'utf8'), SHARED_CLASH)
    })

    it('lists own + shared in every host shape (plain, recurse, full_info, split, /v2), own winning, never the other user\'s', async () => {
      const aliceAll = ['alice-flow.json', 'clash.json', 'doomed.json', 'legacy.json', 'sub/nested.json', 'team/brief.json', 'team/own-team.json', 'twin.json']
      const bobAll = ['bob-flow.json', 'clash.json', 'doomed.json', 'legacy.json', 'team/brief.json']
      assert.deepEqual(sorted(await list('alice')), ['alice-flow.json', 'clash.json', 'doomed.json', 'legacy.json', 'twin.json'])
      assert.deepEqual(sorted(await list('bob')), ['bob-flow.json', 'clash.json', 'doomed.json', 'legacy.json'])
      assert.deepEqual(sorted(await list('alice', '&recurse=true')), aliceAll)
      assert.deepEqual(sorted(await list('bob', '&recurse=true')), bobAll)
      // full_info: the host's FileInfo for every entry; the clash is alice's own file
      const full = await list('alice', '&recurse=true&full_info=true')
      assert.deepEqual(sorted(full.map((e) => e.path)), aliceAll)
      for (const e of full) {
        assert.deepEqual(Object.keys(e), ['path', 'size', 'modified', 'created'], JSON.stringify(e))
        assert.equal(typeof e.size, 'number')
        assert.equal(typeof e.modified, 'number')
        assert.equal(typeof e.created, 'number')
      }
      assert.equal(full.find((e) => e.path === 'clash.json').size, Buffer.byteLength('{"from":"alice"}'))
      assert.equal(full.find((e) => e.path === 'legacy.json').size, Buffer.byteLength(LEGACY))
      const bobFull = await list('bob', '&full_info=true')
      assert.equal(bobFull.find((e) => e.path === 'clash.json').size, Buffer.byteLength('{"from":"bob, longer than the others"}'))
      // split: [path, ...segments]
      const split = await list('alice', '&recurse=true&split=true')
      assert.deepEqual(sorted(split.map((e) => e[0])), aliceAll)
      for (const e of split) assert.deepEqual(e, [e[0], ...e[0].split('/')])
      // a subfolder of the shared set, and of one's own
      assert.deepEqual((await call('bob', 'GET', '/userdata?dir=workflows%2Fteam')).json(), ['brief.json'])
      // a folder both alice and the shared set have: merged, own entries first as the host lists them
      assert.deepEqual((await call('alice', 'GET', '/userdata?dir=workflows%2Fteam')).json(), ['own-team.json', 'brief.json'])
      // the /api twins answer the same
      assert.deepEqual(sorted((await call('alice', 'GET', '/api/userdata?dir=workflows&recurse=true')).json()), aliceAll)
      const apiV2 = await call('bob', 'GET', '/api/v2/userdata?path=workflows%2Fteam')
      assert.equal(apiV2.status, 200, apiV2.text)
      assert.deepEqual(apiV2.json().map((e: any) => e.path), ['workflows/team/brief.json'])
      assert.deepEqual((await call('alice', 'GET', '/userdata?dir=workflows/sub')).json(), ['nested.json'])
      assert.equal((await call('bob', 'GET', '/userdata?dir=workflows/sub')).status, 404)
      // /v2: entries relative to the user root, folders first, then names without case; hidden files listed as os.walk does
      for (const [who, mine] of [['alice', ['workflows/alice-flow.json', 'workflows/sub', 'workflows/sub/nested.json', 'workflows/team/own-team.json', 'workflows/twin.json']], ['bob', ['workflows/bob-flow.json']]] as const) {
        const res = await call(who, 'GET', '/v2/userdata?path=workflows')
        assert.equal(res.status, 200, res.text)
        const entries: any[] = res.json()
        const expected = sorted([...mine, 'workflows/.hidden.json', 'workflows/clash.json', 'workflows/doomed.json', 'workflows/legacy.json', 'workflows/team', 'workflows/team/brief.json'])
        assert.deepEqual(sorted(entries.map((e) => e.path)), expected, who)
        for (const e of entries) {
          assert.deepEqual(Object.keys(e), e.type === 'directory' ? ['name', 'path', 'type'] : ['name', 'path', 'type', 'size', 'modified'], JSON.stringify(e))
          assert.equal(e.name, e.path.split('/').pop())
        }
        const order = entries.map((e) => [e.type !== 'directory', e.name.toLowerCase()])
        const want = [...order].sort((a, b) => Number(a[0]) - Number(b[0]) || (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0))
        assert.deepEqual(order, want, `${who}: /v2 order`)
        const clash = entries.find((e) => e.path === 'workflows/clash.json')
        assert.equal(clash.size, readFileSync(own(who, 'workflows', 'clash.json')).length, `${who}: own clash wins in /v2`)
      }
      const v2team = await call('alice', 'GET', '/v2/userdata?path=workflows%2Fteam')
      assert.equal(v2team.status, 200, v2team.text)
      assert.deepEqual(v2team.json().map((e: any) => e.path), ['workflows/team/brief.json', 'workflows/team/own-team.json'])
    })

    it('loads own first, then shared; never the other user\'s', async () => {
      const load = async (who: keyof typeof token, name: string) => call(who, 'GET', `/userdata/${enc(name)}`)
      assert.equal((await load('alice', 'workflows/clash.json')).text, '{"from":"alice"}')
      assert.equal((await load('bob', 'workflows/clash.json')).text, '{"from":"bob, longer than the others"}')
      assert.equal((await load('viewer', 'workflows/clash.json')).text, SHARED_CLASH)
      assert.equal((await load('alice', 'workflows/sub/nested.json')).text, '{"owner":"alice","nested":true}')
      for (const [who, other] of [['alice', 'workflows/bob-flow.json'], ['bob', 'workflows/alice-flow.json'], ['bob', 'workflows/sub/nested.json'], ['root', 'workflows/alice-flow.json']] as const) {
        const res = await load(who, other)
        assert.equal(res.status, 404, `${who} loads ${other}: ${res.status} ${res.text}`)
      }
    })

    it('moves and deletes only in the caller\'s own space', async () => {
      // bob cannot move or delete alice's workflow: the host looks in bob's own space (404)
      const steal = await call('bob', 'POST', `/userdata/${enc('workflows/alice-flow.json')}/move/${enc('workflows/stolen.json')}`)
      assert.equal(steal.status, 404, steal.text)
      const wipe = await call('bob', 'DELETE', `/userdata/${enc('workflows/alice-flow.json')}`)
      assert.equal(wipe.status, 404, wipe.text)
      assert.equal(readFileSync(own('alice', 'workflows', 'alice-flow.json'), 'utf8'), '{"owner":"alice"}')
      assert.equal(existsSync(own('bob', 'workflows', 'stolen.json')), false)
      // alice moves her own, into a subfolder
      const move = await call('alice', 'POST', `/userdata/${enc('workflows/alice-flow.json')}/move/${enc('workflows/sub/renamed.json')}`)
      assert.equal(move.status, 200, move.text)
      assert.equal(move.json(), 'workflows/sub/renamed.json')
      assert.equal(existsSync(own('alice', 'workflows', 'alice-flow.json')), false)
      assert.equal(readFileSync(own('alice', 'workflows', 'sub', 'renamed.json'), 'utf8'), '{"owner":"alice"}')
      assert.ok((await list('alice', '&recurse=true')).includes('sub/renamed.json'))
      assert.ok(!(await list('bob', '&recurse=true')).includes('sub/renamed.json'))
      // bob moves his own over his own clash: the shared clash is untouched
      const bobMove = await call('bob', 'POST', `/api/userdata/${enc('workflows/bob-flow.json')}/move/${enc('workflows/bob-renamed.json')}?full_info=true`)
      assert.equal(bobMove.status, 200, bobMove.text)
      assert.equal(bobMove.json().path, 'workflows/bob-renamed.json')
      // deletes: own file 204, gone from disk and lists
      const del = await call('alice', 'DELETE', `/userdata/${enc('workflows/sub/renamed.json')}`)
      assert.equal(del.status, 204, del.text)
      assert.equal(existsSync(own('alice', 'workflows', 'sub', 'renamed.json')), false)
      // deleting her own clash uncovers the shared one (for her alone)
      assert.equal((await call('alice', 'DELETE', `/userdata/${enc('workflows/clash.json')}`)).status, 204)
      assert.equal((await call('alice', 'GET', `/userdata/${enc('workflows/clash.json')}`)).text, SHARED_CLASH)
      assert.equal((await call('bob', 'GET', `/userdata/${enc('workflows/clash.json')}`)).text, '{"from":"bob, longer than the others"}')
      assert.equal(readFileSync(shared('workflows', 'clash.json'), 'utf8'), SHARED_CLASH)
      assert.deepEqual(tree(own('alice', 'workflows')), ['sub/nested.json', 'team/own-team.json', 'twin.json'])
      assert.deepEqual(tree(own('bob', 'workflows')), ['bob-renamed.json', 'clash.json'])
    })

    it('settings are per user: each starts from the defaults, saves its own, never sees or changes the other\'s', async () => {
      for (const who of ['alice', 'bob'] as const) {
        const res = await call(who, 'GET', '/settings')
        assert.equal(res.status, 200, res.text)
        assert.deepEqual(res.json(), {}, `${who} starts from ComfyUI's defaults, not user/default's settings`)
      }
      const saves: Array<[keyof typeof token, string, object | string]> = [
        ['alice', '/settings/Comfy.Something', '"alice-dark"'],
        ['bob', '/settings/Comfy.Something', '"bob-light"'],
        ['alice', '/settings', { 'Comfy.Other': 1 }],
        ['bob', '/api/settings', { 'Comfy.Bob': true }],
      ]
      for (const [who, path, body] of saves) {
        const res = await call(who, 'POST', path, { body })
        assert.equal(res.status, 200, `${who} ${path}: ${res.text}`)
      }
      assert.deepEqual((await call('alice', 'GET', '/settings')).json(), { 'Comfy.Something': 'alice-dark', 'Comfy.Other': 1 })
      assert.deepEqual((await call('bob', 'GET', '/api/settings')).json(), { 'Comfy.Something': 'bob-light', 'Comfy.Bob': true })
      assert.equal((await call('alice', 'GET', '/settings/Comfy.Something')).json(), 'alice-dark')
      assert.equal((await call('bob', 'GET', '/settings/Comfy.Something')).json(), 'bob-light')
      assert.equal((await call('bob', 'GET', '/settings/Comfy.Other')).json(), null)
      // on disk: user/<id>/comfy.settings.json; user/default's file as it was
      assert.deepEqual(JSON.parse(readFileSync(own('alice', 'comfy.settings.json'), 'utf8')), { 'Comfy.Something': 'alice-dark', 'Comfy.Other': 1 })
      assert.deepEqual(JSON.parse(readFileSync(own('bob', 'comfy.settings.json'), 'utf8')), { 'Comfy.Something': 'bob-light', 'Comfy.Bob': true })
      assert.equal(readFileSync(shared('comfy.settings.json'), 'utf8'), LEGACY_SETTINGS)
      // a client's own comfy-user header names nobody: alice stays alice
      for (const spoof of [id.bob, 'default', 'authsvc-anonymous']) {
        const read = await call('alice', 'GET', '/settings', { headers: { 'comfy-user': spoof } })
        assert.deepEqual(read.json(), { 'Comfy.Something': 'alice-dark', 'Comfy.Other': 1 }, `comfy-user: ${spoof}`)
      }
      for (const spoof of [id.bob, 'default', 'authsvc-anonymous']) {
        const write = await call('alice', 'POST', '/settings/Comfy.Spoofed', { body: '"x"', headers: { 'comfy-user': spoof } })
        assert.equal(write.status, 200)
      }
      assert.equal('Comfy.Spoofed' in JSON.parse(readFileSync(own('bob', 'comfy.settings.json'), 'utf8')), false)
      assert.equal(readFileSync(shared('comfy.settings.json'), 'utf8'), LEGACY_SETTINGS)
      assert.equal(JSON.parse(readFileSync(own('alice', 'comfy.settings.json'), 'utf8'))['Comfy.Spoofed'], 'x')
      // the settings file is userdata too: each reads only their own
      assert.deepEqual((await call('bob', 'GET', '/userdata/comfy.settings.json')).json(), { 'Comfy.Something': 'bob-light', 'Comfy.Bob': true })
    })

    it('an admin publishes a workflow to the shared set and deletes a shared one; a user cannot (403 WORKFLOW_DENIED)', async () => {
      // a user may neither delete nor move a shared workflow, nor publish
      assertRefused(await call('alice', 'DELETE', `/userdata/${enc('workflows/doomed.json')}`), 403, 'WORKFLOW_DENIED', 'alice deletes a shared workflow')
      assertRefused(await call('bob', 'DELETE', `/api/userdata/${enc('workflows/team/brief.json')}`), 403, 'WORKFLOW_DENIED', 'bob deletes a shared workflow')
      assertRefused(await call('alice', 'POST', `/userdata/${enc('workflows/doomed.json')}/move/${enc('workflows/mine.json')}`), 403, 'WORKFLOW_DENIED', 'alice moves a shared workflow')
      assertRefused(await call('root', 'POST', `/userdata/${enc('workflows/doomed.json')}/move/${enc('workflows/mine.json')}`), 403, 'WORKFLOW_DENIED', 'the admin moves a shared workflow')
      assert.equal(readFileSync(shared('workflows', 'doomed.json'), 'utf8'), DOOMED)
      assert.equal(readFileSync(shared('workflows', 'team', 'brief.json'), 'utf8'), BRIEF)
      assert.equal(existsSync(own('alice', 'workflows', 'mine.json')), false)
      assertRefused(await call('bob', 'POST', `/api/userdata/${enc('workflows/team/brief.json')}/move/${enc('workflows/brief.json')}`), 403, 'WORKFLOW_DENIED', 'bob moves a shared workflow (/api)')
      const userPublish = await call('alice', 'POST', '/authsvc/api/workflows/publish', { body: { filename: 'twin.json' } })
      assertRefused(userPublish, 403, 'ADMIN_REQUIRED', 'alice publishes')
      // saving under a shared name writes the caller's own copy, which wins for them alone
      assert.equal((await call('bob', 'POST', `/userdata/${enc('workflows/legacy.json')}`, { body: '{"bob":"legacy"}' })).status, 200)
      assert.equal(readFileSync(shared('workflows', 'legacy.json'), 'utf8'), LEGACY)
      assert.equal((await call('bob', 'GET', `/userdata/${enc('workflows/legacy.json')}`)).text, '{"bob":"legacy"}')
      assert.equal((await call('alice', 'GET', `/userdata/${enc('workflows/legacy.json')}`)).text, LEGACY)
      assert.equal((await list('bob')).filter((f) => f === 'legacy.json').length, 1)
      assert.equal((await call('bob', 'DELETE', `/userdata/${enc('workflows/legacy.json')}`)).status, 204)
      assert.equal(readFileSync(shared('workflows', 'legacy.json'), 'utf8'), LEGACY)
      assert.equal(existsSync(shared('workflows', 'twin.json')), false)
      // the admin saves one of their own and publishes it
      assert.equal((await call('root', 'POST', `/userdata/${enc('workflows/house-style.json')}`, { body: '{"house":"style"}' })).status, 200)
      const publish = await call('root', 'POST', '/authsvc/api/workflows/publish', { body: { filename: 'house-style.json' } })
      assert.equal(publish.status, 200, publish.text)
      assert.deepEqual(publish.json(), { status: 'ok', filename: 'house-style.json' })
      assert.equal(readFileSync(shared('workflows', 'house-style.json'), 'utf8'), '{"house":"style"}')
      const missing = await call('root', 'POST', '/authsvc/api/workflows/publish', { body: { filename: 'not-mine.json' } })
      assert.equal(missing.status, 404, missing.text)
      for (const who of ['alice', 'bob', 'viewer'] as const) {
        assert.ok((await list(who)).includes('house-style.json'), who)
        assert.equal((await call(who, 'GET', `/userdata/${enc('workflows/house-style.json')}`)).text, '{"house":"style"}')
      }
      // the admin deletes a shared workflow: the gate deletes it from user/default (204)
      const del = await call('root', 'DELETE', `/userdata/${enc('workflows/doomed.json')}`)
      assert.equal(del.status, 204, del.text)
      assert.equal(existsSync(shared('workflows', 'doomed.json')), false)
      for (const who of ['alice', 'bob', 'root'] as const) {
        assert.ok(!(await list(who)).includes('doomed.json'), who)
        assert.equal((await call(who, 'GET', `/userdata/${enc('workflows/doomed.json')}`)).status, 404)
      }
      // the admin's own file of the same name goes first: deleting it leaves the shared one
      assert.equal((await call('root', 'DELETE', `/userdata/${enc('workflows/house-style.json')}`)).status, 204)
      assert.equal(existsSync(own('root', 'workflows', 'house-style.json')), false)
      assert.equal(existsSync(shared('workflows', 'house-style.json')), true)
    })

    it('roles without can_modify_workflows (guest, a custom role) read but never write', async () => {
      for (const who of ['viewer', 'reader'] as const) {
        assert.ok((await list(who)).includes('legacy.json'), who)
        assert.equal((await call(who, 'GET', `/userdata/${enc('workflows/legacy.json')}`)).text, LEGACY)
        const v2 = await call(who, 'GET', '/v2/userdata?path=workflows')
        assert.equal(v2.status, 200, v2.text)
        const cpeList = await call(who, 'GET', '/api/cpe/workflow/list')
        assert.equal(cpeList.status, 200, cpeList.text)
        const writes: Array<[string, string, string]> = [
          ['POST', `/userdata/${enc('workflows/mine.json')}`, 'save'],
          ['POST', `/api/userdata/${enc('workflows/mine.json')}`, 'save (/api)'],
          ['POST', `/userdata/${enc('workflows/sub/mine.json')}`, 'save in a subfolder'],
          ['POST', `/userdata/${enc('Workflows/mine.json')}`, 'save, case variant'],
          ['POST', `/userdata/${enc('workflows\\mine.json')}`, 'save, backslash'],
          ['POST', `/userdata/${enc(enc('workflows/mine.json'))}`, 'save, double-encoded slash'],
          ['POST', `/userdata/${enc('x/../workflows/mine.json')}`, 'save through ..'],
          ['POST', `/userdata/${enc('comfy.settings.json')}/move/${enc('workflows/mine.json')}`, 'move into workflows'],
          ['POST', `/userdata/${enc('workflows/legacy.json')}/move/${enc('workflows/mine.json')}`, 'move a shared one'],
          ['DELETE', `/userdata/${enc('workflows/legacy.json')}`, 'delete a shared one'],
          ['DELETE', `/api/userdata/${enc('workflows/house-style.json')}`, 'delete a shared one (/api)'],
        ]
        for (const [method, path, what] of writes) {
          assertRefused(await call(who, method, path, { body: method === 'POST' ? '{"x":1}' : undefined }), 403, 'PERMISSION_DENIED', `${who}: ${what} (${method} ${path})`)
        }
        assertRefused(await call(who, 'POST', '/api/cpe/workflow/save', { body: { workflow: { x: 1 }, name: 'mine' } }), 403, 'PERMISSION_DENIED', `${who}: cpe save`)
        assertRefused(await call(who, 'POST', '/cpe/workflow/save', { body: { workflow: { x: 1 }, name: 'mine' } }), 403, 'PERMISSION_DENIED', `${who}: cpe save (/cpe)`)
        assert.deepEqual(tree(own(who)).filter((f) => f.toLowerCase().includes('workflows')), [], `${who} wrote no workflow`)
        assert.equal(readFileSync(shared('workflows', 'legacy.json'), 'utf8'), LEGACY)
        assert.equal(existsSync(shared('workflows', 'house-style.json')), true)
        // settings are not workflows: every principal keeps its own
        const setting = await call(who, 'POST', '/settings/Comfy.Mine', { body: `"${who}"` })
        assert.equal(setting.status, 200, setting.text)
        assert.deepEqual((await call(who, 'GET', '/settings')).json(), { 'Comfy.Mine': who })
      }
    })

    it('traversal, encoded-slash, absolute, backslash, case-variant and hidden-file shapes answer what the bare host answers (the gate\'s 403 where a name leaves the caller\'s space) and reach nothing outside it', async () => {
      // alice (may write workflows) owns workflows/twin.json; bob owns workflows/clash.json
      const bobId = id.bob
      const canary = `/tmp/authsvc-canary-${randomUUID()}.json`
      const before = tree(userDir()).filter((f) => !f.startsWith(`${id.alice}/`))
      const bobClash = readFileSync(own('bob', 'workflows', 'clash.json'), 'utf8')
      // [method, path, status the bare ComfyUI 0.3.64 answers for it (known comfy-user, --multi-user, aiohttp 3.8 and 3.11),
      // but for the rows the gate now refuses itself (a name that leaves the caller's space: 403)]
      const rows: Array<[string, string, number]> = [
        ['GET', '/userdata/..%2Fsecret.json', 403],
        ['GET', '/userdata/..%2Fusers.json', 403],
        ['GET', `/userdata/..%2F${bobId}%2Fcomfy.settings.json`, 403],
        ['GET', `/userdata/workflows%2F..%2F..%2F${bobId}%2Fworkflows%2Fclash.json`, 403],
        ['GET', `/userdata/workflows%252F..%252F..%252F${bobId}%252Fworkflows%252Fclash.json`, 403],
        ['GET', `/userdata/workflows%2F..%2F..%2Fdefault%2Fcomfy.settings.json`, 403],
        ['GET', `/userdata/${enc(join(host.userDir, 'secret.json'))}`, 403],
        ['GET', `/userdata/${enc(own('bob', 'workflows', 'clash.json'))}`, 403],
        ['GET', `/userdata/workflows%5C..%5C..%5C${bobId}%5Cworkflows%5Cclash.json`, 404],
        ['GET', '/userdata/Workflows%2Flegacy.json', 404],
        ['GET', '/userdata/WORKFLOWS%2Fclash.json', 404],
        ['GET', '/userdata/../secret.json', 404],
        ['GET', `/userdata/../${bobId}/workflows/clash.json`, 404],
        ['POST', '/userdata/..%2Fevil.json', 403],
        ['POST', `/userdata/..%2F${bobId}%2Fworkflows%2Fclash.json`, 403],
        ['POST', '/userdata/workflows%2F..%2F..%2Fevil.json', 403],
        ['POST', '/userdata/workflows%252F..%252F..%252Fevil.json', 403],
        ['POST', '/userdata/workflows%2F..%2F..%2Fdefault%2Fworkflows%2Flegacy.json', 403],
        ['POST', `/userdata/${enc(canary)}`, 403],
        ['POST', `/userdata/${enc(join(shared('workflows', 'legacy.json')))}`, 403],
        ['DELETE', '/userdata/..%2Fsecret.json', 403],
        ['DELETE', `/userdata/workflows%2F..%2F..%2F${bobId}%2Fworkflows%2Fclash.json`, 403],
        ['DELETE', `/userdata/${enc(shared('workflows', 'legacy.json'))}`, 403],
        // the bare host's move answers 500 when the destination leaves the user root (its dest
        // check tests the source twice; shutil.move then fails on the error response): the gate
        // refuses any name that leaves the caller's space itself (issue 28), so 403
        ['POST', `/userdata/workflows%2Ftwin.json/move/..%2F..%2Fevil.json`, 403],
        ['POST', `/userdata/workflows%2Ftwin.json/move/workflows%2F..%2F..%2F${bobId}%2Fworkflows%2Fclash.json`, 403],
        ['POST', `/userdata/workflows%2Ftwin.json/move/${enc(canary)}`, 403],
        ['POST', `/userdata/..%2F${bobId}%2Fworkflows%2Fclash.json/move/workflows%2Fgot-it.json`, 403],
        ['GET', '/userdata?dir=..', 403],
        ['GET', `/userdata?dir=workflows%2F..%2F..%2F${bobId}`, 403],
        ['GET', `/userdata?dir=workflows/../../${bobId}/workflows`, 403],
        ['GET', `/userdata?dir=${enc(host.userDir)}`, 403],
        // the bare host answers 400 here; the gate refuses first (issue 28)
        ['GET', '/v2/userdata?path=..', 403],
        ['GET', `/v2/userdata?path=workflows%2F..%2F..%2F${bobId}`, 403],
        ['GET', `/v2/userdata?path=${enc(host.userDir)}`, 403],
      ]
      const wrong: string[] = []
      for (const [method, path, want] of rows) {
        const res = await call('alice', method, path, { body: method === 'POST' && !path.includes('/move/') ? '{"evil":true}' : undefined })
        if (res.status !== want) wrong.push(`${method} ${path}: want ${want}, got ${res.status} ${res.text.slice(0, 160)}`)
        for (const leak of [SECRET, bobClash, '"Comfy.Bob"', LEGACY_SETTINGS]) {
          if (res.text.includes(leak)) wrong.push(`${method} ${path}: answered ${leak}`)
        }
      }
      assert.deepEqual(wrong, [])
      // nothing outside alice's own folder changed, appeared or went
      assert.deepEqual(tree(userDir()).filter((f) => !f.startsWith(`${id.alice}/`)), before)
      assert.equal(readFileSync(join(host.userDir, 'secret.json'), 'utf8'), SECRET)
      assert.equal(readFileSync(own('bob', 'workflows', 'clash.json'), 'utf8'), bobClash)
      assert.equal(readFileSync(shared('workflows', 'legacy.json'), 'utf8'), LEGACY)
      assert.equal(existsSync(canary), false)
      assert.equal(existsSync(join(host.baseDir, 'evil.json')), false)
      assert.equal(readFileSync(own('alice', 'workflows', 'twin.json'), 'utf8'), '{"twin":1}', 'the refused moves moved nothing')
      // shapes the host accepts stay inside alice's own space: a backslash is a plain character
      // on Linux, `Workflows/` is another folder than `workflows/`, hidden names are files
      const inside: Array<[string, string]> = [
        ['workflows\\..\\..\\evil.json', 'workflows\\..\\..\\evil.json'],
        ['Workflows/case.json', 'Workflows/case.json'],
        ['workflows/.hid.json', 'workflows/.hid.json'],
      ]
      for (const [name, onDisk] of inside) {
        const res = await call('alice', 'POST', `/userdata/${enc(name)}`, { body: '{"inside":true}' })
        assert.equal(res.status, 200, `${name}: ${res.text}`)
        assert.equal(res.json(), onDisk)
        assert.equal(readFileSync(own('alice', onDisk), 'utf8'), '{"inside":true}')
      }
      assert.deepEqual(tree(userDir()).filter((f) => !f.startsWith(`${id.alice}/`)), before)
      // the host's glob skips hidden names: neither alice's own nor the shared one is listed
      const listed = await list('alice', '&recurse=true')
      assert.ok(!listed.some((f: string) => f.split('/').pop()!.startsWith('.')), JSON.stringify(listed))
      assert.deepEqual((await call('alice', 'GET', '/userdata?dir=Workflows')).json(), ['case.json'])
      assert.equal((await call('bob', 'GET', '/userdata?dir=Workflows')).status, 404)
      // hidden files are loaded like any other: own first (alice's), then shared
      assert.equal((await call('alice', 'GET', `/userdata/${enc('workflows/.hid.json')}`)).text, '{"inside":true}')
      assert.equal((await call('bob', 'GET', `/userdata/${enc('workflows/.hid.json')}`)).status, 404)
      assert.equal((await call('bob', 'GET', `/userdata/${enc('workflows/.hidden.json')}`)).text, HIDDEN)
    })

    it('/api/cpe (and /cpe) answer the SPEC §6.1 shapes over the same files, per user', async () => {
      for (const prefix of ['/api/cpe', '/cpe']) {
        const health = await call('alice', 'GET', `${prefix}/health`)
        assert.equal(health.status, 200, health.text)
        assert.deepEqual(health.json(), { status: 'success' })
      }
      const save = await call('alice', 'POST', '/api/cpe/workflow/save', { body: { workflow: { nodes: [1, 2] }, name: 'cpe-flow' } })
      assert.equal(save.status, 200, save.text)
      assert.deepEqual(save.json(), { status: 'success', message: 'Workflow saved successfully', filename: 'cpe-flow.json' })
      const saveString = await call('alice', 'POST', '/cpe/workflow/save', { body: { workflow: '{"from":"string"}', name: 'cpe-sub/strung.json' } })
      assert.equal(saveString.status, 200, saveString.text)
      assert.deepEqual(saveString.json(), { status: 'success', message: 'Workflow saved successfully', filename: 'cpe-sub/strung.json' })
      const unnamed = await call('bob', 'POST', '/api/cpe/workflow/save', { body: { workflow: { bob: 'unnamed' } } })
      assert.equal(unnamed.status, 200, unnamed.text)
      const bobFile: string = unnamed.json().filename
      assert.match(bobFile, /\.json$/)
      assert.ok(existsSync(own('bob', 'workflows', bobFile)))
      assert.ok(existsSync(own('alice', 'workflows', 'cpe-flow.json')))
      // list: own + shared, own wins, {filename,size,modified}
      for (const prefix of ['/api/cpe', '/cpe']) {
        const res = await call('alice', 'GET', `${prefix}/workflow/list`)
        assert.equal(res.status, 200, res.text)
        const body = res.json()
        assert.deepEqual(Object.keys(body), ['status', 'workflows'])
        assert.equal(body.status, 'success')
        for (const w of body.workflows) assert.deepEqual(Object.keys(w), ['filename', 'size', 'modified'], JSON.stringify(w))
        const names = body.workflows.map((w: any) => w.filename)
        for (const name of ['cpe-flow.json', 'cpe-sub/strung.json', 'legacy.json', 'team/brief.json', 'twin.json', 'clash.json']) assert.ok(names.includes(name), `${prefix}: ${name} in ${names}`)
        assert.equal(names.filter((n: string) => n === 'clash.json').length, 1)
        assert.ok(!names.includes(bobFile) && !names.includes('bob-renamed.json'), JSON.stringify(names))
      }
      const bobList = (await call('bob', 'GET', '/api/cpe/workflow/list')).json()
      const bobClash = bobList.workflows.find((w: any) => w.filename === 'clash.json')
      assert.equal(bobClash.size, readFileSync(own('bob', 'workflows', 'clash.json')).length, 'own wins in the cpe list')
      assert.ok(!bobList.workflows.some((w: any) => w.filename.startsWith('cpe-')), JSON.stringify(bobList))
      // get: own first, then shared; 404 in the cpe shape
      const get = await call('alice', 'GET', '/api/cpe/workflow/get?filename=cpe-flow.json')
      assert.equal(get.status, 200, get.text)
      assert.deepEqual(get.json(), { status: 'success', filename: 'cpe-flow.json', workflow: { nodes: [1, 2] } })
      assert.deepEqual((await call('alice', 'GET', '/cpe/workflow/get?filename=legacy.json')).json(), { status: 'success', filename: 'legacy.json', workflow: JSON.parse(LEGACY) })
      assert.deepEqual((await call('bob', 'GET', '/api/cpe/workflow/get?filename=clash.json')).json().workflow, { from: 'bob, longer than the others' })
      // a workflow saved through /userdata is loaded by the cpe family
      assert.deepEqual((await call('alice', 'GET', '/api/cpe/workflow/get?filename=twin.json')).json().workflow, { twin: 1 })
      for (const [who, name] of [['bob', 'cpe-flow.json'], ['root', 'cpe-flow.json'], ['alice', bobFile]] as const) {
        const res = await call(who, 'GET', `/api/cpe/workflow/get?filename=${enc(name)}`)
        assert.equal(res.status, 404, `${who} gets ${name}: ${res.text}`)
        const body = res.json()
        assert.deepEqual(Object.keys(body), ['status', 'message'])
        assert.equal(body.status, 'error')
      }
      for (const name of ['../secret.json', `../../${id.bob}/workflows/clash.json`, '/etc/passwd', '.hidden.json']) {
        const res = await call('alice', 'GET', `/api/cpe/workflow/get?filename=${enc(name)}`)
        assert.equal(res.status, 400, `${name}: ${res.text}`)
        assert.equal(res.json().status, 'error')
      }
      const badSave = await call('alice', 'POST', '/api/cpe/workflow/save', { body: { workflow: { x: 1 }, name: '../../escape' } })
      assert.equal(badSave.status, 400, badSave.text)
      assert.equal(existsSync(join(host.userDir, 'escape.json')), false)
      // a workflow saved through cpe appears in the host's own list for the same user, and no one else's
      assert.ok((await list('alice')).includes('cpe-flow.json'))
      assert.ok((await list('alice', '&recurse=true')).includes('cpe-sub/strung.json'))
      assert.equal((await call('alice', 'GET', `/userdata/${enc('workflows/cpe-flow.json')}`)).text, JSON.stringify({ nodes: [1, 2] }))
      assert.ok((await list('bob')).includes(bobFile))
      for (const who of ['bob', 'root', 'viewer', 'reader'] as const) {
        const names = await list(who, '&recurse=true')
        assert.ok(!names.includes('cpe-flow.json') && !names.includes('cpe-sub/strung.json'), `${who}: ${names}`)
      }
      assert.ok(!(await list('alice', '&recurse=true')).includes(bobFile))
      // without a principal: 401 (health is open to local clients only)
      const anonymous = await send(host.url, 'GET', '/api/cpe/workflow/list')
      assert.equal(anonymous.status, 401, anonymous.text)
      assert.equal((await send(host.url, 'POST', '/api/cpe/workflow/save', { body: { workflow: {} } })).status, 401)
    })

    it('a guest session (a principal without a user) reads the shared set and keeps its settings in a space of its own, never user/default/ nor another guest\'s', async () => {
      const allow = await call('root', 'PUT', '/authsvc/api/settings/guest-jwt', { body: { allow_guest_jwt: true } })
      assert.equal(allow.status, 200, allow.text)
      const guestLogin = await send(host.url, 'POST', '/login', { body: { guest_login: true } })
      assert.equal(guestLogin.status, 200, guestLogin.text)
      const guest = guestLogin.json().jwt_token as string
      const listed = await send(host.url, 'GET', '/userdata?dir=workflows', { token: guest })
      assert.equal(listed.status, 200, listed.text)
      assert.deepEqual(sorted(listed.json()), ['clash.json', 'house-style.json', 'legacy.json'])
      assert.equal((await send(host.url, 'GET', `/userdata/${enc('workflows/legacy.json')}`, { token: guest })).text, LEGACY)
      assertRefused(await send(host.url, 'POST', `/userdata/${enc('workflows/guest.json')}`, { token: guest, body: '{}' }), 403, 'PERMISSION_DENIED', 'a guest saves')
      const setting = await send(host.url, 'POST', '/settings/Comfy.Guest', { token: guest, body: '"anonymous"' })
      assert.equal(setting.status, 200, setting.text)
      assert.deepEqual((await send(host.url, 'GET', '/settings', { token: guest })).json(), { 'Comfy.Guest': 'anonymous' })
      guestSpace = guestHostUser(guest)
      assert.deepEqual(JSON.parse(readFileSync(join(host.userDir, guestSpace, 'comfy.settings.json'), 'utf8')), { 'Comfy.Guest': 'anonymous' })
      assert.equal(readFileSync(shared('comfy.settings.json'), 'utf8'), LEGACY_SETTINGS)
      const other = (await send(host.url, 'POST', '/login', { body: { guest_login: true } })).json().jwt_token as string
      assert.deepEqual((await send(host.url, 'GET', '/settings', { token: other })).json(), {}, 'another guest session has settings of its own')
      assert.equal('Comfy.Guest' in (await call('alice', 'GET', '/settings')).json(), false)
    })

    it('ComfyUI\'s users.json names every user the gate passed to the host, by user id, and no one else', async () => {
      const users = JSON.parse(readFileSync(join(host.userDir, 'users.json'), 'utf8'))
      const expected: Record<string, string> = Object.fromEntries(Object.keys(token).map((who) => [id[who], who]))
      // without --multi-user ComfyUI starts from its single user, `default`
      if (!mode.multiUser) expected.default = 'default'
      expected[guestSpace] = 'guest'
      for (const [userId, name] of Object.entries(users)) if (name === 'guest' && userId !== guestSpace) expected[userId] = 'guest' // the second guest of the row above
      assert.deepEqual(users, expected)
    })

    // last: it empties alice's space (issue 24, user-env)
    it('user-env counts what alice saved in the real ComfyUI; an admin\'s purge empties her space, after which ComfyUI lists only the shared set for her and saves into it again; bob\'s space and the shared set stay', async () => {
      const status = await call('alice', 'POST', '/authsvc/api/user-env', { body: { action: 'status' } })
      assert.equal(status.status, 200, status.text)
      const visible = tree(own('alice', 'workflows')).filter((f) => !f.split('/').some((segment) => segment.startsWith('.')))
      assert.ok(visible.length > 0, 'earlier rows saved workflows for alice')
      assert.equal(status.json().workflows.count, visible.length)
      assert.equal(status.json().folders[0].path, `user/${id.alice}`)
      const bobBefore = tree(own('bob'))
      const sharedBefore = tree(shared())
      const sharedList = sorted(await list('viewer'))
      const purge = await call('root', 'POST', '/authsvc/api/user-env', { body: { action: 'purge', user: 'alice', confirm: 'alice' } })
      assert.equal(purge.status, 200, purge.text)
      assert.equal(purge.json().removed.workflows.count, visible.length)
      assert.deepEqual(tree(own('alice')), [])
      assert.deepEqual(tree(own('bob')), bobBefore)
      assert.deepEqual(tree(shared()), sharedBefore)
      assert.deepEqual(sorted(await list('alice')), sharedList)
      const again = await call('alice', 'POST', `/userdata/${enc('workflows/after-purge.json')}`, { body: '{"again":true}' })
      assert.equal(again.status, 200, again.text)
      assert.deepEqual(tree(own('alice', 'workflows')), ['after-purge.json'])
    })
  })
}
