/**
 * The whole tree type-checks (sidecar, tests, bench): tsx runs TypeScript
 * without checking it, so without this a type error in a test or a route
 * would only show at the next build, or never.
 */
import { it } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { join, resolve } from 'node:path'

const ROOT = resolve(import.meta.dirname, '..', '..')

it('tsc -p tsconfig.json reports no error', () => {
  const tsc = spawnSync(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', join(ROOT, 'tsconfig.json')], { cwd: ROOT, encoding: 'utf8' })
  assert.equal(tsc.status, 0, `${tsc.stdout}${tsc.stderr}`)
})
