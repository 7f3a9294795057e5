/**
 * Model downloads (SPEC §9, issue 22): a user with `can_download_models` fetches a model from
 * Civitai or Hugging Face into one of the host's model folders, with their own stored key; the
 * file is verified and placed atomically, then granted to them (so it is in their lists at once).
 *
 * The job store and the keys are opened when the store is (the queue's job `start`, tried again
 * while the store cannot be read); a request that comes before waits a few seconds for them, then
 * is a 503. A deleted user's keys are removed and their queued and running
 * jobs cancelled (`user_deleted`; on a shared store, a deletion made on another instance cancels
 * this host's jobs too, and every start removes keys whose account the store no longer has).
 */
import type { FastifyBaseLogger } from 'fastify'
import type { Feature } from '../kernel/feature.js'
import type { Services } from '../services.js'
import type { UserRepository } from '../identity/users.js'
import { Collection } from '../store/collection.js'
import { DownloadQueue, type Landing } from './queue.js'
import { downloadRoutes } from './routes.js'
import { CollectionDownloadJobs, CollectionSourceKeys, SOURCES, type DownloadJobRecord, type DownloadJobs, type KeyRecord, type SourceKeys } from './store.js'
import { AuthsvcError } from '../kernel/errors.js'
import { beforeDeadline } from '../kernel/deadline.js'
import './events.js'

/**
 * Removes the keys of accounts that are gone; how many. An account this replica does not hold is
 * asked of the store itself (a shared store's replica may be older than a new account's key); an
 * account the store could not be asked about keeps its keys. Rejects when a removal fails.
 */
export function sweepOrphanKeys(keys: CollectionSourceKeys, users: Pick<UserRepository, 'fetchById'>): Promise<number> {
  return keys.removeUnless(async (userId) => {
    try {
      return (await users.fetchById(userId)) !== undefined
    } catch {
      return true
    }
  })
}

/** how long a request waits for the downloads to open before it is answered 503 */
const OPEN_WAIT_MS = 5000
const RETRY_BASE_MS = 1000
const RETRY_MAX_MS = 30_000

/** What the models feature does with a landed file (models/feature.ts `landed`). */
export type LandedHook = (userId: string, grantedBy: string, folder: string, item: string, path: string) => Promise<void>
/** What the models feature does just before a file takes a name (models/feature.ts `placing`); its undo. */
export type PlacingHook = (userId: string, folder: string, item: string) => Promise<() => Promise<void>>

export interface DownloadsFeature extends Feature {
  /** the queue once the store is open (tests wait on its changes) */
  queue(): Promise<DownloadQueue>
}

type DownloadServices = Pick<Services, 'config' | 'host' | 'clock' | 'events' | 'kv' | 'localKv' | 'fieldCipher' | 'log' | 'users' | 'modelGrants'>

export function downloadsFeature(services: DownloadServices, log: FastifyBaseLogger, landed: () => LandedHook, placing: () => PlacingHook): DownloadsFeature {
  type Opened = { queue: DownloadQueue; jobs: DownloadJobs; keys: SourceKeys }
  let opened: Opened | undefined
  let resolveReady: (value: Opened) => void = () => {}
  const ready = new Promise<Opened>((r) => (resolveReady = r))
  // a sidecar stopped before its downloads opened tells whoever waits for the queue (tests, the bench)
  let rejectStopped: (err: Error) => void = () => {}
  const stoppedFirst = new Promise<never>((_, r) => (rejectStopped = r))
  stoppedFirst.catch(() => {})
  /** for a request: the opened store, waited for a few seconds at most (a store that cannot be read yet is a 503, not a hung request) */
  const openedSoon = async (): Promise<Opened> =>
    opened ?? beforeDeadline(ready, OPEN_WAIT_MS, () => new AuthsvcError('STORE_UNAVAILABLE', 'The downloads could not read their store yet; try again shortly', { 'Retry-After': '5' }))
  const handle = {
    queue: async () => (await openedSoon()).queue,
    list: () => opened?.jobs.list() ?? [],
    get: (jobId: string) => opened?.jobs.get(jobId),
    keys: async () => (await openedSoon()).keys,
  }
  let stopped = false
  let retry: NodeJS.Timeout | undefined
  let jobRecords: Collection<DownloadJobRecord> | undefined
  let keyRecords: Collection<KeyRecord> | undefined
  /**
   * Opens the job store and the keys, then the queue. A store that cannot be read is tried again
   * with backoff (1 s doubling to 30 s) until it can, or the sidecar stops; never throws.
   */
  const open = async (delayMs = RETRY_BASE_MS): Promise<void> => {
    if (stopped) return
    // each kind is read until it is, once (a kind read is kept while the other is tried again)
    const [jobsRead, keysRead] = await Promise.allSettled([
      jobRecords ?? Collection.load<DownloadJobRecord>(services.localKv, 'download_job', { log }),
      keyRecords ?? Collection.load<KeyRecord>(services.kv, 'download_key', { log }),
    ])
    if (jobsRead.status === 'fulfilled') jobRecords = jobsRead.value
    if (keysRead.status === 'fulfilled') keyRecords = keysRead.value
    if (jobRecords === undefined || keyRecords === undefined) {
      if (stopped) return
      const err = jobsRead.status === 'rejected' ? jobsRead.reason : keysRead.status === 'rejected' ? keysRead.reason : undefined
      log.warn({ err, retry_ms: delayMs }, 'the downloads could not read their store; trying again')
      retry = setTimeout(() => void open(Math.min(delayMs * 2, RETRY_MAX_MS)), delayMs)
      return
    }
    if (stopped) return
    const jobs = new CollectionDownloadJobs(jobRecords, services.clock)
    const keys = new CollectionSourceKeys(keyRecords, services.fieldCipher)
    // keys of an account that is gone (deleted while this sidecar was away, or a removal that
    // failed); best effort: a store that refuses a removal now must not keep the downloads closed
    await sweepOrphanKeys(keys, services.users).then(
      (orphans) => orphans > 0 && log.info({ keys: orphans }, 'removed the download keys of deleted accounts'),
      (err: unknown) => log.warn({ err }, 'the store refused removing a deleted account\'s download key; the store\'s retry removes it'),
    )
    // grants made by this host's downloads before they were of this host only: a shared grant of a
    // name loads whatever another host keeps under it (best effort, tried again at each start)
    const made = jobs.list().filter((j) => j.status === 'completed' && j.filename !== '')
    await services.modelGrants.adoptDownloads(made.map((j) => ({ user_id: j.user_id, username: j.username, folder: j.folder_type, item: j.filename }))).then(
      (moved) => moved > 0 && log.info({ grants: moved }, 'grants of models downloaded here now hold on this host only'),
      (err: unknown) => log.warn({ err }, 'the store refused moving a download\'s grant to this host; tried again at the next start'),
    )
    if (stopped) return
    const landing: Landing = {
      placing: (job, folder, item) => placing()(job.user_id, folder, item),
      landed: (job, folder, item, path) => landed()(job.user_id, job.username, folder, item, path),
    }
    const queue = new DownloadQueue(services, jobs, keys, landing, log)
    opened = { queue, jobs, keys }
    resolveReady(opened)
    await queue.start().catch((err: unknown) => log.error({ err }, 'the download queue failed to start'))
  }
  return {
    name: 'downloads',
    routes: async (family) => {
      await family.register(downloadRoutes(services, handle))
    },
    // (tests and the bench wait for the queue as long as it takes, or until the sidecar stops)
    queue: async () => (await Promise.race([ready, stoppedFirst])).queue,
    bind() {
      /**
       * What a deleted account leaves goes: its keys (shared on a shared store; a no-op for a key
       * already gone), then its queued and running jobs on this host (a finished job's record stays:
       * the admins' list of what was downloaded, by whom). Every step is tried: a store that fails
       * the key removal must not leave a transfer running; what could not be done is logged.
       */
      const dropAccount = async (userId: string) => {
        const { queue, jobs, keys } = await ready
        const removed = await Promise.allSettled(SOURCES.map((source) => keys.set(userId, source, '')))
        const live = jobs.list().filter((j) => j.user_id === userId && (j.status === 'queued' || j.status === 'running'))
        const cancelled = await Promise.allSettled(live.map((j) => queue.cancel(j.job_id)))
        for (const r of [...removed, ...cancelled]) {
          // a job that ended meanwhile is CONFLICT: nothing to do; a key left (the store failed) goes at the next start
          if (r.status === 'rejected' && (r.reason as { code?: string })?.code !== 'CONFLICT') log.error({ err: r.reason, user_id: userId }, 'a deleted account\'s download job or key could not be removed')
        }
      }
      services.events.on('user_deleted', ({ user_id: userId }) => dropAccount(userId))
      // deleted on another instance of a shared store: the jobs here are this host's own (its local
      // store); the deleting instance removed the keys it held, but a key stored here a moment
      // before may not have reached it
      services.users.onDeletedElsewhere((userId) => void dropAccount(userId))
      return {
        jobs: [{
          name: 'model-downloads',
          async start() {
            await open()
          },
          async stop() {
            stopped = true
            clearTimeout(retry)
            rejectStopped(new Error('the sidecar stopped before its downloads opened'))
            await opened?.queue.stop()
          },
        }],
        hostFacts() {
          opened?.queue.hostKnown()
        },
      }
    },
  }
}
