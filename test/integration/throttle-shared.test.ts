/**
 * The throttle on a shared store (real Redis, two Throttle instances with one clock): what one
 * instance tidies away (expiry, eviction past `maxKeys`) never lifts a lock the other set since.
 * Each instance knows only its own writes' times; the record itself says when it last failed.
 */
import { it, describe } from 'node:test'
import assert from 'node:assert/strict'
import { Throttle } from '../../sidecar/src/identity/throttle.js'
import { openRedisSharedStore } from '../../sidecar/src/store/redis-store.js'
import { redisSkipReason, startRedis } from '../helpers/store-servers.js'
import { nextChange } from '../helpers/store-conformance.js'

describe('the throttle on a shared store', { skip: redisSkipReason() }, () => {
  it('an instance evicting its oldest keys past maxKeys does not delete a lock the other instance set since', async () => {
    const server = await startRedis()
    let now = Date.parse('2026-03-01T12:00:00Z')
    const clock = () => now
    const kvA = await openRedisSharedStore(server.url)
    const kvB = await openRedisSharedStore(server.url)
    try {
      const a = await Throttle.open(kvA, clock, { maxKeys: 4 })
      const b = await Throttle.open(kvB, clock, { maxKeys: 4 })
      const x = '198.51.100.7'
      await a.recordFailure(x, null)
      now += 9 * 60_000
      // nine more on B: ten within ten minutes, the address locked on both once A has heard it
      for (let i = 0; i < 9; i++) {
        const heard = nextChange(kvA, (c) => c.key === `throttle:ip:${x}`)
        await b.recordFailure(x, null)
        await heard
      }
      assert.equal(a.check(x, null).allowed, false, 'locked on A')
      // A writes four other addresses: five keys of its own, one past maxKeys; x is the oldest it wrote
      for (let i = 1; i <= 4; i++) {
        now += 1000
        await a.recordFailure(`203.0.113.${i}`, null)
      }
      await a.flush()
      assert.ok(await kvA.get(`throttle:ip:${x}`), 'the lock is still stored')
      assert.equal(b.check(x, null).allowed, false, 'still locked on B')
      assert.equal(a.check(x, null).allowed, false, 'still locked on A')
      assert.equal(await kvA.get('throttle:ip:203.0.113.1'), undefined, 'the oldest A wrote itself went instead')
    } finally {
      await kvA.close()
      await kvB.close()
      await server.stop()
    }
  })
})
