/**
 * Update status and user environment end to end (issue 24 items 4 and 5): the stand-in host
 * loading the real plugin, which starts the real sidecar; real HTTP, the real clock.
 *
 * - The sidecar's own job asks the configured source (a loopback stand-in) shortly after start;
 *   while the source holds its answer, `GET /authsvc/api/update-status` answers at once (offline),
 *   and once the source answers it says online with the newer version.
 * - Files the host itself wrote for alice (a workflow saved through /userdata, an image uploaded
 *   through /upload/image, which the gate sends to her own input folder) show in her
 *   `user-env` status; an admin's purge removes them, after which the host lists only the shared
 *   workflows for her and she can save again; bob's files and the shared ones stay.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { once } from 'node:events'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { HOST_AIOHTTP, destroyStack, poll, startStack, type Stack } from '../helpers/stack.js'
import { apiToken, bearer, json, register } from '../helpers/client.js'

const NEWER = '99.1.0'
const SHARED_FLOW = '{"shared":true}'

for (const aiohttp of [HOST_AIOHTTP]) {
  describe(`update status and user environment through the stand-in, aiohttp ${aiohttp}`, { concurrency: false }, () => {
    let stack: Stack
    let release: () => void = () => {}
    let asked: Promise<unknown>
    const sourceRequests: string[] = []
    const source = createServer((req: IncomingMessage, res: ServerResponse) => {
      sourceRequests.push(req.url ?? '')
      // holds the answer until the test releases it (once)
      release = () => {
        if (!res.headersSent) res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ tag_name: `v${NEWER}` }))
      }
      source.emit('asked')
    })
    const token: Record<string, string> = {}
    const id: Record<string, string> = {}

    const env = async (who: string, body: unknown) => {
      const res = await fetch(`${stack.url}/authsvc/api/user-env`, { method: 'POST', headers: { ...bearer(token[who]), 'Content-Type': 'application/json' }, body: JSON.stringify(body) })
      return { status: res.status, body: await json(res) }
    }
    const userdata = (who: string, path: string, init: RequestInit = {}) => fetch(`${stack.url}${path}`, { ...init, headers: { ...bearer(token[who]), ...(init.headers ?? {}) } })

    before(async () => {
      source.listen(0, '127.0.0.1')
      await once(source, 'listening')
      asked = once(source, 'asked')
      const url = `http://127.0.0.1:${(source.address() as AddressInfo).port}/repos/o/authsvc/releases/latest`
      stack = await startStack({ aiohttp, multiUser: true, config: { update_check: { url } }, env: { AUTHSVC_LOG_LEVEL: 'info' } })
      const shared = join(stack.baseDir, 'user', 'default', 'workflows')
      mkdirSync(shared, { recursive: true })
      writeFileSync(join(shared, 'shared.json'), SHARED_FLOW)
      assert.equal((await register(stack, 'root')).status, 201)
      token.root = await apiToken(stack, 'root')
      for (const name of ['alice', 'bob']) {
        assert.equal((await register(stack, name, { bearer: token.root })).status, 201)
        token[name] = await apiToken(stack, name)
        id[name] = (await json(await userdata(name, '/authsvc/api/me'))).user_id
      }
    })
    after(async () => {
      release()
      source.closeAllConnections()
      source.close()
      if (stack) await destroyStack(stack)
    })

    it('update status: answered while the source holds its answer, online once it answered', async () => {
      await asked
      const status = async () => {
        const res = await fetch(`${stack.url}/authsvc/api/update-status`, { headers: bearer(token.root) })
        assert.equal(res.status, 200)
        return json(res)
      }
      const held = await status()
      assert.equal(held.mode, 'offline')
      assert.equal(held.latest_version, held.current_version)
      assert.equal(held.update_available, false)
      release()
      assert.ok(await poll(async () => (await status()).mode === 'online', 10_000), 'online after the source answered')
      assert.deepEqual({ ...(await status()), current_version: 'x' }, { current_version: 'x', latest_version: NEWER, update_available: true, mode: 'online' })
      assert.deepEqual(sourceRequests, ['/repos/o/authsvc/releases/latest'], 'asked once')
      const denied = await fetch(`${stack.url}/authsvc/api/update-status`, { headers: bearer(token.alice) })
      assert.equal(denied.status, 403)
      assert.equal((await json(denied)).code, 'ADMIN_REQUIRED')
    })

    it('user-env: what the host wrote for alice shows in her status; an admin\'s purge removes only hers', async () => {
      for (const who of ['alice', 'bob']) {
        const save = await userdata(who, `/userdata/${encodeURIComponent(`workflows/${who}.json`)}`, { method: 'POST', body: `{"owner":"${who}"}` })
        assert.equal(save.status, 200, await save.text())
      }
      const form = new FormData()
      form.append('image', new Blob([Buffer.from('not really a png')], { type: 'image/png' }), 'mine.png')
      const upload = await userdata('alice', '/upload/image', { method: 'POST', body: form })
      assert.equal(upload.status, 200, await upload.clone().text())
      assert.equal((await upload.json()).subfolder, `u_${id.alice}`, 'the gate chose her own folder')

      const status = await env('alice', { action: 'status' })
      assert.equal(status.status, 200, JSON.stringify(status.body))
      assert.deepEqual(status.body.workflows, { count: 1, bytes: '{"owner":"alice"}'.length })
      const input = status.body.folders.find((f: { kind: string }) => f.kind === 'input')
      assert.deepEqual(input, { kind: 'input', path: `input/u_${id.alice}`, state: 'folder', files: 1, bytes: 16 })
      assert.ok(!JSON.stringify(status.body).includes(stack.baseDir), 'no host path for a user')

      const refused = await env('root', { action: 'purge', user: 'alice' })
      assert.equal(refused.status, 400)
      assert.ok(existsSync(join(stack.baseDir, 'user', id.alice, 'workflows', 'alice.json')), 'nothing removed without the confirmation')

      const purge = await env('root', { action: 'purge', user: 'alice', confirm: 'alice' })
      assert.equal(purge.status, 200, JSON.stringify(purge.body))
      assert.equal(purge.body.removed.workflows.count, 1)
      assert.deepEqual(readdirSync(join(stack.baseDir, 'input', `u_${id.alice}`)), [])

      const aliceList = await userdata('alice', '/userdata?dir=workflows')
      assert.deepEqual(await aliceList.json(), ['shared.json'], 'only the shared set is left for her')
      const bobList = await userdata('bob', '/userdata?dir=workflows')
      assert.deepEqual((await bobList.json()).sort(), ['bob.json', 'shared.json'])
      const again = await userdata('alice', `/userdata/${encodeURIComponent('workflows/again.json')}`, { method: 'POST', body: '{}' })
      assert.equal(again.status, 200, 'the host writes into her emptied space again')
      assert.equal((await env('alice', { action: 'status' })).body.workflows.count, 1)
      const purgeLine = (l: string) => l.includes('"event":"user_env_purged"') && l.includes('"subject":"alice"') && l.includes('"actor":"root"')
      assert.ok(await poll(async () => stack.output().split('\n').some(purgeLine), 10_000), 'the purge is an event line')
      assert.equal(stack.output().split('\n').filter(purgeLine).length, 1)
    })
  })
}
