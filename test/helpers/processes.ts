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

/** A standby sidecar (loaded, waiting to replace the running one): its environment says so. */
export function isStandbySidecar(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').includes('AUTHSVC_STANDBY=1')
  } catch {
    return false
  }
}

/** Live pids whose environment holds `entry` (`AUTHSVC_DATA_DIR=/tmp/x`): every process a run started, even one spawned after a look at the tree. */
export function processesWithEnv(entry: string): number[] {
  const out: number[] = []
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue
    try {
      if (readFileSync(`/proc/${name}/environ`, 'utf8').split('\0').includes(entry)) out.push(Number(name))
    } catch {
      // exited meanwhile, or not ours to read
    }
  }
  return out
}
