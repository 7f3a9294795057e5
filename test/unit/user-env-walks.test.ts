/**
 * Status walks are shared and bounded (user-env/routes.ts sharedStatus): requests for the same
 * user join the walk in flight, and at most two walks run at once whatever the burst (each walk
 * stats up to 200,000 files on the thread pool argon2 and sqlite share). Review finding M4.
 */
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { sharedStatus } from '../../sidecar/src/user-env/routes.js'
import type { StorageStatus } from '../../sidecar/src/user-env/user-storage.js'

describe('status walks', () => {
  it('join per user and run at most two at once; every caller gets its user\'s answer', async () => {
    let running = 0
    let most = 0
    const started: string[] = []
    const finish = new Map<string, () => void>()
    const storage = {
      async status(userId: string): Promise<StorageStatus> {
        started.push(userId)
        running++
        most = Math.max(most, running)
        await new Promise<void>((resolve) => finish.set(userId, resolve))
        running--
        return { folders: [], workflows: { count: userId.length, bytes: 0 }, files: 0, bytes: 0, truncated: false } as unknown as StorageStatus
      },
    }
    const statusOf = sharedStatus(storage)
    const users = ['a', 'bb', 'ccc', 'dddd']
    const asked = users.flatMap((u) => Array.from({ length: 10 }, () => statusOf(u).then((s) => [u, (s as unknown as { workflows: { count: number } }).workflows.count])))
    // let the walks that may start, start
    while (started.length < 2) await new Promise((r) => setImmediate(r))
    await new Promise((r) => setImmediate(r))
    assert.deepEqual(started, ['a', 'bb'], 'two walk; the rest wait')
    for (const u of users) {
      while (!finish.has(u)) await new Promise((r) => setImmediate(r))
      finish.get(u)!()
    }
    const answers = await Promise.all(asked)
    assert.deepEqual(started, users, 'one walk per user for 40 requests')
    assert.equal(most, 2)
    assert.ok(answers.every(([u, n]) => (u as string).length === n), 'each caller got its own user\'s status')
    // once done, a new request walks again (nothing is cached)
    const again = statusOf('a')
    while (!started.includes('a', 1)) await new Promise((r) => setImmediate(r))
    finish.get('a')!()
    await again
    assert.equal(started.filter((u) => u === 'a').length, 2)
  })
})
