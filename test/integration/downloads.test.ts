/**
 * Model downloads (issue 22) against the local stand-ins of Civitai, Hugging Face and their CDN
 * (test/helpers/download-sources.ts, real HTTP servers): a real sidecar on a temp data dir and a
 * real sqlite file, routes called as the plugin forwards them. Waits are on the queue's changes
 * and the stand-ins' events (paused, stalled), never on a fixed time.
 */
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { EventEmitter, once } from 'node:events'
import { appendFileSync, chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmdirSync, rmSync, writeFileSync } from 'node:fs'
import { createHash } from 'node:crypto'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { PROTOCOL_VERSION } from '../../sidecar/src/kernel/protocol.js'
import { CollectionSourceKeys, type DownloadJobRecord } from '../../sidecar/src/downloads/store.js'
import { DEFAULT_GROUPS } from '../../sidecar/src/access/roles.js'
import { transfersRunning } from '../../sidecar/src/downloads/queue.js'
import { DOWNLOAD_STAGING_DIR } from '../../sidecar/src/models/model-cache.js'
import { addUser, apiToken, bootstrapAdmin, call, decide, openSidecar, sessionJwt, stepAnswer, tempDir, type Sidecar } from '../unit/fixtures.js'
import { startDownloadStandins, type DownloadStandins, type StandinFile } from '../helpers/download-sources.js'
import { poll } from '../helpers/stack.js'
import { redisSkipReason, startRedis } from '../helpers/store-servers.js'
import { nextChange } from '../helpers/store-conformance.js'
import { beforeDeadline } from '../../sidecar/src/kernel/deadline.js'
import { Collection } from '../../sidecar/src/store/collection.js'
import type { KeyValueStore } from '../../sidecar/src/store/kv.js'
import type { Change, SharedStore } from '../../sidecar/src/store/shared-store.js'
import { sweepOrphanKeys, type DownloadsFeature } from '../../sidecar/src/downloads/feature.js'
import type { ModelsFeature } from '../../sidecar/src/models/feature.js'

const FOLDERS = ['checkpoints', 'loras']

function facts(modelsDir: string) {
  return {
    model_folders: Object.fromEntries(FOLDERS.map((f) => [f, [join(modelsDir, f)]])),
    model_folder_extensions: Object.fromEntries(FOLDERS.map((f) => [f, ['.safetensors', '.ckpt', '.pt']])),
    model_paths: { sep: '/', case_insensitive: false },
    all_nodes_loaded: true,
  }
}

interface World {
  sc: Sidecar
  src: DownloadStandins
  modelsDir: string
  adminJwt: string
  aliceJwt: string
  aliceId: string
  bobJwt: string
  plainJwt: string
  changes: EventEmitter
  dir: string
}

let nextId = 1000
function file(over: Partial<StandinFile> = {}): StandinFile {
  const id = nextId++
  return { id, name: `model-${id}.safetensors`, size: 300 * 1024 + (id % 7), seed: id, ...over }
}

/** A shared store for `openWorld`: its config, and a wrapper of what the services open (a test's hold on its feed or reads). */
interface SharedStoreOptions {
  config: Record<string, unknown>
  wrap?: (kv: KeyValueStore) => KeyValueStore
  /** told of the sidecar as soon as it is open (a row that must close it even when the rest of the world never opens) */
  opened?: (sc: Sidecar) => void
}

async function openWorld(src: DownloadStandins, config: Record<string, unknown> = {}, dir = tempDir('as-dl-'), hello = true, shared?: SharedStoreOptions): Promise<World> {
  const modelsDir = join(dir, 'models')
  for (const f of FOLDERS) mkdirSync(join(modelsDir, f), { recursive: true })
  const sc = await openSidecar({
    dir,
    config: {
      model_download: {
        civitai_base_url: src.civitaiUrl, huggingface_base_url: src.huggingfaceUrl, allow_private_hosts: true,
        retry_base_seconds: 0, max_retries: 1, stall_timeout_seconds: 60, ...config,
      },
      ...(shared === undefined ? {} : { store: shared.config }),
    },
    wrapStore: shared?.wrap,
  })
  shared?.opened?.(sc)
  sc.services.roles.replace({ ...DEFAULT_GROUPS, downloader: { ...DEFAULT_GROUPS.user, can_download_models: true } })
  const ensure = async (name: string, role: string) => sc.services.users.byUsername(name) ?? addUser(sc, name, 'Passw0rd-long-enough', role)
  const admin = sc.services.users.byUsername('root-admin') ? { jwt: await sessionJwt(sc, sc.services.users.byUsername('root-admin')!) } : await bootstrapAdmin(sc)
  const alice = await ensure('alice', 'downloader')
  const bob = await ensure('bob', 'downloader')
  const plain = await ensure('plain', 'user')
  if (hello) sayHello(sc, modelsDir)
  const changes = new EventEmitter()
  if (process.env.DL_DEBUG) sc.services.events.onAny((r) => console.error(JSON.stringify(r)))
  // the downloads open at once on a store that answers; bounded, so a regression fails rather than hangs
  const queue = await within((sc.built.features.find((f) => f.name === 'downloads') as DownloadsFeature).queue(), 30_000, 'the downloads did not open')
  queue.onChange = (job) => { if (process.env.DL_DEBUG) console.error(Date.now() % 100000, job.status, job.bytes_done, job.attempts, job.error); changes.emit(job.job_id, job) }
  return { sc, src, modelsDir, dir, changes, adminJwt: admin.jwt, aliceJwt: await sessionJwt(sc, alice), aliceId: alice.user_id, bobJwt: await apiToken(sc, bob), plainJwt: await sessionJwt(sc, plain) }
}

function sayHello(sc: Sidecar, modelsDir: string): void {
  sc.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 'test', host: facts(modelsDir) })
}

/** Resolves with the job's first state that is no longer plainly queued (running, ended, or queued with a note). */
function moved(w: World, jobId: string): Promise<DownloadJobRecord> {
  return new Promise((resolve) => {
    const check = (job: DownloadJobRecord) => {
      if (job.status === 'queued' && job.error === '') return
      w.changes.off(jobId, check)
      resolve(job)
    }
    w.changes.on(jobId, check)
    void jobOf(w, jobId, w.adminJwt).then((j) => j && check(j as DownloadJobRecord))
  })
}

const FINAL = new Set(['completed', 'failed', 'cancelled'])

/** Resolves once the job has written `bytes` (at least one) to its partial file. */
function progressed(w: World, jobId: string, bytes = 1): Promise<void> {
  return new Promise((resolve) => {
    const check = (job: DownloadJobRecord) => {
      if (job.bytes_done < bytes) return
      w.changes.off(jobId, check)
      resolve()
    }
    w.changes.on(jobId, check)
    void jobOf(w, jobId, w.adminJwt).then((j) => j && check(j as DownloadJobRecord))
  })
}

/** Resolves with the job once it reaches a final state (told by the queue, never polled on a timer). */
function ended(w: World, jobId: string): Promise<DownloadJobRecord> {
  return new Promise((resolve) => {
    const check = (job: DownloadJobRecord) => {
      if (!FINAL.has(job.status)) return
      w.changes.off(jobId, check)
      resolve(job)
    }
    w.changes.on(jobId, check)
    // as the admin, who sees every job (its owner may be another user, or deleted)
    void jobOf(w, jobId, w.adminJwt).then((j) => j && FINAL.has(j.status) && check(j as DownloadJobRecord))
  })
}

async function jobOf(w: World, jobId: string, jwt = w.aliceJwt): Promise<any> {
  const res = await call(w.sc, { url: `/authsvc/api/model-download/jobs/${jobId}`, bearer: jwt })
  return res.statusCode === 200 ? JSON.parse(res.body).job : undefined
}

async function start(w: World, body: Record<string, unknown>, jwt = w.aliceJwt): Promise<string> {
  const res = await call(w.sc, { method: 'POST', url: '/authsvc/api/model-download/download', bearer: jwt, body })
  assert.equal(res.statusCode, 202, res.body)
  return JSON.parse(res.body).job_id as string
}

/** Stores (or with '' clears) `jwt`'s key for `source` through the route. */
function putKey(sc: Sidecar, jwt: string, source: string, api_key: string) {
  return call(sc, { method: 'PUT', url: '/authsvc/api/model-download/api-keys', bearer: jwt, body: { source, api_key } })
}

const modelsOf = (w: World) => w.sc.built.features.find((f) => f.name === 'models') as ModelsFeature
/** The next revocation of a grant of `item` (the service's own: a downloaded file gone or another). */
function revoked(w: World, item: string): Promise<{ reason?: string; subject?: string }> {
  return new Promise((resolve) => {
    let done = false
    w.sc.services.events.on('model_revoked', (r) => {
      if (done || r.item_name !== item) return
      done = true
      resolve(r)
    })
  })
}
const sha = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex')
/** Which of alice and bob hold a grant of `item` (shared or of this host). */
const grantedTo = (w: World, item: string) => ['alice', 'bob'].filter((name) => w.sc.services.modelGrants.list(w.sc.services.users.byUsername(name)!.user_id).some((g) => g.item_name === item))
/** Every name in a model folder (the staging directory of partial files included, while it exists). */
const listing = (w: World, folder: string) => readdirSync(join(w.modelsDir, folder)).sort()
/** The partial files in a model folder's staging directory ([] when there is none). */
const staged = (w: World, folder: string) => {
  const dir = join(w.modelsDir, folder, DOWNLOAD_STAGING_DIR)
  return existsSync(dir) ? readdirSync(dir).sort() : []
}

describe('model downloads against the stand-ins', () => {
  let src: DownloadStandins
  let w: World
  before(async () => {
    src = await startDownloadStandins()
    w = await openWorld(src)
  })
  after(async () => {
    await w.sc.close()
    await src.close()
  })

  it('a Civitai version lands in its folder with the published SHA-256, granted to the requester; the key went to Civitai only', async () => {
    const put = await putKey(w.sc, w.aliceJwt, 'civitai', 'civ-secret-key-123')
    assert.equal(put.statusCode, 200, put.body)
    const f = file()
    src.civitai.set(501, [f])
    const jobId = await start(w, { source: 'civitai', model_version_id: 501, folder_type: 'checkpoints' })
    const job = await ended(w, jobId)
    assert.equal(job.status, 'completed', job.error)
    const path = join(w.modelsDir, 'checkpoints', f.name)
    assert.equal(sha(path), src.trueSha256(f))
    assert.equal((await jobOf(w, jobId)).sha256, src.trueSha256(f))
    assert.deepEqual(listing(w, 'checkpoints'), [f.name])
    assert.ok(w.sc.services.modelGrants.list(w.aliceId).some((g) => g.folder === 'checkpoints' && g.item_name === f.name))
    const seen = src.seen.filter((s) => s.path.includes(String(f.id)) || s.path.includes('/501'))
    assert.ok(seen.some((s) => s.server === 'civitai' && s.authorization === 'Bearer civ-secret-key-123'))
    assert.ok(seen.some((s) => s.server === 'cdn'))
    assert.equal(seen.filter((s) => s.server === 'cdn' && s.authorization !== undefined).length, 0, 'the key never goes to the CDN')
    await putKey(w.sc, w.aliceJwt, 'civitai', '')
  })

  it('a Civitai file other than the primary is picked by type/format/fp, and a model page URL takes its newest version', async () => {
    const primary = file({ primary: true })
    const vae = file({ type: 'VAE', name: `vae-${nextId}.safetensors` })
    src.civitai.set(502, [primary, vae])
    src.civitaiModels.set(77, [502, 400])
    const byType = await ended(w, await start(w, { source: 'civitai', model_version_id: 502, type: 'VAE', folder_type: 'loras' }))
    assert.equal(byType.status, 'completed', byType.error)
    assert.equal(byType.filename, vae.name)
    const byPage = await ended(w, await start(w, { url: `${src.civitaiUrl}/models/77/some-slug`, folder_type: 'checkpoints' }))
    assert.equal(byPage.status, 'completed', byPage.error)
    assert.equal(byPage.filename, primary.name)
  })

  it('a Hugging Face LFS file lands with the X-Linked-Etag SHA-256; a small file lands with no hash published', async () => {
    src.repos.add('org/repo')
    const lfs = file({ name: 'unet.safetensors' })
    const small = { ...file({ name: 'tiny.safetensors', size: 1234 }), lfs: false }
    src.huggingface.set('org/repo@main/sub/unet.safetensors', lfs)
    src.huggingface.set('org/repo@main/tiny.safetensors', small)
    await putKey(w.sc, w.aliceJwt, 'huggingface', 'hf_abcdef')
    const a = await ended(w, await start(w, { url: `${src.huggingfaceUrl}/org/repo/blob/main/sub/unet.safetensors`, folder_type: 'loras' }))
    assert.equal(a.status, 'completed', a.error)
    assert.equal(a.expected_sha256, src.trueSha256(lfs))
    assert.equal(sha(join(w.modelsDir, 'loras', 'unet.safetensors')), src.trueSha256(lfs))
    const b = await ended(w, await start(w, { source: 'huggingface', repo_id: 'org/repo', filename: 'tiny.safetensors', folder_type: 'loras' }))
    assert.equal(b.status, 'completed', b.error)
    assert.equal(b.expected_sha256, '')
    assert.equal(sha(join(w.modelsDir, 'loras', 'tiny.safetensors')), src.trueSha256(small))
    const hf = src.seen.filter((s) => s.path.includes('unet.safetensors') || s.path.includes(`/files/${lfs.id}/`))
    assert.ok(hf.some((s) => s.server === 'huggingface' && s.authorization === 'Bearer hf_abcdef'))
    assert.ok(hf.some((s) => s.server === 'cdn' && s.authorization === undefined))
    assert.equal(hf.filter((s) => s.server === 'cdn' && s.authorization !== undefined).length, 0)
    await putKey(w.sc, w.aliceJwt, 'huggingface', '')
  })

  describe('each error answer of a source is a failed job with a clear message and no file', () => {
    const rows: Array<[string, () => Record<string, unknown>, RegExp]> = [
      ['Civitai 401 (login required)', () => (src.civitai.set(601, [file({ error: { status: 401 } })]), { source: 'civitai', model_version_id: 601 }), /signed-in key.*Civitai API key/],
      ['Civitai 403 (early access)', () => (src.civitai.set(602, [file({ error: { status: 403 } })]), { source: 'civitai', model_version_id: 602 }), /early access/],
      ['Civitai 404 (no such version)', () => ({ source: 'civitai', model_version_id: 99999 }), /Civitai: not found/],
      ['Civitai 410 (archived)', () => (src.civitai.set(604, [file({ error: { status: 410 } })]), { source: 'civitai', model_version_id: 604 }), /archived/],
      ['Civitai 429 after the retries', () => (src.civitai.set(605, [file({ failTimes: 5, failStatus: 429 })]), { source: 'civitai', model_version_id: 605 }), /rate limiting/],
      ['Hugging Face RepoNotFound', () => ({ source: 'huggingface', repo_id: 'nobody/none', filename: 'x.safetensors' }), /repository does not exist/],
      ['Hugging Face EntryNotFound', () => (src.repos.add('org/e'), src.huggingface.set('org/e@main/a.safetensors', file()), { source: 'huggingface', repo_id: 'org/e', filename: 'b.safetensors' }), /no such file/],
      ['Hugging Face RevisionNotFound', () => (src.repos.add('org/r'), { source: 'huggingface', repo_id: 'org/r', filename: 'a.safetensors', revision: 'v9' }), /no such revision/],
      ['Hugging Face GatedRepo', () => (src.repos.add('org/g'), src.huggingface.set('org/g@main/m.safetensors', file({ error: { status: 403, code: 'GatedRepo', message: 'Access to model org/g is restricted' } })), { source: 'huggingface', repo_id: 'org/g', filename: 'm.safetensors' }), /gated/],
      ['a published SHA-256 that does not match the bytes', () => { const f = file({ wrongHash: true }); src.civitai.set(606, [f]); return { source: 'civitai', model_version_id: 606 } }, /SHA-256 is [0-9a-f]{64}, not the/],
      ['a Hugging Face X-Linked-Size other than the bytes served', () => (src.repos.add('org/l'), src.huggingface.set('org/l@main/l.safetensors', file({ lieSize: 12 })), { source: 'huggingface', repo_id: 'org/l', filename: 'l.safetensors' }), /announced 12 bytes/],
      ['a file type the folder does not list', () => (src.civitai.set(607, [file({ name: 'readme.txt' })]), { source: 'civitai', model_version_id: 607 }), /does not list \.txt files/],
      ['a connection cut before the end (then the retry too)', () => (src.civitai.set(608, [file({ truncateAt: 100_000 })]), { source: 'civitai', model_version_id: 608 }), /sent 100000 bytes of the|broke off/],
    ]
    for (const [name, setup, message] of rows) {
      it(name, async () => {
        const before = listing(w, 'checkpoints')
        const job = await ended(w, await start(w, { folder_type: 'checkpoints', ...setup() }))
        assert.equal(job.status, 'failed')
        assert.match(job.error, message)
        assert.deepEqual(listing(w, 'checkpoints'), before, 'nothing is left in the folder, not even a partial file')
      })
    }
  })

  it('a 503 once is tried again and the job completes', async () => {
    const f = file({ failTimes: 1, failStatus: 503 })
    src.civitai.set(610, [f])
    const job = await ended(w, await start(w, { source: 'civitai', model_version_id: 610 }))
    assert.equal(job.status, 'completed', job.error)
    assert.equal(job.attempts, 1)
  })

  it('a cancel mid-way stops the transfer and leaves no file; a finished job cannot be cancelled (409)', async () => {
    const f = file({ size: 2 * 1024 * 1024, pauseAt: 1024 * 1024 })
    src.civitai.set(611, [f])
    const paused = once(src.events, 'paused')
    const jobId = await start(w, { source: 'civitai', model_version_id: 611 })
    await Promise.all([paused, progressed(w, jobId)])
    assert.deepEqual(staged(w, 'checkpoints').map((n) => n.startsWith(`${f.name}.`) && n.endsWith('.authsvc-partial')), [true], 'the partial file is in the staging directory while it runs')
    assert.ok(!listing(w, 'checkpoints').some((n) => n.includes(f.name)), 'and not in the folder itself')
    assert.equal(transfersRunning(), true, 'the decision loop is told a transfer runs (its busy poll stays off)')
    const res = await call(w.sc, { method: 'POST', url: `/authsvc/api/model-download/jobs/${jobId}/cancel`, bearer: w.aliceJwt })
    assert.equal(res.statusCode, 200, res.body)
    assert.equal(JSON.parse(res.body).job.status, 'cancelled')
    assert.ok(!listing(w, 'checkpoints').some((n) => n.includes(f.name)), 'neither the model nor its partial file')
    assert.ok(!existsSync(join(w.modelsDir, 'checkpoints', DOWNLOAD_STAGING_DIR)), 'the staging directory went with its last partial file')
    assert.equal(transfersRunning(), false)
    const again = await call(w.sc, { method: 'POST', url: `/authsvc/api/model-download/jobs/${jobId}/cancel`, bearer: w.aliceJwt })
    assert.equal(again.statusCode, 409)
    assert.equal(JSON.parse(again.body).code, 'CONFLICT')
  })

  it('two downloads into one folder share its staging directory: it stays while either partial file is in it, and goes with the last', async () => {
    const a = file({ size: 2 * 1024 * 1024, pauseAt: 1024 * 1024 })
    const b = file({ size: 2 * 1024 * 1024, pauseAt: 1024 * 1024 })
    src.civitai.set(612, [a])
    src.civitai.set(613, [b])
    const paused = new Set<number>()
    const bothPaused = new Promise<void>((resolve) => {
      const onPaused = (id: number) => {
        paused.add(id)
        if (paused.has(a.id) && paused.has(b.id)) {
          src.events.off('paused', onPaused)
          resolve()
        }
      }
      src.events.on('paused', onPaused)
    })
    const jobA = await start(w, { source: 'civitai', model_version_id: 612 })
    const jobB = await start(w, { source: 'civitai', model_version_id: 613 })
    await Promise.all([bothPaused, progressed(w, jobA), progressed(w, jobB)])
    assert.equal(staged(w, 'checkpoints').length, 2)
    const res = await call(w.sc, { method: 'POST', url: `/authsvc/api/model-download/jobs/${jobA}/cancel`, bearer: w.aliceJwt })
    assert.equal(res.statusCode, 200, res.body)
    assert.deepEqual(staged(w, 'checkpoints').map((n) => n.startsWith(`${b.name}.`)), [true], 'the other partial file and its directory stay')
    src.release(b.id)
    const done = await ended(w, jobB)
    assert.equal(done.status, 'completed', done.error)
    assert.equal(sha(join(w.modelsDir, 'checkpoints', b.name)), src.trueSha256(b))
    assert.ok(!existsSync(join(w.modelsDir, 'checkpoints', DOWNLOAD_STAGING_DIR)), 'gone with the last partial file')
    assert.ok(!listing(w, 'checkpoints').includes(a.name))
  })

  it('an existing model of the same name is never overwritten', async () => {
    const f = file()
    writeFileSync(join(w.modelsDir, 'checkpoints', f.name), 'mine')
    src.civitai.set(612, [f])
    const job = await ended(w, await start(w, { source: 'civitai', model_version_id: 612 }))
    assert.equal(job.status, 'failed')
    assert.match(job.error, /already has a file named .* never overwritten/)
    assert.equal(readFileSync(join(w.modelsDir, 'checkpoints', f.name), 'utf8'), 'mine')
  })

  it('a download\'s grant is of its file: once it is removed, another user\'s download under the name is not the first user\'s', async () => {
    const mine = file()
    src.civitai.set(613, [mine])
    assert.equal((await ended(w, await start(w, { source: 'civitai', model_version_id: 613 }))).status, 'completed')
    assert.deepEqual(grantedTo(w, mine.name), ['alice'])
    rmSync(join(w.modelsDir, 'checkpoints', mine.name))
    const theirs = file({ name: mine.name, seed: 9613 })
    src.civitai.set(614, [theirs])
    assert.equal((await ended(w, await start(w, { source: 'civitai', model_version_id: 614 }, w.bobJwt))).status, 'completed')
    assert.equal(sha(join(w.modelsDir, 'checkpoints', mine.name)), src.trueSha256(theirs))
    assert.deepEqual(grantedTo(w, mine.name), ['bob'], 'bob\'s file, granted to bob only')
  })

  describe('a download\'s grant holds while the host opens its very file for the name', () => {
    const land = async (version: number, over: Partial<StandinFile> = {}) => {
      const f = file(over)
      src.civitai.set(version, [f])
      assert.equal((await ended(w, await start(w, { source: 'civitai', model_version_id: version }))).status, 'completed')
      assert.deepEqual(grantedTo(w, f.name), ['alice'])
      return { f, path: join(w.modelsDir, 'checkpoints', f.name) }
    }
    const shapes: Array<[string, (path: string) => void, 'file_gone' | 'file_changed']> = [
      ['removed by hand', (path) => rmSync(path), 'file_gone'],
      ['another file moved over its name', (path) => {
        const other = join(w.dir, 'another-model.bin')
        writeFileSync(other, 'another team\'s model')
        renameSync(other, path)
      }, 'file_changed'],
      ['written over in place', (path) => writeFileSync(path, 'another team\'s model'), 'file_changed'],
      ['appended to', (path) => appendFileSync(path, 'more'), 'file_changed'],
      ['moved out of the folder', (path) => renameSync(path, join(w.dir, `aside-${version}.bin`)), 'file_gone'],
    ]
    let version = 690
    for (const [name, change, reason] of shapes) {
      it(`${name}: her grant goes, and the event says why`, async () => {
        const { f, path } = await land(version++)
        const gone = revoked(w, f.name)
        change(path)
        assert.equal((await within(gone, 10_000, 'her grant did not go')).reason, reason)
        assert.deepEqual(grantedTo(w, f.name), [])
        // a file under the name now: still not hers
        if (!existsSync(path)) writeFileSync(path, 'another team\'s model')
        await modelsOf(w).checkHostGrants()
        assert.deepEqual(grantedTo(w, f.name), [])
      })
    }

    it('the host\'s folders change so that a path it looks in first has a file of the name: her grant goes', async () => {
      const { f } = await land(version++)
      const first = join(w.dir, 'models-first', 'checkpoints')
      mkdirSync(first, { recursive: true })
      writeFileSync(join(first, f.name), 'another team\'s model')
      const gone = revoked(w, f.name)
      const host = facts(w.modelsDir)
      w.sc.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 'test', host: { ...host, model_folders: { ...host.model_folders, checkpoints: [first, ...host.model_folders.checkpoints] } } })
      assert.equal((await within(gone, 10_000, 'her grant did not go')).reason, 'file_changed')
      sayHello(w.sc, w.modelsDir) // the folders as the other rows know them
    })

    it('a file of the name appears later in a path the host looks in first: her grant goes', async () => {
      const { f } = await land(version++)
      const first = join(w.dir, `models-before-${f.id}`, 'checkpoints')
      mkdirSync(first, { recursive: true })
      const host = facts(w.modelsDir)
      w.sc.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 'test', host: { ...host, model_folders: { ...host.model_folders, checkpoints: [first, ...host.model_folders.checkpoints] } } })
      assert.ok(await poll(async () => modelsOf(w).access().cache.folder('checkpoints')?.paths.length === 2, 10_000))
      await modelsOf(w).checkHostGrants()
      assert.deepEqual(grantedTo(w, f.name), ['alice'], 'nothing of the name in the first path yet')
      const gone = revoked(w, f.name)
      writeFileSync(join(first, f.name), 'another team\'s model')
      assert.equal((await within(gone, 10_000, 'her grant did not go')).reason, 'file_changed')
      sayHello(w.sc, w.modelsDir)
    })

    it('the controls: her file read, its mode changed, the folder rescanned, another file added beside it: hers stays', async () => {
      const { f, path } = await land(version++)
      readFileSync(path)
      chmodSync(path, 0o600)
      writeFileSync(join(w.modelsDir, 'checkpoints', `beside-${f.name}`), 'x')
      assert.equal((await call(w.sc, { method: 'POST', url: '/authsvc/api/model-cache/refresh', bearer: w.adminJwt })).statusCode, 200)
      await modelsOf(w).checkHostGrants()
      assert.deepEqual(grantedTo(w, f.name), ['alice'])
    })
  })

  it('a download that finds its name taken when it lands takes no one\'s grant: the one who landed first keeps hers', async () => {
    const bobs = file({ size: 2 * 1024 * 1024, pauseAt: 1024 * 1024 })
    const hers = file({ name: bobs.name, seed: 9615 })
    src.civitai.set(615, [bobs])
    src.civitai.set(616, [hers])
    const paused = once(src.events, 'paused')
    const bobJob = await start(w, { source: 'civitai', model_version_id: 615 }, w.bobJwt)
    await Promise.all([paused, progressed(w, bobJob)])
    assert.equal((await ended(w, await start(w, { source: 'civitai', model_version_id: 616 }))).status, 'completed')
    src.release(bobs.id)
    assert.equal((await ended(w, bobJob)).status, 'failed', 'the name was taken while his transfer ran')
    assert.equal(sha(join(w.modelsDir, 'checkpoints', bobs.name)), src.trueSha256(hers))
    assert.deepEqual(grantedTo(w, bobs.name), ['alice'], 'her grant was put back')
  })

  it('on a host whose file system ignores case, another case of a removed download\'s name is that name', async () => {
    const ci = await openWorld(src, {}, tempDir('as-dl-case-'), false)
    try {
      const host = { ...facts(ci.modelsDir), model_paths: { sep: '/', case_insensitive: true } }
      ci.sc.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 'test', host })
      const first = file({ name: 'Shared-Name.safetensors' })
      src.civitai.set(617, [first])
      assert.equal((await ended(ci, await start(ci, { source: 'civitai', model_version_id: 617 }))).status, 'completed')
      rmSync(join(ci.modelsDir, 'checkpoints', first.name))
      const next = file({ name: 'shared-name.safetensors', seed: 9618 })
      src.civitai.set(618, [next])
      assert.equal((await ended(ci, await start(ci, { source: 'civitai', model_version_id: 618 }, ci.bobJwt))).status, 'completed')
      assert.deepEqual(ci.sc.services.modelGrants.list(ci.aliceId).map((g) => g.item_name), [], 'hers went: the host would open his file for it')
    } finally {
      await ci.sc.close()
    }
  })

  it('a name with path parts lands as its last part, inside the folder', async () => {
    const f = file({ name: '../../escape/..\\evil.safetensors' })
    src.civitai.set(613, [f])
    const job = await ended(w, await start(w, { source: 'civitai', model_version_id: 613 }))
    assert.equal(job.status, 'completed', job.error)
    assert.equal(job.filename, 'evil.safetensors')
    assert.ok(existsSync(join(w.modelsDir, 'checkpoints', 'evil.safetensors')))
    assert.ok(!existsSync(join(w.modelsDir, 'escape')))
  })

  it('an unexpected failure (a file where the model folder goes) is told by its code: the owner\'s job never names a server path', async () => {
    const folder = join(w.modelsDir, 'loras')
    renameSync(folder, `${folder}.aside`)
    writeFileSync(folder, 'not a folder')
    try {
      src.civitai.set(614, [file()])
      const job = await ended(w, await start(w, { source: 'civitai', model_version_id: 614, folder_type: 'loras' }))
      assert.equal(job.status, 'failed')
      assert.equal(job.error, 'The download failed (EEXIST)') // mkdir of a path that is a file
      assert.ok(!job.error.includes(w.modelsDir))
    } finally {
      rmSync(folder, { force: true })
      renameSync(`${folder}.aside`, folder)
    }
  })

  describe('who may do what', () => {
    it('a user without can_download_models is refused (403); no credential is 401', async () => {
      for (const url of ['/authsvc/api/model-download/sources', '/authsvc/api/model-download/jobs', '/authsvc/api/model-download/folders']) {
        assert.equal((await call(w.sc, { url, bearer: w.plainJwt })).statusCode, 403, url)
        assert.equal((await call(w.sc, { url })).statusCode, 401, url)
      }
      const post = await call(w.sc, { method: 'POST', url: '/authsvc/api/model-download/download', bearer: w.plainJwt, body: { source: 'civitai', model_version_id: 1 } })
      assert.equal(post.statusCode, 403)
    })

    it('owners see their own jobs; another user\'s job is 404 to read and to cancel; an admin sees all', async () => {
      const f = file({ size: 2 * 1024 * 1024, pauseAt: 512 * 1024 })
      src.civitai.set(620, [f])
      const paused = once(src.events, 'paused')
      const jobId = await start(w, { source: 'civitai', model_version_id: 620 }, w.bobJwt)
      await Promise.all([paused, progressed(w, jobId)])
      assert.equal(await jobOf(w, jobId, w.aliceJwt), undefined)
      const cancel = await call(w.sc, { method: 'POST', url: `/authsvc/api/model-download/jobs/${jobId}/cancel`, bearer: w.aliceJwt })
      assert.equal(cancel.statusCode, 404)
      const aliceList = JSON.parse((await call(w.sc, { url: '/authsvc/api/model-download/jobs', bearer: w.aliceJwt })).body)
      assert.ok(!aliceList.jobs.some((j: { job_id: string }) => j.job_id === jobId))
      assert.ok(aliceList.jobs.every((j: { username: string }) => j.username === 'alice'))
      const adminList = JSON.parse((await call(w.sc, { url: '/authsvc/api/model-download/jobs', bearer: w.adminJwt })).body)
      assert.ok(adminList.jobs.some((j: { job_id: string; username: string }) => j.job_id === jobId && j.username === 'bob'))
      const running = await jobOf(w, jobId, w.bobJwt)
      assert.equal(running.status, 'running')
      assert.ok(running.bytes_done > 0 && running.total_bytes === f.size, JSON.stringify(running))
      src.release(f.id)
      const done = await ended(w, jobId)
      assert.equal(done.status, 'completed', done.error)
      // bob's model is granted to bob, not to alice
      assert.ok(!w.sc.services.modelGrants.list(w.aliceId).some((g) => g.item_name === f.name))
    })

    it('a key is stored sealed, never returned: sources_with_keys names the source only', async () => {
      const secret = 'hf_never-shown-0123456789'
      await putKey(w.sc, w.aliceJwt, 'huggingface', secret)
      const res = await call(w.sc, { url: '/authsvc/api/model-download/sources', bearer: w.aliceJwt })
      assert.equal(res.statusCode, 200)
      assert.ok(!res.body.includes(secret))
      assert.deepEqual(JSON.parse(res.body).sources_with_keys, ['huggingface'])
      assert.deepEqual(JSON.parse(res.body).capabilities.limits, { active_total: 3, active_civitai: 2, active_huggingface: 2 })
      const stored = await w.sc.services.kv.entries<{ sealed: string }>('download_key')
      assert.equal(stored.length, 1)
      assert.match(stored[0][1].sealed, /^enc:v1:/)
      assert.ok(!JSON.stringify(stored).includes(secret))
      await w.sc.services.flush()
      assert.ok(!readFileSync(join(w.dir, 'authsvc.sqlite')).includes(secret), 'not in the sqlite file in clear')
      const clear = await putKey(w.sc, w.aliceJwt, 'huggingface', '')
      assert.equal(clear.statusCode, 200)
      assert.deepEqual(JSON.parse((await call(w.sc, { url: '/authsvc/api/model-download/sources', bearer: w.aliceJwt })).body).sources_with_keys, [])
    })

    it('bad requests are 400 VALIDATION_FAILED, never queued', async () => {
      const rows: Array<Record<string, unknown>> = [
        {},
        { source: 'civitai' },
        { source: 'civitai', model_version_id: 1, repo_id: 'a/b' },
        { source: 'huggingface', repo_id: 'a', filename: 'x.safetensors' },
        { source: 'huggingface', repo_id: 'a/b', filename: '../x.safetensors' },
        { source: 'huggingface', repo_id: 'a/b', filename: 'x.safetensors', revision: '../../x' },
        { source: 'civitai', model_version_id: 1, folder_type: 'custom_nodes' },
        { source: 'civitai', model_version_id: 1, folder_type: 'nope' },
        { source: 'civitai', model_version_id: -1 },
        { source: 'ftp', model_version_id: 1 },
        { url: 'https://example.com/models/1' },
        { url: 'not a url' },
        { url: `${src.civitaiUrl}/models/1`, source: 'huggingface' },
        { source: 'civitai', model_version_id: 1, extra: true },
      ]
      // a key pasted with an invisible character (a zero-width space, a no-break space) never works in a header: refused when set
      for (const api_key of ['secretkey\u200b', 'secret\u00a0key', 'clé-secrète', 'two words']) {
        const res = await putKey(w.sc, w.aliceJwt, 'civitai', api_key)
        assert.equal(res.statusCode, 400, `${JSON.stringify(api_key)} → ${res.body}`)
        assert.equal(JSON.parse(res.body).code, 'VALIDATION_FAILED')
        assert.ok(!res.body.includes('secret'), 'the answer does not repeat the key')
      }
      for (const body of rows) {
        const res = await call(w.sc, { method: 'POST', url: '/authsvc/api/model-download/download', bearer: w.aliceJwt, body })
        assert.equal(res.statusCode, 400, `${JSON.stringify(body)} → ${res.body}`)
        assert.equal(JSON.parse(res.body).code, 'VALIDATION_FAILED')
      }
      const jobs = [`/authsvc/api/model-download/jobs/not-a-uuid`, `/authsvc/api/model-download/jobs/00000000-0000-4000-8000-000000000000`]
      assert.equal((await call(w.sc, { url: jobs[0], bearer: w.aliceJwt })).statusCode, 400)
      assert.equal((await call(w.sc, { url: jobs[1], bearer: w.aliceJwt })).statusCode, 404)
    })
  })
})

describe('a stalled transfer times out, is tried again from where it stopped, then fails', () => {
  it('stall_timeout_seconds 1: two stalls, the second asked with Range, then a failed job and no file', async () => {
    const src = await startDownloadStandins()
    const w = await openWorld(src, { stall_timeout_seconds: 1 })
    try {
      const f = file({ stallAt: 50_000 })
      src.civitai.set(609, [f])
      const job = await ended(w, await start(w, { source: 'civitai', model_version_id: 609 }))
      assert.equal(job.status, 'failed')
      assert.match(job.error, /stalled: nothing arrived for 1 s/)
      assert.equal(job.attempts, 1)
      const cdn = src.seen.filter((s) => s.server === 'cdn')
      assert.deepEqual(cdn.map((s) => s.range), [undefined, 'bytes=50000-'])
      assert.deepEqual(listing(w, 'checkpoints'), [])
    } finally {
      await w.sc.close()
      await src.close()
    }
  })
})

describe('the queue\'s limits: one source full never holds back the other', () => {
  it('with one slot per source, a Hugging Face job finishes while a second Civitai job waits behind a paused one', async () => {
    const src = await startDownloadStandins()
    const w = await openWorld(src, { max_active_per_source: 1, max_active_total: 2 })
    try {
      const slow = file({ size: 1024 * 1024, pauseAt: 256 * 1024 })
      const second = file()
      src.civitai.set(701, [slow])
      src.civitai.set(702, [second])
      src.repos.add('o/r')
      const hfFile = file({ name: 'fast.safetensors' })
      src.huggingface.set('o/r@main/fast.safetensors', hfFile)
      const paused = once(src.events, 'paused')
      const a = await start(w, { source: 'civitai', model_version_id: 701 })
      await paused
      const b = await start(w, { source: 'civitai', model_version_id: 702 })
      const c = await ended(w, await start(w, { source: 'huggingface', repo_id: 'o/r', filename: 'fast.safetensors' }))
      assert.equal(c.status, 'completed', c.error)
      assert.equal((await jobOf(w, b)).status, 'queued')
      assert.equal((await jobOf(w, a)).status, 'running')
      src.release(slow.id)
      assert.equal((await ended(w, a)).status, 'completed')
      assert.equal((await ended(w, b)).status, 'completed')
    } finally {
      await w.sc.close()
      await src.close()
    }
  })
})

describe('a job outlives its request, not its account', () => {
  const rows: Array<[string, Record<string, unknown>, RegExp]> = [
    ['a queued job of a user disabled meanwhile fails before any request with their key', { disabled: true }, /disabled or deleted/],
    ['a queued job of a user whose role may no longer download fails before any request with their key', { role: 'user' }, /may no longer download models/],
  ]
  for (const [name, change, error] of rows) {
    it(name, async () => {
      const src = await startDownloadStandins()
      const w = await openWorld(src, { max_active_per_source: 1, max_active_total: 1 })
      try {
        const slow = file({ size: 1024 * 1024, pauseAt: 256 * 1024 })
        src.civitai.set(801, [slow])
        src.civitai.set(802, [file()])
        const paused = once(src.events, 'paused')
        const first = await start(w, { source: 'civitai', model_version_id: 801 }, w.adminJwt)
        await paused
        const queued = await start(w, { source: 'civitai', model_version_id: 802 })
        assert.equal((await jobOf(w, queued)).status, 'queued')
        const alice = w.sc.services.users.byUsername('alice')!
        await w.sc.services.users.update(alice.user_id, change)
        src.release(slow.id)
        assert.equal((await ended(w, first)).status, 'completed')
        const job = await ended(w, queued)
        assert.equal(job.status, 'failed')
        assert.match(job.error ?? '', error)
      } finally {
        await w.sc.close()
        await src.close()
      }
    })
  }
})

describe('a deleted account takes its keys and its live jobs with it', () => {
  it('its keys leave the store, its running and queued jobs are cancelled with no file left; another user\'s key and job stay', async () => {
    const src = await startDownloadStandins()
    const w = await openWorld(src, { max_active_per_source: 1, max_active_total: 1 })
    try {
      assert.equal((await putKey(w.sc, w.aliceJwt, 'civitai', 'alice-civitai-key-0123')).statusCode, 200)
      assert.equal((await putKey(w.sc, w.aliceJwt, 'huggingface', 'hf_alice-key-0123456789')).statusCode, 200)
      assert.equal((await putKey(w.sc, w.bobJwt, 'civitai', 'bob-civitai-key-0123')).statusCode, 200)
      const slow = file({ size: 1024 * 1024, pauseAt: 256 * 1024 })
      src.civitai.set(811, [slow])
      src.civitai.set(812, [file()])
      src.civitai.set(813, [file()])
      const paused = once(src.events, 'paused')
      const running = await start(w, { source: 'civitai', model_version_id: 811 })
      await Promise.all([paused, progressed(w, running)])
      const queued = await start(w, { source: 'civitai', model_version_id: 812 })
      const bobs = await start(w, { source: 'civitai', model_version_id: 813 }, w.bobJwt)
      assert.equal((await jobOf(w, queued)).status, 'queued')
      assert.ok(staged(w, 'checkpoints').some((n) => n.startsWith(`${slow.name}.`)), 'the running job\'s partial file is there')

      const endings = Promise.all([ended(w, running), ended(w, queued)])
      const deleted = await call(w.sc, { method: 'DELETE', url: '/authsvc/api/users/alice', bearer: w.adminJwt })
      assert.equal(deleted.statusCode, 200, deleted.body)
      // the feature acts on the deletion's event, after the answer: its keys go first, then its jobs
      const keysLeft = async () => (await w.sc.services.kv.entries<{ user_id: string; source: string }>('download_key')).map(([, r]) => [r.user_id, r.source])
      const bobId = w.sc.services.users.byUsername('bob')!.user_id
      assert.ok(await poll(async () => (await keysLeft()).length === 1, 10_000), `alice's keys are still stored: ${JSON.stringify(await keysLeft())}`)
      assert.deepEqual(await keysLeft(), [[bobId, 'civitai']], 'only bob\'s key is left')
      const statuses = async () => Promise.all([running, queued].map(async (id) => (await jobOf(w, id, w.adminJwt)).status as string))
      assert.ok(await poll(async () => (await statuses()).every((st) => FINAL.has(st)), 10_000), `alice's jobs did not end: ${JSON.stringify(await statuses())}`)
      assert.deepEqual((await endings).map((j) => j.status), ['cancelled', 'cancelled'])
      assert.deepEqual([...staged(w, 'checkpoints'), ...listing(w, 'checkpoints')].filter((n) => n.includes(slow.name)), [], 'no partial file left, nor the model')
      // bob's job runs on (it waited behind alice's), and the admins still see what alice's jobs were
      assert.equal((await ended(w, bobs)).status, 'completed')
      const all = JSON.parse((await call(w.sc, { url: '/authsvc/api/model-download/jobs', bearer: w.adminJwt })).body).jobs as Array<{ job_id: string; status: string }>
      assert.deepEqual(all.filter((j) => j.job_id === running || j.job_id === queued).map((j) => j.status), ['cancelled', 'cancelled'])
    } finally {
      await w.sc.close()
      await src.close()
    }
  })
})

describe('keys of an account deleted without the event go at the next start', () => {
  it('an account removed while no downloads feature listened (or whose removal failed): its key is gone once the sidecar starts again', () => withRestarts('as-dl-orphan-key-', async (_src, first, reopen) => {
    assert.equal((await putKey(first.sc, first.aliceJwt, 'civitai', 'alice-civitai-key-0123')).statusCode, 200)
    assert.equal((await putKey(first.sc, first.bobJwt, 'civitai', 'bob-civitai-key-0123')).statusCode, 200)
    const alice = first.aliceId
    const bob = first.sc.services.users.byUsername('bob')!.user_id
    await first.sc.services.users.delete(bob) // the record alone: no route, no event
    await first.sc.close({ keepDir: true })
    const next = await reopen()
    const stored = await next.sc.services.kv.entries<{ user_id: string }>('download_key')
    assert.deepEqual(stored.map(([, r]) => r.user_id), [alice], 'bob\'s key went with his account; alice\'s stays')
  }))
})

/** What `held` does to a store: its feed muted (the changes of that time never reach its listeners), its single reads failed, its whole-kind reads of download keys refused (counted), its removals of download keys refused. */
interface StoreHold {
  muted?: boolean
  failReads?: boolean
  failKeyLoads?: boolean
  keyReadsRefused?: number
  failKeyRemovals?: boolean
}

/** Wraps the store a sidecar opens so a row can hold it as `hold` says, at any moment. */
function held(hold: StoreHold): (kv: KeyValueStore) => KeyValueStore {
  return (kv) => new Proxy(kv, {
    get(target, prop) {
      const store = target as SharedStore
      if (prop === 'subscribe') return (listener: (c: Change) => void) => store.subscribe((c) => (hold.muted === true ? undefined : listener(c)))
      if (prop === 'getVersioned') return (key: string) => (hold.failReads === true ? Promise.reject(new Error('the store is away')) : store.getVersioned(key))
      if (prop === 'entriesVersioned') {
        return (kind: string) => {
          if (hold.failKeyLoads !== true || kind !== 'download_key') return store.entriesVersioned(kind)
          hold.keyReadsRefused = (hold.keyReadsRefused ?? 0) + 1
          return Promise.reject(new Error('the store is away'))
        }
      }
      if (prop === 'delete') return (key: string) => (hold.failKeyRemovals === true && key.startsWith('download_key:') ? Promise.reject(new Error('the store refused')) : store.delete(key))
      const value = Reflect.get(target, prop, target) as unknown
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value
    },
  })
}

/** `work`, or a failure naming `what` once `ms` have passed (a row that must fail, not hang, when it regresses). */
function within<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  return beforeDeadline(work, ms, () => new Error(`${what} (${ms} ms)`))
}

interface SharedStoreRow {
  src: DownloadStandins
  /** opens a sidecar on the row's store (its store held as `hold` says); `opened` is told of it at once */
  open(dir: string, hold?: StoreHold, opened?: (sc: Sidecar) => void): Promise<World>
  /** closes one before the row ends (every other is closed after it, whatever it did) */
  close(sc: Sidecar, keepDir?: boolean): Promise<void>
}

/** A row with the stand-ins and one real Redis: two or more sidecars on one shared store. */
async function onSharedStore(row: (r: SharedStoreRow) => Promise<void>): Promise<void> {
  // both started, or neither left running: a stand-in left open holds the test file open for ever
  const [started, stored] = await Promise.allSettled([startDownloadStandins(), startRedis()])
  if (started.status === 'rejected' || stored.status === 'rejected') {
    if (started.status === 'fulfilled') await started.value.close()
    if (stored.status === 'fulfilled') await stored.value.stop()
    throw started.status === 'rejected' ? started.reason : (stored as PromiseRejectedResult).reason
  }
  const [src, redis] = [started.value, stored.value]
  const config = { backend: 'redis', redis_url: redis.url }
  const open = new Set<Sidecar>()
  try {
    await row({
      src,
      open: (dir, hold, opened) => openWorld(src, {}, dir, true, {
        config,
        wrap: hold === undefined ? undefined : held(hold),
        opened: (sc) => {
          open.add(sc)
          opened?.(sc)
        },
      }),
      async close(sc, keepDir = false) {
        open.delete(sc)
        await sc.close({ keepDir })
      },
    })
  } finally {
    // each closed whatever another's close did; the store stopped last
    for (const sc of [...open].reverse()) await sc.close().catch((err: unknown) => console.error('a sidecar did not close', err))
    await Promise.all([src.close(), redis.stop()])
  }
}

/** Whose download keys the (shared) store holds, one entry per key. */
async function keyOwners(w: World): Promise<string[]> {
  return (await w.sc.services.kv.entries<{ user_id: string }>('download_key')).map(([, r]) => r.user_id)
}

describe('on a shared store, a deletion on one instance reaches the downloads of another', { skip: redisSkipReason() }, () => {
  it('deleted on A: B cancels the account\'s running job (no file left); B\'s next start removes a key whose account the store no longer has', () => onSharedStore(async ({ src, open, close }) => {
    const a = await open(tempDir('as-dl-shared-a-'))
    const bDir = tempDir('as-dl-shared-b-')
    let b = await open(bDir)
    // alice's download runs on B (B's own job store), with the key she stored there
    assert.equal((await putKey(b.sc, b.aliceJwt, 'civitai', 'alice-civitai-key-0123')).statusCode, 200)
    const slow = file({ size: 1024 * 1024, pauseAt: 256 * 1024 })
    src.civitai.set(821, [slow])
    const paused = once(src.events, 'paused')
    const running = await start(b, { source: 'civitai', model_version_id: 821 })
    await Promise.all([paused, progressed(b, running)])
    const ending = ended(b, running)

    // deleted on A: A removes the keys (the store is shared) and has no job of hers; B hears the deletion through the feed
    const deleted = await call(a.sc, { method: 'DELETE', url: '/authsvc/api/users/alice', bearer: a.adminJwt })
    assert.equal(deleted.statusCode, 200, deleted.body)
    const status = async () => (await jobOf(b, running, b.adminJwt)).status as string
    assert.ok(await poll(async () => FINAL.has(await status()), 10_000), `B's job of the deleted account did not end: ${await status()}`)
    assert.equal((await ending).status, 'cancelled')
    assert.deepEqual([...staged(b, 'checkpoints'), ...listing(b, 'checkpoints')].filter((n) => n.includes(slow.name)), [], 'no partial file left on B, nor the model')
    assert.ok(await poll(async () => (await keyOwners(a)).length === 0, 10_000), `alice's key is still stored: ${JSON.stringify(await keyOwners(a))}`)

    // bob's account removed on A without the event (a deletion whose other steps failed) while B
    // is stopped (a running B would hear of it and remove the key): his key stays until B starts again
    await close(b.sc, true)
    assert.equal((await putKey(a.sc, a.bobJwt, 'civitai', 'bob-civitai-key-0123')).statusCode, 200)
    const bob = a.sc.services.users.byUsername('bob')!.user_id
    await a.sc.services.users.delete(bob)
    assert.deepEqual(await keyOwners(a), [bob])
    // (the new B makes a fresh bob: its key is not the old one's)
    b = await open(bDir)
    assert.deepEqual(await keyOwners(a), [], 'the deleted account\'s key went at B\'s start')
  }))
})

describe('on a shared store, a downloaded model is granted on the host it landed on only', { skip: redisSkipReason() }, () => {
  it('downloaded on A: alice may load it on A, not on B where another file has the name; the admin pages say so; a revocation on A and her deletion on B take it', () => onSharedStore(async ({ src, open }) => {
    const a = await open(tempDir('as-dl-hostgrant-a-'))
    const b = await open(tempDir('as-dl-hostgrant-b-'))
    // a role that sees only what it is granted (the grant is what makes a download usable)
    for (const w of [a, b]) w.sc.services.roles.replace({ ...DEFAULT_GROUPS, downloader: { ...DEFAULT_GROUPS.user, can_download_models: true, can_view_all_comfyui_items: false } })
    const f = file()
    // on B, someone else's model under the very name the source gives (anyone may upload under any name)
    writeFileSync(join(b.modelsDir, 'checkpoints', f.name), 'another studio\'s private model')
    src.civitai.set(841, [f])
    const job = await ended(a, await start(a, { source: 'civitai', model_version_id: 841, folder_type: 'checkpoints' }))
    assert.equal(job.status, 'completed', job.error)

    const loads = async (w: World): Promise<string> => {
      const d = await decide(w.sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: { authorization: `Bearer ${w.aliceJwt}` } })
      if (d.action !== 'pass') return JSON.stringify(d)
      const graph = { prompt: { 4: { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: f.name } } } }
      const out = stepAnswer(await w.sc.handlers.body({ type: 'body', id: 1, ctx: d.need_body!.ctx }, Buffer.from(JSON.stringify(graph), 'utf8')))
      return out.action === 'pass' ? 'pass' : (out.body_text ?? JSON.stringify(out))
    }
    const grants = async (w: World) => JSON.parse((await call(w.sc, { url: '/authsvc/api/users/alice/shared-items', bearer: w.adminJwt })).body).items as Array<Record<string, unknown>>
    assert.equal(await loads(a), 'pass', 'usable on the host it landed on')
    assert.match(await loads(b), /MODEL_NOT_ALLOWED/, 'not on another host of the store')
    assert.deepEqual((await grants(a)).map((g) => [g.folder, g.item_name, g.granted_by, g.host_only]), [['checkpoints', f.name, 'alice', true]])
    assert.deepEqual(await grants(b), [])
    assert.deepEqual((await a.sc.services.kv.entries('model_grant')).length, 0, 'nothing of it in the shared store')

    // control: an admin's grant is by name on every host (the admin's choice), so B then passes
    const shared = await call(b.sc, { method: 'POST', url: '/authsvc/api/users/alice/shared-items', bearer: b.adminJwt, body: { folder: 'checkpoints', item_name: f.name } })
    assert.equal(shared.statusCode, 200, shared.body)
    assert.ok(await poll(async () => (await loads(b)) === 'pass', 10_000), 'the admin\'s shared grant holds on B')
    // the admin's revocation on A takes both the shared grant and A's own
    const revoked = await call(a.sc, { method: 'DELETE', url: '/authsvc/api/users/alice/shared-items', bearer: a.adminJwt, body: { folder: 'checkpoints', item_name: f.name } })
    assert.equal(revoked.statusCode, 200, revoked.body)
    assert.match(await loads(a), /MODEL_NOT_ALLOWED/)
    assert.ok(await poll(async () => /MODEL_NOT_ALLOWED/.test(await loads(b)), 10_000), 'and B hears the shared one go')

    // downloaded again on A, then the account deleted on B: A's own grant goes when A hears of it
    const again = file({ name: `again-${f.name}` })
    src.civitai.set(842, [again])
    assert.equal((await ended(a, await start(a, { source: 'civitai', model_version_id: 842, folder_type: 'checkpoints' }))).status, 'completed')
    const aliceId = a.aliceId
    assert.equal(a.sc.services.modelGrants.list(aliceId).length, 1)
    assert.equal((await call(b.sc, { method: 'DELETE', url: '/authsvc/api/users/alice', bearer: b.adminJwt })).statusCode, 200)
    assert.ok(await poll(async () => (await a.sc.services.localKv.entries('model_host_grant')).length === 0, 10_000), 'A removed the deleted account\'s own grants')
    assert.deepEqual(a.sc.services.modelGrants.list(aliceId), [])
  }))
})

describe('on a shared store, a key the deleting instance never heard of goes too', { skip: redisSkipReason() }, () => {
  it('stored on B while A\'s feed was lost, then the account deleted on A: B removes the key', () => onSharedStore(async ({ open }) => {
    const hold: StoreHold = {}
    const a = await open(tempDir('as-dl-unheard-a-'), hold)
    const b = await open(tempDir('as-dl-unheard-b-'))
    hold.muted = true
    // A's store client hears the change (its collections, muted, do not)
    const reachedA = nextChange(a.sc.services.store, (c) => c.key.startsWith('download_key:'))
    assert.equal((await putKey(b.sc, b.bobJwt, 'civitai', 'bob-civitai-key-0123')).statusCode, 200)
    await reachedA
    hold.muted = false
    const bob = b.sc.services.users.byUsername('bob')!.user_id
    assert.deepEqual(await keyOwners(a), [bob])
    const deleted = await call(a.sc, { method: 'DELETE', url: '/authsvc/api/users/bob', bearer: a.adminJwt })
    assert.equal(deleted.statusCode, 200, deleted.body)
    assert.ok(await poll(async () => (await keyOwners(a)).length === 0, 10_000), 'bob\'s key, stored on B and never heard of by A, is still stored')
  }))
})

describe('on a shared store, the sweep of orphaned keys never takes a live account\'s key', { skip: redisSkipReason() }, () => {
  it('an account B\'s replica has not heard of keeps its key; so does one the store cannot be asked about', () => onSharedStore(async ({ open }) => {
    // B's feed muted (a lagging replica: what A writes meanwhile never reaches B's memory) and its single reads failed on demand
    const hold: StoreHold = {}
    const a = await open(tempDir('as-dl-sweep-a-'))
    const b = await open(tempDir('as-dl-sweep-b-'), hold)
    hold.muted = true
    const carol = await addUser(a.sc, 'carol', 'Passw0rd-long-enough', 'downloader')
    assert.equal((await putKey(a.sc, await sessionJwt(a.sc, carol), 'civitai', 'carol-civitai-key-0123')).statusCode, 200)
    assert.equal(b.sc.services.users.byId(carol.user_id), undefined, 'B\'s replica has not heard of carol')
    // what B's next start sweeps: the keys as the store holds them now
    const sweep = async () => sweepOrphanKeys(new CollectionSourceKeys(await Collection.load(b.sc.services.kv, 'download_key'), b.sc.services.fieldCipher), b.sc.services.users)
    hold.failReads = true
    assert.equal(await sweep(), 0)
    assert.deepEqual(await keyOwners(a), [carol.user_id], 'the store could not be asked: her key stays')
    hold.failReads = false
    assert.equal(await sweep(), 0)
    assert.deepEqual(await keyOwners(a), [carol.user_id], 'asked of the store, carol exists: her key stays')
    // and an account the store has no more is swept, by the same call (dave: made, keyed and
    // removed on A while B heard nothing; carol is held by B now, read from the store above)
    const dave = await addUser(a.sc, 'dave', 'Passw0rd-long-enough', 'downloader')
    assert.equal((await putKey(a.sc, await sessionJwt(a.sc, dave), 'civitai', 'dave-civitai-key-0123')).statusCode, 200)
    await a.sc.services.users.delete(dave.user_id)
    assert.equal(await sweep(), 1)
    assert.deepEqual(await keyOwners(a), [carol.user_id], 'dave\'s key went; carol\'s stays')
  }))
})

describe('a sweep the store refuses does not keep the downloads closed', { skip: redisSkipReason() }, () => {
  it('the orphan\'s removal refused at the start: the downloads open anyway, and the store\'s retry removes the key later', () => onSharedStore(async ({ open }) => {
    const a = await open(tempDir('as-dl-refused-a-'))
    const dave = await addUser(a.sc, 'dave', 'Passw0rd-long-enough', 'downloader')
    assert.equal((await putKey(a.sc, await sessionJwt(a.sc, dave), 'civitai', 'dave-civitai-key-0123')).statusCode, 200)
    await a.sc.services.users.delete(dave.user_id) // the record alone: no event
    // openWorld waits for the downloads to open (the queue); bounded, so a regression fails rather than hangs
    const hold: StoreHold = { failKeyRemovals: true }
    const b = await within(open(tempDir('as-dl-refused-b-'), hold), 20_000, 'the downloads did not open while the sweep was refused')
    const jobs = await call(b.sc, { url: '/authsvc/api/model-download/jobs', bearer: b.aliceJwt })
    assert.equal(jobs.statusCode, 200, jobs.body)
    assert.deepEqual(await keyOwners(a), [dave.user_id], 'the removal was refused')
    hold.failKeyRemovals = false
    assert.ok(await poll(async () => (await keyOwners(a)).length === 0, 15_000), 'the collection\'s retry did not remove the key')
  }))
})

describe('a store the downloads cannot read at the start', { skip: redisSkipReason() }, () => {
  it('a request meanwhile is a 503 STORE_UNAVAILABLE within seconds, not a hung request; the store back, the downloads open by themselves', () => onSharedStore(async ({ open }) => {
    const a = await open(tempDir('as-dl-unread-a-'))
    const hold: StoreHold = { failKeyLoads: true }
    let bSidecar: Sidecar | undefined
    const b = open(tempDir('as-dl-unread-b-'), hold, (sc) => (bSidecar = sc))
    b.catch(() => {}) // awaited below; a failure before that is the row's own
    try {
      assert.ok(await poll(async () => bSidecar !== undefined && (hold.keyReadsRefused ?? 0) >= 1, 10_000), 'B never tried to read its keys')
      // alice's session (shared) on B while its downloads cannot open
      const early = await within(call(bSidecar!, { url: '/authsvc/api/model-download/jobs', bearer: a.aliceJwt }), 15_000, 'the request waited for the downloads to open')
      assert.equal(early.statusCode, 503, early.body)
      assert.equal(JSON.parse(early.body).code, 'STORE_UNAVAILABLE')
      assert.equal(early.headers['retry-after'], '5')
      assert.ok((hold.keyReadsRefused ?? 0) >= 2, 'the read is tried again')
    } finally {
      hold.failKeyLoads = false
    }
    await within(b, 40_000, 'the downloads did not open once the store was back')
    const jobs = await call(bSidecar!, { url: '/authsvc/api/model-download/jobs', bearer: a.aliceJwt })
    assert.equal(jobs.statusCode, 200, jobs.body)
  }))

  it('a sidecar stopped while its downloads try again stops at once and reads the store no more, while one left open goes on trying', () => onSharedStore(async ({ open, close }) => {
    await open(tempDir('as-dl-unread-stop-a-')) // the accounts, on a store that answers
    const stoppedHold: StoreHold = { failKeyLoads: true }
    const openHold: StoreHold = { failKeyLoads: true }
    let stoppedSc: Sidecar | undefined
    // the world around it may still be making its accounts when the sidecar stops: its outcome is not this row's
    open(tempDir('as-dl-unread-stop-b-'), stoppedHold, (sc) => (stoppedSc = sc)).catch(() => {})
    const control = open(tempDir('as-dl-unread-stop-c-'), openHold)
    control.catch(() => {}) // awaited below
    try {
      assert.ok(await poll(async () => stoppedSc !== undefined && (stoppedHold.keyReadsRefused ?? 0) >= 1 && (openHold.keyReadsRefused ?? 0) >= 1, 10_000), 'the sidecars never tried to read their keys')
      const waiting = (stoppedSc!.built.features.find((f) => f.name === 'downloads') as DownloadsFeature).queue()
      waiting.catch(() => {}) // awaited below
      await within(close(stoppedSc!), 10_000, 'the sidecar did not stop while its downloads were trying again')
      // whoever waited for its queue is told, not left waiting
      await assert.rejects(within(waiting, 5_000, 'the wait for the queue outlived the sidecar'), /stopped before its downloads opened/)
      const readsAtStop = stoppedHold.keyReadsRefused
      // the sidecar left open tries twice more (its backoff, the same as the stopped one's would be)
      const controlReads = openHold.keyReadsRefused ?? 0
      assert.ok(await poll(async () => (openHold.keyReadsRefused ?? 0) >= controlReads + 2, 15_000), 'the open sidecar stopped trying')
      assert.equal(stoppedHold.keyReadsRefused, readsAtStop, 'the stopped sidecar read its store again')
    } finally {
      openHold.failKeyLoads = false
    }
    await within(control, 40_000, 'the open sidecar\'s downloads did not open once the store was back')
  }))
})

/** Starts a download of `f` (its source pauses half-way), waits until that half is on disk, and stops the sidecar keeping its files. */
async function stoppedHalfWay(w: World, src: DownloadStandins, version: number, f: StandinFile, folder = 'checkpoints'): Promise<string> {
  src.civitai.set(version, [f])
  const paused = once(src.events, 'paused')
  const jobId = await start(w, { source: 'civitai', model_version_id: version, folder_type: folder })
  await Promise.all([paused, progressed(w, jobId, f.pauseAt!)])
  await w.sc.close({ keepDir: true })
  return jobId
}

/**
 * A row that stops its sidecar and opens another on the same data dir: `reopen` opens the next
 * (`hello` false: no plugin has spoken yet); whichever is open at the end is closed, and the stand-ins.
 */
async function withRestarts(prefix: string, row: (src: DownloadStandins, first: World, reopen: (hello?: boolean) => Promise<World>) => Promise<void>): Promise<void> {
  const src = await startDownloadStandins()
  const dir = tempDir(prefix)
  let current = await openWorld(src, {}, dir)
  try {
    await row(src, current, async (hello = true) => (current = await openWorld(src, {}, dir, hello)))
  } finally {
    await current.sc.close()
    await src.close()
  }
}

describe('the grants of downloads made before they were of this host only', () => {
  it('one in the shared collection, granted by the downloader for a completed job here, is this host\'s from the next start; an admin\'s grants stay shared', () => withRestarts('as-dl-adopt-', async (src, first, reopen) => {
    const f = file()
    src.civitai.set(861, [f])
    const job = await ended(first, await start(first, { source: 'civitai', model_version_id: 861, folder_type: 'checkpoints' }))
    assert.equal(job.status, 'completed', job.error)
    // as a download before the change left it: its grant in the shared collection
    const grants = first.sc.services.modelGrants
    const at = new Date(first.sc.clock()).toISOString()
    assert.equal(await grants.revoke(first.aliceId, 'checkpoints', f.name), true)
    await grants.grant({ user_id: first.aliceId, folder: 'checkpoints', item_name: f.name, granted_by: 'alice', created_at_iso: at })
    // an admin's grants: another model to her, the same name to bob
    const bobId = first.sc.services.users.byUsername('bob')!.user_id
    await grants.grant({ user_id: first.aliceId, folder: 'loras', item_name: 'style.safetensors', granted_by: 'root-admin', created_at_iso: at })
    await grants.grant({ user_id: bobId, folder: 'checkpoints', item_name: f.name, granted_by: 'root-admin', created_at_iso: at })
    const seen = (w: World, userId: string) => w.sc.services.modelGrants.list(userId).map((g) => [g.folder, g.item_name, g.granted_by, g.host_only])
    assert.deepEqual(seen(first, first.aliceId), [['checkpoints', f.name, 'alice', false], ['loras', 'style.safetensors', 'root-admin', false]])
    await first.sc.close({ keepDir: true })

    const again = await reopen()
    assert.deepEqual(seen(again, again.aliceId), [['loras', 'style.safetensors', 'root-admin', false], ['checkpoints', f.name, 'alice', true]])
    assert.deepEqual(seen(again, bobId), [['checkpoints', f.name, 'root-admin', false]])
    assert.deepEqual((await again.sc.services.kv.entries<{ item_name: string }>('model_grant')).map(([, g]) => g.item_name).sort(), [f.name, 'style.safetensors'], 'the shared collection keeps the admin\'s two')
  }))
})

describe('a download\'s grant and its file across a restart', () => {
  it('a file replaced while the sidecar was away loses its grant at the next start, judged on complete folders only; an untouched one keeps it', () => withRestarts('as-dl-follow-', async (src, first, reopen) => {
    const land = async (version: number) => {
      const f = file()
      src.civitai.set(version, [f])
      assert.equal((await ended(first, await start(first, { source: 'civitai', model_version_id: version }))).status, 'completed')
      return f
    }
    const kept = await land(871)
    const replaced = await land(872)
    await first.sc.close({ keepDir: true })
    const path = join(first.modelsDir, 'checkpoints', replaced.name)
    rmSync(path)
    writeFileSync(path, 'another team\'s model')

    const again = await reopen(false)
    const holders = (item: string) => again.sc.services.modelGrants.list(again.aliceId).filter((g) => g.item_name === item).length
    // a ComfyUI still loading its custom nodes: the folder has one path so far, not the one its
    // files are in (a custom node adds that path; an extra_model_paths entry comes the same way)
    const early = join(again.dir, 'early', 'checkpoints')
    mkdirSync(early, { recursive: true })
    const complete = facts(again.modelsDir)
    const partial = { ...complete, model_folders: { ...complete.model_folders, checkpoints: [early] }, all_nodes_loaded: false }
    const scanned = async (paths: string[]) => assert.ok(await poll(async () => JSON.stringify(modelsOf(again).access().cache.folder('checkpoints')?.paths) === JSON.stringify(paths), 10_000), `the scan of ${paths}`)
    again.sc.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 'test', host: partial })
    await scanned([early])
    await modelsOf(again).checkHostGrants()
    assert.deepEqual([holders(kept.name), holders(replaced.name)], [1, 1], 'nothing judged before the folders are known in full')
    // every node loaded, but the plugin could not read the facts again: the import-time ones, so said
    again.sc.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 'test', host: { ...partial, model_folders: { ...partial.model_folders, checkpoints: [early, join(again.dir, 'early-2')] }, all_nodes_loaded: true, facts_incomplete: true } })
    await scanned([early, join(again.dir, 'early-2')])
    await modelsOf(again).checkHostGrants()
    assert.deepEqual([holders(kept.name), holders(replaced.name)], [1, 1], 'nor on facts the plugin says may lack some')
    sayHello(again.sc, again.modelsDir)
    assert.ok(await poll(async () => holders(replaced.name) === 0, 10_000), 'the replaced file\'s grant went')
    await modelsOf(again).checkHostGrants()
    assert.equal(holders(kept.name), 1, 'the untouched file keeps hers')
    // the host restarts and loads its custom nodes again: the same holds
    again.sc.handlers.hello({ type: 'hello', id: 2, protocol: PROTOCOL_VERSION, plugin_version: 'test', host: partial })
    await scanned([early])
    await modelsOf(again).checkHostGrants()
    assert.equal(holders(kept.name), 1)
  }))
})

describe('a restart mid-way resumes with Range and finishes with the right hash', () => {
  it('the partial file is kept across a stop; the next start asks for the rest only', () => withRestarts('as-dl-restart-', async (src, first, reopen) => {
    let w = first
    const f = file({ size: 4 * 1024 * 1024, pauseAt: 2 * 1024 * 1024 })
    const jobId = await stoppedHalfWay(w, src, 801, f)
    assert.equal(staged(w, 'checkpoints').length, 1, 'the partial file is kept across the stop')
    w = await reopen()
    const job = await ended(w, jobId)
    assert.equal(job.status, 'completed', job.error)
    assert.equal(sha(join(w.modelsDir, 'checkpoints', f.name)), src.trueSha256(f))
    const ranged = src.seen.filter((s) => s.server === 'cdn' && s.path.startsWith(`/files/${f.id}/`))
    assert.equal(ranged.length, 2)
    assert.match(ranged[1].range ?? '', /^bytes=\d+-$/)
    assert.equal(ranged[1].range, `bytes=${2 * 1024 * 1024}-`, 'the resume asked for the rest, not the start')
    assert.equal(ranged[1].ifRange, `"${src.trueSha256(f)}"`)
    assert.ok(!existsSync(join(w.modelsDir, 'checkpoints', DOWNLOAD_STAGING_DIR)), 'the staging directory went once the file was placed')
  }))

  it('a source that names another file after the restart: the old partial file is removed, the new one lands, the staging directory goes', () => withRestarts('as-dl-renamed-', async (src, first, reopen) => {
    let w = first
    const f = file({ size: 4 * 1024 * 1024, pauseAt: 2 * 1024 * 1024 })
    const jobId = await stoppedHalfWay(w, src, 805, f)
    assert.equal(staged(w, 'checkpoints').length, 1)
    const renamed = { ...f, id: nextId++, name: `renamed-${f.id}.safetensors`, pauseAt: undefined }
    src.civitai.set(805, [renamed])
    w = await reopen()
    const job = await ended(w, jobId)
    assert.equal(job.status, 'completed', job.error)
    assert.equal(sha(join(w.modelsDir, 'checkpoints', renamed.name)), src.trueSha256(renamed))
    assert.ok(!listing(w, 'checkpoints').includes(f.name))
    assert.ok(!existsSync(join(w.modelsDir, 'checkpoints', DOWNLOAD_STAGING_DIR)), 'no partial file of the first name is left behind in it')
  }))

  it('a job from before the staging directory resumes from its partial file in the folder itself', () => withRestarts('as-dl-oldlayout-', async (src, first, reopen) => {
    let w = first
    const f = file({ size: 4 * 1024 * 1024, pauseAt: 2 * 1024 * 1024 })
    const jobId = await stoppedHalfWay(w, src, 806, f)
    // as an older sidecar left it: the partial file beside the models, its path in the job
    const [name] = staged(w, 'checkpoints')
    const oldPath = join(w.modelsDir, 'checkpoints', name)
    renameSync(join(w.modelsDir, 'checkpoints', DOWNLOAD_STAGING_DIR, name), oldPath)
    rmdirSync(join(w.modelsDir, 'checkpoints', DOWNLOAD_STAGING_DIR))
    w = await reopen(false)
    // no hello yet: the job waits, and its stored path is set as the older sidecar stored it
    assert.equal((await moved(w, jobId)).status, 'queued')
    const queue = await (w.sc.built.features.find((x) => x.name === 'downloads') as DownloadsFeature).queue()
    await (queue as unknown as { jobs: { update(id: string, fields: Partial<DownloadJobRecord>): Promise<unknown> } }).jobs.update(jobId, { partial_path: oldPath })
    sayHello(w.sc, w.modelsDir)
    const job = await ended(w, jobId)
    assert.equal(job.status, 'completed', job.error)
    assert.equal(sha(join(w.modelsDir, 'checkpoints', f.name)), src.trueSha256(f))
    assert.deepEqual(listing(w, 'checkpoints').filter((n) => n.includes(f.name)), [f.name], 'the model in place, the old partial file gone')
    const cdn = src.seen.filter((x) => x.server === 'cdn' && x.path.startsWith(`/files/${f.id}/`))
    assert.equal(cdn.at(-1)?.range, `bytes=${2 * 1024 * 1024}-`, 'resumed from the old partial file, not started again')
  }))

  it('a sidecar started before the plugin\'s hello keeps the job queued, saying why, and resumes it once the host\'s folders come', () => withRestarts('as-dl-nohello-', async (src, first, reopen) => {
    // a restarted sidecar knows no model folder until the plugin reconnects: the job once
    // failed here as "The model folder checkpoints is gone" (CI, real-host-downloads)
    let w = first
    const f = file({ size: 4 * 1024 * 1024, pauseAt: 2 * 1024 * 1024 })
    const jobId = await stoppedHalfWay(w, src, 802, f)
    const asked = src.seen.length
    w = await reopen(false)
    const waiting = await moved(w, jobId)
    assert.equal(waiting.status, 'queued', waiting.error)
    assert.match(waiting.error, /Waiting for ComfyUI to say which model folders it has/)
    assert.equal(src.seen.length, asked, 'nothing was asked of the source before the host spoke')
    sayHello(w.sc, w.modelsDir)
    const job = await ended(w, jobId)
    assert.equal(job.status, 'completed', job.error)
    assert.equal(sha(join(w.modelsDir, 'checkpoints', f.name)), src.trueSha256(f))
    const ranged = src.seen.filter((s) => s.server === 'cdn' && s.path.startsWith(`/files/${f.id}/`))
    assert.equal(ranged.length, 2)
    assert.equal(ranged[1].range, `bytes=${2 * 1024 * 1024}-`)
  }))

  it('a ComfyUI starting names its folders twice: every job waits for the startup facts (a folder, or a path, only they name); complete facts without its folder fail the job as gone', () => withRestarts('as-dl-facts-', async (src, first, reopen) => {
    let w = first
    const f = file({ size: 2 * 1024 * 1024, pauseAt: 1024 * 1024 })
    const later = await stoppedHalfWay(w, src, 803, f, 'loras')
    w = await reopen(false)
    // the import-time hello: checkpoints only (loras is a later custom node's, say), not complete
    const { all_nodes_loaded: _, ...atImport } = facts(w.modelsDir)
    w.sc.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 'test', host: { ...atImport, model_folders: { checkpoints: atImport.model_folders.checkpoints } } })
    const waiting = await moved(w, later)
    assert.equal(waiting.status, 'queued', waiting.error)
    assert.match(waiting.error, /Waiting for ComfyUI to say which model folders it has/)
    // a new job for a folder the import-time facts do name waits as well: a path a later node
    // adds to checkpoints may hold a model of its name, which it would shadow
    const h = file({ size: 256 * 1024 })
    src.civitai.set(805, [h])
    const fresh = await start(w, { source: 'civitai', model_version_id: 805 })
    const freshWaiting = await moved(w, fresh)
    assert.equal(freshWaiting.status, 'queued', freshWaiting.error)
    assert.match(freshWaiting.error, /Waiting for ComfyUI/)
    // every custom node loaded: loras is there, both jobs run
    w.sc.handlers.event({ type: 'event', name: 'host_facts', t: Date.now() / 1000, data: { ...atImport, all_nodes_loaded: true } })
    const [done, freshDone] = await Promise.all([ended(w, later), ended(w, fresh)])
    assert.equal(done.status, 'completed', done.error)
    assert.equal(sha(join(w.modelsDir, 'loras', f.name)), src.trueSha256(f))
    assert.equal(freshDone.status, 'completed', freshDone.error)

    // the same job shape after complete facts that do not name its folder: gone, and said so
    const g = file({ size: 2 * 1024 * 1024, pauseAt: 1024 * 1024 })
    const orphan = await stoppedHalfWay(w, src, 804, g, 'loras')
    assert.equal(staged(w, 'loras').length, 1)
    w = await reopen(false)
    w.sc.handlers.hello({ type: 'hello', id: 1, protocol: PROTOCOL_VERSION, plugin_version: 'test', host: { ...atImport, model_folders: { checkpoints: atImport.model_folders.checkpoints }, all_nodes_loaded: true } })
    const gone = await ended(w, orphan)
    assert.equal(gone.status, 'failed')
    assert.match(gone.error, /The model folder loras is gone/)
    assert.deepEqual(listing(w, 'loras').filter((n) => n.includes(g.name)), [], 'no file is left')
    assert.ok(!existsSync(join(w.modelsDir, 'loras', DOWNLOAD_STAGING_DIR)), 'no partial file, nor its staging directory')
  }))
})

describe('outbound rules: the SSRF rows refuse (allow_private_hosts off)', () => {
  const targets: Array<[string, string, RegExp]> = [
    ['plain http (the loopback CDN)', 'http://127.0.0.1:9/files/1/x?sig=secret-signature-1', /must go to https/],
    ['https to a loopback literal', 'https://127.0.0.1:9/x', /this machine or a private/],
    ['https to loopback written in hex', 'https://0x7f000001/x', /this machine or a private/],
    ['https to ::1', 'https://[::1]/x', /this machine or a private/],
    ['https to an IPv4-mapped loopback', 'https://[::ffff:127.0.0.1]/x', /this machine or a private/],
    ['https to localhost', 'https://localhost/x', /this machine/],
    ['https to a .localhost name', 'https://a.localhost/x', /this machine/],
    ['https to the cloud metadata address', 'https://169.254.169.254/latest/meta-data/', /this machine or a private/],
    ['https to a private 10/8 address', 'https://10.1.2.3/x', /this machine or a private/],
    ['https to a private 192.168/16 address', 'https://192.168.0.1/x', /this machine or a private/],
    ['https to a shared 100.64/10 address', 'https://100.64.0.1/x', /this machine or a private/],
    ['https to an IPv6 link-local address', 'https://[fe80::1]/x', /this machine or a private/],
    ['https to an IPv6 unique-local address', 'https://[fd00::1]/x', /this machine or a private/],
    ['a file: URL', 'file:///etc/passwd', /scheme file is not allowed/],
    ['an ftp: URL', 'ftp://example.com/x', /scheme ftp is not allowed/],
    ['a URL with a user name', 'https://user:pw@example.com/x', /user name or password/],
  ]
  let src: DownloadStandins
  let w: World
  before(async () => {
    src = await startDownloadStandins()
    w = await openWorld(src, { allow_private_hosts: false, max_retries: 0 })
  })
  after(async () => {
    await w.sc.close()
    await src.close()
  })
  let version = 900
  for (const [name, target, message] of targets) {
    it(`a redirect to ${name} is refused`, async () => {
      const f = file({ redirectTo: target })
      const id = version++
      src.civitai.set(id, [f])
      const before = src.seen.length
      const job = await ended(w, await start(w, { source: 'civitai', model_version_id: id }))
      assert.equal(job.status, 'failed')
      assert.match(job.error, /was refused/)
      assert.match(job.error, message)
      assert.ok(!job.error.includes('sig='), 'a refused URL is shown without its query')
      assert.ok(src.seen.slice(before).every((s) => s.server === 'civitai'), 'nothing past the source was asked')
      assert.deepEqual(listing(w, 'checkpoints'), [])
    })
  }
  it('a redirect loop ends after 5 hops', async () => {
    const id = version++
    src.civitai.set(id, [file({ redirectTo: `${src.civitaiUrl}/api/download/models/${id}` })])
    const job = await ended(w, await start(w, { source: 'civitai', model_version_id: id }))
    assert.equal(job.status, 'failed')
    assert.match(job.error, /redirected more than 5 times|was refused/)
  })
})

describe('a full disk fails the job cleanly', { skip: process.getuid?.() !== 0 ? 'mounting a tmpfs needs root' : false }, () => {
  it('a 2 MB tmpfs folder: the job fails with "The disk is full" and nothing is left in it', async () => {
    const src = await startDownloadStandins()
    const dir = tempDir('as-dl-full-')
    mkdirSync(join(dir, 'models', 'checkpoints'), { recursive: true })
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', join(dir, 'models', 'checkpoints')])
    let w: World | undefined
    try {
      w = await openWorld(src, {}, dir)
      src.civitai.set(1001, [file({ size: 4 * 1024 * 1024 })])
      const job = await ended(w, await start(w, { source: 'civitai', model_version_id: 1001 }))
      assert.equal(job.status, 'failed')
      assert.equal(job.error, 'The disk is full')
      assert.deepEqual(listing(w, 'checkpoints'), [])
      // the folder is usable again at once: a small file still fits
      src.civitai.set(1002, [file({ size: 100 * 1024 })])
      assert.equal((await ended(w, await start(w, { source: 'civitai', model_version_id: 1002 }))).status, 'completed')
    } finally {
      await w?.sc.close({ keepDir: true })
      execFileSync('umount', [join(dir, 'models', 'checkpoints')])
      execFileSync('rm', ['-rf', dir])
      await src.close()
    }
  })
})
