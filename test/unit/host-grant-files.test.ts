/**
 * host-grant-files.ts on real files in a temp dir: a download's grant follows its file. The grants
 * are a small in-memory stand-in of the three ModelGrants methods it uses, with ModelGrants' rule
 * that a revocation or a pin acts only on the record held.
 */
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { mkdirSync, renameSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileIdentity, HostGrantFiles } from '../../sidecar/src/models/host-grant-files.js'
import type { FileIdentity, ModelGrantRecord } from '../../sidecar/src/models/model-grants.js'
import { tempDir } from './fixtures.js'

const quiet = { warn: () => {}, error: () => {} }

async function landed(dir: string, item: string): Promise<ModelGrantRecord> {
  writeFileSync(join(dir, item), `the downloaded ${item}`)
  const file = await fileIdentity(join(dir, item))
  assert.ok(file !== null && file !== 'unknown')
  return { user_id: 'u1', folder: 'checkpoints', item_name: item, granted_by: 'alice', created_at_iso: '2026-11-28T00:00:00.000Z', file }
}

function world(records: ModelGrantRecord[], options: { paths?: (folder: string) => readonly string[] | undefined; ready?: () => number | null; read?: typeof fileIdentity } = {}) {
  const ended: string[] = []
  let told: () => void = () => {}
  const grants = {
    hostGrants: () => [...records],
    revokeOnThisHost: async (r: ModelGrantRecord) => {
      const held = records.includes(r)
      records.splice(0, records.length, ...records.filter((x) => x !== r))
      return held
    },
    pinFileOnThisHost: async (r: ModelGrantRecord, file: FileIdentity) => {
      const at = records.indexOf(r)
      if (at >= 0) records[at] = { ...r, file }
    },
  }
  const files = new HostGrantFiles(grants, (folder) => options.paths?.(folder), options.ready ?? (() => 1), quiet, (r, why) => {
    ended.push(`${r.item_name}:${why}`)
    told()
  }, options.read)
  /** the next grant that goes (a deadline, not a wait) */
  const next = () => new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no grant went in 10 s')), 10_000)
    told = () => (clearTimeout(timer), resolve())
  })
  return { files, ended, next }
}

describe('a download\'s grant follows its file', () => {
  it('a file replaced just after the check read it is heard: it is watched before it is read', async () => {
    const dir = tempDir('as-hgf-')
    const records = [await landed(dir, 'a.safetensors')]
    let reads = 0
    const w = world(records, {
      paths: () => [dir],
      read: async (path) => {
        const now = await fileIdentity(path)
        // the first read finds the file, the second reads its state: another file moves over it right after
        if (++reads === 2) {
          writeFileSync(join(dir, 'other.bin'), 'another team\'s model')
          renameSync(join(dir, 'other.bin'), join(dir, 'a.safetensors'))
        }
        return now
      },
    })
    try {
      const gone = w.next()
      await w.files.check()
      assert.deepEqual(w.ended, [], 'the read saw her file')
      await gone
      assert.deepEqual(w.ended, ['a.safetensors:file_changed'])
    } finally {
      w.files.close()
    }
  })

  it('the host opens the first of the folder\'s paths that has the name: a file there is another file', async () => {
    const first = tempDir('as-hgf-')
    const second = tempDir('as-hgf-')
    const records = [await landed(second, 'a.safetensors')]
    let paths = [second]
    const w = world(records, { paths: () => paths })
    await w.files.check()
    assert.equal(records.length, 1)
    paths = [first, second]
    await w.files.check()
    assert.equal(records.length, 1, 'nothing in the first path yet')
    writeFileSync(join(first, 'a.safetensors'), 'another team\'s model')
    await w.files.check()
    w.files.close()
    assert.deepEqual(w.ended, ['a.safetensors:file_changed'])
  })

  it('judged on complete facts only: nothing before them, and a run stops when they change under it', async () => {
    const dir = tempDir('as-hgf-')
    const records = [await landed(dir, 'a.safetensors'), await landed(dir, 'b.safetensors')]
    const never = world(records, { paths: () => [], ready: () => null })
    await never.files.check()
    assert.deepEqual(never.ended, [])
    let generation: number | null = 1
    let paths: string[] = [dir]
    const w = world(records, {
      paths: () => paths,
      ready: () => generation,
      read: async (path) => {
        // a ComfyUI restarting: its first facts lack the folder, while the run reads a's file
        generation = null
        paths = []
        return fileIdentity(path)
      },
    })
    await w.files.check()
    w.files.close()
    assert.deepEqual(w.ended, [])
    assert.equal(records.length, 2)
  })

  it('what is not a judgement: a file that cannot be read (a symlink loop) and a folder the facts do not name keep the grant; a missing file does not', async () => {
    const dir = tempDir('as-hgf-')
    const loop = await landed(dir, 'loop.safetensors')
    const missing = await landed(dir, 'missing.safetensors')
    const elsewhere = { ...(await landed(dir, 'elsewhere.safetensors')), folder: 'loras' }
    mkdirSync(join(dir, 'x'))
    renameSync(join(dir, 'loop.safetensors'), join(dir, 'x', 'aside'))
    symlinkSync(join(dir, 'loop.safetensors'), join(dir, 'loop.safetensors')) // stat: ELOOP
    renameSync(join(dir, 'missing.safetensors'), join(dir, 'x', 'gone'))
    renameSync(join(dir, 'elsewhere.safetensors'), join(dir, 'x', 'away'))
    const records = [loop, missing, elsewhere]
    // the facts name checkpoints only
    const w = world(records, { paths: (folder) => (folder === 'checkpoints' ? [dir] : undefined) })
    await w.files.check()
    w.files.close()
    assert.deepEqual(w.ended, ['missing.safetensors:file_gone'])
    assert.deepEqual(records.map((r) => r.item_name), ['loop.safetensors', 'elsewhere.safetensors'])
  })

  it('a path that cannot be read is no file to the host: a later path\'s file is what it opens', async () => {
    const first = tempDir('as-hgf-')
    const second = tempDir('as-hgf-')
    const records = [await landed(first, 'a.safetensors')]
    renameSync(join(first, 'a.safetensors'), join(first, 'aside'))
    symlinkSync(join(first, 'a.safetensors'), join(first, 'a.safetensors')) // her name, unreadable (ELOOP)
    writeFileSync(join(second, 'a.safetensors'), 'another team\'s model')
    const w = world(records, { paths: () => [first, second] })
    await w.files.check()
    w.files.close()
    assert.deepEqual(w.ended, ['a.safetensors:file_changed'])
  })

  it('a grant from before files were recorded gets the file its name names at its first check, and follows it from then on', async () => {
    const dir = tempDir('as-hgf-')
    const { file: _, ...old } = await landed(dir, 'a.safetensors')
    const records: ModelGrantRecord[] = [old]
    const w = world(records, { paths: () => [dir] })
    await w.files.check()
    assert.deepEqual(records[0].file, await fileIdentity(join(dir, 'a.safetensors')))
    const gone = w.next()
    writeFileSync(join(dir, 'a.safetensors'), 'another team\'s model, written over it')
    await gone
    w.files.close()
    assert.deepEqual(w.ended, ['a.safetensors:file_changed'])
  })
})
