/**
 * Temp dirs of one test process: made in the system's temp dir, and removed when the process ends
 * if the test did not remove them itself (a failed `before`, a test that stopped its host and
 * kept the files to look at, an `after` that never ran), so a test run leaves nothing behind.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

const made = new Set<string>()
let hooked = false

function removeAll(): void {
  for (const dir of made) {
    try {
      rmSync(dir, { recursive: true, force: true, maxRetries: 3 })
    } catch {
      // a process killed a moment ago may still have been writing in it: nothing more to do at exit
    }
  }
}

export function scratchDir(prefix: string): string {
  if (!hooked) {
    // registered at the first dir, so after the hooks the helpers register when they load (the
    // real host's kills its hosts at exit): the files go once their writers are gone
    process.on('exit', removeAll)
    hooked = true
  }
  const dir = mkdtempSync(join(tmpdir(), prefix))
  made.add(dir)
  return dir
}
