/**
 * `COMFYUI_DIR=… npm start`: which Python runs ComfyUI, in the documented order, and which flags
 * reach its main.py (issue 27: it ran `python3` from PATH, not ComfyUI's own, and took no flags).
 * Each row lays out real files in a temp dir; "executable" means a file with an x bit.
 */
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
// @ts-expect-error plain ESM script without types
import { comfyArgs, comfyPort, findComfyPython } from '../../scripts/comfyui-launch.mjs'

const root = mkdtempSync(join(tmpdir(), 'as-launch-'))
after(() => rmSync(root, { recursive: true, force: true }))
let n = 0

/** A portable-style layout: <case>/ComfyUI (main.py) beside <case>/python_embeded, plus `files`. */
function layout(files: Record<string, boolean>): { comfy: string; base: string } {
  const base = join(root, String(n++))
  const comfy = join(base, 'ComfyUI')
  mkdirSync(comfy, { recursive: true })
  writeFileSync(join(comfy, 'main.py'), '')
  for (const [path, executable] of Object.entries(files)) {
    const full = join(base, path)
    mkdirSync(dirname(full), { recursive: true })
    writeFileSync(full, '#!/bin/sh\n')
    chmodSync(full, executable ? 0o755 : 0o644)
  }
  return { comfy, base }
}

describe('findComfyPython: the first that exists wins', () => {
  const rows: Array<{ name: string; files: Record<string, boolean>; env?: (base: string) => NodeJS.ProcessEnv; want: string | null; source?: string }> = [
    { name: 'venv/ inside ComfyUI', files: { 'ComfyUI/venv/bin/python3': true, 'ComfyUI/.venv/bin/python3': true, 'bin/python3': true }, env: (b) => ({ PATH: join(b, 'bin') }), want: 'ComfyUI/venv/bin/python3', source: 'venv' },
    { name: '.venv/ when there is no venv/', files: { 'ComfyUI/.venv/bin/python': true, 'bin/python3': true }, env: (b) => ({ PATH: join(b, 'bin') }), want: 'ComfyUI/.venv/bin/python', source: '.venv' },
    { name: 'the portable build\'s python_embeded beside ComfyUI', files: { 'python_embeded/python.exe': true, 'bin/python3': true }, env: (b) => ({ PATH: join(b, 'bin') }), want: 'python_embeded/python.exe', source: 'python_embeded' },
    { name: 'an active virtual environment', files: { 'env/bin/python3': true, 'bin/python3': true }, env: (b) => ({ VIRTUAL_ENV: join(b, 'env'), PATH: join(b, 'bin') }), want: 'env/bin/python3', source: 'VIRTUAL_ENV' },
    { name: 'an active conda environment', files: { 'conda/bin/python3': true, 'bin/python3': true }, env: (b) => ({ CONDA_PREFIX: join(b, 'conda'), PATH: join(b, 'bin') }), want: 'conda/bin/python3', source: 'CONDA_PREFIX' },
    { name: 'python3 on PATH, the last resort', files: { 'bin/python3': true }, env: (b) => ({ PATH: `${join(b, 'nothing')}:${join(b, 'bin')}` }), want: 'bin/python3', source: 'PATH' },
    { name: 'python on PATH when there is no python3', files: { 'bin/python': true }, env: (b) => ({ PATH: join(b, 'bin') }), want: 'bin/python', source: 'PATH' },
    { name: 'a venv python without the x bit does not count', files: { 'ComfyUI/venv/bin/python3': false, 'bin/python3': true }, env: (b) => ({ PATH: join(b, 'bin') }), want: 'bin/python3', source: 'PATH' },
    { name: 'a folder named python does not count', files: { 'bin/python3/x': true }, env: (b) => ({ PATH: join(b, 'bin') }), want: null },
    { name: 'nothing anywhere', files: {}, env: () => ({ PATH: '' }), want: null },
  ]
  for (const row of rows) {
    it(row.name, () => {
      const { comfy, base } = layout(row.files)
      const found = findComfyPython(comfy, row.env?.(base) ?? {})
      if (row.want === null) {
        assert.match(found.error, /COMFYUI_PYTHON/)
      } else {
        assert.equal(found.python, join(base, row.want))
        assert.equal(found.source, row.source)
      }
    })
  }

  it('COMFYUI_PYTHON comes before everything, and a wrong one is an error, not a fallback', () => {
    const { comfy, base } = layout({ 'ComfyUI/venv/bin/python3': true, 'mine/python': true })
    assert.deepEqual(findComfyPython(comfy, { COMFYUI_PYTHON: join(base, 'mine/python') }), { python: join(base, 'mine/python'), source: 'COMFYUI_PYTHON' })
    assert.match(findComfyPython(comfy, { COMFYUI_PYTHON: join(base, 'typo/python') }).error, /not an executable file/)
  })
})

describe('comfyArgs: the gate\'s defaults only where the caller named nothing', () => {
  const rows: Array<[string[], string[]]> = [
    [[], ['main.py', '--listen', '127.0.0.1', '--port', '8188']],
    [['--cpu'], ['main.py', '--listen', '127.0.0.1', '--port', '8188', '--cpu']],
    [['--cpu', '--port', '8190'], ['main.py', '--listen', '127.0.0.1', '--cpu', '--port', '8190']],
    [['--port=8191'], ['main.py', '--listen', '127.0.0.1', '--port=8191']],
    [['--listen', '0.0.0.0'], ['main.py', '--port', '8188', '--listen', '0.0.0.0']],
    [['--listen'], ['main.py', '--port', '8188', '--listen']],
    [['--listen=::', '--multi-user'], ['main.py', '--port', '8188', '--listen=::', '--multi-user']],
    // a bare --port is ComfyUI's to refuse; we add no second one
    [['--port'], ['main.py', '--listen', '127.0.0.1', '--port']],
  ]
  for (const [given, want] of rows) {
    it(JSON.stringify(given), () => {
      assert.deepEqual(comfyArgs(given, '8188'), want)
    })
  }

  it('the port it reports is the one ComfyUI will use', () => {
    assert.equal(comfyPort(['--cpu'], '8188'), '8188')
    assert.equal(comfyPort(['--port', '8190'], '8188'), '8190')
    assert.equal(comfyPort(['--port=8191'], '8188'), '8191')
  })
})
