/** One version: package.json is the source; pyproject.toml (the Comfy registry reads it) must agree. */
import { it } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { SERVICE_VERSION } from '../../sidecar/src/services.js'
import { ROOT } from '../helpers/stack.js'

it('package.json, pyproject.toml and the sidecar report the same version', () => {
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).version
  const pyproject = /^version = "([^"]+)"/m.exec(readFileSync(join(ROOT, 'pyproject.toml'), 'utf8'))?.[1]
  assert.equal(pyproject, pkg)
  assert.equal(SERVICE_VERSION, pkg)
})
