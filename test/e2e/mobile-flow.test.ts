/**
 * Issue 3's mobile sequence end to end through the stand-in, for every
 * credential channel: token → /me → /object_info → POST /prompt → /queue and
 * /history → /ws receives that prompt's execution messages → /view returns
 * the PNG. The host sees the principal's comfy-user, never the credential.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { HOST_AIOHTTP, destroyStack, poll, startStack, type Stack } from '../helpers/stack.js'
import { WsClient, apiToken, json, login, register, tinyGraph } from '../helpers/client.js'

type Channel = 'bearer-token' | 'cookie' | 'query-token' | 'query-access_token'

/** What the stand-in recorded for the last request that reached a host handler. */
type Seen = Awaited<ReturnType<Stack['lastRequest']>> & { raw_path: string; route: string }

/** A client's attempt to act as someone else through ComfyUI's multi-user header. */
const SPOOF = { 'comfy-user': 'admin' }

for (const aiohttp of [HOST_AIOHTTP]) {
  describe(`mobile flow, aiohttp ${aiohttp}`, () => {
    let stack: Stack
    let token: string
    let cookie: string
    let userId: string
    before(async () => {
      // debug logs on both sides, so the no-secret check below has every line to search
      stack = await startStack({ aiohttp, env: { AUTHSVC_LOG_LEVEL: 'debug', AUTHSVC_TEST_LOG: '1' } })
      assert.equal((await register(stack, 'alice')).status, 201)
      token = await apiToken(stack, 'alice')
      cookie = (await login(stack, 'alice')).cookie
    })
    after(async () => {
      await destroyStack(stack)
    })

    /** The host saw the request at `route`, acting for the principal, with no trace of the credential. */
    async function assertHostSawPrincipalOnly(route: string): Promise<void> {
      const seen = (await stack.lastRequest()) as Seen
      assert.equal(seen?.route, route, `the last request to reach the host is ${route}`)
      for (const [field, value] of [['path', seen.path], ['query_string', seen.query_string], ['raw_path', seen.raw_path]]) {
        assert.equal(value.includes(token), false, `${route}: the token reached the host's ${field}`)
        assert.equal(value.includes('token='), false, `${route}: a query credential reached the host's ${field}: ${value}`)
      }
      assert.equal(seen.headers['comfy-user'], userId, `${route}: comfy-user is the principal's id, never the client's spoof`)
      assert.equal(seen.headers['authorization'], undefined, `${route}: the bearer is not forwarded to the host`)
    }

    const channels: Channel[] = ['bearer-token', 'cookie', 'query-token', 'query-access_token']
    channels.forEach((channel, n) => {
      it(`works with ${channel}`, async () => {
        const headers: Record<string, string> = { Accept: 'application/json', ...SPOOF }
        let suffix = ''
        if (channel === 'bearer-token') headers.Authorization = `Bearer ${token}`
        if (channel === 'cookie') Object.assign(headers, { Cookie: cookie, Origin: stack.url })
        if (channel === 'query-token') suffix = `token=${token}`
        if (channel === 'query-access_token') suffix = `access_token=${token}`
        const url = (path: string) => stack.url + path + (suffix ? (path.includes('?') ? '&' : '?') + suffix : '')

        const me = await json(await fetch(url('/authsvc/api/me'), { headers }))
        assert.equal(me.username, 'alice')
        assert.equal(me.auth_type, channel === 'cookie' ? 'session' : 'api_token')
        userId = me.user_id
        assert.match(userId, /^[0-9a-f-]{36}$/)

        const info = await fetch(url('/object_info'), { headers })
        assert.equal(info.status, 200)
        assert.ok('SaveImage' in (await json(info)))

        // Names without the word "token", so the no-credential checks cannot be fooled by them.
        const clientId = `phone${n}`
        // A phone app cannot set headers on its WebSocket: the API token goes in ?token=.
        const wsUrl = channel === 'bearer-token'
          ? `${stack.url}/ws?clientId=${clientId}&token=${token}`
          : url(`/ws?clientId=${clientId}`)
        // a browser sends its page's Origin with the upgrade; a cookie upgrade must come from the same origin
        const wsHeaders = channel === 'cookie' ? { Cookie: cookie, Origin: stack.url, ...SPOOF } : SPOOF
        const ws = await WsClient.open(wsUrl.replace('http', 'ws'), wsHeaders)
        try {
          await assertHostSawPrincipalOnly('GET /ws')
          assert.equal((await stack.lastRequest()).query_string, `clientId=${clientId}`, 'only the credential was removed from the query')
          await ws.waitFor((m) => m.type === 'status')
          const post = await fetch(url('/prompt'), {
            method: 'POST',
            headers: { ...headers, 'Content-Type': 'application/json' },
            body: JSON.stringify({ prompt: tinyGraph(`mobile${n}`), client_id: clientId, extra_data: { authsvc_user: 'mallory' } }),
          })
          assert.equal(post.status, 200, await post.clone().text())
          const { prompt_id } = await json(post)
          await assertHostSawPrincipalOnly('POST /prompt')

          // The prompt is queued (running or pending) or, on a fast host, already in the history;
          // the history is read after the queue, so a prompt that left the queue is found there.
          const queue = await fetch(url('/queue'), { headers })
          assert.equal(queue.status, 200)
          const { queue_running, queue_pending } = await json(queue)
          const queued = [...queue_running, ...queue_pending].find((item: unknown[]) => item[1] === prompt_id)
          if (queued) {
            assert.equal(queued[3].authsvc_user, 'alice', 'the queued prompt carries its owner')
          } else {
            const done = await json(await fetch(url(`/history/${prompt_id}`), { headers }))
            assert.ok(prompt_id in done, `prompt ${prompt_id} is neither queued nor in the history`)
          }

          const executed = await ws.waitFor((m) => m.type === 'executed' && m.data.prompt_id === prompt_id)
          await ws.waitFor((m) => m.type === 'execution_success' && m.data.prompt_id === prompt_id)
          // the history holds the prompt once the worker's last message came: `executing` with node
          // null, sent after the entry is stored (execution_success comes before it)
          await ws.waitFor((m) => m.type === 'executing' && m.data.node === null && m.data.prompt_id === prompt_id)
          const image = executed.data.output.images[0]

          const history = await json(await fetch(url(`/history/${prompt_id}`), { headers }))
          const extra = history[prompt_id].prompt[3]
          assert.equal(extra.authsvc_user, 'alice', 'owner stamped, spoof replaced')
          assert.equal(extra.authsvc_user_id, userId)
          await assertHostSawPrincipalOnly('GET /history/{prompt_id}')

          const view = await fetch(url(`/view?filename=${encodeURIComponent(image.filename)}&type=output&subfolder=${encodeURIComponent(image.subfolder)}`), { headers })
          assert.equal(view.status, 200)
          const bytes = Buffer.from(await view.arrayBuffer())
          assert.equal(bytes.subarray(0, 8).toString('hex'), '89504e470d0a1a0a', 'a PNG')
          await assertHostSawPrincipalOnly('GET /view')
        } finally {
          ws.close()
        }
      })
    })

    it('no secret reaches the logs of the host, the plugin or the sidecar (DESIGN §2.7)', async () => {
      // one more request per channel with the raw secrets in every place a client puts them
      await fetch(`${stack.url}/queue?token=${token}`)
      await fetch(`${stack.url}/authsvc/api/me?access_token=${token}`)
      await fetch(`${stack.url}/login`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ username: 'alice', password: 'correct-horse-battery' }) })
      // a marker request last: once its log line is in the output, every line before it is too
      const marker = `log-marker-${randomUUID()}`
      await (await fetch(`${stack.url}/authsvc/health?${marker}`)).arrayBuffer()
      assert.ok(await poll(async () => stack.output().includes(marker), 10_000), 'the marker line reached the output')
      const output = stack.output()
      assert.ok(output.includes('"msg"'), 'the sidecar did log (the check below has lines to search)')
      for (const secret of [token, token.slice(4), cookie.split('=')[1], 'correct-horse-battery']) {
        assert.equal(output.includes(secret), false, `a secret appears in the logs: ${secret.slice(0, 10)}…`)
      }
    })

    it('a role without can_run gets 403 PERMISSION_DENIED on POST /prompt, and /me shows why', async () => {
      const admin = await login(stack, 'alice')
      const groups = await json(await fetch(`${stack.url}/authsvc/api/groups`, { headers: { Authorization: `Bearer ${admin.jwt}` } }))
      groups.groups.viewer = { can_access_api: true, can_run: false }
      const put = await fetch(`${stack.url}/authsvc/api/groups`, {
        method: 'PUT',
        headers: { Authorization: `Bearer ${admin.jwt}`, 'Content-Type': 'application/json' },
        body: JSON.stringify(groups),
      })
      assert.equal(put.status, 200)
      assert.equal((await register(stack, 'victor', { bearer: admin.jwt, role: 'viewer' })).status, 201)
      const viewer = await login(stack, 'victor')
      const res = await fetch(`${stack.url}/prompt`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${viewer.jwt}`, 'Content-Type': 'application/json' },
        body: JSON.stringify({ prompt: tinyGraph() }),
      })
      assert.equal(res.status, 403)
      assert.equal((await json(res)).code, 'PERMISSION_DENIED')
      const me = await json(await fetch(`${stack.url}/authsvc/api/me`, { headers: { Authorization: `Bearer ${viewer.jwt}` } }))
      assert.equal(me.role, 'viewer')
      assert.equal(me.permissions.can_run, false)
      assert.equal(me.permissions.can_access_api, true)
    })
  })
}

for (const aiohttp of [HOST_AIOHTTP]) {
  describe(`ComfyUI --multi-user, aiohttp ${aiohttp}`, () => {
    let stack: Stack
    before(async () => {
      stack = await startStack({ aiohttp, multiUser: true })
    })
    after(async () => {
      await destroyStack(stack)
    })

    it('the user the gate names in comfy-user is known to ComfyUI, so userdata works per user', async () => {
      assert.equal((await register(stack, 'mallory')).status, 201)
      const token = await apiToken(stack, 'mallory')
      const headers = { Authorization: `Bearer ${token}` }
      const me = await json(await fetch(`${stack.url}/authsvc/api/me`, { headers }))
      const save = await fetch(`${stack.url}/userdata/workflows%2Fmine.json`, { method: 'POST', headers, body: '{"nodes":[]}' })
      assert.equal(save.status, 200, await save.clone().text())
      const list = await fetch(`${stack.url}/userdata?dir=workflows`, { headers })
      assert.equal(list.status, 200)
      assert.deepEqual(await list.json(), ['mine.json'])
      const users = JSON.parse(readFileSync(join(stack.baseDir, 'user', 'users.json'), 'utf8'))
      assert.equal(users[me.user_id], 'mallory')
    })
  })
}
