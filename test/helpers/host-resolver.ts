/**
 * A host link (kernel/host-link.ts) for tests that drive the sidecar's decider directly: the
 * plugin's own resolver (host-plugin/host_paths.py) in a Python process, over the stand-in's
 * `folder_paths` rooted at a temp dir (input/, output/, temp/ under `base`). The plugin's code,
 * not an imitation of it; the e2e suites check the same resolver inside the stand-in and the
 * real ComfyUI.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process'
import { createInterface } from 'node:readline'
import { join } from 'node:path'
import type { HostLink, ResolveItem, Resolved } from '../../sidecar/src/kernel/host-link.js'
import { ROOT } from './stack.js'

const SCRIPT = `
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import folder_paths
folder_paths.set_base_path(sys.argv[3])
import host_paths
for line in sys.stdin:
    msg = json.loads(line)
    out = host_paths.resolve(msg["items"])
    out["rid"] = msg["rid"]
    sys.stdout.write(json.dumps(out) + "\\n")
    sys.stdout.flush()
`

export interface PythonHost extends HostLink {
  close(): void
}

export function pythonHost(base: string): PythonHost {
  const child: ChildProcessWithoutNullStreams = spawn(process.env.AUTHSVC_PYTHON ?? '/usr/bin/python3', ['-c', SCRIPT, join(ROOT, 'test', 'host-standin'), join(ROOT, 'host-plugin'), base])
  const waiting = new Map<number, (r: Resolved) => void>()
  let rid = 0
  let stderr = ''
  child.stderr.on('data', (c: Buffer) => { stderr += c.toString() })
  createInterface({ input: child.stdout }).on('line', (line) => {
    const msg = JSON.parse(line) as Resolved & { rid: number }
    waiting.get(msg.rid)?.(msg)
    waiting.delete(msg.rid)
  })
  return {
    resolve(items: ResolveItem[]): Promise<Resolved> {
      const id = ++rid
      return new Promise((resolve, reject) => {
        if (child.exitCode !== null) return reject(new Error(`resolver exited: ${stderr}`))
        waiting.set(id, resolve)
        child.stdin.write(JSON.stringify({ rid: id, items }) + '\n')
      })
    },
    close() {
      child.stdin.end()
      child.kill()
    },
  }
}
