/**
 * Shared setup of the decision-path attack tables (decide-*.test.ts): a real
 * sidecar holding an admin, two users, a role without write permissions and a
 * role merely named "Admin", with a session JWT each (and an API token of
 * alice's); the request shapes the rows start from; and the body and filter
 * steps as the plugin calls them. Nothing here decides: every answer comes from
 * the real decider.
 */
import assert from 'node:assert/strict'
import type { Decision } from '../../sidecar/src/kernel/protocol.js'
import type { UserRecord } from '../../sidecar/src/identity/users.js'
import {
  addUser, answer, apiToken, assertPass, openSidecar, sessionJwt, stepAnswer, type DescOptions, type Sidecar, type Stepped,
} from './fixtures.js'

export const API = { accept: 'application/json' }
export const NAVIGATE = { 'sec-fetch-mode': 'navigate', accept: 'text/html,application/xhtml+xml' }
export const HTML_ACCEPT = { accept: 'text/html,application/xhtml+xml,*/*;q=0.8' }
export const SAME_ORIGIN = { origin: 'http://127.0.0.1:8188' }
export const REMOTE = '203.0.113.9'
export const cookie = (t: string) => ({ cookie: `theme=dark; jwt_token=${t}` })

export function passedWithBody(d: Stepped): { body_text?: string } {
  assertPass(d)
  return d
}
export async function bodyStep(sc: Sidecar, ctx: unknown, body: string): Promise<Stepped & { action: string }> {
  return stepAnswer(await sc.handlers.body({ type: 'body', id: 1, ctx }, Buffer.from(body, 'utf8'))) as Stepped & { action: string }
}
export async function filterStep(sc: Sidecar, name: string, ctx: unknown, body: string): Promise<Stepped & { action: string }> {
  return stepAnswer(await sc.handlers.filter({ type: 'filter', id: 1, name, ctx, status: 200, content_type: 'application/json' }, Buffer.from(body, 'utf8'))) as Stepped & { action: string }
}

/** Groups with a custom role lacking every write permission. */
const VIEWER_GROUPS = {
  admin: { can_run: true, can_access_api: true, can_upload: true, can_modify_workflows: true, can_have_api_tokens: true, can_view_all_comfyui_items: true, can_download_models: true, mfa_required: false },
  user: { can_run: true, can_access_api: true, can_upload: true, can_modify_workflows: true, can_have_api_tokens: true, can_view_all_comfyui_items: true, can_download_models: false, mfa_required: false },
  guest: { can_run: false, can_access_api: true, can_upload: false, can_modify_workflows: false, can_have_api_tokens: false, can_view_all_comfyui_items: false, can_download_models: false, mfa_required: false },
  viewer: { can_run: false, can_access_api: true, can_upload: false, can_modify_workflows: false, can_have_api_tokens: false, can_view_all_comfyui_items: false, can_download_models: false, mfa_required: false },
  Admin: { can_run: true, can_access_api: true, can_upload: true, can_modify_workflows: true, can_have_api_tokens: true, can_view_all_comfyui_items: true, can_download_models: true, mfa_required: false },
}

export interface World {
  sc: Sidecar
  admin: UserRecord
  alice: UserRecord
  bob: UserRecord
  viewer: UserRecord
  fakeAdmin: UserRecord
  adminJwt: string
  aliceJwt: string
  bobJwt: string
  viewerJwt: string
  fakeAdminJwt: string
  aliceToken: string
}

export async function world(config: Record<string, unknown> = {}): Promise<World> {
  const sc = await openSidecar({ config })
  sc.services.roles.replace(structuredClone(VIEWER_GROUPS))
  const admin = await addUser(sc, 'admin', 'admin-passphrase-1', 'admin')
  const alice = await addUser(sc, 'alice', 'alice-passphrase-1')
  const bob = await addUser(sc, 'bob', 'bob-passphrase-1')
  const viewer = await addUser(sc, 'vera', 'vera-passphrase-1', 'viewer')
  const fakeAdmin = await addUser(sc, 'mallory', 'mallory-passphrase-1', 'Admin')
  return {
    sc, admin, alice, bob, viewer, fakeAdmin,
    adminJwt: await sessionJwt(sc, admin),
    aliceJwt: await sessionJwt(sc, alice),
    bobJwt: await sessionJwt(sc, bob),
    viewerJwt: await sessionJwt(sc, viewer),
    fakeAdminJwt: await sessionJwt(sc, fakeAdmin),
    aliceToken: await apiToken(sc, alice),
  }
}

export const QUEUE: DescOptions = { method: 'GET', path: '/queue', pattern: '/queue', headers: API }
export const at = (base: DescOptions, extra: Partial<DescOptions>): DescOptions => ({
  ...base,
  ...extra,
  headers: { ...(base.headers ?? {}), ...(extra.headers ?? {}) },
})

export function location(d: Decision): string {
  const a = answer(d)
  assert.equal(a.status, 302, `expected a redirect, got ${a.status} ${a.body}`)
  return a.headers.location
}
