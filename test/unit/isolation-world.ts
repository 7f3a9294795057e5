/**
 * Shared setup of the per-user isolation suites (isolation-*.test.ts): a real
 * sidecar that resolves names on a host (`host: true`) holding an admin, alice
 * and bob with a session JWT each, and the later steps as the plugin drives
 * them: a prompt's body step, a filter step on a host answer, a host event.
 * Every answer comes from the real decider and its steps.
 */
import assert from 'node:assert/strict'
import type { UserRecord } from '../../sidecar/src/identity/users.js'
import {
  bearer, addUser, assertPass, decide, openSidecar, sessionJwt, stepAnswer, type DescOptions, type Sidecar, type Stepped,
} from './fixtures.js'

export interface World {
  sc: Sidecar
  admin: UserRecord
  alice: UserRecord
  bob: UserRecord
  adminJwt: string
  aliceJwt: string
  bobJwt: string
}

export async function world(config: Record<string, unknown> = {}): Promise<World> {
  const sc = await openSidecar({ config, host: true })
  const admin = await addUser(sc, 'admin', 'admin-password-1', 'admin')
  const alice = await addUser(sc, 'alice', 'alice-password-1')
  const bob = await addUser(sc, 'bob', 'bob-password-12')
  return {
    sc, admin, alice, bob,
    adminJwt: await sessionJwt(sc, admin), aliceJwt: await sessionJwt(sc, alice), bobJwt: await sessionJwt(sc, bob),
  }
}

/** POST /prompt as `jwt` with this raw body: the body step's answer. */
export async function postPrompt(sc: Sidecar, jwt: string, body: string): Promise<Stepped> {
  const d = assertPass(await decide(sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: bearer(jwt) }))
  return stepAnswer(await sc.handlers.body({ type: 'body', id: 1, ctx: d.need_body!.ctx }, Buffer.from(body, 'utf8'), sc.host))
}

/** The prompt_id a passed prompt body carries. */
export async function ownPrompt(sc: Sidecar, jwt: string, extra = ''): Promise<string> {
  const out = await postPrompt(sc, jwt, `{"prompt":{"1":{}}${extra}}`)
  assert.equal(out.action, 'pass', JSON.stringify(out))
  return (JSON.parse(out.body_text!) as { prompt_id: string }).prompt_id
}

export async function filtered(sc: Sidecar, o: DescOptions, hostAnswer: string): Promise<string | 'unchanged'> {
  const d = assertPass(await decide(sc, o))
  if (!d.filter) return 'unchanged'
  const out = stepAnswer(await sc.handlers.filter({ type: 'filter', id: 1, name: d.filter.name, ctx: d.filter.ctx, status: 200, content_type: 'application/json' }, Buffer.from(hostAnswer, 'utf8')))
  return (out.action as string) === 'keep' ? 'unchanged' : out.body_text!
}

export const event = (sc: Sidecar, name: string, data: Record<string, unknown>, t = Date.now() / 1000) => sc.handlers.event({ type: 'event', name, t, data })
