/**
 * Throttling and lockout (SPEC §7) through the owned routes: real services,
 * real sqlite, injected clock (no test waits for time to pass, except the
 * timing test, which measures real argon2 work).
 *
 * - per client IP: 10 failures (any usernames) lock the address for 10 min,
 *   loopback included; other addresses are unaffected;
 * - per username (existing or not, indistinguishable): 5 free failures, then
 *   30 s, 60, 120 … at most 900 s; a success resets;
 * - unknown and known usernames answer alike and cost the same time;
 * - /authsvc/generate_token and MFA code checks are throttled too; /register is refused from a
 *   locked address, but a closed registration is not a failure (issue 21);
 * - counters live in the store and survive a restart.
 */
import { describe, it, beforeEach, afterEach } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PASSWORD, bearer, clockAt, openHarness, registerAndLogin, type Harness } from './harness.js'
import { totpAt } from './totp-reference.js'

const S = 1000
const MIN = 60 * S

type Answer = { status: number; body: any; retryAfter: string | undefined }

/** A fresh documentation-range address per call, so the per-IP limit never interferes. */
let peerCounter = 0
const freshPeer = () => {
  peerCounter++
  return `198.18.${(peerCounter >> 8) & 255}.${peerCounter & 255}`
}

async function post(h: Harness, url: string, body: unknown, peer: string, headers: Record<string, string> = {}): Promise<Answer> {
  const res = await h.call('POST', url, { body, peer, headers })
  const retry = res.headers['retry-after']
  return { status: res.status, body: res.body, retryAfter: retry === undefined ? undefined : String(retry) }
}

const login = (h: Harness, username: string, password: string, peer: string) => post(h, '/login', { username, password }, peer)

function assertThrottled(a: Answer, retryAfter: number | null, what: string): void {
  assert.equal(a.status, 429, `${what}: ${a.status} ${JSON.stringify(a.body)}`)
  assert.deepEqual(a.body, { error: 'Too many attempts; try again later', code: 'TOO_MANY_ATTEMPTS', statusCode: 429 }, what)
  assert.ok(a.retryAfter !== undefined, `${what}: Retry-After missing`)
  if (retryAfter !== null) assert.equal(a.retryAfter, String(retryAfter), `${what}: Retry-After`)
}

function assertBadPassword(a: Answer, what: string): void {
  assert.equal(a.status, 401, `${what}: ${a.status} ${JSON.stringify(a.body)}`)
  assert.deepEqual(a.body, { error: 'Invalid username or password', code: 'INVALID_CREDENTIALS', statusCode: 401 }, what)
  assert.equal(a.retryAfter, undefined, `${what}: no Retry-After on a plain 401`)
}

/** A 6-digit code that is none of the codes the ±1 window (and one more step) would accept. */
function wrongCode(secret: string, now: number): string {
  const valid = new Set([-2, -1, 0, 1, 2].map((o) => totpAt(secret, now, o)))
  for (let n = 0; ; n++) {
    const code = String(n).padStart(6, '0')
    if (!valid.has(code)) return code
  }
}

async function enrol(h: Harness, session: string): Promise<string> {
  const setup = await h.call('POST', '/authsvc/api/mfa/setup', { headers: bearer(session), body: {} })
  assert.equal(setup.status, 200, JSON.stringify(setup.body))
  const ok = await h.call('POST', '/authsvc/api/mfa/verify-setup', { headers: bearer(session), body: { code: totpAt(setup.body.secret, h.clock()) } })
  assert.equal(ok.status, 200, JSON.stringify(ok.body))
  return setup.body.secret
}

describe('throttle per client IP', () => {
  let h: Harness
  beforeEach(async () => {
    h = await openHarness()
    await registerAndLogin(h, 'admin')
    assert.equal((await h.call('POST', '/register', { headers: bearer((await login(h, 'admin', PASSWORD, freshPeer())).body.jwt_token), body: { username: 'alice', password: PASSWORD } })).status, 201)
  })
  afterEach(async () => {
    await h.close()
  })

  it('10 failures from one IP (known and unknown usernames) lock it for 10 minutes; other IPs unaffected', async () => {
    const ip = '203.0.113.10'
    const names = ['alice', 'admin', 'ghost-1', 'ghost-2', 'ghost-3', 'ghost-4', 'ghost-5', 'ghost-6', 'ghost-7', 'ghost-8']
    for (const name of names) assertBadPassword(await login(h, name, 'wrong-password-x', ip), `failure for ${name}`)

    // the 11th: even the right password of an existing user is refused before any check
    assertThrottled(await login(h, 'alice', PASSWORD, ip), 600, '11th from the locked IP')
    assertThrottled(await login(h, 'never-seen', 'whatever-pass', ip), 600, 'unknown user from the locked IP')
    assert.equal((await login(h, 'alice', PASSWORD, '203.0.113.11')).status, 200, 'another IP is not affected')

    h.clock.advance(5 * MIN)
    assertThrottled(await login(h, 'alice', PASSWORD, ip), 300, 'half way through the lock')
    h.clock.advance(5 * MIN - S)
    assertThrottled(await login(h, 'alice', PASSWORD, ip), 1, 'one second before the end')
    h.clock.advance(S)
    const after = await login(h, 'alice', PASSWORD, ip)
    assert.equal(after.status, 200, `10 minutes later: ${JSON.stringify(after.body)}`)
    assert.ok(after.body.jwt_token)

    // the window slides: the old failures no longer count, a new one is just a 401
    assertBadPassword(await login(h, 'ghost-9', 'wrong-password-x', ip), 'a fresh failure after the lock')
    assert.equal((await login(h, 'alice', PASSWORD, ip)).status, 200, 'one failure does not lock again')
  })

  it('failures spread over more than 10 minutes do not lock', async () => {
    const ip = '203.0.113.20'
    for (let i = 0; i < 9; i++) assertBadPassword(await login(h, `spread-${i}`, 'wrong-password-x', ip), `failure ${i + 1}`)
    h.clock.advance(10 * MIN)
    assertBadPassword(await login(h, 'spread-9', 'wrong-password-x', ip), '10th failure, but the first nine are older than 10 minutes')
    assert.equal((await login(h, 'alice', PASSWORD, ip)).status, 200)
  })

  it('loopback is throttled like anyone else', async () => {
    for (let i = 0; i < 10; i++) assertBadPassword(await login(h, `local-${i}`, 'wrong-password-x', '127.0.0.1'), `loopback failure ${i + 1}`)
    assertThrottled(await login(h, 'alice', PASSWORD, '127.0.0.1'), 600, 'loopback after 10 failures')
    h.clock.advance(10 * MIN)
    assert.equal((await login(h, 'alice', PASSWORD, '127.0.0.1')).status, 200)
  })
})

describe('throttle per username (existing or not, indistinguishable)', () => {
  let h: Harness
  beforeEach(async () => {
    h = await openHarness()
    await registerAndLogin(h, 'alice')
  })
  afterEach(async () => {
    await h.close()
  })

  it('5 free failures, then 30 s, 60, 120 … capped at 900 s; a success resets; an unknown name answers identically', async () => {
    const known = 'alice'
    const unknown = 'no-such-user'
    /** One attempt for each name at the same instant (fresh IPs); both answers must be identical. */
    const both = async (what: string, password = 'wrong-password-x'): Promise<Answer> => {
      const a = await login(h, known, password, freshPeer())
      const b = await login(h, unknown, password, freshPeer())
      assert.deepEqual(b, a, `${what}: an unknown user must answer exactly like an existing one`)
      return a
    }

    for (let i = 1; i <= 5; i++) assertBadPassword(await both(`free failure ${i}`), `free failure ${i}`)

    let failures = 5
    for (const delay of [30, 60, 120, 240, 480, 900, 900]) {
      assertThrottled(await both(`after ${failures} failures`), delay, `after ${failures} failures`)
      h.clock.advance((delay - 1) * S)
      assertThrottled(await both(`${delay - 1} s after failure ${failures}`), 1, `${delay - 1} s after failure ${failures}`)
      h.clock.advance(S)
      assertBadPassword(await both(`attempt after waiting ${delay} s`), `attempt after waiting ${delay} s`)
      failures++
    }
    assertThrottled(await both('capped'), 900, 'still capped at 15 minutes')

    // a success resets the existing user (the unknown one cannot succeed; it stays capped)
    h.clock.advance(900 * S)
    const ok = await login(h, known, PASSWORD, freshPeer())
    assert.equal(ok.status, 200, JSON.stringify(ok.body))
    for (let i = 1; i <= 5; i++) assertBadPassword(await login(h, known, 'wrong-password-x', freshPeer()), `after the reset, free failure ${i}`)
    assertThrottled(await login(h, known, PASSWORD, freshPeer()), 30, 'after the reset the ladder starts again at 30 s')
    assertBadPassword(await login(h, unknown, 'wrong-password-x', freshPeer()), 'the unknown name, after its 900 s wait')
    assertThrottled(await login(h, unknown, 'wrong-password-x', freshPeer()), 900, 'the unknown name stays at the cap')
  })

  it('a wrong password for a known user and any password for an unknown one: same status and body', async () => {
    const a = await login(h, 'alice', 'wrong-password-x', freshPeer())
    const b = await login(h, 'nobody-at-all', 'wrong-password-x', freshPeer())
    assertBadPassword(a, 'known')
    assert.deepEqual(b, a)
    const ha = await h.call('POST', '/login', { body: { username: 'alice', password: 'wrong-password-y' }, peer: freshPeer() })
    const hb = await h.call('POST', '/login', { body: { username: 'nobody-at-all', password: 'wrong-password-y' }, peer: freshPeer() })
    const shape = (headers: Record<string, unknown>) => Object.keys(headers).filter((k) => k !== 'date').sort()
    assert.deepEqual(shape(hb.headers), shape(ha.headers), 'same response headers')
    assert.equal(hb.headers['set-cookie'], undefined)
  })
})

// "Unknown and known usernames cost the same" is proved by counting argon2 verifies in
// test/unit/login-cost.test.ts; the timing itself is measured by `npm run bench` (load-sensitive).

describe('other password and code checks are throttled too', () => {
  let h: Harness
  let admin: string
  beforeEach(async () => {
    h = await openHarness()
    admin = await registerAndLogin(h, 'admin')
    assert.equal((await h.call('POST', '/register', { headers: bearer(admin), body: { username: 'alice', password: PASSWORD } })).status, 201)
  })
  afterEach(async () => {
    await h.close()
  })

  it('generate_token password failures count with login failures per IP, and a locked IP is refused on every alias', async () => {
    const ip = '203.0.113.30'
    for (let i = 0; i < 5; i++) assertBadPassword(await login(h, `mixed-${i}`, 'wrong-password-x', ip), `login failure ${i + 1}`)
    for (let i = 5; i < 10; i++) {
      assertBadPassword(await post(h, '/authsvc/generate_token', { username: `mixed-${i}`, password: 'wrong-password-x' }, ip), `generate_token failure ${i + 1}`)
    }
    const good = { username: 'alice', password: PASSWORD }
    for (const url of ['/authsvc/generate_token', '/generate_token', '/api/authsvc/generate_token']) {
      assertThrottled(await post(h, url, good, ip), 600, `${url} from the locked IP`)
    }
    assertThrottled(await login(h, 'alice', PASSWORD, ip), 600, '/login from the locked IP')
    const other = await post(h, '/authsvc/generate_token', good, '203.0.113.31')
    assert.equal(other.status, 200, JSON.stringify(other.body))
    assert.match(other.body.token, /^ast_/)
  })

  it('generate_token only: 10 failures lock the IP', async () => {
    const ip = '203.0.113.32'
    for (let i = 0; i < 10; i++) {
      assertBadPassword(await post(h, '/authsvc/generate_token', { username: `tok-${i}`, password: 'wrong-password-x' }, ip), `failure ${i + 1}`)
    }
    assertThrottled(await post(h, '/authsvc/generate_token', { username: 'alice', password: PASSWORD }, ip), 600, '11th')
  })

  it('generate_token password failures count per username, shared with /login', async () => {
    for (let i = 0; i < 5; i++) {
      assertBadPassword(await post(h, '/authsvc/generate_token', { username: 'alice', password: 'wrong-password-x' }, freshPeer()), `failure ${i + 1}`)
    }
    assertThrottled(await post(h, '/authsvc/generate_token', { username: 'alice', password: PASSWORD }, freshPeer()), 30, 'generate_token after 5 failures')
    assertThrottled(await login(h, 'alice', PASSWORD, freshPeer()), 30, '/login for the same username')
    h.clock.advance(30 * S)
    const ok = await post(h, '/authsvc/generate_token', { username: 'alice', password: PASSWORD }, freshPeer())
    assert.equal(ok.status, 200, JSON.stringify(ok.body))
  })

  // issue 21: eleven closed registrations used to lock the admin out of password login from that address
  it('/register: a closed registration counts nothing, but an address locked by failed logins is refused there too', async () => {
    const ip = '203.0.113.40'
    for (let i = 0; i < 25; i++) {
      const res = await post(h, '/register', { username: `newcomer-${i}`, password: PASSWORD }, ip)
      assert.equal(res.status, 403, JSON.stringify(res.body))
      assert.equal(res.body.code, 'REGISTRATION_CLOSED')
    }
    assert.equal((await login(h, 'admin', PASSWORD, ip)).status, 200, 'the admin still logs in from that address')
    for (let i = 0; i < 10; i++) assert.equal((await login(h, `nobody-${i}`, 'wrong-password', ip)).body.code, 'INVALID_CREDENTIALS')
    assertThrottled(await post(h, '/register', { username: 'newcomer-x', password: PASSWORD }, ip), 600, '/register from the locked address')
    const other = await post(h, '/register', { username: 'newcomer-y', password: PASSWORD }, '203.0.113.41')
    assert.equal(other.status, 403, 'another IP still gets the ordinary answer')
    assert.equal(other.body.code, 'REGISTRATION_CLOSED')
    h.clock.advance(10 * MIN)
    assert.equal((await post(h, '/register', { username: 'newcomer-z', password: PASSWORD }, ip)).body.code, 'REGISTRATION_CLOSED', 'lock lifted after 10 minutes')
  })

  it('MFA code checks are throttled per user: after 5 wrong codes even a new temp token with the right code gets 429', async () => {
    const bob = await registerAndLogin(h, 'bob', { admin })
    const secret = await enrol(h, bob)
    h.clock.advance(30 * S)
    const first = await login(h, 'bob', PASSWORD, freshPeer())
    assert.equal(first.body.mfa_required, true)
    for (let i = 0; i < 5; i++) {
      const res = await post(h, '/authsvc/api/mfa/verify', { mfa_temp_token: first.body.mfa_temp_token, code: wrongCode(secret, h.clock()) }, freshPeer())
      assert.equal(res.status, 401, JSON.stringify(res.body))
      assert.equal(res.body.code, 'MFA_INVALID_CODE')
    }
    const second = await login(h, 'bob', PASSWORD, freshPeer())
    assert.equal(second.status, 200, 'the password step is a different key')
    assert.equal(second.body.mfa_required, true)
    const right = totpAt(secret, h.clock())
    assertThrottled(await post(h, '/authsvc/api/mfa/verify', { mfa_temp_token: second.body.mfa_temp_token, code: right }, freshPeer()), 30, 'verify with a new temp token and the right code')
    assertThrottled(await post(h, '/authsvc/generate_token', { username: 'bob', password: PASSWORD, code: right }, freshPeer()), 30, 'generate_token password + code')
    assertThrottled(await post(h, '/authsvc/generate_token', { mfa_temp_token: second.body.mfa_temp_token, code: right }, freshPeer()), 30, 'generate_token temp token + code')
    assert.equal((await post(h, '/authsvc/api/mfa/disable', { code: right }, freshPeer(), bearer(bob))).status, 429, 'disable with a code')

    h.clock.advance(30 * S)
    const ok = await post(h, '/authsvc/api/mfa/verify', { mfa_temp_token: second.body.mfa_temp_token, code: totpAt(secret, h.clock()) }, freshPeer())
    assert.equal(ok.status, 200, `after the wait: ${JSON.stringify(ok.body)}`)
    assert.ok(ok.body.jwt_token)
  })

  it('verify-setup code checks count per user as well', async () => {
    const bob = await registerAndLogin(h, 'bob', { admin })
    const setup = await h.call('POST', '/authsvc/api/mfa/setup', { headers: bearer(bob), body: {} })
    assert.equal(setup.status, 200)
    for (let i = 0; i < 5; i++) {
      const res = await post(h, '/authsvc/api/mfa/verify-setup', { code: wrongCode(setup.body.secret, h.clock()) }, freshPeer(), bearer(bob))
      assert.equal(res.body.code, 'MFA_INVALID_CODE')
    }
    assertThrottled(await post(h, '/authsvc/api/mfa/verify-setup', { code: totpAt(setup.body.secret, h.clock()) }, freshPeer(), bearer(bob)), 30, 'verify-setup after 5 wrong codes')
  })
})

describe('concurrent attempts cannot exceed the budget', () => {
  // The password check is async (argon2): the throttle must count attempts in
  // flight, or a burst of parallel requests passes check() before any failure is recorded.
  let h: Harness
  beforeEach(async () => {
    h = await openHarness()
    await registerAndLogin(h, 'alice')
  })
  afterEach(async () => {
    await h.close()
  })

  it('30 parallel wrong logins from one IP: at most 10 reach the password check', async () => {
    const answers = await Promise.all(Array.from({ length: 30 }, (_, i) => login(h, `burst-${i}`, 'wrong-password-x', '203.0.113.60')))
    const checked = answers.filter((a) => a.status === 401).length
    const throttled = answers.filter((a) => a.status === 429).length
    assert.equal(checked + throttled, 30)
    assert.ok(checked <= 10, `${checked} of 30 parallel guesses from one IP were checked (limit 10 per 10 minutes)`)
  })

  it('30 parallel wrong logins for one username from 30 IPs: at most 5 reach the password check', async () => {
    const answers = await Promise.all(Array.from({ length: 30 }, () => login(h, 'alice', 'wrong-password-x', freshPeer())))
    const checked = answers.filter((a) => a.status === 401).length
    assert.ok(checked <= 5, `${checked} of 30 parallel guesses for one username were checked (5 free, then 30 s)`)
  })

  it('20 parallel wrong MFA codes for one user from 20 IPs: at most 5 are checked', async () => {
    const bobSession = await registerAndLogin(h, 'bob', { admin: (await login(h, 'alice', PASSWORD, freshPeer())).body.jwt_token })
    const secret = await enrol(h, bobSession)
    h.clock.advance(30 * S)
    const temp = (await login(h, 'bob', PASSWORD, freshPeer())).body.mfa_temp_token
    const wrong = wrongCode(secret, h.clock())
    const answers = await Promise.all(Array.from({ length: 20 }, () => post(h, '/authsvc/api/mfa/verify', { mfa_temp_token: temp, code: wrong }, freshPeer())))
    const checked = answers.filter((a) => a.status === 401).length
    assert.ok(checked <= 5, `${checked} of 20 parallel wrong codes were checked`)
    assert.equal(answers.filter((a) => a.status === 429).length, 20 - checked)
  })
})

describe('throttle counters survive a restart', () => {
  it('an address locked before the restart is still locked after it, and so is a username', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'as-throttle-'))
    const clock = clockAt()
    try {
      const before = await openHarness({ dir, clock })
      await registerAndLogin(before, 'admin')
      const ip = '203.0.113.50'
      for (let i = 0; i < 10; i++) assertBadPassword(await login(before, `restart-${i}`, 'wrong-password-x', ip), `failure ${i + 1}`)
      for (let i = 0; i < 5; i++) assertBadPassword(await login(before, 'admin', 'wrong-password-x', freshPeer()), `admin failure ${i + 1}`)
      assertThrottled(await login(before, 'admin', PASSWORD, ip), 600, 'before the restart')
      await before.close()

      const after = await openHarness({ dir, clock })
      try {
        assertThrottled(await login(after, 'admin', PASSWORD, ip), 600, 'the address, after the restart')
        assertThrottled(await login(after, 'admin', PASSWORD, freshPeer()), 30, 'the username, after the restart')
        clock.advance(30 * S)
        assert.equal((await login(after, 'admin', PASSWORD, freshPeer())).status, 200, 'another address once the username wait is over')
        assertThrottled(await login(after, 'admin', PASSWORD, ip), 570, 'the address lock keeps running')
      } finally {
        await after.close()
      }
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
