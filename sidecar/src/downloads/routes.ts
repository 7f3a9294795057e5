/**
 * The routes of SPEC §9 under `/authsvc/api/model-download/`: a signed-in user (a session or an
 * API token; never an anonymous or guest principal) with `can_download_models`; owners see and
 * cancel their own jobs, admins everyone's. Keys go in and never come out (not in an answer,
 * not in a log line, not in an event).
 */
import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Type, { type Static } from 'typebox'
import { eventContext, requireUser } from '../access/request-context.js'
import { can, type Principal } from '../identity/principal.js'
import { AuthsvcError } from '../kernel/errors.js'
import type { Services } from '../services.js'
import type { DownloadQueue, JobView } from './queue.js'
import { CIVITAI_FIELDS, HUGGINGFACE_FIELDS, requestFromUrl, requestProblem } from './sources.js'
import { SOURCES, type DownloadJobRecord, type DownloadRequest, type SourceName } from './store.js'

const tags = ['model downloads']
const Source = Type.Union([Type.Literal('civitai'), Type.Literal('huggingface')])
const Stats = Type.Object({ queued: Type.Integer(), running: Type.Integer(), completed: Type.Integer(), failed: Type.Integer(), cancelled: Type.Integer() })
const Job = Type.Object({
  job_id: Type.String(),
  source: Source,
  status: Type.Union([Type.Literal('queued'), Type.Literal('running'), Type.Literal('completed'), Type.Literal('failed'), Type.Literal('cancelled')]),
  username: Type.String({ description: 'whose job it is' }),
  folder_type: Type.String(),
  filename: Type.String(),
  bytes_done: Type.Integer(),
  total_bytes: Type.Integer(),
  progress_pct: Type.Number(),
  speed_bps: Type.Number(),
  eta_seconds: Type.Union([Type.Integer(), Type.Null()]),
  sha256: Type.String(),
  expected_sha256: Type.String(),
  attempts: Type.Integer(),
  created_at_iso: Type.String(),
  started_at_iso: Type.String(),
  finished_at_iso: Type.String(),
  error: Type.String(),
})
const Name = (max: number) => Type.String({ minLength: 1, maxLength: max })
const DownloadBody = Type.Object(
  {
    source: Type.Optional(Source),
    url: Type.Optional(Type.String({ minLength: 1, maxLength: 2048, description: 'a Civitai model page or download URL, or a Hugging Face file URL (instead of the fields)' })),
    folder_type: Type.Optional(Name(255)),
    model_version_id: Type.Optional(Type.Integer({ minimum: 1, maximum: 1e12 })),
    model_id: Type.Optional(Type.Integer({ minimum: 1, maximum: 1e12 })),
    file_id: Type.Optional(Type.Integer({ minimum: 1, maximum: 1e12 })),
    type: Type.Optional(Name(64)),
    format: Type.Optional(Name(64)),
    size: Type.Optional(Name(64)),
    fp: Type.Optional(Name(64)),
    repo_id: Type.Optional(Name(200)),
    filename: Type.Optional(Name(500)),
    revision: Type.Optional(Name(200)),
    subfolder: Type.Optional(Type.String({ maxLength: 500 })),
  },
  { additionalProperties: false },
)
const KeyBody = Type.Object({ source: Source, api_key: Type.String({ maxLength: 512, description: 'empty clears the stored key' }) }, { additionalProperties: false })
const JobId = Type.Object({ job_id: Type.String({ format: 'uuid' }) })

function downloader(request: FastifyRequest): Principal & { userId: string } {
  const p = requireUser(request)
  if (!can(p, 'can_download_models')) throw new AuthsvcError('PERMISSION_DENIED', 'Your role may not download models')
  return p
}

function publicJob(view: JobView): Static<typeof Job> {
  const pct = view.total_bytes > 0 ? Math.min(100, Math.round((view.bytes_done / view.total_bytes) * 1000) / 10) : view.status === 'completed' ? 100 : 0
  const eta = view.status === 'running' && view.speed_bps > 0 && view.total_bytes > 0 ? Math.max(0, Math.round((view.total_bytes - view.bytes_done) / view.speed_bps)) : null
  return {
    job_id: view.job_id, source: view.source, status: view.status, username: view.username, folder_type: view.folder_type, filename: view.filename,
    bytes_done: view.bytes_done, total_bytes: view.total_bytes, progress_pct: pct, speed_bps: Math.round(view.speed_bps), eta_seconds: eta,
    sha256: view.sha256, expected_sha256: view.expected_sha256, attempts: view.attempts,
    created_at_iso: view.created_at_iso, started_at_iso: view.started_at_iso, finished_at_iso: view.finished_at_iso, error: view.error,
  }
}

export interface DownloadsHandle {
  queue(): Promise<DownloadQueue>
  list(): DownloadJobRecord[]
  get(jobId: string): DownloadJobRecord | undefined
  keys(): Promise<{ set(userId: string, source: SourceName, key: string): Promise<void>; sourcesWithKeys(userId: string): SourceName[] }>
}

export function downloadRoutes(services: Pick<Services, 'config' | 'events'>, handle: DownloadsHandle) {
  return async function (fastify: FastifyInstance): Promise<void> {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
    const cfg = () => services.config.model_download

    const visible = (p: Principal & { userId: string }) => handle.list().filter((j) => p.isAdmin || j.user_id === p.userId)
    const ownJob = async (p: Principal & { userId: string }, jobId: string) => {
      await handle.queue()
      const job = handle.get(jobId)
      // another user's job is as absent as one that never was
      if (job === undefined || (!p.isAdmin && job.user_id !== p.userId)) throw new AuthsvcError('NOT_FOUND', 'No such download job')
      return job
    }

    app.get('/api/model-download/sources', {
      config: { auth: 'user' },
      schema: {
        summary: 'The sources, which of them you have a key for, and the limits', tags,
        response: { 200: Type.Object({
          sources: Type.Array(Source),
          sources_with_keys: Type.Array(Source),
          capabilities: Type.Object({
            limits: Type.Object({ active_total: Type.Integer(), active_civitai: Type.Integer(), active_huggingface: Type.Integer() }),
            civitai_fields: Type.Array(Type.String()),
            huggingface_fields: Type.Array(Type.String()),
          }),
        }) },
      },
    }, async (request) => {
      const p = downloader(request)
      const keys = await handle.keys()
      const perSource = Math.min(cfg().max_active_per_source, cfg().max_active_total)
      return {
        sources: [...SOURCES],
        sources_with_keys: keys.sourcesWithKeys(p.userId),
        capabilities: {
          limits: { active_total: cfg().max_active_total, active_civitai: perSource, active_huggingface: perSource },
          civitai_fields: [...CIVITAI_FIELDS],
          huggingface_fields: [...HUGGINGFACE_FIELDS],
        },
      }
    })

    app.get('/api/model-download/folders', {
      config: { auth: 'user' },
      schema: { summary: 'The host\'s model folders a download can go to', tags, response: { 200: Type.Object({ folders: Type.Array(Type.String()), default_folder: Type.String() }) } },
    }, async (request) => {
      downloader(request)
      const folders = (await handle.queue()).folders().map((f) => f.name)
      return { folders, default_folder: folders.includes('checkpoints') ? 'checkpoints' : (folders[0] ?? '') }
    })

    app.put('/api/model-download/api-keys', {
      config: { auth: 'user' },
      schema: { summary: 'Set, replace or clear (empty) your key for a source; it is stored sealed and never shown again', tags, body: KeyBody, response: { 200: Type.Object({ status: Type.Literal('ok'), source: Source }) } },
    }, async (request) => {
      const p = downloader(request)
      const { source, api_key } = request.body
      const key = api_key.trim()
      // printable ASCII only: an invisible character pasted with it (a zero-width space) is not a
      // space to \s, and no HTTP header can carry it, so every download would fail later
      if (!/^[\x21-\x7e]*$/.test(key)) throw new AuthsvcError('VALIDATION_FAILED', 'A key is one word of letters, digits and punctuation, without spaces or invisible characters')
      await (await handle.keys()).set(p.userId, source, key)
      services.events.emit('download_key_changed', { ...eventContext(request), subject: p.username, source, cleared: key === '' })
      return { status: 'ok' as const, source }
    })

    app.post('/api/model-download/download', {
      config: { auth: 'user' },
      schema: {
        summary: 'Queue a download (the source\'s fields, or a pasted url)', tags, body: DownloadBody,
        response: { 202: Type.Object({ status: Type.Literal('queued'), job_id: Type.String(), job: Job, stats: Stats }) },
      },
    }, async (request, reply) => {
      const p = downloader(request)
      const { url, folder_type, ...fields } = request.body
      const queue = await handle.queue()
      let req: DownloadRequest
      if (url !== undefined) {
        const parsed = requestFromUrl(url, { civitai: cfg().civitai_base_url, huggingface: cfg().huggingface_base_url })
        if (parsed === null) throw new AuthsvcError('VALIDATION_FAILED', 'The URL is not a Civitai model or download URL, or a Hugging Face file URL')
        if (fields.source !== undefined && fields.source !== parsed.source) throw new AuthsvcError('VALIDATION_FAILED', `The URL is a ${parsed.source} URL`)
        req = { ...fields, ...parsed }
      } else {
        if (fields.source === undefined) throw new AuthsvcError('VALIDATION_FAILED', 'Name a source (civitai or huggingface) or paste a url')
        req = { ...fields, source: fields.source }
      }
      const problem = requestProblem(req)
      if (problem !== null) throw new AuthsvcError('VALIDATION_FAILED', problem)
      const folders = queue.folders().map((f) => f.name)
      const folder = folder_type ?? (folders.includes('checkpoints') ? 'checkpoints' : folders[0])
      if (folder === undefined || !folders.includes(folder)) throw new AuthsvcError('VALIDATION_FAILED', `Unknown model folder: ${folder_type ?? '(none)'}`)
      const job = await queue.enqueue({ userId: p.userId, username: p.username }, req, folder)
      services.events.emit('download_queued', { ...eventContext(request), subject: p.username, job_id: job.job_id, source: job.source, folder })
      const jobs = visible(p)
      return reply.code(202).send({ status: 'queued' as const, job_id: job.job_id, job: publicJob(queue.view(handle.get(job.job_id) ?? job)), stats: queue.stats(jobs) })
    })

    app.get('/api/model-download/jobs', {
      config: { auth: 'user' },
      schema: { summary: 'Your download jobs, newest first (an admin: everyone\'s)', tags, response: { 200: Type.Object({ jobs: Type.Array(Job), stats: Stats }) } },
    }, async (request) => {
      const p = downloader(request)
      const queue = await handle.queue()
      const jobs = visible(p)
      return { jobs: jobs.map((j) => publicJob(queue.view(j))), stats: queue.stats(jobs) }
    })

    app.get('/api/model-download/jobs/:job_id', {
      config: { auth: 'user' },
      schema: { summary: 'One of your download jobs (an admin: anyone\'s)', tags, params: JobId, response: { 200: Type.Object({ job: Job, stats: Stats }) } },
    }, async (request) => {
      const p = downloader(request)
      const job = await ownJob(p, request.params.job_id)
      const queue = await handle.queue()
      return { job: publicJob(queue.view(job)), stats: queue.stats(visible(p)) }
    })

    app.post('/api/model-download/jobs/:job_id/cancel', {
      config: { auth: 'user' },
      schema: { summary: 'Cancel a queued or running job (its partial file is removed); a finished one is 409', tags, params: JobId, response: { 200: Type.Object({ status: Type.Literal('cancelled'), job: Job }) } },
    }, async (request) => {
      const p = downloader(request)
      const job = await ownJob(p, request.params.job_id)
      const queue = await handle.queue()
      const done = await queue.cancel(job.job_id)
      if (done.status !== 'cancelled') throw new AuthsvcError('CONFLICT', `The job has ${done.status}`)
      services.events.emit('download_cancelled', { ...eventContext(request), subject: job.username, job_id: job.job_id, source: job.source })
      return { status: 'cancelled' as const, job: publicJob(queue.view(done)) }
    })
  }
}
