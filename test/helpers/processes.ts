/** Process facts from the kernel (/proc), for tests that check who runs and who is whose child. */
import { readdirSync, readFileSync } from 'node:fs'

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/** `/proc/<pid>/stat` field 4 is the parent pid (after the parenthesised command name). */
export function parentPid(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
}

/** Pids whose parent is `pid`. */
export function childrenOf(pid: number): number[] {
  const out: number[] = []
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      if (parentPid(Number(entry)) === pid) out.push(Number(entry))
    } catch {
      // exited meanwhile
    }
  }
  return out
}
