import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { ROOT } from '../helpers/stack.js'

describe('the test helpers\' temp dirs', () => {
  it('a dir the test left behind is removed when its process ends, files and all; one it removed itself is no trouble', () => {
    const script = `
      import { writeFileSync, mkdirSync, rmSync } from 'node:fs'
      import { join } from 'node:path'
      import { scratchDir } from ${JSON.stringify(join(ROOT, 'test/helpers/temp-dir.ts'))}
      const left = scratchDir('as-unit-left-')
      mkdirSync(join(left, 'data'))
      writeFileSync(join(left, 'data', 'a.txt'), 'x')
      const removed = scratchDir('as-unit-removed-')
      rmSync(removed, { recursive: true })
      console.log(JSON.stringify({ left, removed }))
    `
    const run = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: ROOT, encoding: 'utf8' })
    assert.equal(run.status, 0, run.stderr)
    const { left, removed } = JSON.parse(run.stdout.trim().split('\n').pop()!)
    assert.ok(left.startsWith('/') && left.includes('as-unit-left-'), left)
    assert.equal(existsSync(left), false, `${left} is still there`)
    assert.equal(existsSync(removed), false)
  })
})
