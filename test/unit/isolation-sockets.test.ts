/**
 * Live WebSockets follow their credential: a revoked session, deleted token,
 * disabled user or role change closes exactly its sockets, also across a
 * sidecar restart, and no principal can push others out of the watch list.
 *
 * Part of per-user isolation through the real decider and its later steps
 * (body, form, filter, host events), with the real services and sqlite file;
 * the shared world is isolation-world.ts. End to end on the real ComfyUI:
 * test/e2e/real-host-isolation.test.ts.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { PROTOCOL_VERSION } from '../../sidecar/src/kernel/protocol.js'
import { CLOSE_ACCESS_CHANGED, CLOSE_CREDENTIAL_ENDED } from '../../sidecar/src/isolation/credential-state.js'
import { bearer, apiToken, assertDenied, assertPass, call, decide, openSidecar, type Sidecar } from './fixtures.js'
import { event, ownPrompt, postPrompt, world, type World } from './isolation-world.js'

describe('live WebSockets follow their credential', () => {
  let w: World
  before(async () => {
    w = await world()
  })
  after(() => w.sc.close())

  /** Opens (decides) a socket for this credential; returns its tag. */
  async function open(jwt: string): Promise<string> {
    return assertPass(await decide(w.sc, { path: '/ws', pattern: '/ws', headers: bearer(jwt) })).ws_tag!
  }
  /** The close_ws messages `sc` sends from now on. */
  function pushes(sc: Sidecar = w.sc): Array<{ tags: string[]; code: number }> {
    const seen: Array<{ tags: string[]; code: number }> = []
    sc.built.setPush((m) => { if (m.type === 'close_ws') seen.push({ tags: m.tags, code: m.code }) })
    return seen
  }

  it('a revoked session, a deleted token, a disabled user and a role change each close exactly their sockets', async () => {
    const seen = pushes()
    const aliceSession = await open(w.aliceJwt)
    const bobSession = await open(w.bobJwt)
    const aliceToken = await apiToken(w.sc, w.alice)
    const tokenSocket = await open(aliceToken)
    assert.equal(w.sc.built.liveSockets.sweep(), 0, 'nothing ended yet')

    const jti = (await w.sc.services.sessions.activeForUser(w.alice.user_id))[0].jti
    await w.sc.services.sessions.revoke(jti)
    assert.equal(w.sc.built.liveSockets.sweep(), 1)
    assert.deepEqual(seen.pop(), { tags: [aliceSession], code: CLOSE_CREDENTIAL_ENDED })

    await w.sc.services.tokens.revokeAllForUser(w.alice.user_id)
    assert.equal(w.sc.built.liveSockets.sweep(), 1)
    assert.deepEqual(seen.pop(), { tags: [tokenSocket], code: CLOSE_CREDENTIAL_ENDED })

    await w.sc.services.users.update(w.bob.user_id, { role: 'guest' })
    assert.equal(w.sc.built.liveSockets.sweep(), 1)
    assert.deepEqual(seen.pop(), { tags: [bobSession], code: CLOSE_ACCESS_CHANGED })
    assert.equal(w.sc.built.liveSockets.size, 0)
  })

  it('after a sidecar restart, the plugin\'s hello hands its sockets back: a logout meanwhile closes them at once', async () => {
    const pass = assertPass(await decide(w.sc, { path: '/ws', pattern: '/ws', headers: bearer(w.adminJwt) })) as { ws_tag?: string; ws_entry?: object }
    assert.equal((pass.ws_entry as { tag: string }).tag, pass.ws_tag)
    await w.sc.services.flush()
    const restarted = await openSidecar({ dir: w.sc.dir })
    try {
      const seen = pushes(restarted)
      const jti = (await restarted.services.sessions.activeForUser(w.admin.user_id))[0].jti
      await restarted.services.sessions.revoke(jti)
      restarted.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 't', sockets: [pass.ws_entry, { tag: 7 }, 'junk'] })
      assert.deepEqual(seen, [{ tags: [pass.ws_tag], code: CLOSE_CREDENTIAL_ENDED }], 'closed on adoption; malformed entries ignored')
    } finally {
      await restarted.close({ keepDir: true })
    }
  })

  it('one principal cannot push others out of the watch list: past its cap its upgrades are refused (429)', async () => {
    const { MAX_PER_PRINCIPAL } = await import('../../sidecar/src/isolation/live-sockets.js')
    const guestless = await world()
    try {
      const bobToken = await apiToken(guestless.sc, guestless.bob)
      for (let i = 0; i < MAX_PER_PRINCIPAL; i++) assertPass(await decide(guestless.sc, { path: '/ws', pattern: '/ws', headers: bearer(bobToken) }))
      assertDenied(await decide(guestless.sc, { path: '/ws', pattern: '/ws', headers: bearer(bobToken) }), 'TOO_MANY_ATTEMPTS')
      assertPass(await decide(guestless.sc, { path: '/ws', pattern: '/ws', headers: bearer(guestless.aliceJwt) }), 'alice still opens hers')
      assert.equal(guestless.sc.built.liveSockets.size, MAX_PER_PRINCIPAL + 1)
    } finally {
      await guestless.sc.close()
    }
  })

  it('an IP list that now refuses an address a socket came from closes exactly those sockets (4403): a ban, a temporary ban, a whitelist that leaves it out; also after a restart', async () => {
    const own = await world()
    try {
      const seen = pushes(own.sc)
      const lists = async (body: object) => {
        const res = await call(own.sc, { method: 'PUT', url: '/authsvc/api/ip-lists', bearer: own.adminJwt, body })
        assert.equal(res.statusCode, 200, res.body)
      }
      const openFrom = async (peer: string, jwt = own.aliceJwt) => assertPass(await decide(own.sc, { path: '/ws', pattern: '/ws', headers: bearer(jwt), peer })) as { ws_tag: string; ws_entry: object }
      const first = await openFrom('203.0.113.7')
      const other = await openFrom('203.0.113.8')
      await lists({ whitelist: [], blacklist: [{ ip: '203.0.113.7', permanent: true }] })
      assert.equal(own.sc.built.liveSockets.sweep(), 1)
      assert.deepEqual(seen.pop(), { tags: [first.ws_tag], code: CLOSE_ACCESS_CHANGED })
      assertDenied(await decide(own.sc, { path: '/ws', pattern: '/ws', headers: bearer(own.aliceJwt), peer: '203.0.113.7' }), 'IP_DENIED')

      const temp = await openFrom('203.0.113.9')
      await lists({ whitelist: [], blacklist: [{ ip: '203.0.113.9', expires_at_iso: new Date(Date.now() + 3_600_000).toISOString() }] })
      assert.equal(own.sc.built.liveSockets.sweep(), 1)
      assert.deepEqual(seen.pop(), { tags: [temp.ws_tag], code: CLOSE_ACCESS_CHANGED })

      const listed = await openFrom('198.51.100.4')
      await lists({ whitelist: ['198.51.100.0/24'], blacklist: [] })
      assert.equal(own.sc.built.liveSockets.sweep(), 1, 'the socket from outside the whitelist closes; the one inside stays')
      assert.deepEqual(seen.pop(), { tags: [other.ws_tag], code: CLOSE_ACCESS_CHANGED })
      assert.equal(own.sc.built.liveSockets.size, 1)

      // a socket handed back after a restart is judged by its addresses too
      await own.sc.services.flush()
      const restarted = await openSidecar({ dir: own.sc.dir })
      try {
        const after = pushes(restarted)
        restarted.services.ipGate.update({ whitelist: ['192.0.2.0/24'], blacklist: [] })
        restarted.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 't', sockets: [listed.ws_entry, { ...listed.ws_entry, tag: 'x', addresses: 'not a list' }] })
        assert.deepEqual(after, [{ tags: [listed.ws_tag], code: CLOSE_ACCESS_CHANGED }], 'closed on adoption; an entry with malformed addresses is ignored')
      } finally {
        await restarted.close({ keepDir: true })
      }
    } finally {
      await own.sc.close()
    }
  })

  it('a session unused past session_idle_minutes closes its open sockets (4401), as its next request is refused; a session in use keeps its own, and an API token\'s socket has no idle limit', async () => {
    const own = await world()
    try {
      const seen = pushes(own.sc)
      const idleMs = own.sc.services.config.session_idle_minutes * 60_000
      assert.ok(idleMs > 0, 'idle sessions end by default')
      const bobToken = await apiToken(own.sc, own.bob)
      const open = async (headers: Record<string, string>) => assertPass(await decide(own.sc, { path: '/ws', pattern: '/ws', headers })).ws_tag!
      const alices = await open(bearer(own.aliceJwt))
      const admins = await open(bearer(own.adminJwt))
      const bobs = await open(bearer(bobToken))
      own.sc.clock.advance(idleMs - 60_000)
      assert.equal(own.sc.built.liveSockets.sweep(), 0, 'not idle yet')
      assertPass(await decide(own.sc, { path: '/queue', pattern: '/queue', headers: bearer(own.adminJwt) }), 'the admin works on in another tab')
      own.sc.clock.advance(2 * 60_000)
      assert.equal(own.sc.built.liveSockets.sweep(), 1)
      assert.deepEqual(seen.pop(), { tags: [alices], code: CLOSE_CREDENTIAL_ENDED })
      assertDenied(await decide(own.sc, { path: '/ws', pattern: '/ws', headers: bearer(own.aliceJwt) }), 'TOKEN_EXPIRED')
      assert.equal(own.sc.built.liveSockets.size, 2, `the admin's ${admins} and bob's token's ${bobs} stay`)
    } finally {
      await own.sc.close()
    }
  })

  it('guest login turned off closes guests\' open sockets (4401) and no user\'s', async () => {
    const own = await world()
    try {
      const seen = pushes(own.sc)
      const setting = async (allow: boolean) => {
        const res = await call(own.sc, { method: 'PUT', url: '/authsvc/api/settings/guest-jwt', bearer: own.adminJwt, body: { allow_guest_jwt: allow } })
        assert.equal(res.statusCode, 200, res.body)
      }
      await setting(true)
      const guest = await call(own.sc, { method: 'POST', url: '/login', body: { guest_login: true } })
      assert.equal(guest.statusCode, 200, guest.body)
      const guestJwt = JSON.parse(guest.body).jwt_token as string
      const guestSocket = assertPass(await decide(own.sc, { path: '/ws', pattern: '/ws', headers: bearer(guestJwt) })).ws_tag!
      const aliceSocket = assertPass(await decide(own.sc, { path: '/ws', pattern: '/ws', headers: bearer(own.aliceJwt) })).ws_tag!
      assert.equal(own.sc.built.liveSockets.sweep(), 0)
      await setting(false)
      assert.equal(own.sc.built.liveSockets.sweep(), 1)
      assert.deepEqual(seen.pop(), { tags: [guestSocket], code: CLOSE_CREDENTIAL_ENDED })
      assert.equal(own.sc.built.liveSockets.size, 1, `alice's socket ${aliceSocket} stays`)
    } finally {
      await own.sc.close()
    }
  })

  it('a clientId stays its owner\'s while a socket opened with it is open, even once the host forgot every prompt that named it (else anyone could take her tab over)', async () => {
    const own = await world()
    try {
      const ws = (clientId: string, jwt: string) => ({ path: '/ws', pattern: '/ws', query: `clientId=${clientId}`, headers: { ...bearer(jwt), upgrade: 'websocket' } })
      const tag = assertPass(await decide(own.sc, ws('tab-open', own.aliceJwt))).ws_tag!
      const kept = await ownPrompt(own.sc, own.aliceJwt, ',"client_id":"tab-open"')
      // an id she named in a prompt only, with no socket: the host forgetting it frees it, as before
      const freed = await ownPrompt(own.sc, own.aliceJwt, ',"client_id":"tab-closed"')
      event(own.sc, 'host_prompts', { seq: 1, running: [], pending: [kept, freed], added: [kept, freed], gone: [] })
      event(own.sc, 'host_prompts', { seq: 2, running: [], pending: [], added: [], gone: [kept, freed] })
      assertDenied(await decide(own.sc, ws('tab-open', own.bobJwt)), 'CLIENT_ID_TAKEN')
      const bobs = await postPrompt(own.sc, own.bobJwt, '{"prompt":{"1":{}},"client_id":"tab-open"}')
      assert.equal(bobs.action, 'respond', JSON.stringify(bobs))
      assert.match(String(bobs.body_text), /CLIENT_ID_TAKEN/)
      assertPass(await decide(own.sc, ws('tab-closed', own.bobJwt)), 'an id with no open socket and no known prompt is free again')
      // her newer ids never push out the one her open tab holds (the oldest, by when it was claimed)
      const { CLIENT_IDS_PER_OWNER } = await import('../../sidecar/src/isolation/client-ids.js')
      for (let i = 0; i < CLIENT_IDS_PER_OWNER + 8; i++) {
        const other = assertPass(await decide(own.sc, ws(`tab-${i}`, own.aliceJwt))).ws_tag!
        event(own.sc, 'ws_closed', { tag: other })
      }
      assertDenied(await decide(own.sc, ws('tab-open', own.bobJwt)), 'CLIENT_ID_TAKEN', 'pushed out by her newer ids while open')
      assertPass(await decide(own.sc, ws('tab-0', own.bobJwt)), 'her oldest closed one went instead')
      event(own.sc, 'ws_closed', { tag })
      assertDenied(await decide(own.sc, ws('tab-open', own.bobJwt)), 'CLIENT_ID_TAKEN', 'an id a socket opened stays its owner\'s after it closes')
    } finally {
      await own.sc.close()
    }
  })

  it('a socket the plugin reports closed is no longer watched', async () => {
    const before = w.sc.built.liveSockets.size
    const tag = await open(w.adminJwt)
    assert.equal(w.sc.built.liveSockets.size, before + 1)
    event(w.sc, 'ws_closed', { tag })
    assert.equal(w.sc.built.liveSockets.size, before)
  })
})
