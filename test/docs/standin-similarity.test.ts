/**
 * The ComfyUI stand-in is our own code (issue 27): at most 5 % of its non-blank lines longer than
 * 30 characters may appear verbatim (after trimming) in any Python file of ComfyUI 0.3.64. A port
 * of ComfyUI's GPL source would repeat most of them; code written from behaviour repeats a few
 * generic ones (`from aiohttp import web`). Compared with the real source from
 * ../shared/real-comfyui (or COMFYUI_DIR); skipped with one line where neither exists. The
 * licence statement that depends on this is in LICENSE and THIRD_PARTY_NOTICES.md.
 */
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { ROOT } from '../helpers/stack.js'
import { REAL_HOST_SKIP, comfySource } from '../helpers/real-host.js'

const LIMIT = 0.05
const STANDIN = join(ROOT, 'test', 'host-standin')

function pythonFiles(dir: string, skip: (path: string) => boolean = () => false): string[] {
  const out: string[] = []
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    if (skip(path)) continue
    if (entry.isDirectory()) out.push(...pythonFiles(path, skip))
    else if (entry.isFile() && entry.name.endsWith('.py')) out.push(path)
  }
  return out
}

/** Trimmed lines longer than 30 characters: short ones (`return None`, `else:`) say nothing of origin. */
function significantLines(text: string): string[] {
  return text.split('\n').map((line) => line.trim()).filter((line) => line.length > 30)
}

/** The stand-in's own code: every .py under test/host-standin but its test suite and caches. */
function standinFiles(): string[] {
  return pythonFiles(STANDIN, (path) => path.includes('__pycache__') || /[\\/]test_[^\\/]*\.py$/.test(path))
}

describe('the ComfyUI stand-in is not a copy of ComfyUI', { skip: REAL_HOST_SKIP }, () => {
  it(`at most ${LIMIT * 100} % of its significant lines appear verbatim in ComfyUI's Python`, () => {
    const comfy = new Set<string>()
    for (const file of pythonFiles(comfySource(), (path) => path.includes('__pycache__'))) {
      for (const line of significantLines(readFileSync(file, 'utf8'))) comfy.add(line)
    }
    assert.ok(comfy.size > 10_000, `ComfyUI's source was read (${comfy.size} distinct lines)`)
    let total = 0
    let shared = 0
    const perFile: string[] = []
    for (const file of standinFiles()) {
      const lines = significantLines(readFileSync(file, 'utf8'))
      const hits = lines.filter((line) => comfy.has(line))
      total += lines.length
      shared += hits.length
      perFile.push(`${relative(STANDIN, file)}: ${hits.length}/${lines.length}`)
    }
    assert.ok(total > 500, `the stand-in's files were found (${total} significant lines)`)
    const ratio = shared / total
    console.log(`stand-in lines found verbatim in ComfyUI: ${shared} of ${total} (${(ratio * 100).toFixed(1)} %)`)
    assert.ok(ratio <= LIMIT, `${(ratio * 100).toFixed(1)} % of the stand-in's lines are ComfyUI's (limit ${LIMIT * 100} %):\n${perFile.join('\n')}`)
  })

})
