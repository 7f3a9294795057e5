/**
 * Content safety (SPEC §11, issue 23): NSFW tags per image file, a classifier off the request
 * path, and the policy for sfw_check users on /view (and its twins) and on their own preview
 * frames. Off unless `nsfw.enabled`; then:
 *
 * - the tags are loaded at start (tags.ts), the classifier's worker starts and loads its model
 *   (pool.ts), and a scan that was running resumes once the host named its folders (scanner.ts);
 * - every image a prompt outputs (the host's `executed` events) is queued for classification in
 *   the background, which runs once the prompt ended (pool.ts `hold`: the prompt keeps the CPU);
 * - the isolation feature's /view asks `gate()` for sfw_check users (isolation/behaviours/view.ts).
 *
 * Routes: `/authsvc/api/nsfw-management` and `/authsvc-gallery/mark-nsfw` (routes.ts).
 */
import { join } from 'node:path'
import type { FastifyBaseLogger } from 'fastify'
import type { Feature } from '../kernel/feature.js'
import type { EventMessage } from '../kernel/protocol.js'
import type { ContentGate } from '../isolation/behaviours/deps.js'
import { normalSegments } from '../isolation/ownership.js'
import type { Services } from '../services.js'
import { ClassifierPool } from './pool.js'
import { NsfwPolicy } from './policy.js'
import { managementRoutes, markRoutes, rootsOf } from './routes.js'
import { Scanner } from './scanner.js'
import { CollectionTagRepository, TagStore } from './tags.js'

export interface NsfwBound {
  tags: TagStore
  pool: ClassifierPool
  policy: NsfwPolicy
  scanner: Scanner
  /** settles once the stored tags are in memory */
  loaded: Promise<void>
}

export interface NsfwFeature extends Feature {
  /** the gate on /view and previews; null while the policy is off (or before bind) */
  gate(): ContentGate | null
  /** what bind built (tests, the bench); null while off */
  bound(): NsfwBound | null
}

type NsfwServices = Pick<Services, 'config' | 'localKv' | 'host' | 'ownership' | 'events' | 'clock' | 'accessEpoch'>

/** The images an `executed` event names (`output.images: [{filename, subfolder, type}]`), as real-ish paths under the host's folders. */
function outputsOf(msg: EventMessage, services: Pick<Services, 'host'>): string[] {
  const output = msg.data.output as { images?: unknown } | null | undefined
  const images = Array.isArray(output?.images) ? output.images : []
  const roots = rootsOf(services)
  const paths: string[] = []
  for (const image of images as Array<Record<string, unknown>>) {
    const type = image?.type === 'temp' || image?.type === 'input' ? image.type : image?.type === 'output' ? 'output' : null
    const root = type === null ? undefined : roots[type]
    if (root === undefined || typeof image.filename !== 'string') continue
    const parts = normalSegments(`${typeof image.subfolder === 'string' ? image.subfolder : ''}/${image.filename}`, /[\\/]+/)
    if (parts !== null && parts.length > 0) paths.push(join(root, ...parts))
  }
  return paths
}

export function nsfwFeature(services: NsfwServices, log: FastifyBaseLogger): NsfwFeature {
  let bound: NsfwBound | null = null
  let gate: ContentGate | null = null
  const current = () => bound
  return {
    name: 'nsfw',
    gate: () => gate,
    bound: current,
    routes: async (family) => {
      await family.register(managementRoutes(services, current))
    },
    rootRoutes: async (root) => {
      await root.register(markRoutes(services, current))
    },
    bind() {
      const config = services.config.nsfw
      if (!config.enabled) return {}
      const tags = new TagStore(new CollectionTagRepository(services.localKv, log))
      // a kept /view pass read the file's tag: any tag that changes ends every kept decision (forget)
      tags.onChange = () => services.accessEpoch.bump()
      const pool = new ClassifierPool(config.classifier, config.queue_max, log)
      const policy = new NsfwPolicy(
        tags,
        pool,
        { thresholds: config.thresholds, viewDeadlineMs: config.view_deadline_ms, previewDeadlineMs: config.preview_deadline_ms },
        () => rootsOf(services),
        services.events,
        services.clock,
        log,
      )
      const folders = () => {
        const roots = rootsOf(services)
        return [roots.output, roots.input].filter((d): d is string => d !== undefined)
      }
      const scanner = new Scanner(services.localKv, tags, policy, folders, services.clock, log)
      const loaded = tags.load()
      loaded.catch((err: unknown) => log.error({ err }, 'the NSFW tags could not be loaded'))
      bound = { tags, pool, policy, scanner, loaded }
      gate = {
        applies: (principal) => principal.sfwCheck,
        async view(principal, file, ip) {
          // until the stored tags are in memory a manual tag could be missed: wait for them (bounded by the view's own deadline)
          await loaded
          return policy.viewDecision(principal, file, ip)
        },
        async marksAny() {
          await loaded
          return tags.all().some((tag) => policy.tagSaysNsfw(tag))
        },
        async marked(paths) {
          await loaded
          return paths.some((path) => {
            const tag = tags.get(path)
            return tag !== undefined && policy.tagSaysNsfw(tag)
          })
        },
      }
      return {
        jobs: [{
          name: 'nsfw',
          async start() {
            await loaded
            pool.warm().catch(() => {}) // a failure is logged by the pool; every classification then fails (fail safe)
            await scanner.resume()
          },
          async stop() {
            await scanner.stop()
            await pool.close()
          },
        }],
        hostFacts() {
          void loaded.then(() => scanner.kick())
        },
        preview: (image) => policy.previewAllowed(image),
        hello(msg) {
          // a prompt running at (re)connect: background classification waits for its end
          pool.hold(Array.isArray(msg.running) && msg.running.length > 0)
        },
        hostEvent(msg) {
          if (msg.name === 'execution_start') pool.hold(true)
          else if (msg.name === 'execution_end') pool.hold(false)
          else if (msg.name === 'executed') for (const path of outputsOf(msg, services)) policy.learn(path)
        },
      }
    },
  }
}
