/**
 * The SHA-256 of a download's body on a thread of its own (issue 22's speed line): the transfer
 * thread reads the socket into a ring of shared buffers and writes each full one to the partial
 * file; this thread hashes the same buffers, from the same memory, meanwhile. On this two-core
 * machine the hash was a third of the transfer thread's CPU (docs/decisions.md, "The downloads
 * bench: the size of a write, and the hash on a thread of its own").
 *
 * It blocks between buffers (`Atomics.wait` on the wake word), so nothing of it ever runs on an
 * event loop, and it reads its orders synchronously (`receiveMessageOnPort`). The protocol, with
 * the words of `ctl` (direct-body.ts holds the other side):
 * - `begin {run, path, bytes}`: a new hash; the first `bytes` of `path` (a resumed partial) are
 *   read and hashed first; then HASHED is 0 and `ready {run}` (or `failed {run, message}`) is posted.
 * - the transfer thread fills buffer `FILLED % slots`, stores its length at `LENGTHS + i`, raises
 *   FILLED and then WAKE; this thread hashes buffers up to FILLED in order and raises HASHED after
 *   each (a buffer may be read into again only once it is hashed and written).
 * - `end {run}`: once every filled buffer is hashed, `digest {run, sha256}` is posted.
 * - `drop {run}`: the run is abandoned (a failed or cancelled transfer); nothing more is hashed
 *   for it. The transfer thread stores the run in DROPPED first, so a prefix being hashed for it
 *   (which may be gigabytes) stops at its next read, and nothing is posted for that run.
 */
import { createHash, type Hash } from 'node:crypto'
import { closeSync, openSync, readSync } from 'node:fs'
import { receiveMessageOnPort, workerData } from 'node:worker_threads'
import { lowerOwnPriority } from './priority.js'
import { DROPPED, FILLED, HASHED, HOLD, LENGTHS, WAKE, type HasherData, type HasherOrder, type HasherReport } from './ring-hash-protocol.js'

/** Hashes the first `bytes` of `path`; false when the run was dropped meanwhile (looked at before each read). */
function hashPrefixSync(hash: Hash, path: string, bytes: number, scratch: Buffer, ctl: Int32Array, run: number): boolean {
  const fd = openSync(path, 'r')
  try {
    for (let at = 0; at < bytes;) {
      if (!goOn(ctl, run)) return false
      const n = readSync(fd, scratch, 0, Math.min(scratch.length, bytes - at), at)
      if (n === 0) throw new Error('the partial file is shorter than its recorded progress')
      hash.update(scratch.subarray(0, n))
      at += n
    }
    return true
  } finally {
    closeSync(fd)
  }
}

/** Whether a prefix's hash goes on: not while HOLD is set (a test's seam), never once its run is dropped. */
function goOn(ctl: Int32Array, run: number): boolean {
  for (;;) {
    const wake = Atomics.load(ctl, WAKE)
    if (Atomics.load(ctl, DROPPED) === run) return false
    if (Atomics.load(ctl, HOLD) === 0) return true
    Atomics.wait(ctl, WAKE, wake)
  }
}

function serve({ ring, ctl: ctlBuffer, slot, slots, port }: HasherData): never {
  const ctl = new Int32Array(ctlBuffer)
  const buffers = Array.from({ length: slots }, (_, i) => Buffer.from(ring, i * slot, slot))
  let run: { id: number; hash: Hash; hashed: number; ending: boolean } | undefined
  for (;;) {
    const wake = Atomics.load(ctl, WAKE)
    for (let m = receiveMessageOnPort(port); m !== undefined; m = receiveMessageOnPort(port)) {
      const order = m.message as HasherOrder
      if (order.type === 'begin') {
        run = undefined
        const hash = createHash('sha256')
        try {
          if (order.bytes > 0 && !hashPrefixSync(hash, order.path, order.bytes, buffers[0], ctl, order.run)) continue
        } catch (err) {
          const code = (err as { code?: string }).code ?? 'EPREFIX'
          port.postMessage({ type: 'failed', run: order.run, message: `the partial file could not be read (${code})`, code } satisfies HasherReport)
          continue
        }
        run = { id: order.run, hash, hashed: 0, ending: false }
        Atomics.store(ctl, HASHED, 0)
        port.postMessage({ type: 'ready', run: order.run } satisfies HasherReport)
      } else if (run !== undefined && order.run === run.id) {
        if (order.type === 'drop') run = undefined
        else run.ending = true
      }
    }
    if (run !== undefined && Atomics.load(ctl, HOLD) === 0) {
      // every buffer filled so far, in order; the count is read again after each one
      for (let filled = Atomics.load(ctl, FILLED); run.hashed < filled; filled = Atomics.load(ctl, FILLED)) {
        const i = run.hashed % slots
        run.hash.update(buffers[i].subarray(0, Atomics.load(ctl, LENGTHS + i)))
        run.hashed++
        Atomics.store(ctl, HASHED, run.hashed)
        Atomics.notify(ctl, HASHED)
      }
      if (run.ending) {
        port.postMessage({ type: 'digest', run: run.id, sha256: run.hash.digest('hex') } satisfies HasherReport)
        run = undefined
      }
    }
    Atomics.wait(ctl, WAKE, wake)
  }
}

lowerOwnPriority()
serve(workerData as HasherData)
