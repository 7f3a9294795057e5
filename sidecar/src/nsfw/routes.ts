/**
 * The content-safety routes (SPEC §5):
 *
 * - `POST /authsvc/api/nsfw-management` (admin): `scan_all` starts the background scan (with
 *   `force_rescan`, files tagged before are classified again; manual tags stay), `clear_all_tags`
 *   removes every tag the detector or metadata made (`include_manual: true`: the manual ones too),
 *   `list_tags` lists them; each answers `{status: "ok", stats}`, stats with the scan's progress.
 * - `POST /authsvc-gallery/mark-nsfw` (a signed-in user): a manual tag on an image. An admin may mark
 *   any image and unmark it (`is_nsfw: false` is then a manual "safe" tag that wins over the
 *   detector). The image's owner may mark it; their `is_nsfw: false` only removes a manual tag (the
 *   detector decides again), so an sfw_check user cannot clear the way to their own output. Anyone
 *   else gets what /view gives them: 404 for a file they may not read, 403 for one they may.
 */
import { realpath, stat } from 'node:fs/promises'
import { realpathSync } from 'node:fs'
import { sep } from 'node:path'
import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Type from 'typebox'
import { eventContext } from '../access/request-context.js'
import { isAdministrator, type Principal } from '../identity/principal.js'
import { ownerKey } from '../kernel/behaviour.js'
import { AuthsvcError } from '../kernel/errors.js'
import { normalSegments, type FileType } from '../isolation/ownership.js'
import { mayRead, placeOf, folderOfRel, userFolder, type Roots } from '../isolation/user-folders.js'
import type { Services } from '../services.js'
import type { Scores } from './classifier.js'
import type { NsfwTag } from './tags.js'
import type { NsfwBound } from './feature.js'
import { isImageName } from './policy.js'

const tags = ['admin: content safety']

const ScoresSchema = Type.Object({ Drawing: Type.Number(), Hentai: Type.Number(), Neutral: Type.Number(), Porn: Type.Number(), Sexy: Type.Number() })
const TagSchema = Type.Object({
  filename: Type.String(),
  subfolder: Type.String(),
  type: Type.String(),
  is_nsfw: Type.Boolean(),
  source: Type.Union([Type.Literal('manual'), Type.Literal('detector'), Type.Literal('metadata')]),
  scores: Type.Union([ScoresSchema, Type.Null()]),
  tagged_at_iso: Type.String(),
  marked_by: Type.Union([Type.String(), Type.Null()]),
})
const Stats = Type.Object({
  tags_total: Type.Integer(),
  tags_nsfw: Type.Integer(),
  by_source: Type.Object({ manual: Type.Integer(), detector: Type.Integer(), metadata: Type.Integer() }),
  classifier: Type.Object({ engine: Type.String(), pending: Type.Integer(), answered: Type.Integer() }),
  scan: Type.Object({
    running: Type.Boolean(),
    force: Type.Boolean(),
    total: Type.Integer(),
    done: Type.Integer(),
    nsfw: Type.Integer(),
    failed: Type.Integer(),
    started_at_iso: Type.Union([Type.String(), Type.Null()]),
    finished_at_iso: Type.Union([Type.String(), Type.Null()]),
  }),
  cleared: Type.Optional(Type.Integer()),
})
const ManagementBody = Type.Object(
  {
    action: Type.Union([Type.Literal('scan_all'), Type.Literal('clear_all_tags'), Type.Literal('list_tags')]),
    force_rescan: Type.Optional(Type.Boolean()),
    include_manual: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
)
const ManagementAnswer = Type.Object({ status: Type.Literal('ok'), stats: Stats, tags: Type.Optional(Type.Array(TagSchema)) })

const MarkBody = Type.Object(
  {
    filename: Type.String({ minLength: 1, maxLength: 1024 }),
    subfolder: Type.Optional(Type.String({ maxLength: 4096 })),
    type: Type.Optional(Type.Union([Type.Literal('output'), Type.Literal('input'), Type.Literal('temp')])),
    is_nsfw: Type.Boolean(),
  },
  { additionalProperties: false },
)
const MarkAnswer = Type.Object({ status: Type.Literal('ok'), filename: Type.String(), is_nsfw: Type.Boolean() })

const publicTag = (t: NsfwTag) => ({
  filename: t.filename,
  subfolder: t.subfolder,
  type: t.type,
  is_nsfw: t.is_nsfw,
  source: t.source,
  scores: (t.scores ?? null) as Scores | null,
  tagged_at_iso: t.at_iso,
  marked_by: t.by ?? null,
})

type RouteServices = Pick<Services, 'config' | 'host' | 'ownership' | 'events' | 'clock'>

const off = () => new AuthsvcError('CONFLICT', 'The NSFW policy is off (nsfw.enabled is false in the configuration)')

/** a folder's real path (the host opens files through links: `output/` is often one, in Docker), once per folder */
const realFolders = new Map<string, string>()
function realFolder(dir: string): string {
  let real = realFolders.get(dir)
  if (real === undefined) {
    try {
      real = realpathSync(dir)
    } catch {
      return dir // not there yet: asked again next time
    }
    if (realFolders.size > 64) realFolders.clear()
    realFolders.set(dir, real)
  }
  return real
}

/**
 * The host's folders as real paths: `/view` hands the policy the real path of a file, so the
 * folders it is placed in are compared as real paths too (a linked output folder would otherwise
 * place no file, and every image would be blocked as unclassifiable).
 */
export function rootsOf(services: Pick<Services, 'host'>): Roots {
  const f = services.host.facts
  return {
    ...(f.output_dir ? { output: realFolder(f.output_dir) } : {}),
    ...(f.input_dir ? { input: realFolder(f.input_dir) } : {}),
    ...(f.temp_dir ? { temp: realFolder(f.temp_dir) } : {}),
  }
}

export function managementRoutes(services: RouteServices, bound: () => NsfwBound | null) {
  const stats = (b: NsfwBound) => {
    const all = b.tags.all()
    const by_source = { manual: 0, detector: 0, metadata: 0 }
    let nsfw = 0
    for (const t of all) {
      by_source[t.source]++
      if (b.policy.tagSaysNsfw(t)) nsfw++
    }
    return {
      tags_total: all.length,
      tags_nsfw: nsfw,
      by_source,
      classifier: { engine: services.config.nsfw.classifier, pending: b.pool.pending, answered: b.pool.answered },
      scan: b.scanner.status(),
    }
  }
  return async function (fastify: FastifyInstance): Promise<void> {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
    app.post('/api/nsfw-management', {
      config: { auth: 'admin' },
      schema: { summary: 'Scan every image, clear the tags, or list them (with the scan\'s progress)', tags, body: ManagementBody, response: { 200: ManagementAnswer } },
    }, async (request) => {
      const b = bound()
      if (b === null) throw off()
      await b.loaded
      const { action } = request.body
      if (action === 'scan_all') {
        await b.scanner.start(request.body.force_rescan === true)
        return { status: 'ok' as const, stats: stats(b) }
      }
      if (action === 'clear_all_tags') {
        const cleared = await b.tags.clear(request.body.include_manual === true)
        return { status: 'ok' as const, stats: { ...stats(b), cleared } }
      }
      const list = b.tags.all().sort((x, y) => (x.type + x.subfolder + x.filename).localeCompare(y.type + y.subfolder + y.filename))
      return { status: 'ok' as const, stats: stats(b), tags: list.map(publicTag) }
    })
  }
}

/** The real path of a file the client names, inside its host folder; null when it is not there. */
async function fileOf(roots: Roots, type: FileType, subfolder: string, filename: string): Promise<string | null> {
  const root = roots[type]
  if (root === undefined) return null
  const parts = normalSegments(`${subfolder}/${filename}`, /[\\/]+/)
  if (parts === null || parts.length === 0) throw new AuthsvcError('VALIDATION_FAILED', 'The name leaves its folder')
  let real: string
  try {
    real = await realpath(`${root}${sep}${parts.join(sep)}`)
    if (!(await stat(real)).isFile()) return null
  } catch {
    return null
  }
  return real.startsWith(root + sep) ? real : null
}

/** Whether `principal` owns the file: in their own per-user folder, or theirs by the ownership table. */
function owns(principal: Principal, real: string, roots: Roots, services: Pick<Services, 'ownership'>): boolean {
  const where = placeOf(real, roots)
  if (where === null) return false
  const owner = ownerKey(principal)
  const folder = folderOfRel(where.rel)
  if (folder !== null) return folder.toLowerCase() === userFolder(owner)
  return services.ownership.file(`${where.type}/${where.rel}`)?.owners.includes(owner) === true
}

/** Whether this principal set the manual tag (tags from before `by_id` was kept name the username). */
function markedBy(tag: NsfwTag, principal: Principal): boolean {
  return tag.by_id !== undefined ? tag.by_id === principal.userId : tag.by === principal.username
}

export function markRoutes(services: RouteServices, bound: () => NsfwBound | null) {
  return async function (fastify: FastifyInstance): Promise<void> {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
    app.post('/authsvc-gallery/mark-nsfw', {
      config: { auth: 'user' },
      schema: { summary: 'Mark or unmark an image as NSFW (an admin, or the image\'s owner)', tags: ['content safety'], body: MarkBody, response: { 200: MarkAnswer } },
    }, async (request) => {
      const b = bound()
      if (b === null) throw off()
      await b.loaded
      const principal = request.principal
      if (principal === null) throw new AuthsvcError('AUTH_REQUIRED')
      const { filename, is_nsfw } = request.body
      const type = request.body.type ?? 'output'
      const subfolder = request.body.subfolder ?? ''
      if (!isImageName(filename)) throw new AuthsvcError('VALIDATION_FAILED', 'Only PNG, JPEG and WebP images are tagged')
      const roots = rootsOf(services)
      const real = await fileOf(roots, type, subfolder, filename)
      if (real === null) throw new AuthsvcError('NOT_FOUND')
      const admin = isAdministrator(principal)
      if (!admin && !owns(principal, real, roots, services)) {
        // as /view answers it: a file this user may not read does not exist for them
        const where = placeOf(real, roots)
        const readable = !services.config.seperate_users || (where !== null && mayRead(where, { file: true }, ownerKey(principal), services.ownership))
        throw readable ? new AuthsvcError('PERMISSION_DENIED', 'Only an administrator or the image\'s owner may mark it') : new AuthsvcError('NOT_FOUND')
      }
      const s = await stat(real, { bigint: true })
      const facts = { size: Number(s.size), mtime_ms: Number(s.mtimeNs / 1_000_000n) }
      const previous = b.tags.get(real)
      if (!admin && !is_nsfw) {
        // an owner's unmark removes only a manual tag they set themselves: the detector (or the
        // file's own tag) decides again. An administrator's mark (or a co-owner's) is theirs to lift:
        // an owner with the SFW check could otherwise unblock what an admin blocked for them.
        if (previous?.source === 'manual') {
          if (!markedBy(previous, principal)) throw new AuthsvcError('PERMISSION_DENIED', 'Someone else marked this image; only they or an administrator may lift the mark')
          await b.tags.remove(real)
        }
      } else if (!admin && previous?.source === 'manual' && previous.is_nsfw && !markedBy(previous, principal)) {
        // someone else's NSFW mark is already there: it stays theirs (were it replaced by the owner's
        // own mark, the owner could then lift it)
      } else {
        const where = placeOf(real, roots)
        const at = where === null ? -1 : where.rel.lastIndexOf('/')
        await b.tags.put({
          path: real, ...facts,
          type: where?.type ?? type,
          subfolder: where === null || at < 0 ? '' : where.rel.slice(0, at),
          filename: where === null ? filename : where.rel.slice(at + 1),
          is_nsfw,
          source: 'manual',
          ...(previous?.scores !== undefined ? { scores: previous.scores } : {}),
          at_iso: new Date(services.clock()).toISOString(),
          by: principal.username,
          ...(principal.userId !== null ? { by_id: principal.userId } : {}),
        })
      }
      services.events.emit('nsfw_marked', { ...eventContext(request), filename, is_nsfw })
      return { status: 'ok' as const, filename, is_nsfw }
    })
  }
}
