import { readlinkSync } from 'node:fs'
import { setPriority } from 'node:os'

/**
 * On Linux, the calling thread (only: a nice value is per thread there) runs at nice 10, so when
 * the CPU is short the sidecar's event loop, which answers every user's decisions, goes first and
 * a download's threads (its transfer, its hash) take what is left.
 */
export function lowerOwnPriority(): void {
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/').pop())
    if (Number.isInteger(tid) && tid > 0) setPriority(tid, 10)
  } catch {
    // not Linux, or not allowed: the thread runs at the process's priority
  }
}
