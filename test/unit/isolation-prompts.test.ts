/**
 * Prompt ownership at POST /prompt: the body reaches the host byte for byte
 * but for the keys authsvc sets; bob cannot name alice's socket or prompt_id,
 * choose his place in the queue, or get a non-UTF-8 body mangled; ownership
 * outlives a sidecar restart.
 *
 * Part of per-user isolation through the real decider and its later steps
 * (body, form, filter, host events), with the real services and sqlite file;
 * the shared world is isolation-world.ts. End to end on the real ComfyUI:
 * test/e2e/real-host-isolation.test.ts.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { userFolder } from '../../sidecar/src/isolation/user-folders.js'
import { bearer, assertDenied, assertPass, decide, openSidecar, stepAnswer } from './fixtures.js'
import { ownPrompt, postPrompt, world, type World } from './isolation-world.js'

describe('prompt ownership at POST /prompt', () => {
  let w: World
  before(async () => {
    w = await world()
  })
  after(() => w.sc.close())

  it('the body reaches the host byte for byte but for the keys authsvc sets (64-bit seed, 1e400, \\u escapes, key order)', async () => {
    const raw = '{"prompt": {"3": {"class_type": "KSampler", "inputs": {"seed": 18446744073709551615, "cfg": 1e400, "text": "caf\\u00e9 \\ud83d\\ude00"}}}, "client_id": "alice-tab", "extra_data": {"extra_pnginfo": {"n": 12345678901234567890}}}'
    const out = await postPrompt(w.sc, w.aliceJwt, raw)
    assert.equal(out.action, 'pass')
    const sent = out.body_text!
    const promptId = (JSON.parse(sent) as { prompt_id: string }).prompt_id
    assert.match(promptId, /^[0-9a-f-]{36}$/)
    // the node's cache entry is hers (prompt-files.ts): authsvc_scope is added to its inputs
    const expected = raw
      .replace('\\ud83d\\ude00"}', `\\ud83d\\ude00","authsvc_scope":"${userFolder(w.alice.user_id)}"}`)
      .replace('{"extra_pnginfo": {"n": 12345678901234567890}}', `{"extra_pnginfo": {"n": 12345678901234567890},"authsvc_user":"alice","authsvc_user_id":"${w.alice.user_id}","authsvc_folder":"${userFolder(w.alice.user_id)}","authsvc_models":null}`)
      .replace(/}$/, `,"prompt_id":"${promptId}"}`)
    assert.equal(sent, expected)
  })

  it('a prompt without client_id gets a fresh id of its owner (no broadcast), bound to her', async () => {
    const out = await postPrompt(w.sc, w.aliceJwt, '{"prompt":{}}')
    const clientId = (JSON.parse(out.body_text!) as { client_id: string }).client_id
    assert.match(clientId, /^authsvc-/)
    assertDenied(await decide(w.sc, { path: '/ws', pattern: '/ws', query: `clientId=${clientId}`, headers: bearer(w.bobJwt) }), 'CLIENT_ID_TAKEN')
    assertPass(await decide(w.sc, { path: '/ws', pattern: '/ws', query: `clientId=${clientId}`, headers: bearer(w.aliceJwt) }))
  })

  const HIJACKS: Array<[string, string]> = [
    ['top-level client_id', '{"prompt":{},"client_id":"alice-tab"}'],
    ['extra_data.client_id', '{"prompt":{},"extra_data":{"client_id":"alice-tab"}}'],
    ['extra_data.client_id behind a top-level one of his own', '{"prompt":{},"client_id":"bob-tab","extra_data":{"client_id":"alice-tab"}}'],
  ]
  for (const [name, body] of HIJACKS) {
    it(`bob naming alice's socket in ${name} → 403 CLIENT_ID_TAKEN`, async () => {
      assertDenied(await postPrompt(w.sc, w.bobJwt, body), 'CLIENT_ID_TAKEN')
    })
  }

  it('"client_id": null (which ComfyUI would broadcast) is replaced by a fresh id', async () => {
    const out = JSON.parse((await postPrompt(w.sc, w.bobJwt, '{"prompt":{},"client_id":null,"extra_data":{"client_id":null}}')).body_text!) as { client_id: string }
    assert.match(out.client_id, /^authsvc-/)
  })

  it('a client prompt_id is accepted only when nobody else owns it', async () => {
    const out = JSON.parse((await postPrompt(w.sc, w.aliceJwt, '{"prompt":{},"prompt_id":"mine-1"}')).body_text!) as { prompt_id: string }
    assert.equal(out.prompt_id, 'mine-1')
    assertDenied(await postPrompt(w.sc, w.bobJwt, '{"prompt":{},"prompt_id":"mine-1"}'), 'PROMPT_ID_TAKEN')
    assert.equal((await postPrompt(w.sc, w.aliceJwt, '{"prompt":{},"prompt_id":"mine-1"}')).action, 'pass', 'her own again')
    for (const bad of ['null', '7', '""', '["x"]']) assertDenied(await postPrompt(w.sc, w.bobJwt, `{"prompt":{},"prompt_id":${bad}}`), 'VALIDATION_FAILED', bad)
  })

  it('two submissions of one prompt_id at once: exactly one owner gets it', async () => {
    const [a, b] = await Promise.all([
      postPrompt(w.sc, w.aliceJwt, '{"prompt":{},"prompt_id":"race-1"}'),
      postPrompt(w.sc, w.bobJwt, '{"prompt":{},"prompt_id":"race-1"}'),
    ])
    assert.deepEqual([a.action, b.action].sort(), ['pass', 'respond'])
    assert.equal(w.sc.services.ownership.ownerOfPrompt('race-1'), a.action === 'pass' ? w.alice.user_id : w.bob.user_id)
  })

  // ComfyUI reads `front` with Python's truthiness: every value it takes as true is a queue jump
  const frontRows: Array<[string, boolean]> = [
    ['true', true], ['1', true], ['-1', true], ['0.5', true], ['1e300', true], ['"yes"', true], ['"false"', true], ['"0"', true],
    ['[0]', true], ['[false]', true], ['{"a":0}', true], ['false', false], ['null', false], ['0', false], ['0.0', false],
    ['-0', false], ['0e5', false], ['""', false], ['[]', false], ['{}', false],
  ]
  for (const [value, jumps] of frontRows) {
    it(`front: ${value} is ${jumps ? 'refused to a non-admin (the host puts it first)' : 'fine (the host does not put it first)'}`, async () => {
      const decision = await postPrompt(w.sc, w.bobJwt, `{"prompt":{},"front":${value}}`)
      if (jumps) assertDenied(decision, 'PERMISSION_DENIED')
      else assert.equal(decision.action, 'pass')
    })
  }

  it('a duplicated front key is read as the host reads it: the last one', async () => {
    assertDenied(await postPrompt(w.sc, w.bobJwt, '{"prompt":{},"front":false,"front":1}'), 'PERMISSION_DENIED')
    assert.equal((await postPrompt(w.sc, w.bobJwt, '{"prompt":{},"front":1,"front":false}')).action, 'pass')
  })

  it('non-admins cannot choose their place in the queue; a prompt_id is a plain name', async () => {
    assertDenied(await postPrompt(w.sc, w.bobJwt, '{"prompt":{},"front":true}'), 'PERMISSION_DENIED')
    assertDenied(await postPrompt(w.sc, w.bobJwt, '{"prompt":{},"number":-5}'), 'PERMISSION_DENIED')
    assert.equal((await postPrompt(w.sc, w.adminJwt, '{"prompt":{},"front":true}')).action, 'pass')
    assertDenied(await postPrompt(w.sc, w.bobJwt, '{"prompt":{},"prompt_id":"p+ACI-"}'), 'VALIDATION_FAILED')
  })

  it('ownership is in the store: a restarted sidecar still knows whose prompt it is', async () => {
    const id = await ownPrompt(w.sc, w.aliceJwt)
    await w.sc.services.flush()
    const again = await openSidecar({ dir: w.sc.dir })
    try {
      assert.equal(again.services.ownership.ownerOfPrompt(id), w.alice.user_id)
    } finally {
      await again.close({ keepDir: true })
    }
  })

  it('a body that is not UTF-8 is refused, never mangled', async () => {
    const d = assertPass(await decide(w.sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: bearer(w.aliceJwt) }))
    assertDenied(stepAnswer(await w.sc.handlers.body({ type: 'body', id: 1, ctx: d.need_body!.ctx }, Buffer.from([0x7b, 0xff, 0x7d]))), 'VALIDATION_FAILED')
  })
})
