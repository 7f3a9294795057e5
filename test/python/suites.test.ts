/**
 * The Python suites, run by node's test runner so one summary covers all:
 * the plugin's unittest suite against a fake sidecar on aiohttp 3.8 (Debian)
 * and 3.11 (what ComfyUI requires), once more on Python 3.13 with aiohttp 3.11
 * where this machine has one (ComfyUI's portable build ships 3.12 and 3.13,
 * whose asyncio starts aiohttp's handlers eagerly: decision_client.py), and
 * the stand-in's own suite.
 */
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { existsSync, readdirSync } from 'node:fs'
import { homedir } from 'node:os'
import { join } from 'node:path'
import { AIOHTTP_VERSIONS, PYTHON, ROOT, pythonEnv } from '../helpers/stack.js'

/**
 * A Python 3.13 on this machine: `AUTHSVC_PYTHON_NEXT`, else pyenv's newest 3.13 (Debian
 * bookworm's own is 3.11; no package source here has a newer one), else none.
 */
function python313(): string | undefined {
  if (process.env.AUTHSVC_PYTHON_NEXT) return process.env.AUTHSVC_PYTHON_NEXT
  const versions = join(process.env.PYENV_ROOT ?? join(homedir(), '.pyenv'), 'versions')
  if (!existsSync(versions)) return undefined
  const found = readdirSync(versions).filter((v) => /^3\.13\.\d+$/.test(v)).sort((a, b) => Number(b.split('.')[2]) - Number(a.split('.')[2]))
  return found.map((v) => join(versions, v, 'bin', 'python3')).find((p) => existsSync(p))
}

function runUnittest(dir: string, env: NodeJS.ProcessEnv, topLevel = true, python = PYTHON): void {
  const result = spawnSync(python, ['-m', 'unittest', 'discover', '-s', dir, '-p', 'test_*.py', ...(topLevel ? ['-t', '.'] : [])], {
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
  const next = python313()
  it('plugin suite on Python 3.13, aiohttp 3.11', { skip: next === undefined ? 'no Python 3.13 on this machine (AUTHSVC_PYTHON_NEXT, or pyenv\'s)' : false }, () => {
    // the unpacked aiohttp 3.11 is pure Python; idna, which yarl needs, is Debian's (pure Python too)
    const aiohttp311 = pythonEnv('3.11')
    const env = { ...aiohttp311, PYTHONPATH: `${aiohttp311.PYTHONPATH}:/usr/lib/python3/dist-packages` }
    const version = spawnSync(next!, ['-c', 'import sys, aiohttp; print(sys.version_info[:2] >= (3, 13), aiohttp.__version__)'], { env: { ...process.env, ...env }, encoding: 'utf8' })
    assert.ok(version.stdout.startsWith('True 3.11'), `expected Python 3.13 with aiohttp 3.11, got ${version.stdout}${version.stderr}`)
    runUnittest('test/plugin', env, true, next)
  })
  it('stand-in suite', () => {
    runUnittest('test/host-standin', {}, false)
  })
})
