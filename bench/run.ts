/**
 * `npm run bench`: the stand-in bench (bench/gate-bench.ts), another user's decisions
 * while a long /history is filtered (bench/isolation-bench.ts), then the same gate
 * inside the real ComfyUI (bench/real-host-bench.ts, which skips with one line
 * when no real ComfyUI is available), then a sidecar killed under load inside it
 * (bench/restart-bench.ts), then logins and decisions with a slow, failing or dead ntfy
 * (bench/ntfy-bench.ts), then the shared store's verbs and feed on PostgreSQL
 * (bench/store-bench.ts), several instances on one Redis or PostgreSQL: parity with sqlite,
 * revocation from one to the other, recovery after an outage (bench/shared-bench.ts), a store of
 * 100,000 users and a million sessions and tokens (bench/scale-bench.ts), the content-safety policy's cost (bench/nsfw-bench.ts), and model
 * downloads against curl with the sidecar's memory and another user's decisions
 * (bench/downloads-bench.ts). Each runs in its own process; exits 1 when any missed a target.
 * BENCH_ONLY=standin, isolation, real, restart, ntfy, store, shared, scale, nsfw or downloads runs one.
 */
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'

const only = process.env.BENCH_ONLY
const parts = [
  ['standin', 'gate-bench.ts'],
  ['isolation', 'isolation-bench.ts'],
  ['real', 'real-host-bench.ts'],
  ['restart', 'restart-bench.ts'],
  ['ntfy', 'ntfy-bench.ts'],
  ['store', 'store-bench.ts'],
  ['shared', 'shared-bench.ts'],
  ['scale', 'scale-bench.ts'],
  ['nsfw', 'nsfw-bench.ts'],
  ['downloads', 'downloads-bench.ts'],
].filter(([name]) => !only || only === name)
let failed = false
for (const [, file] of parts) {
  const result = spawnSync(process.execPath, ['--import', 'tsx', join(import.meta.dirname, file)], { stdio: 'inherit' })
  if (result.status !== 0) failed = true
}
process.exitCode = failed ? 1 : 0
