/**
 * Throttling (SPEC §7) with a fake clock: 10 failures per address in a sliding
 * 10 minutes lock it for 10 minutes (loopback included, IPv6 per /64); per
 * username, failures 1–5 are free, then 30 s doubling to 15 min; a success
 * resets the username, not the address; unknown and known usernames behave
 * alike; check() is synchronous and touches no store; the state is bounded and
 * survives reopening the sqlite file; usernames are never stored in clear.
 * These suites test the module alone (no app), so the clock and the in-memory
 * store are built here rather than taken from fixtures.ts.
 */
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Throttle, type ThrottleCheck } from '../../sidecar/src/identity/throttle.js'
import type { KeyValueStore } from '../../sidecar/src/store/kv.js'
import { openSqliteSharedStore as openSqliteStore } from '../../sidecar/src/store/sqlite-store.js'

const T0 = Date.parse('2026-03-01T12:00:00.000Z')
const MIN = 60_000

interface TestClock {
  (): number
  advance(ms: number): void
  set(ms: number): void
}

function testClock(start = T0): TestClock {
  let now = start
  const clock = (() => now) as TestClock
  clock.advance = (ms) => {
    now += ms
  }
  clock.set = (ms) => {
    now = ms
  }
  return clock
}

/** A KeyValueStore in a Map, counting the calls made to it. */
function memoryStore(): KeyValueStore & { data: Map<string, unknown>; calls: number } {
  const data = new Map<string, unknown>()
  const store = {
    data,
    calls: 0,
    async get<T>(key: string) {
      store.calls++
      return data.get(key) as T | undefined
    },
    async set(key: string, value: unknown) {
      store.calls++
      data.set(key, structuredClone(value))
    },
    async delete(key: string) {
      store.calls++
      return data.delete(key)
    },
    async entries<T>(kind: string) {
      store.calls++
      return [...data].filter(([k]) => k.startsWith(`${kind}:`)) as Array<[string, T]>
    },
    async close() {},
  }
  return store
}

async function openThrottle(limits = {}) {
  const clock = testClock()
  const kv = memoryStore()
  const throttle = await Throttle.open(kv, clock, limits)
  return { clock, kv, throttle }
}

const refused = (check: ThrottleCheck) => (check.allowed ? 0 : check.retryAfterSeconds)

describe('per address: 10 failures in 10 minutes lock it for 10 minutes (SPEC §7)', () => {
  it('the 11th attempt is refused with Retry-After 600, allowed again after 10 minutes', async () => {
    const { clock, throttle } = await openThrottle()
    for (let i = 0; i < 10; i++) {
      assert.deepEqual(throttle.check('203.0.113.7', `user${i}`), { allowed: true }, `attempt ${i + 1}`)
      await throttle.recordFailure('203.0.113.7', `user${i}`)
      clock.advance(1000)
    }
    clock.advance(-1000)
    assert.deepEqual(throttle.check('203.0.113.7', 'someone-new'), { allowed: false, retryAfterSeconds: 600, reason: 'address' })
    assert.deepEqual(throttle.check('203.0.113.7', null), { allowed: false, retryAfterSeconds: 600, reason: 'address' })
    assert.deepEqual(throttle.check('203.0.113.8', 'user0'), { allowed: true }, 'another address is not affected')
    clock.advance(10 * MIN - 1)
    assert.equal(refused(throttle.check('203.0.113.7', null)), 1)
    clock.advance(1)
    assert.deepEqual(throttle.check('203.0.113.7', 'someone-new'), { allowed: true })
  })

  it('loopback is throttled like anyone else', async () => {
    const { throttle } = await openThrottle()
    for (const ip of ['127.0.0.1', '::1']) {
      for (let i = 0; i < 10; i++) await throttle.recordFailure(ip, `u${i}`)
      assert.equal(refused(throttle.check(ip, null)), 600, ip)
    }
  })

  it('the window slides: failures older than 10 minutes do not count', async () => {
    const { clock, throttle } = await openThrottle()
    const ip = '198.51.100.20'
    for (let i = 0; i < 5; i++) await throttle.recordFailure(ip, null) // t = 0
    clock.advance(6 * MIN)
    for (let i = 0; i < 4; i++) await throttle.recordFailure(ip, null) // t = 6 min: 9 in the window
    clock.advance(4 * MIN) // t = 10 min: the first five leave the window
    await throttle.recordFailure(ip, null) // 4 + 1
    assert.deepEqual(throttle.check(ip, null), { allowed: true })
    for (let i = 0; i < 4; i++) await throttle.recordFailure(ip, null) // 9
    assert.deepEqual(throttle.check(ip, null), { allowed: true })
    await throttle.recordFailure(ip, null) // 10 within 10 minutes
    assert.equal(refused(throttle.check(ip, null)), 600)
  })

  it('9 failures, a quiet 10 minutes, 9 more: never locked', async () => {
    const { clock, throttle } = await openThrottle()
    for (let i = 0; i < 9; i++) await throttle.recordFailure('192.0.2.1', null)
    clock.advance(10 * MIN)
    for (let i = 0; i < 9; i++) await throttle.recordFailure('192.0.2.1', null)
    assert.deepEqual(throttle.check('192.0.2.1', null), { allowed: true })
  })

  it('IPv6 counts per /64; an IPv4-mapped address counts as the IPv4 address', async () => {
    const { throttle } = await openThrottle()
    for (let i = 0; i < 10; i++) await throttle.recordFailure(`2001:db8:aa:bb:${i}::${i + 1}`, null)
    assert.equal(refused(throttle.check('2001:db8:aa:bb:ffff:1:2:3', null)), 600)
    assert.equal(refused(throttle.check('2001:0db8:00aa:00bb::1', null)), 600, 'the same /64 spelt long')
    assert.equal(refused(throttle.check('[2001:db8:aa:bb::9]', null)), 600, 'bracketed')
    assert.deepEqual(throttle.check('2001:db8:aa:bc::1', null), { allowed: true }, 'the next /64')

    for (let i = 0; i < 10; i++) await throttle.recordFailure('::ffff:192.0.2.55', null)
    assert.equal(refused(throttle.check('192.0.2.55', null)), 600)
  })

  it('a success does not reset the address window', async () => {
    const { throttle } = await openThrottle()
    for (let i = 0; i < 9; i++) await throttle.recordFailure('192.0.2.9', `guess${i}`)
    await throttle.recordSuccess('192.0.2.9', 'bob')
    await throttle.recordFailure('192.0.2.9', 'guess9')
    assert.equal(refused(throttle.check('192.0.2.9', 'bob')), 600)
  })
})

describe('per username: 5 free failures, then 30 s doubling to 15 minutes (SPEC §7)', () => {
  // A fresh address per attempt, so only the username counter is in play.
  let n = 0
  const freshIp = () => `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n++ & 255}`

  it('failures 1–5 are free; then 30, 60, 120, 240, 480, 900, 900 s', async () => {
    const { clock, throttle } = await openThrottle()
    for (let i = 1; i <= 5; i++) {
      assert.deepEqual(throttle.check(freshIp(), 'alice'), { allowed: true }, `attempt ${i}`)
      await throttle.recordFailure(freshIp(), 'alice')
    }
    for (const wait of [30, 60, 120, 240, 480, 900, 900]) {
      assert.deepEqual(throttle.check(freshIp(), 'alice'), { allowed: false, retryAfterSeconds: wait, reason: 'username' })
      clock.advance(wait * 1000 - 1)
      assert.equal(refused(throttle.check(freshIp(), 'alice')), 1, `1 ms before the ${wait} s wait ends`)
      clock.advance(1)
      assert.deepEqual(throttle.check(freshIp(), 'alice'), { allowed: true })
      await throttle.recordFailure(freshIp(), 'alice')
    }
  })

  it('the username is normalised: case and surrounding spaces do not make a new one', async () => {
    const { throttle } = await openThrottle()
    for (const typed of ['Alice', 'ALICE', ' alice', 'alice ', 'aLiCe']) await throttle.recordFailure(freshIp(), typed)
    assert.equal(refused(throttle.check(freshIp(), 'alice')), 30)
  })

  it('a success resets the username', async () => {
    const { throttle } = await openThrottle()
    for (let i = 0; i < 7; i++) await throttle.recordFailure(freshIp(), 'carol')
    assert.equal(refused(throttle.check(freshIp(), 'carol')), 120)
    await throttle.recordSuccess(freshIp(), 'Carol')
    for (let i = 1; i <= 5; i++) {
      assert.deepEqual(throttle.check(freshIp(), 'carol'), { allowed: true }, `attempt ${i} after the reset`)
      await throttle.recordFailure(freshIp(), 'carol')
    }
    assert.equal(refused(throttle.check(freshIp(), 'carol')), 30)
  })

  it('unknown and known usernames get identical answers (the module never knows which is which)', async () => {
    const { clock, throttle } = await openThrottle()
    const script = async (username: string) => {
      const answers: ThrottleCheck[] = []
      const start = clock()
      for (let i = 0; i < 9; i++) {
        answers.push(throttle.check(freshIp(), username))
        await throttle.recordFailure(freshIp(), username)
        clock.advance(7_000)
      }
      answers.push(throttle.check(freshIp(), username))
      clock.set(start)
      return answers
    }
    const known = await script('admin')
    const unknown = await script('no-such-user-7f3a')
    assert.deepEqual(unknown, known)
    assert.ok(known.some((a) => !a.allowed))
  })

  it('the longer of the two waits wins', async () => {
    const { throttle } = await openThrottle()
    for (let i = 0; i < 10; i++) await throttle.recordFailure('192.0.2.77', 'dave')
    assert.deepEqual(throttle.check('192.0.2.77', 'dave'), { allowed: false, retryAfterSeconds: 900, reason: 'username' })
    assert.deepEqual(throttle.check('192.0.2.77', 'erin'), { allowed: false, retryAfterSeconds: 600, reason: 'address' })
    assert.deepEqual(throttle.check(freshIp(), 'dave'), { allowed: false, retryAfterSeconds: 900, reason: 'username' })
  })

  it('a username with no failure for 24 hours starts over', async () => {
    const { clock, throttle } = await openThrottle()
    for (let i = 0; i < 8; i++) await throttle.recordFailure(freshIp(), 'frank')
    clock.advance(24 * 60 * MIN)
    for (let i = 1; i <= 5; i++) {
      assert.deepEqual(throttle.check(freshIp(), 'frank'), { allowed: true }, `attempt ${i}`)
      await throttle.recordFailure(freshIp(), 'frank')
    }
    assert.equal(refused(throttle.check(freshIp(), 'frank')), 30)
  })
})

describe('hot path, bounds and robustness', () => {
  it('check() answers synchronously and makes no store call', async () => {
    const { kv, throttle } = await openThrottle()
    for (let i = 0; i < 12; i++) await throttle.recordFailure('192.0.2.1', 'gina')
    const before = kv.calls
    for (let i = 0; i < 1000; i++) {
      const answer = throttle.check(`192.0.2.${i % 3}`, i % 2 ? 'gina' : null)
      assert.ok(!(answer instanceof Promise))
    }
    assert.equal(kv.calls, before)
  })

  it('a failure is in the store once recordFailure settles', async () => {
    const { kv, throttle } = await openThrottle()
    await throttle.recordFailure('192.0.2.1', 'hank')
    assert.equal([...kv.data.keys()].filter((k) => k.startsWith('throttle:')).length, 2)
  })

  it('expired entries are dropped on the next write, from memory and from the store', async () => {
    const { clock, kv, throttle } = await openThrottle()
    for (let i = 0; i < 20; i++) await throttle.recordFailure(`192.0.2.${i}`, null)
    await throttle.recordFailure('192.0.2.200', 'ivan')
    assert.equal(throttle.trackedKeys, 22)
    clock.advance(10 * MIN)
    await throttle.recordFailure('198.51.100.1', null)
    assert.equal(throttle.trackedKeys, 2, 'the new address and the username (kept 24 h)')
    clock.advance(24 * 60 * MIN)
    await throttle.recordSuccess('198.51.100.2', null)
    assert.equal(throttle.trackedKeys, 0)
    assert.equal(kv.data.size, 0)
  })

  it('beyond maxKeys the least recently written keys are evicted', async () => {
    const { clock, kv, throttle } = await openThrottle({ maxKeys: 50 })
    for (let i = 0; i < 300; i++) {
      await throttle.recordFailure(`10.1.${i >> 8}.${i & 255}`, i % 3 === 0 ? `name${i}` : null)
      clock.advance(100)
    }
    assert.equal(throttle.trackedKeys, 50)
    assert.equal(kv.data.size, 50)
    for (let i = 0; i < 9; i++) await throttle.recordFailure('10.1.1.43', null) // the last address written: 10 now
    assert.equal(refused(throttle.check('10.1.1.43', null)), 600)
    assert.equal(throttle.trackedKeys, 50)
  })

  it('a mangled stored record neither locks out nor yields a NaN Retry-After', async () => {
    const clock = testClock()
    const kv = memoryStore()
    await kv.set('throttle:ip:192.0.2.1', { key: 'ip:192.0.2.1', failures_ms: 'nope' })
    await kv.set('throttle:ip:192.0.2.2', { locked_until_ms: T0 + 10 * MIN })
    const throttle = await Throttle.open(kv, clock)
    assert.deepEqual(throttle.check('192.0.2.1', null), { allowed: true })
    assert.deepEqual(throttle.check('192.0.2.2', null), { allowed: true })
    for (let i = 0; i < 10; i++) await throttle.recordFailure('192.0.2.1', null)
    assert.equal(refused(throttle.check('192.0.2.1', null)), 600)
  })

  it('a clock stepped back cannot stretch a wait past its length', async () => {
    const { clock, throttle } = await openThrottle()
    for (let i = 0; i < 10; i++) await throttle.recordFailure('192.0.2.3', 'judy')
    clock.advance(-3 * 60 * MIN)
    assert.equal(refused(throttle.check('192.0.2.3', null)), 600)
    assert.equal(refused(throttle.check('192.0.2.250', 'judy')), 900)
  })

  it('maxKeys below 2 is refused', async () => {
    await assert.rejects(Throttle.open(memoryStore(), testClock(), { maxKeys: 1 }), RangeError)
  })
})

describe('the state survives reopening the sqlite file', () => {
  const dir = mkdtempSync(join(tmpdir(), 'authsvc-throttle-'))
  const path = join(dir, 'authsvc.sqlite')
  after(() => rmSync(dir, { recursive: true, force: true }))

  it('a locked address and a delayed username stay so after a restart, and expire on time', async () => {
    const clock = testClock()
    const typedUsername = 'Correct-Horse-Battery-Staple-42'
    let kv = await openSqliteStore(path)
    let throttle = await Throttle.open(kv, clock)
    for (let i = 0; i < 10; i++) await throttle.recordFailure('203.0.113.50', i < 6 ? typedUsername : `other${i}`)
    for (let i = 0; i < 2; i++) await throttle.recordFailure(`198.51.100.${i}`, 'mallory')
    await kv.close()

    clock.advance(MIN)
    kv = await openSqliteStore(path)
    throttle = await Throttle.open(kv, clock)
    assert.deepEqual(throttle.check('203.0.113.50', null), { allowed: false, retryAfterSeconds: 540, reason: 'address' })
    assert.deepEqual(throttle.check('192.0.2.1', typedUsername), { allowed: true }, 'its 60 s wait began a minute ago')
    assert.deepEqual(throttle.check('192.0.2.1', typedUsername.toUpperCase()), { allowed: true })
    await throttle.recordFailure('192.0.2.1', 'mallory')
    await throttle.recordFailure('192.0.2.2', 'mallory')
    await throttle.recordFailure('192.0.2.3', 'mallory')
    assert.equal(refused(throttle.check('192.0.2.4', 'mallory')), 30, 'the two failures before the restart still count')

    const rows = await kv.entries<unknown>('throttle')
    assert.ok(rows.length > 0)
    for (const [key] of rows) assert.ok(!key.toLowerCase().includes('mallory') && !key.toLowerCase().includes('correct-horse'), key)
    await kv.close()
    const bytes = Buffer.concat(['', '-wal', '-shm'].map((s) => `${path}${s}`).filter(existsSync).map((p) => readFileSync(p)))
    for (const secret of [typedUsername, typedUsername.toLowerCase(), 'mallory']) assert.ok(!bytes.includes(Buffer.from(secret)), `${secret} is on disk`)

    clock.advance(9 * MIN)
    kv = await openSqliteStore(path)
    throttle = await Throttle.open(kv, clock)
    assert.deepEqual(throttle.check('203.0.113.50', null), { allowed: true })
    await kv.close()
  })
})
