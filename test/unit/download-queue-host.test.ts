/**
 * The download queue before the host's facts are complete (sidecar/src/downloads/queue.ts): a
 * queued job waits with a note, and a store that refuses to write that note loses only the note
 * (it was once an unhandled rejection, which ends the sidecar process).
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { FastifyBaseLogger } from 'fastify'
import { Collection } from '../../sidecar/src/store/collection.js'
import type { KeyValueStore } from '../../sidecar/src/store/kv.js'
import { DownloadQueue } from '../../sidecar/src/downloads/queue.js'
import { CollectionDownloadJobs, type DownloadJobRecord, type SourceKeys } from '../../sidecar/src/downloads/store.js'

const job: DownloadJobRecord = {
  job_id: '0b0e7a5e-0000-4000-8000-000000000001', user_id: 'u1', username: 'alice', source: 'civitai',
  request: { source: 'civitai', model_version_id: 1 }, status: 'queued', folder_type: 'checkpoints', filename: '', bytes_done: 0,
  total_bytes: 0, expected_sha256: '', sha256: '', etag: '', partial_path: '', final_path: '', attempts: 0,
  created_at_iso: '2026-11-27T00:00:00.000Z', started_at_iso: '', finished_at_iso: '', error: '',
}

describe('a queue whose host has not said everything yet', () => {
  it('a store that refuses the waiting note: logged with the job, nothing thrown, the job still queued', async () => {
    const stored = new Map<string, unknown>([[`download_job:${job.job_id}`, job]])
    const kv: KeyValueStore = {
      get: async (key) => stored.get(key) as never,
      set: async () => { throw new Error('SQLITE_FULL (test)') },
      delete: async () => { throw new Error('SQLITE_FULL (test)') },
      entries: async (kind) => [...stored].filter(([k]) => k.startsWith(`${kind}:`)) as never,
      close: async () => {},
    }
    const jobs = new CollectionDownloadJobs(await Collection.load<DownloadJobRecord>(kv, 'download_job'), Date.now)
    const keys: SourceKeys = { open: () => undefined, set: async () => {}, sourcesWithKeys: () => [] }
    let warned: (v: { fields: Record<string, unknown>; msg: string }) => void
    const warning = new Promise<{ fields: Record<string, unknown>; msg: string }>((resolve) => { warned = resolve })
    const log = { warn: (fields: Record<string, unknown>, msg: string) => warned({ fields, msg }), error: () => {}, info: () => {}, debug: () => {} } as unknown as FastifyBaseLogger
    const unhandled: unknown[] = []
    const onUnhandled = (reason: unknown) => unhandled.push(reason)
    process.on('unhandledRejection', onUnhandled)
    try {
      // import-time facts: folders named, not yet every custom node loaded
      const services = { config: {} as never, host: { facts: { model_folders: { checkpoints: ['/nowhere/checkpoints'] } } }, clock: Date.now, events: { emit: () => {} } as never }
      const queue = new DownloadQueue(services, jobs, keys, { landed: async () => {} }, log)
      const changes: DownloadJobRecord[] = []
      queue.onChange = (j) => changes.push(j)
      const failedNote = Promise.race([warning, new Promise<never>((_, reject) => process.once('unhandledRejection', reject))])
      await queue.start()
      const { fields, msg } = await failedNote
      assert.equal(fields.job_id, job.job_id)
      assert.match(msg, /note was not stored/)
      await new Promise((resolve) => setImmediate(resolve))
      assert.deepEqual(unhandled, [])
      assert.equal(jobs.get(job.job_id)?.status, 'queued', 'nothing ran: the facts are not complete')
      assert.deepEqual(changes, [], 'no change announced for a note that was not stored')
    } finally {
      process.off('unhandledRejection', onUnhandled)
    }
  })
})
