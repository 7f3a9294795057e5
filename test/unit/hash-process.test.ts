/**
 * The password-hash worker process (identity/hash-process.ts + hash-worker.ts),
 * as a real child process: argon2id PHC strings that in-process argon2 accepts,
 * every thread that hashes at nice 19, a worker killed mid-hash fails the call
 * with AUTHSVC_UNAVAILABLE (not "wrong password") and is replaced on the next call.
 */
import { describe, it, afterEach } from 'node:test'
import assert from 'node:assert/strict'
import argon2 from 'argon2'
import { readdirSync, readFileSync } from 'node:fs'
import { HashProcess } from '../../sidecar/src/identity/hash-process.js'
import { PasswordHasher } from '../../sidecar/src/identity/passwords.js'
import { AuthsvcError } from '../../sidecar/src/kernel/errors.js'
import { childrenOf } from '../helpers/processes.js'

const OPTIONS = { memoryCost: 1024, timeCost: 1, parallelism: 1 }
/** Slow enough to still be running when the test kills the worker. */
const SLOW = { memoryCost: 65536, timeCost: 20, parallelism: 1 }

/** The hash worker among this process's children (found through /proc, as an operator would). */
function workerChild(): number | undefined {
  return childrenOf(process.pid).find((pid) => readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('hash-worker'))
}

/** nice value of every thread of `pid` (field 19 of /proc/<pid>/task/<tid>/stat) */
function threadNice(pid: number): Array<{ tid: number; nice: number; cpu: number }> {
  return readdirSync(`/proc/${pid}/task`).map((tid) => {
    const fields = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8').split(') ')[1].split(' ')
    return { tid: Number(tid), nice: Number(fields[16]), cpu: Number(fields[11]) + Number(fields[12]) }
  })
}

describe('password-hash worker process', () => {
  // one worker alive at a time: the last test looks for it among this process's children
  let current: HashProcess | undefined
  const open = (threads = 2) => {
    current = new HashProcess(threads)
    return current
  }
  afterEach(() => {
    current?.close()
    current = undefined
  })

  it('hashes argon2id PHC strings that argon2 in this process verifies, and verifies them back', async () => {
    const w = open()
    const hash = await w.hash('correct horse battery', OPTIONS)
    assert.match(hash, /^\$argon2id\$v=19\$m=1024,t=1,p=1\$/)
    assert.equal(await argon2.verify(hash, 'correct horse battery'), true)
    assert.equal(await w.verify(hash, 'correct horse battery'), true)
    assert.equal(await w.verify(hash, 'correct horse batter'), false)
    assert.equal(await w.verify(hash, 'correct horse battery '), false, 'compared exactly as typed')
    const local = await argon2.hash('from this process', { type: argon2.argon2id, ...OPTIONS })
    assert.equal(await w.verify(local, 'from this process'), true)
    assert.equal(await w.verify('not a phc string', 'x'), false, 'a malformed hash is a failed check')
  })

  it('every thread that ran a hash runs at nice 19; the sidecar itself is untouched', async () => {
    const w = open(2)
    await Promise.all([w.hash('a-password-1', SLOW), w.hash('a-password-2', SLOW)])
    const pid = w.pid!
    const threads = threadNice(pid)
    assert.ok(threads.filter((t) => t.cpu > 20).length >= 2, `two threads did the hashing: ${JSON.stringify(threads)}`)
    for (const t of threads) assert.equal(t.nice, 19, `thread ${t.tid} of the worker`)
    assert.equal(threadNice(process.pid).find((t) => t.tid === process.pid)!.nice, 0, 'this process keeps its priority')
  })

  it('a worker killed mid-hash fails the call with AUTHSVC_UNAVAILABLE, and the next call starts a new one', async () => {
    const w = open(1)
    await w.hash('warm-up-password', OPTIONS)
    const first = w.pid!
    const inFlight = w.verify(await argon2.hash('x-password-1', { type: argon2.argon2id, ...SLOW }), 'x-password-1')
    process.kill(first, 'SIGKILL')
    await assert.rejects(inFlight, (err: unknown) => err instanceof AuthsvcError && err.code === 'AUTHSVC_UNAVAILABLE')
    const hash = await w.hash('after-the-crash', OPTIONS)
    assert.equal(await argon2.verify(hash, 'after-the-crash'), true)
    assert.notEqual(w.pid, first)
  })

  it('through the PasswordHasher: a dead worker is an error for the caller, never a "wrong password"', async () => {
    const hasher = new PasswordHasher({ memory_kib: SLOW.memoryCost, time_cost: SLOW.timeCost, parallelism: 1, max_concurrent_hashes: 1 })
    try {
      await hasher.ready
      const hash = await argon2.hash('y-password-1', { type: argon2.argon2id, ...SLOW })
      const check = hasher.verify(hash, 'y-password-1')
      const dummy = hasher.verifyDummy('whatever-password')
      // the verify holds the only slot; the dummy check waits behind it
      await new Promise((r) => setTimeout(r, 50))
      const pid = workerChild()
      assert.ok(pid, 'the hash worker is a child of this process')
      process.kill(pid, 'SIGKILL')
      await assert.rejects(check, (err: unknown) => err instanceof AuthsvcError && err.code === 'AUTHSVC_UNAVAILABLE')
      assert.equal(await dummy, false, 'the next check runs on a new worker')
    } finally {
      hasher.close()
    }
  })
})
