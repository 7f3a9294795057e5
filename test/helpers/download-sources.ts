/**
 * Local stand-ins of Civitai and Hugging Face, plus a second loopback host playing their CDN,
 * for the download tests and `npm run bench` (issue 22 item 8). Each is a real HTTP server on
 * 127.0.0.1, speaking the shapes the real services answer:
 *
 * - Civitai: `GET /api/v1/model-versions/{id}` → `{id, modelId, name, files[]}` with `id`,
 *   `name`, `sizeKB`, `type`, `metadata {format,size,fp}`, `hashes {SHA256}`, `primary`,
 *   `downloadUrl`; `GET /api/v1/models/{id}` → `{id, modelVersions:[{id}]}` newest first;
 *   `GET /api/download/models/{id}[?type&format&size&fp]` → 307 to a signed CDN URL; JSON
 *   errors `{"error": ...}` 401 (login required), 403 (early access), 404, 410 (archived), 429.
 * - Hugging Face: `GET /{owner}/{repo}/resolve/{rev}/{path}` → an LFS file: 302 to the CDN with
 *   `X-Linked-Size`, `X-Linked-Etag` (the SHA-256, quoted) and `ETag`; a small file: 200 at once
 *   with an `ETag` that is a git SHA-1; errors with `X-Error-Code` (RepoNotFound 401,
 *   EntryNotFound 404, RevisionNotFound 404, GatedRepo 403) and `X-Error-Message`.
 * - CDN: `GET /files/{id}?sig=...` with `Range: bytes=N-` and `If-Range` (206 / 200), `ETag`
 *   the SHA-256 (quoted), `Content-Length`.
 *
 * Files are deterministic bytes (a 1 MiB block of a seed, repeated with an offset), so a 2 GB
 * file costs no memory. Modes per file: `slowBps` (throttled), `pauseAt` (stops sending at a
 * byte and waits for `release()`: a test kills or cancels there, told by the `paused` event,
 * never by a sleep), `stallAt` (stops sending, never resumes), `wrongHash` (publishes another
 * SHA-256), `truncateAt` (closes the connection early), `redirectTo` (the download redirects
 * there instead of the CDN), `lieSize` (announces another X-Linked-Size). Every request is
 * recorded (host, path, Authorization, Range) for the rows that check what was sent where.
 */
import { createCipheriv, createHash } from 'node:crypto'
import { EventEmitter, once } from 'node:events'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'

export interface StandinFile {
  id: number
  name: string
  size: number
  seed: number
  /** the bytes themselves (a loadable model for the real host) instead of the seed's; `size` must be its length */
  content?: Buffer
  /** Civitai metadata */
  type?: string
  format?: string
  sizeLabel?: string
  fp?: string
  primary?: boolean
  slowBps?: number
  pauseAt?: number
  stallAt?: number
  truncateAt?: number
  wrongHash?: boolean
  redirectTo?: string
  lieSize?: number
  /** how many times a `pauseAt` still pauses (default: once) */
  pauses?: number
  /** answer this error instead (Civitai: status; Hugging Face: status + X-Error-Code) */
  error?: { status: number; code?: string; message?: string }
  /** the first `failTimes` downloads answer 429/503 */
  failTimes?: number
  failStatus?: number
}

export interface SeenRequest {
  server: 'civitai' | 'huggingface' | 'cdn'
  method: string
  path: string
  authorization: string | undefined
  range: string | undefined
  ifRange: string | undefined
}

const BLOCK = 1024 * 1024
const blocks = new Map<number, Buffer>()

/** 1 MiB of the seed's bytes: an AES-128-CTR key stream (about a millisecond, so a new file never holds up the stand-ins). */
function blockOf(seed: number): Buffer {
  let block = blocks.get(seed)
  if (block === undefined) {
    const key = createHash('sha256').update(`seed:${seed}`).digest().subarray(0, 16)
    block = createCipheriv('aes-128-ctr', key, Buffer.alloc(16)).update(Buffer.alloc(BLOCK))
    blocks.set(seed, block)
  }
  return block
}

/** The bytes [start, end) of a file of seed `seed`. */
export function bytesOf(seed: number, start: number, end: number): Buffer {
  const block = blockOf(seed)
  const out = Buffer.alloc(end - start)
  for (let pos = start; pos < end; ) {
    const at = pos % BLOCK
    const n = Math.min(BLOCK - at, end - pos)
    block.copy(out, pos - start, at, at + n)
    pos += n
  }
  return out
}

const hashes = new Map<string, string>()
export function sha256Of(seed: number, size: number): string {
  const key = `${seed}:${size}`
  let hex = hashes.get(key)
  if (hex === undefined) {
    const hash = createHash('sha256')
    const block = blockOf(seed)
    for (let pos = 0; pos < size; pos += BLOCK) hash.update(block.subarray(0, Math.min(BLOCK, size - pos)))
    hex = hash.digest('hex')
    hashes.set(key, hex)
  }
  return hex
}

export interface DownloadStandins {
  civitaiUrl: string
  huggingfaceUrl: string
  cdnUrl: string
  seen: SeenRequest[]
  /** Civitai versions: version id → its files */
  civitai: Map<number, StandinFile[]>
  /** Hugging Face: `owner/repo@rev/path` → file (`lfs: false` serves it directly) */
  huggingface: Map<string, StandinFile & { lfs?: boolean }>
  /** models (`/api/v1/models/{id}`) → version ids, newest first */
  civitaiModels: Map<number, number[]>
  /** repos that exist (for RepoNotFound vs EntryNotFound) */
  repos: Set<string>
  events: EventEmitter
  /** lets a paused transfer go on */
  release(fileId: number): void
  /** the published SHA-256 of a file (wrong when it is in wrongHash mode) */
  publishedSha256(file: StandinFile): string
  trueSha256(file: StandinFile): string
  close(): Promise<void>
}

/** Resolves on the first of 'drain' and 'close', leaving no listener behind. */
function drainOrClose(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done)
      res.off('close', done)
      resolve()
    }
    res.on('drain', done)
    res.on('close', done)
  })
}

function listen(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ server: Server; url: string; sockets: Set<Socket> }> {
  const server = createServer(handler)
  const sockets = new Set<Socket>()
  server.on('connection', (s) => {
    sockets.add(s)
    s.on('close', () => sockets.delete(s))
  })
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({ server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, sockets })))
}

export async function startDownloadStandins(): Promise<DownloadStandins> {
  const seen: SeenRequest[] = []
  const events = new EventEmitter()
  const civitai = new Map<number, StandinFile[]>()
  const civitaiModels = new Map<number, number[]>()
  const huggingface = new Map<string, StandinFile & { lfs?: boolean }>()
  const repos = new Set<string>()
  const files = new Map<number, StandinFile>()
  const released = new Set<number>()
  const pausesLeft = new Map<number, number>()
  const failsLeft = new Map<number, number>()
  const record = (server: SeenRequest['server'], req: IncomingMessage) => {
    seen.push({ server, method: req.method ?? '', path: req.url ?? '', authorization: req.headers.authorization, range: req.headers.range, ifRange: req.headers['if-range'] as string | undefined })
  }
  const trueSha = (f: StandinFile) => (f.content ? createHash('sha256').update(f.content).digest('hex') : sha256Of(f.seed, f.size))
  const published = (f: StandinFile) => (f.wrongHash ? createHash('sha256').update(`not ${f.id}`).digest('hex') : trueSha(f))
  const json = (res: ServerResponse, status: number, body: unknown) => {
    const text = JSON.stringify(body)
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }).end(text)
  }
  let cdnUrl = ''
  const signed = (f: StandinFile) => `${cdnUrl}/files/${f.id}/${encodeURIComponent(f.name)}?sig=secret-signature-${f.id}&expires=9999999999`
  const failing = (f: StandinFile, res: ServerResponse): boolean => {
    const left = failsLeft.get(f.id) ?? f.failTimes ?? 0
    if (left <= 0) return false
    failsLeft.set(f.id, left - 1)
    const status = f.failStatus ?? 429
    res.writeHead(status, { 'content-type': 'application/json', 'retry-after': '1' }).end(JSON.stringify({ error: status === 429 ? 'Rate limited' : 'Service unavailable' }))
    return true
  }

  const civ = await listen((req, res) => {
    record('civitai', req)
    const url = new URL(req.url ?? '/', 'http://x')
    const version = /^\/api\/v1\/model-versions\/(\d+)$/.exec(url.pathname)
    if (version) {
      const list = civitai.get(Number(version[1]))
      if (!list) return json(res, 404, { error: `No model version with id ${version[1]}` })
      return json(res, 200, {
        id: Number(version[1]), modelId: 1, name: `v${version[1]}`,
        files: list.map((f) => ({
          id: f.id, name: f.name, sizeKB: f.size / 1024, type: f.type ?? 'Model', primary: f.primary ?? list.length === 1,
          metadata: { format: f.format ?? 'SafeTensor', size: f.sizeLabel ?? 'pruned', fp: f.fp ?? 'fp16' },
          hashes: { SHA256: published(f).toUpperCase(), AutoV2: published(f).slice(0, 10).toUpperCase() },
          downloadUrl: `https://civitai.com/api/download/models/${version[1]}`,
        })),
      })
    }
    const model = /^\/api\/v1\/models\/(\d+)$/.exec(url.pathname)
    if (model) {
      const versions = civitaiModels.get(Number(model[1]))
      if (!versions) return json(res, 404, { error: `No model with id ${model[1]}` })
      return json(res, 200, { id: Number(model[1]), name: 'model', modelVersions: versions.map((id) => ({ id })) })
    }
    const download = /^\/api\/download\/models\/(\d+)$/.exec(url.pathname)
    if (download) {
      const list = civitai.get(Number(download[1]))
      if (!list) return json(res, 404, { error: 'Model not found' })
      const q = url.searchParams
      const named = ['type', 'format', 'size', 'fp'].some((k) => q.has(k))
      const f = named
        ? list.find((x) => (!q.has('type') || (x.type ?? 'Model') === q.get('type')) && (!q.has('format') || (x.format ?? 'SafeTensor') === q.get('format')) && (!q.has('size') || (x.sizeLabel ?? 'pruned') === q.get('size')) && (!q.has('fp') || (x.fp ?? 'fp16') === q.get('fp')))
        : (list.find((x) => x.primary) ?? list[0])
      if (!f) return json(res, 404, { error: 'File not found' })
      if (f.error) {
        const messages: Record<number, string> = { 401: 'The creator of this asset requires you to be logged in to download it', 403: 'This asset is in Early Access', 404: 'Model not found', 410: 'Model archived, not available for download', 429: 'Rate limited' }
        return json(res, f.error.status, { error: f.error.message ?? messages[f.error.status] ?? 'error' })
      }
      if (failing(f, res)) return
      res.writeHead(307, { location: f.redirectTo ?? signed(f) }).end()
      return
    }
    json(res, 404, { error: 'Not found' })
  })

  const hf = await listen((req, res) => {
    record('huggingface', req)
    const url = new URL(req.url ?? '/', 'http://x')
    const m = /^\/([^/]+)\/([^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(url.pathname)
    const error = (status: number, code: string, message: string) => {
      res.writeHead(status, { 'content-type': 'application/json', 'x-error-code': code, 'x-error-message': message }).end(JSON.stringify({ error: message }))
    }
    if (!m) return error(404, 'EntryNotFound', 'Not found')
    const repo = `${decodeURIComponent(m[1])}/${decodeURIComponent(m[2])}`
    const rev = decodeURIComponent(m[3])
    const path = m[4].split('/').map(decodeURIComponent).join('/')
    if (!repos.has(repo)) return error(401, 'RepoNotFound', 'Repository not found')
    const f = huggingface.get(`${repo}@${rev}/${path}`)
    if (!f) {
      const anyRev = [...huggingface.keys()].some((k) => k.startsWith(`${repo}@${rev}/`))
      return anyRev ? error(404, 'EntryNotFound', `${path} does not exist on "${rev}"`) : error(404, 'RevisionNotFound', `Invalid rev id: ${rev}`)
    }
    if (f.error) return error(f.error.status, f.error.code ?? 'EntryNotFound', f.error.message ?? 'error')
    if (failing(f, res)) return
    if (f.lfs === false) return serveFile(f, req, res, `"${createHash('sha1').update(`blob ${f.size}\0`).digest('hex')}"`)
    res.writeHead(302, {
      location: f.redirectTo ?? signed(f),
      'x-linked-size': String(f.lieSize ?? f.size),
      'x-linked-etag': `"${published(f)}"`,
      etag: `W/"${createHash('sha1').update(String(f.id)).digest('hex')}"`,
      'x-repo-commit': 'a'.repeat(40),
    }).end()
  })

  const serveFile = (f: StandinFile, req: IncomingMessage, res: ServerResponse, etag: string) => {
    let start = 0
    const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? '')
    const ifRange = req.headers['if-range']
    if (range && (ifRange === undefined || ifRange === etag)) start = Number(range[1])
    // as real servers answer (RFC 9110): a range that starts at the end of the file or past it
    if (start > 0 && start >= f.size) {
      res.writeHead(416, { 'content-range': `bytes */${f.size}` }).end()
      return
    }
    const headers: Record<string, string> = { 'content-type': 'application/octet-stream', 'content-length': String(f.size - start), etag, 'accept-ranges': 'bytes' }
    if (start > 0) headers['content-range'] = `bytes ${start}-${f.size - 1}/${f.size}`
    res.writeHead(start > 0 ? 206 : 200, headers)
    res.flushHeaders()
    void stream(f, start, res)
  }

  const stream = async (f: StandinFile, start: number, res: ServerResponse): Promise<void> => {
    const block = blockOf(f.seed)
    let pos = start
    const startedAt = Date.now()
    const chunk = f.slowBps ? Math.max(1024, Math.min(BLOCK, Math.floor(f.slowBps / 20))) : 256 * 1024
    while (pos < f.size && !res.destroyed) {
      if (f.pauseAt !== undefined && pos < f.pauseAt && pos + chunk >= f.pauseAt && (pausesLeft.get(f.id) ?? f.pauses ?? 1) > 0 && !released.has(f.id)) {
        // send up to the pause point, then wait for release()
        const upTo = f.pauseAt
        res.write(f.content ? f.content.subarray(pos, upTo) : bytesOf(f.seed, pos, upTo))
        pos = upTo
        pausesLeft.set(f.id, (pausesLeft.get(f.id) ?? f.pauses ?? 1) - 1)
        events.emit('paused', f.id, pos)
        const [id] = (await Promise.race([once(events, `release:${f.id}`), once(res, 'close')])) as [number?]
        if (id === undefined && res.destroyed) return
        continue
      }
      if (f.stallAt !== undefined && pos >= f.stallAt) {
        events.emit('stalled', f.id, pos)
        await once(res, 'close')
        return
      }
      if (f.truncateAt !== undefined && pos >= f.truncateAt) {
        events.emit('truncated', f.id, pos)
        // what was written reaches the client first, then the connection is cut mid-body
        const socket = res.socket
        if (socket) await new Promise<void>((r) => socket.write('', () => r()))
        socket?.destroy()
        return
      }
      let end = Math.min(f.size, pos + chunk)
      for (const stop of [f.stallAt, f.truncateAt]) if (stop !== undefined && pos < stop && end > stop) end = stop
      const at = pos % BLOCK
      const piece = f.content ? f.content.subarray(pos, end) : at + (end - pos) <= BLOCK ? block.subarray(at, at + (end - pos)) : bytesOf(f.seed, pos, end)
      pos = end
      if (!res.write(piece)) await drainOrClose(res)
      if (f.slowBps) {
        const due = startedAt + ((pos - start) / f.slowBps) * 1000
        const wait = due - Date.now()
        if (wait > 0) await new Promise((r) => setTimeout(r, wait))
      }
    }
    if (!res.destroyed) res.end()
  }

  const cdn = await listen((req, res) => {
    record('cdn', req)
    const url = new URL(req.url ?? '/', 'http://x')
    const m = /^\/files\/(\d+)\//.exec(url.pathname)
    const f = m ? files.get(Number(m[1])) : undefined
    if (!f || !url.searchParams.get('sig')?.startsWith('secret-signature-')) {
      res.writeHead(403, { 'content-type': 'application/xml' }).end('<Error><Code>AccessDenied</Code></Error>')
      return
    }
    serveFile(f, req, res, `"${trueSha(f)}"`)
  })
  cdnUrl = cdn.url

  // every file put in either map is served by the CDN
  const track = <K, V extends StandinFile | StandinFile[]>(map: Map<K, V>) => {
    const set = map.set.bind(map)
    map.set = (key: K, value: V) => {
      for (const f of Array.isArray(value) ? value : [value]) files.set(f.id, f)
      return set(key, value)
    }
    return map
  }
  track(civitai)
  track(huggingface)

  return {
    civitaiUrl: civ.url, huggingfaceUrl: hf.url, cdnUrl: cdn.url, seen, civitai, civitaiModels, huggingface, repos, events,
    release(fileId) {
      released.add(fileId)
      events.emit(`release:${fileId}`, fileId)
    },
    publishedSha256: published,
    trueSha256: trueSha,
    async close() {
      // every listener stops taking connections first, then every connection goes, a late one too
      // (a sidecar's transfer thread may still be connecting as the test ends): server.close waits
      // for open connections, so one that came after a first sweep would hold the test file open
      const closed = [civ, hf, cdn].map((s) => new Promise((r) => s.server.close(r)))
      for (const s of [civ, hf, cdn]) {
        for (const socket of s.sockets) socket.destroy()
        s.server.closeAllConnections()
      }
      await Promise.all(closed)
    },
  }
}
