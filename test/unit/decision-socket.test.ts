/**
 * The decision socket itself (real Unix socket, real frames): a connection is
 * served only after a hello of this protocol version, so a plugin of another
 * version is refused from the sidecar's side as well as from its own.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import type { Server } from 'node:net'
import { statSync } from 'node:fs'
import { join } from 'node:path'
import { listenDecisionSocket } from '../../sidecar/src/kernel/server.js'
import { PROTOCOL_VERSION } from '../../sidecar/src/kernel/protocol.js'
import { addUser, apiToken, log, openSidecar, type Sidecar } from './fixtures.js'
import { FrameClient, type Frame } from '../helpers/decision-socket.js'

describe('decision socket: protocol agreement per connection', () => {
  let sc: Sidecar
  let server: Server
  let path: string
  let token: string
  const decideMe = (): Frame => ({
    type: 'decide', method: 'GET', path: '/prompt', query: '', route: { pattern: '/prompt', kind: 'route' },
    route_status: 200, match_info: {}, headers: { authorization: `Bearer ${token}` }, peer: '127.0.0.1', scheme: 'http',
  })

  before(async () => {
    sc = await openSidecar()
    const alice = await addUser(sc, 'alice', 'alice-password-1')
    token = await apiToken(sc, alice)
    path = join(sc.dir, 'decide.sock')
    server = (await listenDecisionSocket(path, sc.handlers, log)).server
  })
  after(async () => {
    await new Promise((r) => server.close(r))
    await sc.close()
  })

  it('the socket file is 0600', () => {
    assert.equal(statSync(path).mode & 0o777, 0o600)
  })

  const rows: Array<{ name: string; hello: Frame | null; served: boolean }> = [
    { name: 'hello of this version', hello: { type: 'hello', protocol: PROTOCOL_VERSION, plugin_version: 't' }, served: true },
    { name: 'no hello at all', hello: null, served: false },
    { name: 'hello of the next version', hello: { type: 'hello', protocol: PROTOCOL_VERSION + 1, plugin_version: 't' }, served: false },
    { name: 'hello of an older version', hello: { type: 'hello', protocol: PROTOCOL_VERSION - 1, plugin_version: 't' }, served: false },
    { name: 'hello with the version as a string', hello: { type: 'hello', protocol: String(PROTOCOL_VERSION), plugin_version: 't' }, served: false },
    { name: 'hello without a version', hello: { type: 'hello', plugin_version: 't' }, served: false },
  ]
  for (const row of rows) {
    it(`${row.name} → ${row.served ? 'decisions' : '503 for every request'}`, async () => {
      const client = await FrameClient.open(path)
      try {
        if (row.hello) {
          const hello = await client.send(row.hello)
          assert.equal(hello.protocol, PROTOCOL_VERSION, 'the hello answer names the sidecar version')
        }
        for (const msg of [decideMe(), { type: 'body', ctx: 'x' }, { type: 'filter', name: 'x', ctx: 'x', status: 200, content_type: 'application/json' }]) {
          const answer = await client.send(msg)
          if (row.served && msg.type === 'decide') assert.equal(answer.action, 'pass')
          if (!row.served) {
            assert.equal(answer.action, 'respond', `${String(msg.type)} refused`)
            assert.equal(answer.status, 503)
            assert.equal(JSON.parse(String(answer.body_text)).code, 'AUTHSVC_UNAVAILABLE')
          }
        }
      } finally {
        client.close()
      }
    })
  }

  it('a later mismatched hello on the same connection withdraws the agreement', async () => {
    const client = await FrameClient.open(path)
    try {
      await client.send({ type: 'hello', protocol: PROTOCOL_VERSION, plugin_version: 't' })
      assert.equal((await client.send(decideMe())).action, 'pass')
      await client.send({ type: 'hello', protocol: PROTOCOL_VERSION + 1, plugin_version: 't' })
      assert.equal((await client.send(decideMe())).status, 503)
    } finally {
      client.close()
    }
  })

  // issue 9, hole 9: nothing from the plugin is cast and used before its shape is checked
  const MALFORMED: Array<[string, (d: Frame) => Frame]> = [
    ['route as a string', (d) => ({ ...d, route: '/prompt' })],
    ['route without a pattern', (d) => ({ ...d, route: { kind: 'route' } })],
    ['route of an unknown kind', (d) => ({ ...d, route: { pattern: '/prompt', kind: 'magic' } })],
    ['a header value that is a number', (d) => ({ ...d, headers: { authorization: 5 } })],
    ['headers as a list', (d) => ({ ...d, headers: [['authorization', 'x']] })],
    ['no path', (d) => ({ ...d, path: undefined })],
    ['method as an object', (d) => ({ ...d, method: { toString: 'GET' } })],
    ['match_info holding an object', (d) => ({ ...d, match_info: { file: { a: 1 } } })],
    ['peer missing', (d) => ({ ...d, peer: undefined })],
    ['an unknown message type', (d) => ({ ...d, type: 'decide-please' })],
  ]
  for (const [name, spoil] of MALFORMED) {
    it(`a decide message with ${name} → 503 for that request; the connection keeps deciding`, async () => {
      const client = await FrameClient.open(path)
      try {
        await client.send({ type: 'hello', protocol: PROTOCOL_VERSION, plugin_version: 't' })
        const bad = await client.send(spoil(decideMe()))
        assert.equal(bad.action, 'respond')
        assert.equal(bad.status, 503)
        assert.equal((await client.send(decideMe())).action, 'pass')
      } finally {
        client.close()
      }
    })
  }

  it('a malformed host event is dropped without an answer; the connection keeps deciding', async () => {
    const client = await FrameClient.open(path)
    try {
      await client.send({ type: 'hello', protocol: PROTOCOL_VERSION, plugin_version: 't' })
      client.notify({ type: 'event', name: 'execution_start', data: 'not an object' })
      client.notify({ type: 'event', t: 1, data: {} })
      assert.equal((await client.send(decideMe())).action, 'pass')
    } finally {
      client.close()
    }
  })
})
