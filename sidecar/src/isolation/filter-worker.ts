/**
 * The filter worker: a thread that runs the pure edits of host-json-filters.ts
 * on large host answers, so the sidecar's event loop (every user's decisions)
 * never waits for them. Requests and answers carry their bytes as transferred
 * buffers; a failure answers `error` (the request is then refused, never passed).
 */
import { parentPort } from 'node:worker_threads'
import { filterHistory, filterQueue } from './host-json-filters.js'
import type { FilterJob, FilterJobResult } from './filter-pool.js'

/** The edited text as bytes the parent takes over (transferred, not copied). */
function bytesOf(text: string): ArrayBuffer {
  const bytes = Buffer.from(text, 'utf8')
  const owned = new Uint8Array(bytes.length)
  owned.set(bytes)
  return owned.buffer
}

function run(job: FilterJob): FilterJobResult {
  const text = Buffer.from(job.body).toString('utf8')
  switch (job.kind) {
    case 'history':
      return { id: job.id, bytes: bytesOf(filterHistory(text, new Set(job.own), job.maxItems, job.offset)) }
    case 'queue':
      return { id: job.id, bytes: bytesOf(filterQueue(text, new Set(job.own), job.seesAll)) }
  }
}

parentPort!.on('message', (job: FilterJob) => {
  let result: FilterJobResult
  try {
    result = run(job)
  } catch (err) {
    result = { id: job.id, error: err instanceof Error ? err.message : String(err) }
  }
  parentPort!.postMessage(result, result.bytes ? [result.bytes] : [])
})
