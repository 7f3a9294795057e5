/**
 * Filter memos (protocol `filter.memo`): the plugin reuses a filter's result for a
 * byte-identical host answer under the same memo, so the memo must change with everything
 * the result depends on besides that answer, and the answer's memo must equal the decision's
 * while nothing changed. Rows per filter: /queue, /history, /object_info.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import type { Decision, FilterAnswer } from '../../sidecar/src/kernel/protocol.js'
import type { UserRecord } from '../../sidecar/src/identity/users.js'
import { bearer, addUser, apiToken, assertPass, decide, openSidecar, type DescOptions, type Sidecar } from './fixtures.js'

const HOST_ANSWERS: Record<string, string> = {
  '/queue': '{"queue_running": [], "queue_pending": []}',
  '/history': '{}',
  '/object_info': '{"LoadImage": {"input": {"required": {"image": [["a.png", "b.png"], {"image_upload": true}]}}}, "CheckpointLoaderSimple": {"input": {"required": {"ckpt_name": [["m1.safetensors", "m2.safetensors"], {}]}}}}',
}

describe('filter memos', () => {
  let sc: Sidecar
  let alice: UserRecord
  let intern: UserRecord
  let aliceToken: string
  let internToken: string
  let rootUser: UserRecord
  before(async () => {
    sc = await openSidecar()
    rootUser = await addUser(sc, 'root', 'a-long-password-1', 'admin')
    alice = await addUser(sc, 'alice', 'a-long-password-1')
    sc.services.roles.replace({ ...sc.services.roles.snapshot(), intern: { ...sc.services.roles.snapshot().user, can_view_all_comfyui_items: false } })
    intern = await addUser(sc, 'intern', 'a-long-password-1', 'intern')
    aliceToken = await apiToken(sc, alice)
    internToken = await apiToken(sc, intern)
  })
  after(() => sc.close())

  async function memoOf(o: DescOptions): Promise<string> {
    const d = assertPass(await decide(sc, o))
    assert.equal(typeof d.filter?.memo, 'string', `${o.path}: the filter names a memo`)
    return d.filter!.memo!
  }

  /** The memo of the decision, and the memo of the filter's answer for the same request: equal while nothing changes. */
  async function decideAndFilter(o: DescOptions): Promise<string> {
    const d = assertPass(await decide(sc, o)) as Extract<Decision, { action: 'pass' }>
    const raw = await sc.handlers.filter({ type: 'filter', id: 1, name: d.filter!.name, ctx: d.filter!.ctx, status: 200, content_type: 'application/json' }, Buffer.from(HOST_ANSWERS[o.path]))
    const answer = ('answer' in raw ? raw.answer : raw) as FilterAnswer & { memo?: string }
    assert.equal(answer.memo, d.filter!.memo, `${o.path}: the answer is under the decision's memo`)
    return answer.memo!
  }

  const queue = () => ({ path: '/queue', headers: bearer(aliceToken) })
  const history = (query = '') => ({ path: '/history', query, headers: bearer(aliceToken) })
  const objectInfo = (token: string) => ({ path: '/object_info', headers: bearer(token) })

  it('the decision and the answer name the same memo while nothing changes', async () => {
    for (const o of [queue(), history(), history('max_items=2'), objectInfo(aliceToken), objectInfo(internToken)]) {
      const first = await decideAndFilter(o)
      assert.equal(await decideAndFilter(o), first, `${o.path}: stable`)
    }
  })

  it('the memo names the caller: two users never share one', async () => {
    const bob = await addUser(sc, 'bob', 'a-long-password-1')
    const bobToken = await apiToken(sc, bob)
    for (const path of ['/queue', '/history', '/object_info']) {
      assert.notEqual(await memoOf({ path, headers: bearer(aliceToken) }), await memoOf({ path, headers: bearer(bobToken) }), path)
    }
  })

  it('/history: max_items and offset are part of it', async () => {
    const memos = new Set([await memoOf(history()), await memoOf(history('max_items=1')), await memoOf(history('max_items=1&offset=1'))])
    assert.equal(memos.size, 3)
  })

  const changes: Array<[string, () => Promise<unknown>, Array<() => DescOptions>]> = [
    ['a prompt recorded (anyone\'s)', () => sc.services.ownership.recordPrompt({ prompt_id: `p-${Math.random()}`, owner: rootUser.user_id, user_id: rootUser.user_id, username: 'root', client_id: 'c', created_at_iso: new Date(sc.clock()).toISOString() }), [queue, history]],
    ['an input file owned', () => sc.services.ownership.addFileOwner(`input//up-${Math.random()}.png`, alice.user_id, undefined, new Date(sc.clock())), [() => objectInfo(aliceToken), () => objectInfo(internToken)]],
    ['an input file forgotten (removed from disk)', async () => {
      const key = `input//gone-${Math.random()}.png`
      await sc.services.ownership.addFileOwner(key, alice.user_id, undefined, new Date(sc.clock()))
      baseline.length = 0
      baseline.push(await memoOf(objectInfo(aliceToken)))
      await sc.services.ownership.forgetFile(key)
    }, [() => objectInfo(aliceToken)]],
    ['a model granted to the intern', () => sc.services.modelGrants.grant({ user_id: intern.user_id, folder: 'checkpoints', item_name: 'm1.safetensors', granted_by: rootUser.user_id, created_at_iso: new Date(sc.clock()).toISOString() }), [() => objectInfo(internToken)]],
  ]
  const baseline: string[] = []
  for (const [label, change, requests] of changes) {
    it(`changes with ${label}`, async () => {
      baseline.length = 0
      baseline.push(...(await Promise.all(requests.map((r) => memoOf(r())))))
      await change()
      const after = await Promise.all(requests.map((r) => memoOf(r())))
      for (const [i, memo] of after.entries()) assert.notEqual(memo, baseline[i], `${label}: ${requests[i]().path}`)
    })
  }
})
