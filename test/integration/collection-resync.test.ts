/**
 * A collection's reload after its feed reconnected (store/collection.ts `resync`), on a real
 * Redis with two clients: the reload reads the whole kind, and a record the read lacks is gone from
 * the store unless memory learnt of it while the read ran. Each row holds B's read after the store
 * answered it (a snapshot taken before the change the row makes), makes its change, waits until
 * B's memory shows it, then lets the read finish.
 */
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { Collection } from '../../sidecar/src/store/collection.js'
import { openRedisSharedStore } from '../../sidecar/src/store/redis-store.js'
import type { Change, SharedStore } from '../../sidecar/src/store/shared-store.js'
import { nextChange } from '../helpers/store-conformance.js'
import { redisSkipReason, startRedis, type StoreServer } from '../helpers/store-servers.js'

interface Rec {
  name: string
}

/**
 * `store` with its next whole-kind read held after the store answered (`hold`, released by
 * `release`), and its feed muted while `muted` (the changes of that time never reach the listener,
 * as a feed that lost them).
 */
function controlled(store: SharedStore) {
  let held: { answered: () => void; release: () => void; gate: Promise<void> } | null = null
  /** `failReads`: whole-kind reads refused; `listening`: the listeners subscribed through it now */
  const state = { muted: false, failReads: false, listening: 0 }
  const proxy = new Proxy(store, {
    get(target, prop) {
      if (prop === 'entriesVersioned') {
        return async (kind: string) => {
          if (state.failReads) throw new Error('the store is away')
          const rows = await target.entriesVersioned(kind)
          const hold = held
          if (hold !== null) {
            held = null
            hold.answered()
            await hold.gate
          }
          return rows
        }
      }
      if (prop === 'subscribe') {
        return (listener: (c: Change) => void) => {
          const off = target.subscribe((c) => (state.muted ? undefined : listener(c)))
          state.listening++
          return () => {
            state.listening--
            off()
          }
        }
      }
      const value = Reflect.get(target, prop, target) as unknown
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value
    },
  })
  return {
    store: proxy,
    state,
    /** holds the next read; resolves once the store has answered it */
    hold(): { answered: Promise<void>; release: () => void } {
      let answered!: () => void
      let release!: () => void
      const answeredP = new Promise<void>((r) => (answered = r))
      const gate = new Promise<void>((r) => (release = r))
      held = { answered, release, gate }
      return { answered: answeredP, release }
    },
  }
}

describe('a collection\'s reload keeps what it learnt while it read', { skip: redisSkipReason() }, () => {
  let server: StoreServer
  let a: SharedStore
  let bRaw: SharedStore
  before(async () => {
    server = await startRedis()
    a = await openRedisSharedStore(server.url)
    bRaw = await openRedisSharedStore(server.url)
  })
  after(async () => {
    await a?.close()
    await bRaw?.close()
    await server?.stop()
  })

  async function pair(kind: string) {
    const b = controlled(bRaw)
    const onA = await Collection.load<Rec>(a, kind)
    const onB = await Collection.load<Rec>(b.store, kind)
    const gone: string[] = []
    onB.observeRemote((id, before, after) => before !== undefined && after === undefined && gone.push(id))
    return { b, onA, onB, gone }
  }

  /** Makes `write`, and resolves once B's store client has heard the change of `key` (a deletion when `exists` is false). */
  async function heardOnB(key: string, write: () => Promise<void>, exists = true): Promise<void> {
    const heard = nextChange(bRaw, (c) => c.key === key && c.exists === exists)
    await write()
    await heard
  }

  /** Starts `onB`'s reload with its read held once the store answered it; `release` lets it finish. */
  async function heldReload(b: ReturnType<typeof controlled>, onB: Collection<Rec>): Promise<{ reload: Promise<boolean>; release: () => void }> {
    const { answered, release } = b.hold()
    const reload = onB.resync()
    await answered
    return { reload, release }
  }

  it('a record another instance made while the read ran stays, and nobody hears it deleted', async () => {
    const { b, onA, onB, gone } = await pair('resync-remote')
    await heardOnB('resync-remote:old', () => onA.put('old', { name: 'old' }))
    const { reload, release } = await heldReload(b, onB)
    await heardOnB('resync-remote:new', () => onA.put('new', { name: 'new' }))
    assert.deepEqual(onB.get('new'), { name: 'new' }, 'B heard it while its read was held')
    release()
    assert.equal(await reload, true)
    assert.deepEqual(onB.get('new'), { name: 'new' }, 'the reload kept it')
    assert.deepEqual(onB.get('old'), { name: 'old' })
    assert.deepEqual(gone, [])
  })

  it('a record another instance deleted while the read ran stays deleted (the read still had it)', async () => {
    const { b, onA, onB, gone } = await pair('resync-deleted')
    await heardOnB('resync-deleted:x', () => onA.put('x', { name: 'x' }))
    const { reload, release } = await heldReload(b, onB)
    await heardOnB('resync-deleted:x', () => onA.remove('x'), false)
    assert.equal(onB.get('x'), undefined, 'B heard the deletion while its read was held')
    release()
    assert.equal(await reload, true)
    assert.equal(onB.get('x'), undefined, 'the reload did not bring it back')
    assert.deepEqual(gone, ['x'], 'heard deleted once, never re-created')
  })

  it('a load the store refuses leaves nothing subscribed to the feed (its caller may try again)', async () => {
    const b = controlled(bRaw)
    b.state.failReads = true
    await assert.rejects(Collection.load<Rec>(b.store, 'resync-refused'))
    assert.equal(b.state.listening, 0)
    b.state.failReads = false
    const loaded = await Collection.load<Rec>(b.store, 'resync-refused')
    assert.equal(b.state.listening, 1)
    assert.equal(loaded.get('anything'), undefined)
  })

  it('a record this instance wrote while the read ran stays', async () => {
    const { b, onB, gone } = await pair('resync-own')
    const { reload, release } = await heldReload(b, onB)
    await onB.put('mine', { name: 'mine' })
    release()
    assert.equal(await reload, true)
    assert.deepEqual(onB.get('mine'), { name: 'mine' })
    assert.deepEqual(gone, [])
  })

  it('a record deleted while the feed was lost is gone after the reload (what the reload is for)', async () => {
    const { b, onA, onB, gone } = await pair('resync-lost')
    await heardOnB('resync-lost:doomed', () => onA.put('doomed', { name: 'doomed' }))
    assert.deepEqual(onB.get('doomed'), { name: 'doomed' })
    b.state.muted = true
    // heard by B's store client; the collection's listener was muted
    await heardOnB('resync-lost:doomed', () => onA.remove('doomed'), false)
    b.state.muted = false
    assert.deepEqual(onB.get('doomed'), { name: 'doomed' }, 'B missed the deletion')
    assert.equal(await onB.resync(), true)
    assert.equal(onB.get('doomed'), undefined)
    assert.deepEqual(gone, ['doomed'])
  })
})
