/**
 * Shared vectors (shared/vectors/decisions.json), sidecar side: each request
 * description gets the vector's decision from a sidecar with no users and the
 * default config. The plugin side (test/plugin/test_vectors.py) checks the
 * descriptions themselves.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { RequestDescription } from '../../sidecar/src/kernel/protocol.js'
import { ROOT } from '../helpers/stack.js'
import { openHarness, type Harness } from '../integration/harness.js'
import { buildApp } from '../../sidecar/src/app.js'
import { createLogger } from '../../sidecar/src/kernel/log.js'
import { PROTOCOL_VERSION } from '../../sidecar/src/kernel/protocol.js'
import { encodeFrame, FrameDecoder, parseMessage } from '../../sidecar/src/kernel/frames.js'

interface Vector {
  name: string
  description: Partial<RequestDescription>
  decision: { action: string; status?: number; code?: string; location?: string }
}

const vectors = (JSON.parse(readFileSync(join(ROOT, 'shared/vectors/decisions.json'), 'utf8')) as { vectors: Vector[] }).vectors

describe('shared decision vectors', () => {
  let h: Harness
  let decide: (d: RequestDescription) => unknown
  let closeApp: () => Promise<void>
  before(async () => {
    h = await openHarness()
    const built = buildApp(h.services, createLogger({ level: 'silent' }))
    await built.app.ready() // owned routes are known once the app's plugins are loaded
    closeApp = () => built.app.close()
    decide = built.handlers('/tmp/unused.sock').decide as (d: RequestDescription) => unknown
  })
  after(async () => {
    await closeApp()
    await h.close()
  })

  for (const vector of vectors) {
    it(vector.name, async () => {
      const desc: RequestDescription = {
        type: 'decide', id: 1, method: 'GET', path: '/', query: '', route: null, route_status: 404,
        match_info: {}, headers: {}, peer: '127.0.0.1', scheme: 'http',
        ...vector.description,
      } as RequestDescription
      const decision = (await decide(desc)) as { action: string; status?: number; headers?: Array<[string, string]>; body_text?: string }
      assert.equal(decision.action, vector.decision.action)
      if (vector.decision.status !== undefined) assert.equal(decision.status, vector.decision.status)
      if (vector.decision.code !== undefined) assert.equal(JSON.parse(decision.body_text ?? '{}').code, vector.decision.code)
      if (vector.decision.location !== undefined) {
        assert.equal(new Map(decision.headers).get('Location'), vector.decision.location)
      }
    })
  }
})

describe('shared frame vectors (protocol v3, byte for byte)', () => {
  const spec = JSON.parse(readFileSync(join(ROOT, 'shared/vectors/frames.json'), 'utf8')) as {
    protocol: number
    vectors: Array<{ name: string; direction: string; message: Record<string, unknown>; payload_utf8: string; frame_hex: string }>
  }
  it('names this protocol version', () => {
    assert.equal(spec.protocol, PROTOCOL_VERSION)
  })
  for (const v of spec.vectors) {
    it(v.name, () => {
      const frame = Buffer.from(v.frame_hex, 'hex')
      const payload = Buffer.from(v.payload_utf8, 'utf8')
      assert.deepEqual(encodeFrame(v.message, payload), frame)
      const decoder = new FrameDecoder()
      assert.deepEqual(decoder.feed(frame.subarray(0, 5)), [], 'half a frame is no message')
      const [decoded] = decoder.feed(frame.subarray(5))
      assert.deepEqual(decoded.message, v.message)
      assert.deepEqual(decoded.payload, payload)
      // a well-formed message, parsed into its type with every field it carries
      if (v.direction === 'plugin->sidecar') assert.deepEqual(parseMessage(decoded.message), { message: v.message })
    })
  }
})
