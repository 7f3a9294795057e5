/** The error catalogue and docs/errors.md list the same codes with the same statuses. */
import { it } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { ERRORS } from '../../sidecar/src/kernel/errors.js'
import { ROOT } from '../helpers/stack.js'

it('docs/errors.md documents exactly the catalogue', () => {
  const doc = readFileSync(join(ROOT, 'docs/errors.md'), 'utf8')
  const documented = new Map<string, number>()
  for (const m of doc.matchAll(/^\| `([A-Z_]+)` \| (\d{3}) \|/gm)) documented.set(m[1], Number(m[2]))
  const catalogue = new Map(Object.entries(ERRORS).map(([code, e]) => [code, e.status as number]))
  assert.deepEqual([...documented.entries()].sort(), [...catalogue.entries()].sort())
})
