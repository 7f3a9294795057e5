// Runs every suite through node's test runner, so its summary is the last
// thing printed: TypeScript unit tests, the end-to-end and browser suites,
// and the Python plugin and stand-in suites (wrapped in test/python/suites.test.ts).
import { spawn, spawnSync } from 'node:child_process'
import { readdirSync, existsSync } from 'node:fs'
import { join, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const suites = ['test/unit', 'test/integration', 'test/docs', 'test/python', 'test/e2e', 'test/browser']
const only = process.argv.slice(2)
const files = only.length > 0 ? only : suites.flatMap((dir) => {
  const full = join(root, dir)
  if (!existsSync(full)) return []
  return readdirSync(full).filter((f) => f.endsWith('.test.ts')).sort().map((f) => join(dir, f))
})
// The plugin runs only a sidecar built from the sources on disk (install.py's stamp): build an edited
// tree now, once, rather than in the background of the first stack a test starts.
spawnSync(process.env.AUTHSVC_PYTHON ?? '/usr/bin/python3', [join(root, 'install.py'), '--quiet'], { cwd: root, stdio: 'inherit' })
const child = spawn(process.execPath, ['--import', 'tsx', '--test', '--test-reporter=spec', '--test-concurrency=2', ...files], {
  cwd: root,
  stdio: 'inherit',
  env: { ...process.env, AUTHSVC_LOG_LEVEL: process.env.AUTHSVC_LOG_LEVEL ?? 'warn' },
})
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)))
