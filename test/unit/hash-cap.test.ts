/**
 * The password hasher's two cost guarantees (SPEC §7, §2), observed on the
 * real argon2 through the hasher's `argon2` seam (a wrapper that counts calls
 * in flight and passes them on):
 * - at most min(`max_concurrent_hashes`, cores) hashes and verifies run at
 *   once, the dummy hash built at creation included; the rest queue and all
 *   complete with the right answers;
 * - the dummy hash for unknown users exists once `ready` settles, so the very
 *   first unknown-user check costs one argon2 verify, like a known user's.
 */
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import argon2 from 'argon2'
import { availableParallelism } from 'node:os'
import { PasswordHasher, hashConcurrencyLimit, type Argon2Calls } from '../../sidecar/src/identity/passwords.js'

/** Cheap parameters: the tests are about scheduling, not cost. */
const CHEAP = { memory_kib: 256, time_cost: 1, parallelism: 1 }

interface ObservedArgon2 extends Argon2Calls {
  inFlight: number
  peak: number
  hashes: number
  verifies: number
}

/** The real argon2, counting calls started and the most in flight at once. */
function observedArgon2(): ObservedArgon2 {
  const observed = {
    inFlight: 0,
    peak: 0,
    hashes: 0,
    verifies: 0,
  } as ObservedArgon2
  const track = async <T>(call: () => Promise<T>): Promise<T> => {
    observed.inFlight++
    observed.peak = Math.max(observed.peak, observed.inFlight)
    try {
      return await call()
    } finally {
      observed.inFlight--
    }
  }
  observed.hash = ((password: string, options: argon2.Options) => {
    observed.hashes++
    return track(() => argon2.hash(password, options))
  }) as Argon2Calls['hash']
  observed.verify = (hash: string, password: string | Buffer) => {
    observed.verifies++
    return track(() => argon2.verify(hash, password))
  }
  return observed
}

describe('the effective cap on concurrent hashes', () => {
  it('is the configured cap, never more than the cores, at least one (the worker runs at nice 19)', () => {
    assert.equal(hashConcurrencyLimit(4, 2), 2, 'two cores: two hashes; the decision path still runs first')
    assert.equal(hashConcurrencyLimit(4, 1), 1, 'one core: one hash')
    assert.equal(hashConcurrencyLimit(4, 8), 4)
    assert.equal(hashConcurrencyLimit(2, 16), 2)
    assert.equal(hashConcurrencyLimit(6, 5), 5)
    assert.equal(hashConcurrencyLimit(0, 4), 1)
  })

  it('defaults to this machine: min(4, cores)', () => {
    const hasher = new PasswordHasher({ ...CHEAP, max_concurrent_hashes: 4 })
    try {
      assert.equal(hasher.concurrencyLimit, Math.max(1, Math.min(4, availableParallelism())))
    } finally {
      hasher.close()
    }
  })
})

describe('at most N password hashes run at once', () => {
  const cases: Array<{ name: string; configured: number; cores?: number }> = [
    { name: 'default cap on this machine', configured: 4 },
    { name: 'configured 4 on 8 cores', configured: 4, cores: 8 },
    { name: 'configured 3 on 16 cores', configured: 3, cores: 16 },
    { name: 'configured 1', configured: 1, cores: 16 },
  ]
  for (const { name, configured, cores } of cases) {
    it(`${name}: 24 mixed hash / verify / verifyDummy calls fired at once`, async () => {
      const known = await argon2.hash('known-password-1', { type: argon2.argon2id, memoryCost: 256, timeCost: 1, parallelism: 1 })
      const observed = observedArgon2()
      // fired right after creation: the dummy hash built then competes for the same slots
      const hasher = new PasswordHasher({ ...CHEAP, max_concurrent_hashes: configured }, { argon2: observed, cores })
      const cap = hasher.concurrencyLimit
      assert.equal(cap, hashConcurrencyLimit(configured, cores ?? availableParallelism()))

      const hashed: Array<Promise<string>> = []
      const rightPassword: Array<Promise<boolean>> = []
      const wrongPassword: Array<Promise<boolean>> = []
      const dummy: Array<Promise<false>> = []
      for (let i = 0; i < 6; i++) {
        hashed.push(hasher.hash(`new-password-${i}`))
        rightPassword.push(hasher.verify(known, 'known-password-1'))
        wrongPassword.push(hasher.verify(known, `wrong-password-${i}`))
        dummy.push(hasher.verifyDummy(`unknown-user-password-${i}`))
      }
      assert.equal(observed.inFlight, cap, 'the first N calls start at once; the others queue')

      const hashes = await Promise.all(hashed)
      assert.deepEqual(await Promise.all(rightPassword), Array(6).fill(true))
      assert.deepEqual(await Promise.all(wrongPassword), Array(6).fill(false))
      assert.deepEqual(await Promise.all(dummy), Array(6).fill(false))
      for (const [i, hash] of hashes.entries()) {
        assert.match(hash, /^\$argon2id\$/)
        assert.equal(await argon2.verify(hash, `new-password-${i}`), true, 'each hash is of its own password')
      }

      assert.equal(observed.peak, cap, `peak ${observed.peak} in flight, cap ${cap}`)
      assert.equal(observed.inFlight, 0)
      assert.equal(hasher.hashing, false, 'every slot released')
      assert.equal(observed.hashes, 6 + 1, 'six hashes and the dummy hash')
      assert.equal(observed.verifies, 18, 'twelve verifies and six dummy verifies')
    })
  }

  it('a verify of a corrupt hash answers false and frees its slot', async () => {
    const observed = observedArgon2()
    const hasher = new PasswordHasher({ ...CHEAP, max_concurrent_hashes: 1 }, { argon2: observed, cores: 16 })
    await hasher.ready
    assert.deepEqual(await Promise.all([hasher.verify('not-a-phc-string', 'x'), hasher.verify('$argon2id$broken', 'x')]), [false, false])
    assert.equal(await hasher.verify(await hasher.hash('password-after-1'), 'password-after-1'), true, 'the gate still admits work')
    assert.equal(observed.peak, 1)
  })
})

describe('unknown users cost one verify from the first attempt on', () => {
  it('the dummy hash is built when the hasher is created, through the gate', async () => {
    const observed = observedArgon2()
    const hasher = new PasswordHasher({ ...CHEAP, max_concurrent_hashes: 1 }, { argon2: observed, cores: 16 })
    assert.equal(observed.hashes, 1, 'the dummy hash starts at creation')
    assert.equal(hasher.hashing, true, 'and holds a slot of the gate')
    const queued = hasher.hash('queued-password-1')
    assert.equal(observed.hashes, 1, 'a hash asked for meanwhile waits for the slot')
    await hasher.ready
    await queued
    assert.equal(observed.peak, 1)
  })

  it('after ready, the first unknown-user check makes exactly the argon2 calls of a known-user check', async () => {
    const observed = observedArgon2()
    const hasher = new PasswordHasher({ ...CHEAP, max_concurrent_hashes: 4 }, { argon2: observed, cores: 16 })
    await hasher.ready
    const known = await hasher.hash('known-password-1')

    const before = { hashes: observed.hashes, verifies: observed.verifies }
    assert.equal(await hasher.verifyDummy('guess-password-1'), false)
    const unknownCost = { hashes: observed.hashes - before.hashes, verifies: observed.verifies - before.verifies }

    const mid = { hashes: observed.hashes, verifies: observed.verifies }
    assert.equal(await hasher.verify(known, 'guess-password-1'), false)
    const knownCost = { hashes: observed.hashes - mid.hashes, verifies: observed.verifies - mid.verifies }

    assert.deepEqual(unknownCost, { hashes: 0, verifies: 1 }, 'the first unknown user: one verify, no hash')
    assert.deepEqual(unknownCost, knownCost)
  })
})
