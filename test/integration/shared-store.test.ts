/**
 * Two instances on one shared store (issue 28, items 2, 4 and 7 at the
 * services level): two sidecars' services, each with its own data dir, on one
 * real Redis, then one real PostgreSQL, with the same AUTHSVC_SECRET. What one
 * does holds on the other once the feed has delivered it (the tests wait for
 * that delivery as an event, never for a time). The real-host suite
 * (test/e2e/two-instances.test.ts) repeats the core through two real ComfyUIs.
 */
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { decodeJwt } from 'jose'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { PASSWORD, bearer, clockAt, openHarness, registerAndLogin, type Harness } from './harness.js'
import { nextChange } from '../helpers/store-conformance.js'
import { postgresSkipReason, redisSkipReason, startPostgres, startRedis, type StoreServer } from '../helpers/store-servers.js'
import { totpAt } from './totp-reference.js'
import { SecretMismatchError } from '../../sidecar/src/store/open.js'
import type { Change, SharedStore } from '../../sidecar/src/store/shared-store.js'
import type { KeyValueStore } from '../../sidecar/src/store/kv.js'

const SECRET = 'shared-store-secret-0123456789abcdef'

interface Backend {
  name: 'redis' | 'postgres'
  skip: string | false
  start(): Promise<StoreServer>
}

const backends: Backend[] = [
  { name: 'redis', skip: redisSkipReason(), start: startRedis },
  { name: 'postgres', skip: postgresSkipReason(), start: startPostgres },
]

for (const backend of backends) {
  describe(`two instances on one ${backend.name} store`, { skip: backend.skip }, () => {
    let server: StoreServer
    let a: Harness
    let b: Harness
    let admin: string
    const clock = clockAt(Date.now())
    const storeConfig = () => ({ store: { backend: backend.name, [`${backend.name}_url`]: server.url } })
    const open = (env: Record<string, string> = {}) => openHarness({ config: storeConfig(), env: { AUTHSVC_SECRET: SECRET, ...env }, clock })
    /** resolves once `h`'s feed has delivered a change `predicate` accepts; set it up before the write */
    const delivered = (h: Harness, predicate: (c: Change) => boolean) => nextChange(h.services.store, predicate)
    const me = (h: Harness, jwt: string) => h.call('GET', '/authsvc/api/me', { headers: bearer(jwt) })

    before(async () => {
      server = await backend.start()
      a = await open()
      b = await open()
      admin = await registerAndLogin(a, 'root')
    })
    after(async () => {
      await a?.close()
      await b?.close()
      await server?.stop()
    })

    it('a user registered on A signs in on B; a token created on B works on A', async () => {
      const created = delivered(b, (c) => c.key.startsWith('user:'))
      await a.call('POST', '/register', { headers: bearer(admin), body: { username: 'alice', password: PASSWORD } })
      await created
      const login = await b.call('POST', '/login', { body: { username: 'alice', password: PASSWORD } })
      assert.equal(login.status, 200, JSON.stringify(login.body))
      const tokenWritten = delivered(a, (c) => c.key.startsWith('token:'))
      const token = await b.call('POST', '/authsvc/generate_token', { body: { label: 'phone' }, headers: bearer(login.body.jwt_token) })
      assert.equal(token.status, 200, JSON.stringify(token.body))
      await tokenWritten
      assert.equal((await me(a, token.body.token)).body.username, 'alice')
    })

    it('a username taken on one instance cannot be registered on the other, in any case, even at once', async () => {
      const results = await Promise.all([
        a.call('POST', '/register', { headers: bearer(admin), body: { username: 'Twin', password: PASSWORD } }),
        b.call('POST', '/register', { headers: bearer(admin), body: { username: 'twin', password: PASSWORD } }),
      ])
      assert.deepEqual(results.map((r) => r.status).sort(), [201, 409])
    })

    it('logout on A: the session is refused on B at the next request after delivery', async () => {
      const jwt = await registerAndLogin(a, 'bob', { admin })
      assert.equal((await me(b, jwt)).status, 200)
      const jti = String(decodeJwt(jwt).jti)
      const revoked = delivered(b, (c) => c.key === `session:${jti}`)
      assert.equal((await a.call('POST', '/logout', { headers: bearer(jwt) })).status, 200)
      await revoked
      assert.equal((await me(b, jwt)).body.code, 'TOKEN_REVOKED')
    })

    it('8 logins of one user on both instances at once: every session listed on each, and "sign out everywhere" on B ends those made on A', async () => {
      await registerAndLogin(a, 'dana', { admin })
      const logins = await Promise.all(Array.from({ length: 8 }, (_, i) => (i % 2 === 0 ? a : b).call('POST', '/login', { body: { username: 'dana', password: PASSWORD } })))
      assert.deepEqual(logins.map((l) => l.status), Array(8).fill(200))
      const jwts = logins.map((l) => String(l.body.jwt_token))
      for (const h of [a, b]) {
        const listed = await h.call('GET', '/authsvc/me/sessions', { headers: bearer(jwts[0]) })
        assert.equal(listed.status, 200, JSON.stringify(listed.body))
        // the registration's own login is the 9th
        assert.equal((listed.body.sessions as unknown[]).length, 9, 'no login lost to the race on the index')
      }
      const jtis = jwts.map((j) => String(decodeJwt(j).jti))
      const allDelivered = Promise.all(jtis.filter((_, i) => i !== 1).map((jti) => delivered(a, (c) => c.key === `session:${jti}` && (c.value as { revoked?: boolean } | undefined)?.revoked === true)))
      const out = await b.call('POST', '/authsvc/me/sessions/revoke-others', { headers: bearer(jwts[1]), body: {} })
      assert.equal(out.status, 200, JSON.stringify(out.body))
      assert.equal(out.body.revoked, 8)
      await allDelivered
      for (const [i, jwt] of jwts.entries()) assert.equal((await me(a, jwt)).status, i === 1 ? 200 : 401, `session ${i} on A`)
    })

    it('disable, role change and password reset on B hold on A', async () => {
      const jwt = await registerAndLogin(b, 'carol', { admin })
      const disabled = delivered(a, (c) => c.key.startsWith('user:') && (c.value as { username?: string; disabled?: boolean } | undefined)?.disabled === true)
      assert.equal((await b.call('PUT', '/authsvc/api/users/carol', { headers: bearer(admin), body: { disabled: true } })).status, 200)
      await disabled
      assert.equal((await me(a, jwt)).status, 401)
      const promoted = delivered(a, (c) => c.key.startsWith('user:') && (c.value as { username?: string; role?: string } | undefined)?.role === 'admin')
      assert.equal((await b.call('PUT', '/authsvc/api/users/carol', { headers: bearer(admin), body: { disabled: false, role: 'admin' } })).status, 200)
      await promoted
      assert.equal(a.services.users.byUsername('carol')?.role, 'admin')
    })

    it('10 failed logins spread over both instances lock the address on both', async () => {
      const peer = '198.51.100.77'
      for (let i = 0; i < 10; i++) {
        const h = i % 2 === 0 ? a : b
        const res = await h.call('POST', '/login', { body: { username: `nobody${i}`, password: 'wrong-password-1' }, peer })
        assert.equal(res.status, 401, `attempt ${i}: ${JSON.stringify(res.body)}`)
      }
      // subscribed before looking: the lock is either in A's replica already or heard after
      const heard = delivered(a, (c) => c.key === `throttle:ip:${peer}`)
      if (a.services.throttle.check(peer, null).allowed) await heard
      else heard.catch(() => {})
      for (const h of [a, b]) {
        const res = await h.call('POST', '/login', { body: { username: 'alice', password: PASSWORD }, peer })
        assert.equal(res.status, 429, JSON.stringify(res.body))
      }
    })

    it('a lock B set is not lifted by A tidying what it wrote itself long ago (A judges by the stored record)', async () => {
      const peer = '198.51.100.78'
      const fail = (h: Harness, i: number) => h.call('POST', '/login', { body: { username: `nobody${i}`, password: 'wrong-password-1' }, peer })
      // one failure on A, then nine on B nine minutes later: the address is locked until then + 10 min
      assert.equal((await fail(a, 0)).status, 401)
      clock.advance(9 * 60_000)
      for (let i = 1; i <= 9; i++) {
        const heard = delivered(a, (c) => c.key === `throttle:ip:${peer}`)
        assert.equal((await fail(b, i)).status, 401, `attempt ${i}`)
        await heard
      }
      assert.equal((await a.call('POST', '/login', { body: { username: 'alice', password: PASSWORD }, peer })).status, 429, 'locked on A')
      // ten minutes after A's own write, any login on A tidies its throttle records
      clock.advance(61_000)
      assert.equal((await a.call('POST', '/login', { body: { username: 'root', password: PASSWORD }, peer: '203.0.113.1' })).status, 200)
      await a.services.throttle.flush()
      for (const h of [a, b]) {
        const res = await h.call('POST', '/login', { body: { username: 'alice', password: PASSWORD }, peer })
        assert.equal(res.status, 429, `still locked: ${JSON.stringify(res.body)}`)
      }
      assert.ok(await a.services.store.get(`throttle:ip:${peer}`), 'the stored lock is still there')
      clock.advance(10 * 60_000)
    })

    it('a TOTP code used on A is refused on B', async () => {
      const jwt = await registerAndLogin(a, 'frank', { admin })
      const setup = await a.call('POST', '/authsvc/api/mfa/setup', { headers: bearer(jwt), body: {} })
      const enrolled = delivered(b, (c) => c.key.startsWith('mfa:'))
      const confirm = await a.call('POST', '/authsvc/api/mfa/verify-setup', { headers: bearer(jwt), body: { code: totpAt(setup.body.secret, clock()) } })
      assert.equal(confirm.status, 200, JSON.stringify(confirm.body))
      await enrolled
      clock.advance(30_000)
      const code = totpAt(setup.body.secret, clock())
      const first = await a.call('POST', '/login', { body: { username: 'frank', password: PASSWORD } })
      const second = await b.call('POST', '/login', { body: { username: 'frank', password: PASSWORD } })
      assert.ok(first.body.mfa_temp_token && second.body.mfa_temp_token)
      const onA = await a.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: first.body.mfa_temp_token, code } })
      assert.equal(onA.status, 200, JSON.stringify(onA.body))
      const onB = await b.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: second.body.mfa_temp_token, code } })
      assert.equal(onB.status, 401, JSON.stringify(onB.body))
    })

    it('the MFA step spans instances: password on A, code on B; one temp token gives one session; wrong codes on both count together', async () => {
      const jwt = await registerAndLogin(a, 'gina', { admin })
      const setup = await a.call('POST', '/authsvc/api/mfa/setup', { headers: bearer(jwt), body: {} })
      const enrolled = delivered(b, (c) => c.key.startsWith('mfa:'))
      assert.equal((await a.call('POST', '/authsvc/api/mfa/verify-setup', { headers: bearer(jwt), body: { code: totpAt(setup.body.secret, clock()) } })).status, 200)
      await enrolled
      // password on A, code on B (a load balancer without sticky sessions)
      clock.advance(30_000)
      const step = await a.call('POST', '/login', { body: { username: 'gina', password: PASSWORD } })
      assert.ok(step.body.mfa_temp_token, JSON.stringify(step.body))
      const onB = await b.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: step.body.mfa_temp_token, code: totpAt(setup.body.secret, clock()) } })
      assert.equal(onB.status, 200, JSON.stringify(onB.body))
      assert.equal((await me(a, onB.body.jwt_token)).body.username, 'gina')
      // the same temp token with a backup code, sent to both at once: one session, never two
      const step2 = await b.call('POST', '/login', { body: { username: 'gina', password: PASSWORD } })
      const both = await Promise.all([a, b].map((h, i) => h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: step2.body.mfa_temp_token, backup_code: setup.body.backup_codes[i] } })))
      assert.deepEqual(both.map((r) => r.status).sort(), [200, 401], JSON.stringify(both.map((r) => r.body)))
      // 5 wrong codes, 3 on A and 2 on B, spend the token everywhere
      const step3 = await a.call('POST', '/login', { body: { username: 'gina', password: PASSWORD } })
      for (const h of [a, b, a, b, a]) {
        const wrong = await h.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: step3.body.mfa_temp_token, code: '000000' } })
        assert.equal(wrong.body.code, 'MFA_INVALID_CODE', JSON.stringify(wrong.body))
      }
      clock.advance(30_000)
      const after = await b.call('POST', '/authsvc/api/mfa/verify', { body: { mfa_temp_token: step3.body.mfa_temp_token, code: totpAt(setup.body.secret, clock()) } })
      assert.equal(after.body.code, 'MFA_TOKEN_INVALID', JSON.stringify(after.body))
    })

    it('an IP-list edit on A applies on B', async () => {
      const tag = String((await a.call('GET', '/authsvc/api/ip-lists', { headers: bearer(admin) })).headers.etag)
      const applied = delivered(b, (c) => c.key === 'setting:ip_lists')
      const saved = await a.call('PUT', '/authsvc/api/ip-lists', { headers: { ...bearer(admin), 'if-match': tag }, body: { whitelist: [], blacklist: [{ ip: '203.0.113.99', permanent: true }] } })
      assert.equal(saved.status, 200, JSON.stringify(saved.body))
      await applied
      assert.equal(b.services.ipGate.refuse('203.0.113.99'), 'IP_DENIED')
    })

    it('a user, session and token made on A a moment ago work on B before its feed delivers them', async () => {
      // C's feed is held: nothing A writes reaches C's replica until released, as on a slow link;
      // so is news of C's connection (a blip under load would make C read every replica again)
      let held: Array<() => void> | null = null
      const holdFeed = (kv: KeyValueStore): KeyValueStore => new Proxy(kv, {
        get(target, prop) {
          if (prop === 'subscribe') {
            return (listener: (c: Change) => void) => (target as SharedStore).subscribe((c) => (held !== null ? held.push(() => listener(c)) : listener(c)))
          }
          if (prop === 'onConnection') {
            return (listener: (up: boolean) => void) => (target as SharedStore).onConnection((up) => (held !== null ? held.push(() => listener(up)) : listener(up)))
          }
          const value = Reflect.get(target, prop, target) as unknown
          return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value
        },
      })
      const c = await openHarness({ config: storeConfig(), env: { AUTHSVC_SECRET: SECRET }, clock, wrapStore: holdFeed })
      try {
        held = []
        const fresh = await registerAndLogin(a, 'fresh', { admin })
        const token = await a.call('POST', '/authsvc/generate_token', { headers: bearer(fresh), body: { label: 'phone' } })
        assert.equal(token.status, 200, JSON.stringify(token.body))
        assert.equal(c.services.users.byUsername('fresh'), undefined, "C's replica has not heard of the user: the rows below go to the store")
        const bySession = await me(c, fresh)
        assert.equal(bySession.status, 200, JSON.stringify(bySession.body))
        assert.equal(bySession.body.username, 'fresh')
        const byToken = await me(c, String(token.body.token))
        assert.equal(byToken.status, 200, JSON.stringify(byToken.body))
        const login = await c.call('POST', '/login', { body: { username: 'FRESH', password: PASSWORD } })
        assert.equal(login.status, 200, JSON.stringify(login.body))
        // and a revocation made on A while C's feed is still held is read from the store too: C never
        // heard the session was live, so it has nothing stale to serve (it fetched it above, though)
        const unknown = await me(c, `${fresh.slice(0, -2)}xx`)
        assert.equal(unknown.status, 401)
      } finally {
        const queued = held ?? []
        held = null
        for (const deliver of queued) deliver()
        await c.close()
      }
    })

    it('a groups edit on A applies on B, and B then refuses a save based on the version it had', async () => {
      const tagOnB = String((await b.call('GET', '/authsvc/api/groups', { headers: bearer(admin) })).headers.etag)
      const tagOnA = String((await a.call('GET', '/authsvc/api/groups', { headers: bearer(admin) })).headers.etag)
      assert.equal(tagOnA, tagOnB, 'both instances start from the same shared groups')
      const groups = a.services.roles.snapshot()
      groups.viewer = { can_access_api: true }
      const applied = delivered(b, (c) => c.key === 'setting:groups')
      const saved = await a.call('PUT', '/authsvc/api/groups', { headers: { ...bearer(admin), 'if-match': tagOnA }, body: { groups } })
      assert.equal(saved.status, 200, JSON.stringify(saved.body))
      await applied
      assert.equal(b.services.roles.has('viewer'), true)
      assert.equal(b.services.roles.permissions('viewer').can_access_api, true)
      assert.equal(b.services.roles.permissions('viewer').can_run, false)
      const stale = await b.call('PUT', '/authsvc/api/groups', { headers: { ...bearer(admin), 'if-match': tagOnB }, body: { groups: a.services.roles.snapshot() } })
      assert.equal(stale.status, 412, JSON.stringify(stale.body))
      const onB = await b.call('GET', '/authsvc/api/groups', { headers: bearer(admin) })
      assert.deepEqual((onB.body as { groups: Record<string, unknown> }).groups.viewer, { can_access_api: true })
    })

    it('an edit of the groups file on A reaches B through the store', async () => {
      const groups = a.services.roles.snapshot()
      groups.editor = { can_access_api: true, can_modify_workflows: true }
      const applied = delivered(b, (c) => c.key === 'setting:groups')
      writeFileSync(join(a.services.dataDir, 'authsvc_groups.json'), JSON.stringify(groups))
      assert.equal(a.services.roles.reload(), true)
      await applied
      assert.equal(b.services.roles.permissions('editor').can_modify_workflows, true)
      const mirrored = JSON.parse(readFileSync(join(b.services.dataDir, 'authsvc_groups.json'), 'utf8')) as Record<string, unknown>
      assert.deepEqual(mirrored.editor, { can_access_api: true, can_modify_workflows: true }, "B's own file mirrors the shared groups")
    })

    it('a role\'s model grant on A holds on B; taken back on A, and with its role deleted, it is gone on B', async () => {
      const groups = a.services.roles.snapshot()
      groups.trainee = { can_access_api: true }
      const roleOnB = delivered(b, (c) => c.key === 'setting:groups')
      const saved = await a.call('PUT', '/authsvc/api/groups', { headers: bearer(admin), body: { groups } })
      assert.equal(saved.status, 200, JSON.stringify(saved.body))
      await roleOnB
      const granted = delivered(b, (c) => c.key.startsWith('model_role_grant:'))
      await a.services.modelGrants.grantRole({ role: 'trainee', folder: 'checkpoints', item_name: 'shared.safetensors', granted_by: 'root', created_at_iso: new Date().toISOString() })
      await granted
      const onB = () => [...(b.services.modelGrants.forUser(null, 'trainee').byFolder.get('checkpoints') ?? [])]
      assert.deepEqual(onB(), ['shared.safetensors'])
      assert.equal(b.services.modelGrants.forUser(null, 'trainee').signature, a.services.modelGrants.forUser(null, 'trainee').signature)
      const revoked = delivered(b, (c) => c.key.startsWith('model_role_grant:'))
      assert.equal(await a.services.modelGrants.revokeRole('trainee', 'checkpoints', 'shared.safetensors'), true)
      await revoked
      assert.deepEqual(onB(), [])

      await a.services.modelGrants.grantRole({ role: 'trainee', folder: 'checkpoints', item_name: 'again.safetensors', granted_by: 'root', created_at_iso: new Date().toISOString() })
      const removed = delivered(b, (c) => c.key.startsWith('model_role_grant:') && !c.exists)
      delete groups.trainee
      const dropped = await a.call('PUT', '/authsvc/api/groups', { headers: bearer(admin), body: { groups } })
      assert.equal(dropped.status, 200, JSON.stringify(dropped.body))
      await removed
      assert.deepEqual(b.services.modelGrants.listRole('trainee'), [])
      assert.deepEqual(a.services.modelGrants.listRole('trainee'), [])
    })

    it('a session used on B alone for longer than session_idle_minutes is not idle on A: A reads the last use B stored', async () => {
      const jwt = await registerAndLogin(a, 'ivy', { admin })
      const jti = String(decodeJwt(jwt).jti)
      assert.equal((await me(a, jwt)).status, 200, 'A\'s own last use of it: now')
      // 70 minutes of use on B (the idle limit is 60), each use stored and delivered to A
      for (let minute = 5; minute <= 70; minute += 5) {
        clock.advance(5 * 60_000)
        const stored = delivered(a, (c) => c.key === `session:${jti}`)
        assert.equal((await me(b, jwt)).status, 200, `on B at minute ${minute}`)
        assert.equal((await me(a, admin)).status, 200, 'the admin stays active')
        await stored
      }
      assert.equal((await me(a, jwt)).status, 200, 'back on A: not idle')
      // and idle is still idle: an hour unused anywhere
      clock.advance(61 * 60_000)
      assert.equal((await me(a, jwt)).body.code, 'TOKEN_EXPIRED')
      // the admin's session went idle too: a new one for the tests after this one
      const again = await a.call('POST', '/login', { body: { username: 'root', password: PASSWORD } })
      assert.equal(again.status, 200, JSON.stringify(again.body))
      admin = again.body.jwt_token
    })

    it('two admins demoting each other on two instances at once leave one admin', async () => {
      const dave = await registerAndLogin(a, 'dave', { admin, role: 'admin' })
      const erin = await registerAndLogin(a, 'erin', { admin, role: 'admin' })
      const twoLeft = delivered(b, (c) => c.key === 'meta:admins' && (c.value as { ids: string[] }).ids.length === 2)
      for (const name of ['carol', 'root']) {
        const res = await a.call('PUT', `/authsvc/api/users/${name}`, { headers: bearer(dave), body: { role: 'user' } })
        assert.equal(res.status, 200, `${name}: ${JSON.stringify(res.body)}`)
      }
      await twoLeft
      // each admin's session used once on the instance it will act on (a replica reads a session on
      // its first use): both demotions then reach the last-admin rule, rather than one being refused
      // only because the other's revocation of its session landed first
      assert.equal((await me(a, dave)).status, 200)
      assert.equal((await me(b, erin)).status, 200)
      const results = await Promise.all([
        a.call('PUT', '/authsvc/api/users/erin', { headers: bearer(dave), body: { role: 'user' } }),
        b.call('PUT', '/authsvc/api/users/dave', { headers: bearer(erin), body: { role: 'user' } }),
      ])
      assert.deepEqual(results.map((r) => r.status).sort(), [200, 409], JSON.stringify(results.map((r) => r.body)))
      assert.equal((await a.services.store.get<{ ids: string[] }>('meta:admins'))!.ids.length, 1)
      const stillAdmin = (await Promise.all(['dave', 'erin'].map((n) => a.services.store.get<{ role: string }>(`user:${a.services.users.byUsername(n)!.user_id}`)))).filter((u) => u?.role === 'admin')
      assert.equal(stillAdmin.length, 1)
    })

    it('each instance keeps its own host records (whose prompt and file is whose) in its own data dir', async () => {
      // two ComfyUIs' output/ComfyUI_00001_.png are two files: their owners must never meet in one record
      assert.notEqual(a.services.localKv, a.services.kv)
      await a.services.localKv.set('file:output/ComfyUI_00001_.png', { owner: 'on-a' })
      assert.equal(await b.services.localKv.get('file:output/ComfyUI_00001_.png'), undefined)
      assert.equal(await b.services.kv.get('file:output/ComfyUI_00001_.png'), undefined)
      assert.deepEqual(await a.services.localKv.get('file:output/ComfyUI_00001_.png'), { owner: 'on-a' })
    })

    it('an instance started with another AUTHSVC_SECRET refuses to start, naming AUTHSVC_SECRET', async () => {
      await assert.rejects(open({ AUTHSVC_SECRET: 'another-secret-0123456789abcdefghijkl' }), (err: unknown) => err instanceof SecretMismatchError && /AUTHSVC_SECRET/.test(err.message))
    })
  })
}

for (const backend of backends) {
  describe(`the first registration on an empty ${backend.name} store`, { skip: backend.skip }, () => {
    let server: StoreServer
    const opened: Harness[] = []
    before(async () => {
      server = await backend.start()
    })
    after(async () => {
      for (const h of opened) await h.close()
      await server?.stop()
    })

    it('sent to two instances at once makes one admin; the other is refused as registration closed', async () => {
      const clock = clockAt(Date.now())
      for (let i = 0; i < 2; i++) {
        opened.push(await openHarness({ config: { store: { backend: backend.name, [`${backend.name}_url`]: server.url } }, env: { AUTHSVC_SECRET: SECRET }, clock }))
      }
      const [a, b] = opened
      assert.equal(a.services.users.count, 0)
      assert.equal(b.services.users.count, 0)
      const results = await Promise.all([
        a.call('POST', '/register', { body: { username: 'first-a', password: PASSWORD } }),
        b.call('POST', '/register', { body: { username: 'first-b', password: PASSWORD } }),
      ])
      assert.deepEqual(results.map((r) => r.status).sort(), [201, 403], JSON.stringify(results.map((r) => r.body)))
      assert.equal(results.find((r) => r.status === 403)!.body.code, 'REGISTRATION_CLOSED')
      assert.equal((await a.services.store.get<{ ids: string[] }>('meta:admins'))!.ids.length, 1)
    })
  })
}
