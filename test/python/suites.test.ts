/**
 * The Python suites, run by node's test runner so one summary covers all:
 * the plugin's unittest suite against a fake sidecar on aiohttp 3.8 (Debian)
 * and 3.11 (what ComfyUI requires), and the stand-in's own suite.
 */
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { AIOHTTP_VERSIONS, PYTHON, ROOT, pythonEnv } from '../helpers/stack.js'

function runUnittest(dir: string, env: NodeJS.ProcessEnv, topLevel = true): void {
  const result = spawnSync(PYTHON, ['-m', 'unittest', 'discover', '-s', dir, '-p', 'test_*.py', ...(topLevel ? ['-t', '.'] : [])], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    encoding: 'utf8',
    timeout: 300_000,
  })
  const output = `${result.stdout ?? ''}${result.stderr ?? ''}`
  assert.equal(result.status, 0, `python suite ${dir} failed:\n${output.slice(-6000)}`)
  const ran = /Ran (\d+) tests?/.exec(output)
  assert.ok(ran && Number(ran[1]) > 0, `python suite ${dir} ran no test:\n${output.slice(-2000)}`)
}

describe('python suites', () => {
  for (const aiohttp of AIOHTTP_VERSIONS) {
    it(`plugin suite on aiohttp ${aiohttp}`, () => {
      const env = pythonEnv(aiohttp)
      const version = spawnSync(PYTHON, ['-c', 'import aiohttp; print(aiohttp.__version__)'], { env: { ...process.env, ...env }, encoding: 'utf8' })
      assert.ok(version.stdout.startsWith(aiohttp), `expected aiohttp ${aiohttp}, got ${version.stdout}${version.stderr}`)
      runUnittest('test/plugin', env)
    })
  }
  it('stand-in suite', () => {
    runUnittest('test/host-standin', {}, false)
  })
})
