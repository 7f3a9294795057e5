/**
 * The two sources as their real APIs behave (issue 22 item 2): what to ask, what their answers
 * mean, what a user may paste.
 *
 * Civitai: `GET /api/v1/model-versions/{id}` lists `files[]` (`id`, `name`, `sizeKB`, `type`,
 * `metadata {format, size, fp}`, `hashes.SHA256`, `primary`); the primary file is taken unless
 * the request names a file id or `type`/`format`/`size`/`fp`. The bytes come from
 * `GET /api/download/models/{id}` on the configured base (never the `downloadUrl` the answer
 * names: the first request goes only to the base), which redirects to a signed URL elsewhere.
 * A model page without a version (`/models/{id}`) asks `GET /api/v1/models/{id}` for its newest.
 *
 * Hugging Face: `GET /{repo_id}/resolve/{revision}/{path}`; an LFS file redirects (302) to a CDN
 * and the redirect carries `X-Linked-Size` and `X-Linked-Etag` (the SHA-256); a small file is
 * served at once with an `ETag` that is a git SHA-1 (no SHA-256 published). Errors carry
 * `X-Error-Code`.
 */
import type { IncomingMessage } from 'node:http'
import { basename, extname } from 'node:path'
import { openFollowing, readSmall, SourceError, type HopPolicy } from './hops.js'
import type { DownloadRequest, SourceName } from './store.js'

export const CIVITAI_FIELDS = ['model_version_id', 'model_id', 'file_id', 'type', 'format', 'size', 'fp'] as const
export const HUGGINGFACE_FIELDS = ['repo_id', 'filename', 'revision', 'subfolder'] as const

/** What a transfer needs, once the source has been asked. */
export interface Resolved {
  url: string
  filename: string
  /** published SHA-256 (hex lower case), '' when none is known yet (Hugging Face: read from the redirect) */
  sha256: string
  /** announced size in bytes, 0 when not known yet */
  size: number
  /** Civitai's `sizeKB` (rounded): the bytes must come within 1 KiB of it */
  sizeKB?: number
}

const REPO_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,95}\/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$/
const REVISION = /^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$/
const REPO_PATH = /^(?!.*(?:^|\/)\.\.?(?:\/|$))[^\\\0]{1,500}$/

/** Why a request's fields are not usable, or null. */
export function requestProblem(req: DownloadRequest): string | null {
  if (req.source === 'civitai') {
    if (req.model_version_id === undefined && req.model_id === undefined) return 'civitai needs model_version_id (or a model page URL)'
    for (const key of ['repo_id', 'filename', 'revision', 'subfolder'] as const) if (req[key] !== undefined) return `${key} is a huggingface field`
    return null
  }
  for (const key of ['model_version_id', 'model_id', 'file_id', 'type', 'format', 'size', 'fp'] as const) if (req[key] !== undefined) return `${key} is a civitai field`
  if (req.repo_id === undefined || !REPO_ID.test(req.repo_id)) return 'repo_id must be owner/name'
  if (req.filename === undefined || !REPO_PATH.test(req.filename)) return 'filename must be a file path in the repository'
  if (req.subfolder !== undefined && req.subfolder !== '' && !REPO_PATH.test(req.subfolder)) return 'subfolder must be a folder path in the repository'
  if (req.revision !== undefined && (!REVISION.test(req.revision) || req.revision.includes('..'))) return 'revision must be a branch, tag or commit'
  return null
}

/**
 * A pasted URL as a request: a Civitai model page (`/models/{id}[/slug][?modelVersionId=]`), a
 * Civitai download URL (`/api/download/models/{versionId}`), a Hugging Face file URL
 * (`/{owner}/{repo}/blob|resolve/{revision}/{path}`). Hosts: the configured bases and the
 * public sites. Null when it is none of these.
 */
export function requestFromUrl(raw: string, bases: Record<SourceName, string>): DownloadRequest | null {
  let url: URL
  try {
    url = new URL(raw.trim())
  } catch {
    return null
  }
  const hostIs = (source: SourceName, publicHost: string) => url.host === new URL(bases[source]).host || url.host === publicHost || url.host === `www.${publicHost}`
  if (hostIs('civitai', 'civitai.com')) {
    const version = url.searchParams.get('modelVersionId')
    const download = /^\/api\/download\/models\/(\d{1,12})\/?$/.exec(url.pathname)
    if (download) {
      // the URL of Civitai's own download buttons names the file it means: kept, not the primary
      const pick: DownloadRequest = { source: 'civitai', model_version_id: Number(download[1]) }
      for (const key of ['type', 'format', 'size', 'fp'] as const) {
        const value = url.searchParams.get(key)
        if (value === null || value === '') continue
        if (value.length > 64) return null // as the fields themselves: at most 64 characters
        pick[key] = value
      }
      return pick
    }
    const page = /^\/models\/(\d{1,12})(?:\/[^/]*)?\/?$/.exec(url.pathname)
    if (!page) return null
    if (version !== null && /^\d{1,12}$/.test(version)) return { source: 'civitai', model_version_id: Number(version) }
    return { source: 'civitai', model_id: Number(page[1]) }
  }
  if (hostIs('huggingface', 'huggingface.co')) {
    let parts: string[]
    try {
      parts = url.pathname.split('/').filter((p) => p !== '').map((p) => decodeURIComponent(p))
    } catch {
      return null // a broken %-escape: not a URL we can read (400, not a 500)
    }
    if (parts.length < 5 || (parts[2] !== 'blob' && parts[2] !== 'resolve')) return null
    return { source: 'huggingface', repo_id: `${parts[0]}/${parts[1]}`, revision: parts[3], filename: parts.slice(4).join('/') }
  }
  return null
}

/** The longest name a download gets, in UTF-8 bytes: file systems count bytes (255 on ext4, xfs,
 * btrfs), and the partial file beside it adds `.<8 characters>.authsvc-partial` (25 bytes). */
export const NAME_MAX_BYTES = 200
const utf8Bytes = (s: string): number => Buffer.byteLength(s, 'utf8')

/**
 * The name a file lands under: the last path part, without control characters, lone surrogates
 * or characters file systems or shells trip over, no leading dot, at most NAME_MAX_BYTES bytes of
 * UTF-8, cut between whole characters, its extension kept. Empty when nothing usable is left.
 */
export function sanitiseFilename(raw: string): string {
  let name = basename(raw.replaceAll('\\', '/'))
    .normalize('NFC')
    .replace(/[\u0000-\u001f\u007f<>:"/\\|?*]|\p{Surrogate}/gu, '_')
    .replace(/^[.\s]+/, '')
    .replace(/[.\s]+$/, '')
  if (utf8Bytes(name) > NAME_MAX_BYTES) {
    let ext = extname(name)
    if (utf8Bytes(ext) > 20) ext = ''
    const stem = Array.from(name.slice(0, name.length - ext.length)) // whole code points
    let room = NAME_MAX_BYTES - utf8Bytes(ext)
    let kept = ''
    for (const ch of stem) {
      room -= utf8Bytes(ch)
      if (room < 0) break
      kept += ch
    }
    name = kept + ext
  }
  return name === '.' || name === '..' ? '' : name
}

/** A source's error answer in words, and whether trying again later may help. */
export function errorOfAnswer(source: SourceName, status: number, errorCode: string | undefined, message: string | undefined): SourceError {
  const said = message ? ` (${message.slice(0, 200)})` : ''
  if (source === 'huggingface') {
    switch (errorCode) {
      case 'RepoNotFound': return new SourceError('Hugging Face: the repository does not exist, or it is private and your key cannot read it', false, status)
      case 'EntryNotFound': return new SourceError('Hugging Face: the repository has no such file', false, status)
      case 'RevisionNotFound': return new SourceError('Hugging Face: the repository has no such revision', false, status)
      case 'GatedRepo': return new SourceError('Hugging Face: the repository is gated; accept its terms on huggingface.co and set your Hugging Face key', false, status)
    }
  }
  const name = source === 'civitai' ? 'Civitai' : 'Hugging Face'
  switch (status) {
    case 401: return new SourceError(`${name} wants a signed-in key for this download; set your ${name} API key${said}`, false, status)
    case 403: return new SourceError(source === 'civitai' ? `Civitai: this version is in early access and your account may not download it yet${said}` : `Hugging Face refused access${said}`, false, status)
    case 404: return new SourceError(`${name}: not found${said}`, false, status)
    case 410: return new SourceError(`${name}: this model was archived and can no longer be downloaded${said}`, false, status)
    case 416: return new SourceError(`${name} could not serve the rest of the file`, true, status)
    case 429: return new SourceError(`${name} is rate limiting downloads; tried again later${said}`, true, status)
  }
  if (status >= 500) return new SourceError(`${name} had an error (${status})${said}`, true, status)
  return new SourceError(`${name} answered ${status}${said}`, false, status)
}

/** The error an answer carries: JSON `error`/`message`, `X-Error-Code`, `X-Error-Message`. */
export async function answerError(source: SourceName, response: IncomingMessage): Promise<SourceError> {
  const status = response.statusCode ?? 0
  const code = response.headers['x-error-code']
  let message = typeof response.headers['x-error-message'] === 'string' ? response.headers['x-error-message'] : undefined
  try {
    const body = (await readSmall(response, 64 * 1024)).toString('utf8')
    const parsed = JSON.parse(body) as { error?: unknown; message?: unknown }
    if (typeof parsed.error === 'string') message = parsed.error
    else if (typeof parsed.message === 'string') message = parsed.message
  } catch {
    // not JSON, or too long: the status says enough
  }
  return errorOfAnswer(source, status, typeof code === 'string' ? code : undefined, message?.replace(/[\u0000-\u001f]/g, ' '))
}

/**
 * A source's JSON answer, whole within `stallMs` (headers and body): a source that accepts the
 * connection and never finishes its answer would otherwise hold the job, and its source's slot,
 * until someone cancels it.
 */
async function getJson(source: SourceName, url: string, policy: HopPolicy, signal: AbortSignal, stallMs: number): Promise<unknown> {
  const deadline = AbortSignal.timeout(stallMs)
  const both = AbortSignal.any([signal, deadline])
  let body: Buffer
  try {
    const { response } = await openFollowing(url, policy, { accept: 'application/json' }, both)
    if (response.statusCode !== 200) throw await answerError(source, response)
    body = await readSmall(response, 4 * 1024 * 1024)
  } catch (err) {
    if (deadline.aborted && !signal.aborted) throw new SourceError(`${source === 'civitai' ? 'Civitai' : 'Hugging Face'} did not answer within ${Math.round(stallMs / 1000)} s`, true)
    throw err
  }
  try {
    return JSON.parse(body.toString('utf8'))
  } catch {
    throw new SourceError(`${source === 'civitai' ? 'Civitai' : 'Hugging Face'} answered something that is not JSON`, true)
  }
}

interface CivitaiFile {
  id?: number
  name?: string
  sizeKB?: number
  type?: string
  primary?: boolean
  metadata?: { format?: string; size?: string; fp?: string }
  hashes?: { SHA256?: string }
}

const trimBase = (base: string) => base.replace(/\/+$/, '')

/** Asks the source what to fetch (Civitai: its metadata; Hugging Face: nothing to ask first). */
export async function resolveRequest(req: DownloadRequest, policy: HopPolicy, signal: AbortSignal, stallMs: number): Promise<Resolved> {
  const base = trimBase(policy.base)
  if (req.source === 'huggingface') {
    const path = [req.subfolder, req.filename].filter((p) => p !== undefined && p !== '').join('/')
    const encoded = path.split('/').map(encodeURIComponent).join('/')
    return {
      url: `${base}/${req.repo_id}/resolve/${encodeURIComponent(req.revision ?? 'main')}/${encoded}`,
      filename: sanitiseFilename(req.filename ?? ''),
      sha256: '',
      size: 0,
    }
  }
  let versionId = req.model_version_id
  if (versionId === undefined) {
    const model = (await getJson('civitai', `${base}/api/v1/models/${req.model_id}`, policy, signal, stallMs)) as { modelVersions?: Array<{ id?: unknown }> }
    const newest = model.modelVersions?.[0]?.id
    if (typeof newest !== 'number') throw new SourceError('Civitai: this model has no downloadable version', false)
    versionId = newest
  }
  const version = (await getJson('civitai', `${base}/api/v1/model-versions/${versionId}`, policy, signal, stallMs)) as { files?: CivitaiFile[] }
  const files = Array.isArray(version.files) ? version.files : []
  const wanted = (f: CivitaiFile): boolean =>
    (req.file_id === undefined || f.id === req.file_id) &&
    (req.type === undefined || f.type === req.type) &&
    (req.format === undefined || f.metadata?.format === req.format) &&
    (req.size === undefined || f.metadata?.size === req.size) &&
    (req.fp === undefined || f.metadata?.fp === req.fp)
  const named = req.file_id !== undefined || req.type !== undefined || req.format !== undefined || req.size !== undefined || req.fp !== undefined
  const file = named ? files.find(wanted) : (files.find((f) => f.primary === true) ?? files[0])
  if (file === undefined || typeof file.name !== 'string') throw new SourceError(named ? 'Civitai: this version has no file matching what was asked' : 'Civitai: this version has no files', false)
  const query = new URLSearchParams()
  if (named) {
    if (file.type) query.set('type', file.type)
    if (file.metadata?.format) query.set('format', file.metadata.format)
    if (file.metadata?.size) query.set('size', file.metadata.size)
    if (file.metadata?.fp) query.set('fp', file.metadata.fp)
  }
  const sha = typeof file.hashes?.SHA256 === 'string' && /^[0-9a-fA-F]{64}$/.test(file.hashes.SHA256) ? file.hashes.SHA256.toLowerCase() : ''
  return {
    url: `${base}/api/download/models/${versionId}${query.size > 0 ? `?${query}` : ''}`,
    filename: sanitiseFilename(file.name),
    sha256: sha,
    size: 0,
    ...(typeof file.sizeKB === 'number' && file.sizeKB > 0 ? { sizeKB: file.sizeKB } : {}),
  }
}
