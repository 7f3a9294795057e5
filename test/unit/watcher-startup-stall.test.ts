/**
 * The output watcher's start-up walk never holds the event loop (issue 21, item 8): the host
 * folders are walked with asynchronous reads, so the longest stall of the sidecar's loop while a
 * folder of 50,000 files (flat, plus a tree of subfolders) is entered stays far below what a
 * synchronous walk costs. The bound is generous for a loaded 2-core machine; a walk with one
 * stat per file on the loop (chokidar's, or readdirSync + statSync) stalls for seconds.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { HostFileWatcher } from '../../sidecar/src/isolation/file-watcher.js'
import { Ownership } from '../../sidecar/src/isolation/ownership.js'
import { Collection } from '../../sidecar/src/store/collection.js'
import type { KeyValueStore } from '../../sidecar/src/store/kv.js'

const FILES = 50_000
const STALL_BOUND_MS = 150

const memoryKv = (): KeyValueStore => {
  const map = new Map<string, unknown>()
  return {
    get: async (k: string) => map.get(k),
    set: async (k: string, v: unknown) => void map.set(k, v),
    delete: async (k: string) => map.delete(k),
    entries: async () => [],
    close: async () => {},
  } as unknown as KeyValueStore
}

describe('the output watcher starts on a large folder without holding the event loop', () => {
  let dir: string
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'authsvc-walk-'))
    const flat = join(dir, 'output')
    mkdirSync(flat)
    for (let i = 0; i < FILES * 0.8; i++) writeFileSync(join(flat, `ComfyUI_${String(i).padStart(5, '0')}_.png`), '')
    for (let d = 0; d < 100; d++) {
      const sub = join(flat, `batch-${d}`)
      mkdirSync(sub)
      for (let i = 0; i < (FILES * 0.2) / 100; i++) writeFileSync(join(sub, `x_${i}.png`), '')
    }
  })
  after(() => rmSync(dir, { recursive: true, force: true }))

  it(`enters ${FILES} files with no stall over ${STALL_BOUND_MS} ms`, async () => {
    const ownership = new Ownership(await Collection.load(memoryKv(), 'prompt'), await Collection.load(memoryKv(), 'file'))
    const log = { warn() {}, error() {}, info() {}, debug() {} } as never
    const watcher = new HostFileWatcher(ownership, log)
    const delay = monitorEventLoopDelay({ resolution: 5 })
    delay.enable()
    const started = performance.now()
    await watcher.watch({ output: join(dir, 'output') })
    const walkMs = performance.now() - started
    delay.disable()
    await watcher.close()
    const stallMs = delay.max / 1e6
    console.log(`walk of ${FILES} files: ${walkMs.toFixed(0)} ms, longest event-loop stall ${stallMs.toFixed(1)} ms`)
    assert.ok(stallMs < STALL_BOUND_MS, `the loop stalled ${stallMs.toFixed(1)} ms`)
  })
})
