/**
 * host-grant-files.ts on real files in a temp dir: a download's grant follows its file. The grants
 * are a small in-memory stand-in of ModelGrants' two methods it uses.
 */
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { renameSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileIdentity, HostGrantFiles } from '../../sidecar/src/models/host-grant-files.js'
import type { ModelGrantRecord } from '../../sidecar/src/models/model-grants.js'
import { tempDir } from './fixtures.js'

const quiet = { warn: () => {}, error: () => {} }

async function grantOf(dir: string, item: string): Promise<ModelGrantRecord> {
  const path = join(dir, item)
  writeFileSync(path, `the downloaded ${item}`)
  const file = await fileIdentity(path)
  assert.ok(file)
  return { user_id: 'u1', folder: 'checkpoints', item_name: item, granted_by: 'alice', created_at_iso: '2026-11-28T00:00:00.000Z', file }
}

describe('a download\'s grant follows its file', () => {
  it('a file replaced while the check reads the other grants is still heard: each file is watched before it is read', async () => {
    const dir = tempDir('as-hgf-')
    let records = [await grantOf(dir, 'a.safetensors'), await grantOf(dir, 'b.safetensors')]
    const ended: string[] = []
    let endedNow: () => void = () => {}
    const grants = {
      hostGrants: () => [...records],
      revokeOnThisHost: async (r: ModelGrantRecord) => {
        const held = records.includes(r)
        records = records.filter((x) => x !== r)
        return held
      },
    }
    let replaced = false
    const files = new HostGrantFiles(grants, (_folder, item) => {
      if (item === 'b.safetensors' && !replaced) {
        // a's file was read a moment ago: another file moves over its name now
        replaced = true
        writeFileSync(join(dir, 'other.bin'), 'another team\'s model')
        renameSync(join(dir, 'other.bin'), join(dir, 'a.safetensors'))
      }
      return join(dir, item)
    }, () => true, quiet, (r, why) => {
      ended.push(`${r.item_name}:${why}`)
      endedNow()
    })
    try {
      const heard = new Promise<void>((resolve) => (endedNow = resolve))
      await files.check()
      assert.equal(replaced, true)
      let timer: NodeJS.Timeout | undefined
      await Promise.race([heard, new Promise((_, reject) => (timer = setTimeout(() => reject(new Error('the replacement was not heard in 10 s')), 10_000)))])
        .finally(() => clearTimeout(timer))
      assert.deepEqual(ended, ['a.safetensors:file_changed'])
      assert.deepEqual(records.map((r) => r.item_name), ['b.safetensors'])
    } finally {
      files.close()
    }
  })

  it('before the folders are known in full, a check judges nothing', async () => {
    const dir = tempDir('as-hgf-')
    const records = [await grantOf(dir, 'a.safetensors')]
    let revoked = 0
    const files = new HostGrantFiles({ hostGrants: () => records, revokeOnThisHost: async () => (revoked++, true) }, () => undefined, () => false, quiet, () => {})
    await files.check()
    files.close()
    assert.equal(revoked, 0)
  })
})
