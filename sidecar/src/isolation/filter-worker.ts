/**
 * The filter worker: a thread that runs the pure edits of host-json-filters.ts
 * on large host answers, so the sidecar's event loop (every user's decisions)
 * never waits for them. Requests and answers carry their bytes as transferred
 * buffers; a failure answers `error` (the request is then refused, never passed).
 */
import { parentPort } from 'node:worker_threads'
import { filterHistory, filterQueue, uploadListsOf } from './host-json-filters.js'
import type { FilterJob, FilterJobResult } from './filter-pool.js'

function run(job: FilterJob): FilterJobResult {
  const text = Buffer.from(job.body).toString('utf8')
  switch (job.kind) {
    case 'history':
      return { id: job.id, text: filterHistory(text, new Set(job.own), job.maxItems, job.offset) }
    case 'queue':
      return { id: job.id, text: filterQueue(text, new Set(job.own), job.seesAll) }
    case 'upload-lists':
      return { id: job.id, lists: uploadListsOf(text) }
  }
}

parentPort!.on('message', (job: FilterJob) => {
  let result: FilterJobResult
  try {
    result = run(job)
  } catch (err) {
    result = { id: job.id, error: err instanceof Error ? err.message : String(err) }
  }
  parentPort!.postMessage(result)
})
