/**
 * Credentials: forged, stale and mixed JWTs and API tokens on every channel
 * (bearer, cookie, query), credentials that stopped being valid (revoked,
 * disabled, deleted, re-created users), and expiry through the injected clock.
 *
 * Part of the decision path's attack table (DESIGN §6 "Attack tables", STYLE 7):
 * one row per bypass shape, through the real decider and real services; the
 * shared world is decide-world.ts.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { SignJWT, base64url } from 'jose'
import { deriveKeys } from '../../sidecar/src/identity/secrets.js'
import type { UserRecord } from '../../sidecar/src/identity/users.js'
import {
  SECRET, addUser, answer, apiToken, assertDenied, assertPass, bearer, decide, fakeClock, openSidecar, sessionJwt, type Sidecar,
} from './fixtures.js'
import { API, NAVIGATE, QUEUE, REMOTE, SAME_ORIGIN, at, cookie, location, world, type World } from './decide-world.js'

// ---------------------------------------------------------------- credentials

function b64json(value: unknown): string {
  return base64url.encode(JSON.stringify(value))
}

describe('forged, stale and mixed credentials', () => {
  let w: World
  let keys: ReturnType<typeof deriveKeys>
  before(async () => {
    w = await world()
    keys = deriveKeys(Buffer.from(SECRET, 'utf8'))
  })
  after(() => w.sc.close())

  const claimsOf = (jwt: string) => JSON.parse(Buffer.from(jwt.split('.')[1], 'base64url').toString()) as Record<string, unknown>

  async function signed(claims: Record<string, unknown>, key: Uint8Array, alg = 'HS256'): Promise<string> {
    return new SignJWT(claims).setProtectedHeader({ alg, typ: 'JWT' }).sign(key)
  }

  it('sanity: a valid session JWT passes', async () => {
    assertPass(await decide(w.sc, at(QUEUE, { headers: bearer(w.aliceJwt) })))
  })

  const invalidRows: Array<[string, () => Promise<string> | string, string]> = [
    ['alg:none with empty signature', () => `${b64json({ alg: 'none', typ: 'JWT' })}.${w.aliceJwt.split('.')[1]}.`, 'TOKEN_INVALID'],
    ['alg:none keeping the original signature', () => `${b64json({ alg: 'none', typ: 'JWT' })}.${w.aliceJwt.split('.')[1]}.${w.aliceJwt.split('.')[2]}`, 'TOKEN_INVALID'],
    ['alg:NONE (case)', () => `${b64json({ alg: 'NONE' })}.${w.aliceJwt.split('.')[1]}.`, 'TOKEN_INVALID'],
    ['payload swapped to the admin (original signature)', () => {
      const [h, p, s] = w.aliceJwt.split('.')
      const claims = { ...JSON.parse(Buffer.from(p, 'base64url').toString()), sub: w.admin.user_id, username: 'admin' }
      return `${h}.${b64json(claims)}.${s}`
    }, 'TOKEN_INVALID'],
    ['HS256 signed with another key (valid jti)', () => signed(claimsOf(w.adminJwt), new TextEncoder().encode('another-key-another-key-another-key!!')), 'TOKEN_INVALID'],
    ['HS512 signed with the real key (algorithm confusion)', () => signed(claimsOf(w.adminJwt), keys.jwt, 'HS512'), 'TOKEN_INVALID'],
    ['signed with the master secret itself instead of the derived key', () => signed(claimsOf(w.adminJwt), new TextEncoder().encode(SECRET)), 'TOKEN_INVALID'],
    ['real key, typ not "session"', () => signed({ ...claimsOf(w.adminJwt), typ: 'mfa' }, keys.jwt), 'TOKEN_INVALID'],
    ['real key, no jti', () => {
      const { jti: _jti, ...rest } = claimsOf(w.adminJwt)
      return signed(rest, keys.jwt)
    }, 'TOKEN_INVALID'],
    ['real key, jti of no session record (signature alone never suffices)', () => signed({ ...claimsOf(w.adminJwt), jti: '00000000-0000-4000-8000-000000000000' }, keys.jwt), 'TOKEN_REVOKED'],
    ['real key, alice\'s jti with sub = admin', () => signed({ ...claimsOf(w.aliceJwt), sub: w.admin.user_id }, keys.jwt), 'TOKEN_REVOKED'],
    ['truncated JWT', () => w.aliceJwt.slice(0, -5), 'TOKEN_INVALID'],
    ['JWT with a trailing dot segment', () => `${w.aliceJwt}.x`, 'TOKEN_INVALID'],
    ['opaque garbage', () => 'not-a-token', 'TOKEN_INVALID'],
    ['API token shape too short', () => 'ast_short', 'TOKEN_INVALID'],
    ['API token of the right shape, unknown', () => `ast_${'A'.repeat(43)}`, 'TOKEN_INVALID'],
    ['API token with an appended character', () => `${w.aliceToken}x`, 'TOKEN_INVALID'],
    ['API token in upper case', () => w.aliceToken.toUpperCase(), 'TOKEN_INVALID'],
  ]
  for (const [name, make, code] of invalidRows) {
    for (const channel of ['bearer', 'cookie', 'query'] as const) {
      it(`${name} via ${channel} → 401 ${code}`, async () => {
        const token = await make()
        const desc = channel === 'bearer' ? at(QUEUE, { headers: bearer(token) })
          : channel === 'cookie' ? at(QUEUE, { headers: cookie(encodeURIComponent(token)) })
          : at(QUEUE, { query: `token=${encodeURIComponent(token)}` })
        assertDenied(await decide(w.sc, desc), code as 'TOKEN_INVALID', `${name} via ${channel}`)
      })
    }
  }

  it('malformed Authorization: Bearer headers → 401 TOKEN_INVALID (never anonymous)', async () => {
    for (const value of ['Bearer', 'Bearer ', 'Bearer a b', 'bearer\tx y', 'Bearer  ']) {
      assertDenied(await decide(w.sc, at(QUEUE, { headers: { authorization: value } })), 'TOKEN_INVALID', JSON.stringify(value))
    }
  })

  it('Authorization with another scheme (Basic) is ignored, the cookie is used', async () => {
    const d = assertPass(await decide(w.sc, at(QUEUE, { headers: { authorization: 'Basic YWxpY2U6eA==', ...cookie(w.aliceJwt) } })))
    assert.equal(d.set_headers?.['comfy-user'], w.alice.user_id)
  })

  it('bearer + forged cookie: the bearer wins', async () => {
    const d = assertPass(await decide(w.sc, at(QUEUE, { headers: { ...bearer(w.aliceJwt), ...cookie('forged.cookie.value') } })))
    assert.equal(d.set_headers?.['comfy-user'], w.alice.user_id)
  })

  it('bearer (user) + valid admin cookie: acts as the bearer, not the admin', async () => {
    const d = await decide(w.sc, { method: 'POST', path: '/free', pattern: '/free', headers: { ...bearer(w.aliceJwt), ...cookie(w.adminJwt), ...SAME_ORIGIN } })
    assertDenied(d, 'ADMIN_REQUIRED')
  })

  it('invalid bearer + valid admin cookie → 401, never falls back to the cookie', async () => {
    assertDenied(await decide(w.sc, at(QUEUE, { headers: { ...bearer('ast_nope'), ...cookie(w.adminJwt) } })), 'TOKEN_INVALID')
  })

  it('invalid bearer + valid query token → 401', async () => {
    assertDenied(await decide(w.sc, at(QUEUE, { headers: bearer('x.y.z'), query: `token=${w.aliceToken}` })), 'TOKEN_INVALID')
  })

  it('invalid cookie + valid query token → 401', async () => {
    assertDenied(await decide(w.sc, at(QUEUE, { headers: cookie('forged.cookie.value'), query: `token=${w.aliceToken}` })), 'TOKEN_INVALID')
  })

  it('invalid token=… + valid access_token=… → 401 (first query key decides)', async () => {
    assertDenied(await decide(w.sc, at(QUEUE, { query: `token=ast_bad&access_token=${w.aliceToken}` })), 'TOKEN_INVALID')
  })

  it('an invalid credential on a page navigation redirects to login (no JSON oracle, no host call)', async () => {
    const d = await decide(w.sc, { path: '/', pattern: '/', headers: { ...NAVIGATE, ...cookie('forged.cookie.value') } })
    assert.equal(location(d), '/login?next=%2F')
  })

  it('a valid API token passes on every channel; the bearer header never reaches the host', async () => {
    const viaBearer = assertPass(await decide(w.sc, at(QUEUE, { headers: bearer(w.aliceToken) })))
    assert.ok(viaBearer.strip_headers?.includes('authorization'))
    assertPass(await decide(w.sc, at(QUEUE, { headers: cookie(w.aliceToken) })))
    assertPass(await decide(w.sc, at(QUEUE, { query: `access_token=${w.aliceToken}` })))
  })
})

describe('credentials that stopped being valid', () => {
  let sc: Sidecar
  let alice: UserRecord
  before(async () => {
    sc = await openSidecar({ clock: fakeClock() })
    await addUser(sc, 'admin', 'admin-passphrase-1', 'admin')
    alice = await addUser(sc, 'alice', 'alice-passphrase-1')
  })
  after(() => sc.close())

  it('session revoked → 401 TOKEN_REVOKED on the next request', async () => {
    const { token, record } = await sc.services.sessions.issue(alice, false)
    assertPass(await decide(sc, at(QUEUE, { headers: bearer(token) })))
    await sc.services.sessions.revoke(record.jti)
    assertDenied(await decide(sc, at(QUEUE, { headers: bearer(token) })), 'TOKEN_REVOKED')
    assertDenied(await decide(sc, at(QUEUE, { headers: cookie(token) })), 'TOKEN_REVOKED')
  })

  it('user disabled → session and API token refused (TOKEN_REVOKED)', async () => {
    const carol = await addUser(sc, 'carol', 'carol-passphrase-1')
    const jwt = await sessionJwt(sc, carol)
    const token = await apiToken(sc, carol)
    assertPass(await decide(sc, at(QUEUE, { headers: bearer(jwt) })))
    await sc.services.users.update(carol.user_id, { disabled: true })
    assertDenied(await decide(sc, at(QUEUE, { headers: bearer(jwt) })), 'TOKEN_REVOKED')
    assertDenied(await decide(sc, at(QUEUE, { headers: bearer(token) })), 'TOKEN_REVOKED')
  })

  it('JWT and API token of a deleted user → 401 TOKEN_REVOKED, even if their records survive', async () => {
    const dave = await addUser(sc, 'dave', 'dave-passphrase-1')
    const jwt = await sessionJwt(sc, dave)
    const token = await apiToken(sc, dave)
    await sc.services.users.delete(dave.user_id)
    assertDenied(await decide(sc, at(QUEUE, { headers: bearer(jwt) })), 'TOKEN_REVOKED')
    assertDenied(await decide(sc, at(QUEUE, { headers: bearer(token) })), 'TOKEN_REVOKED')
  })

  it('a user re-created under the same name does not inherit the old JWT', async () => {
    const erin = await addUser(sc, 'erin', 'erin-passphrase-1')
    const jwt = await sessionJwt(sc, erin)
    await sc.services.users.delete(erin.user_id)
    await addUser(sc, 'erin', 'erin-passphrase-2')
    assertDenied(await decide(sc, at(QUEUE, { headers: bearer(jwt) })), 'TOKEN_REVOKED')
  })

  it('API token revoked by prefix → 401 TOKEN_REVOKED (its tombstone outlives the record)', async () => {
    const { token, record } = await sc.services.tokens.issue(alice.user_id, 'x', 24)
    assertPass(await decide(sc, at(QUEUE, { headers: bearer(token) })))
    await sc.services.tokens.revokeByPrefix(alice.user_id, record.hash.slice(0, 12))
    assertDenied(await decide(sc, at(QUEUE, { headers: bearer(token) })), 'TOKEN_REVOKED')
  })
})

describe('expiry through the injected clock', () => {
  it('a session JWT past access_token_expiration_hours → 401 TOKEN_EXPIRED', async () => {
    const sc = await openSidecar({ config: { session_idle_minutes: 0 } })
    try {
      const alice = await addUser(sc, 'alice', 'alice-passphrase-1')
      const jwt = await sessionJwt(sc, alice)
      sc.clock.advance(12 * 3600_000 - 1000)
      assertPass(await decide(sc, at(QUEUE, { headers: bearer(jwt) })))
      sc.clock.advance(2000)
      assertDenied(await decide(sc, at(QUEUE, { headers: bearer(jwt) })), 'TOKEN_EXPIRED')
    } finally {
      await sc.close()
    }
  })

  it('an idle session (> session_idle_minutes unused) → 401 TOKEN_EXPIRED, and stays dead', async () => {
    const sc = await openSidecar({ config: { session_idle_minutes: 60 } })
    try {
      const alice = await addUser(sc, 'alice', 'alice-passphrase-1')
      const jwt = await sessionJwt(sc, alice)
      for (let i = 0; i < 3; i++) {
        sc.clock.advance(59 * 60_000)
        assertPass(await decide(sc, at(QUEUE, { headers: bearer(jwt) })), `use ${i}`)
      }
      sc.clock.advance(61 * 60_000)
      assertDenied(await decide(sc, at(QUEUE, { headers: bearer(jwt) })), 'TOKEN_EXPIRED')
      sc.clock.advance(-61 * 60_000 + 1000)
      const again = answer(await decide(sc, at(QUEUE, { headers: bearer(jwt) })))
      assert.equal(again.status, 401, 'an idle-expired session is revoked, not revived by a clock step back')
    } finally {
      await sc.close()
    }
  })

  it('a session\'s last use is stored well inside a short idle limit (other instances on a shared store judge idleness by it)', async () => {
    const sc = await openSidecar({ config: { session_idle_minutes: 2 } })
    try {
      const alice = await addUser(sc, 'alice', 'alice-passphrase-1')
      const jwt = await sessionJwt(sc, alice)
      const jti = (await sc.services.sessions.activeForUser(alice.user_id))[0].jti
      assertPass(await decide(sc, at(QUEUE, { headers: bearer(jwt) })))
      const before = Date.parse((await sc.services.sessions.fetch(jti))!.last_used_at_iso)
      sc.clock.advance(31_000) // a quarter of the limit: stored now, not only after a minute
      assertPass(await decide(sc, at(QUEUE, { headers: bearer(jwt) })))
      await sc.services.flush()
      assert.equal(Date.parse((await sc.services.sessions.fetch(jti))!.last_used_at_iso), before + 31_000)
    } finally {
      await sc.close()
    }
  })

  it('a session whose stored last use does not parse (a mangled record) is idle, never "never idle"', async () => {
    const sc = await openSidecar({ config: { session_idle_minutes: 60 } })
    try {
      const alice = await addUser(sc, 'alice', 'alice-passphrase-1')
      const jwt = await sessionJwt(sc, alice)
      const jti = (await sc.services.sessions.activeForUser(alice.user_id))[0].jti
      ;(sc.services.sessions.get(jti) as { last_used_at_iso: string }).last_used_at_iso = 'not a time'
      sc.clock.advance(61 * 60_000)
      assertDenied(await decide(sc, at(QUEUE, { headers: bearer(jwt) })), 'TOKEN_EXPIRED')
    } finally {
      await sc.close()
    }
  })

  it('an API token past expire_hours → 401 TOKEN_EXPIRED', async () => {
    const sc = await openSidecar()
    try {
      const alice = await addUser(sc, 'alice', 'alice-passphrase-1')
      const token = await apiToken(sc, alice, 2)
      sc.clock.advance(2 * 3600_000 - 1)
      assertPass(await decide(sc, at(QUEUE, { headers: bearer(token) })))
      sc.clock.advance(1)
      assertDenied(await decide(sc, at(QUEUE, { headers: bearer(token) })), 'TOKEN_EXPIRED')
    } finally {
      await sc.close()
    }
  })

  it('a temporary IP ban ends at expires_at_iso', async () => {
    const sc = await openSidecar()
    try {
      const until = new Date(sc.clock() + 600_000).toISOString()
      sc.services.ipGate.update({ whitelist: [], blacklist: [{ ip: REMOTE, expires_at_iso: until }] })
      assertDenied(await decide(sc, at(QUEUE, { peer: REMOTE })), 'IP_DENIED')
      sc.clock.advance(600_000)
      assertDenied(await decide(sc, at(QUEUE, { peer: REMOTE })), 'AUTH_REQUIRED')
    } finally {
      await sc.close()
    }
  })
})
