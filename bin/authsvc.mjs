#!/usr/bin/env node
// The operator command: `npx authsvc user reset-password NAME` (see sidecar/src/cli.ts).
import { execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
if (!existsSync(join(root, 'sidecar/dist/cli.js'))) execFileSync('bash', [join(root, 'install.sh'), '--quiet'], { stdio: 'inherit' })
const { runCli } = await import('../sidecar/dist/cli.js')
try {
  process.exitCode = await runCli(process.argv.slice(2), (line) => console.log(line))
} catch (err) {
  console.error(err.constructor?.name === 'UsageError' ? err.message : `authsvc: ${err.message}`)
  process.exitCode = err.constructor?.name === 'UsageError' ? 2 : 1
}
