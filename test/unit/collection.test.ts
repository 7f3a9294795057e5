/**
 * store/collection.ts: the order and durability rules of the write-through
 * memory (issue 9, hole 7), on a store whose writes the test settles or fails
 * one by one, so every interleaving is chosen, never left to timing.
 */
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { Collection } from '../../sidecar/src/store/collection.js'
import type { KeyValueStore } from '../../sidecar/src/store/kv.js'
import { AuthsvcError } from '../../sidecar/src/kernel/errors.js'

interface PendingWrite {
  key: string
  value: unknown
  ok(): void
  fail(): void
}

/** A store whose every write waits until the test settles it; `stored` is what it holds. */
function heldStore() {
  const stored = new Map<string, unknown>()
  const pending: PendingWrite[] = []
  const write = (key: string, value: unknown) =>
    new Promise<void>((resolve, reject) => {
      pending.push({
        key,
        value,
        ok: () => {
          if (value === undefined) stored.delete(key)
          else stored.set(key, value)
          resolve()
        },
        fail: () => reject(new Error('SQLITE_FULL (held store)')),
      })
    })
  const kv: KeyValueStore = {
    get: async (key) => stored.get(key) as never,
    set: (key, value) => write(key, value),
    delete: async (key) => {
      await write(key, undefined)
      return true
    },
    entries: async (kind) => [...stored].filter(([k]) => k.startsWith(`${kind}:`)) as never,
    close: async () => {},
  }
  /** Settles the oldest pending write once the collection has issued it. */
  const next = async (): Promise<PendingWrite> => {
    for (let i = 0; i < 50 && pending.length === 0; i++) await new Promise<void>((r) => setImmediate(r))
    const w = pending.shift()
    assert.ok(w, 'a write was issued')
    return w
  }
  return { kv, stored, next, pending }
}

type Rec = { v: number; revoked?: boolean }

describe('Collection: widening writes apply once stored, narrowing ones at once', () => {
  it('put: memory changes only after the write is stored', async () => {
    const s = heldStore()
    const c = await Collection.load<Rec>(s.kv, 'k')
    const put = c.put('a', { v: 1 })
    assert.equal(c.get('a'), undefined, 'not before it is stored')
    ;(await s.next()).ok()
    await put
    assert.deepEqual(c.get('a'), { v: 1 })
  })

  it('put that fails: 503 STORE_UNAVAILABLE with the cause, memory unchanged, nothing retried', async () => {
    const s = heldStore()
    const c = await Collection.load<Rec>(s.kv, 'k')
    const put = c.put('a', { v: 1 })
    ;(await s.next()).fail()
    await assert.rejects(put, (err: unknown) => err instanceof AuthsvcError && err.code === 'STORE_UNAVAILABLE' && /SQLITE_FULL/.test(String(err.cause)))
    assert.equal(c.get('a'), undefined)
    assert.equal(c.unsavedCount, 0)
  })

  it('narrow that fails: memory changed at once and stays; a retry stores it', async () => {
    const s = heldStore()
    const c = await Collection.load<Rec>(s.kv, 'k')
    const put = c.put('a', { v: 1 })
    ;(await s.next()).ok()
    await put
    const narrow = c.narrow('a', { v: 1, revoked: true })
    assert.deepEqual(c.get('a'), { v: 1, revoked: true }, 'at once')
    ;(await s.next()).fail()
    await assert.rejects(narrow, (err: unknown) => err instanceof AuthsvcError && err.code === 'STORE_UNAVAILABLE')
    assert.deepEqual(c.get('a'), { v: 1, revoked: true }, 'stays')
    assert.equal(c.unsavedCount, 1)
    const retry = c.retryUnsaved()
    ;(await s.next()).ok()
    assert.equal(await retry, 0)
    assert.deepEqual(s.stored.get('k:a'), { v: 1, revoked: true })
  })

  it('an older put settling after a newer narrow neither shows in memory nor overwrites the store', async () => {
    const s = heldStore()
    const c = await Collection.load<Rec>(s.kv, 'k')
    const put = c.put('a', { v: 1 })
    const narrow = c.narrow('a', { v: 1, revoked: true })
    assert.deepEqual(c.get('a'), { v: 1, revoked: true })
    ;(await s.next()).ok() // the put's write, first in the key's order
    await put
    assert.deepEqual(c.get('a'), { v: 1, revoked: true }, 'the put is older than what memory shows')
    ;(await s.next()).ok()
    await narrow
    assert.deepEqual(s.stored.get('k:a'), { v: 1, revoked: true })
  })

  it('a newer put stored after a failed narrow supersedes it: the retry writes nothing older', async () => {
    const s = heldStore()
    const c = await Collection.load<Rec>(s.kv, 'k')
    const narrow = c.narrow('a', { v: 1, revoked: true })
    ;(await s.next()).fail()
    await assert.rejects(narrow)
    const put = c.put('a', { v: 2, revoked: true })
    ;(await s.next()).ok()
    await put
    assert.equal(c.unsavedCount, 0, 'the newer stored record covers the unsaved one')
    assert.equal(await c.retryUnsaved(), 0)
    assert.equal(s.pending.length, 0, 'nothing older written again')
    assert.deepEqual(s.stored.get('k:a'), { v: 2, revoked: true })
  })

  it('narrowRemove that fails: gone from memory at once, deleted from the store by the retry', async () => {
    const s = heldStore()
    s.stored.set('k:a', { v: 1 })
    const c = await Collection.load<Rec>(s.kv, 'k')
    const removal = c.narrowRemove('a')
    assert.equal(c.get('a'), undefined)
    ;(await s.next()).fail()
    await assert.rejects(removal)
    const retry = c.retryUnsaved()
    ;(await s.next()).ok()
    await retry
    assert.equal(s.stored.has('k:a'), false)
  })
})
