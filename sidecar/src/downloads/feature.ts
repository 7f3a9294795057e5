/**
 * Model downloads (SPEC §9, issue 22): a user with `can_download_models` fetches a model from
 * Civitai or Hugging Face into one of the host's model folders, with their own stored key; the
 * file is verified and placed atomically, then granted to them (so it is in their lists at once).
 *
 * The job store and the keys are opened when the store is (the queue's job `start`); a request
 * that comes before waits for them. A deleted user's keys are removed and their queued and running
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
import { CollectionDownloadJobs, CollectionSourceKeys, SOURCES, type DownloadJobRecord, type DownloadJobs, type SourceKeys } from './store.js'
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

/** What the models feature does with a landed file (models/feature.ts `landed`). */
export type LandedHook = (userId: string, grantedBy: string, folder: string, item: string) => Promise<void>

export interface DownloadsFeature extends Feature {
  /** the queue once the store is open (tests wait on its changes) */
  queue(): Promise<DownloadQueue>
}

type DownloadServices = Pick<Services, 'config' | 'host' | 'clock' | 'events' | 'kv' | 'localKv' | 'fieldCipher' | 'log' | 'users'>

export function downloadsFeature(services: DownloadServices, log: FastifyBaseLogger, landed: () => LandedHook): DownloadsFeature {
  let opened: { queue: DownloadQueue; jobs: DownloadJobs; keys: SourceKeys } | undefined
  let resolveReady: (value: { queue: DownloadQueue; jobs: DownloadJobs; keys: SourceKeys }) => void = () => {}
  const ready = new Promise<{ queue: DownloadQueue; jobs: DownloadJobs; keys: SourceKeys }>((r) => (resolveReady = r))
  const handle = {
    queue: async () => (await ready).queue,
    list: () => opened?.jobs.list() ?? [],
    get: (jobId: string) => opened?.jobs.get(jobId),
    keys: async () => (await ready).keys,
  }
  return {
    name: 'downloads',
    routes: async (family) => {
      await family.register(downloadRoutes(services, handle))
    },
    queue: handle.queue,
    bind() {
      /** Cancels the account's queued and running jobs on this host; what could not be done, logged (`keysRemoved`: that step's outcomes). */
      const stopJobsOf = async (userId: string, keysRemoved: PromiseSettledResult<unknown>[] = []) => {
        const { queue, jobs } = await ready
        const live = jobs.list().filter((j) => j.user_id === userId && (j.status === 'queued' || j.status === 'running'))
        const stopped = await Promise.allSettled(live.map((j) => queue.cancel(j.job_id)))
        for (const r of [...keysRemoved, ...stopped]) {
          // a job that ended meanwhile is CONFLICT: nothing to do; a key left (the store failed) goes at the next start
          if (r.status === 'rejected' && (r.reason as { code?: string })?.code !== 'CONFLICT') log.error({ err: r.reason, user_id: userId }, 'a deleted account\'s download job or key could not be removed')
        }
      }
      // a deleted account's keys go with it, and its jobs on this host stop (a finished job's record
      // stays: the admins' list of what was downloaded, by whom)
      services.events.on('user_deleted', async ({ user_id: userId }) => {
        const { keys } = await ready
        // every step is tried: a store that fails the key removal must not leave a transfer running
        await stopJobsOf(userId, await Promise.allSettled(SOURCES.map((source) => keys.set(userId, source, ''))))
      })
      // deleted on another instance of a shared store: the jobs here are this host's own (its local
      // store) and stop here; the keys are shared and the deleting instance removed those it held,
      // but a key stored here a moment before may not have reached it: removed here too (a no-op
      // for a key already gone)
      services.users.onDeletedElsewhere((userId) => {
        void ready.then(async ({ keys }) => stopJobsOf(userId, await Promise.allSettled(SOURCES.map((source) => keys.set(userId, source, '')))))
      })
      return {
        jobs: [{
          name: 'model-downloads',
          async start() {
            const [jobRecords, keyRecords] = await Promise.all([
              Collection.load<DownloadJobRecord>(services.localKv, 'download_job', { log }),
              Collection.load<{ user_id: string; source: 'civitai' | 'huggingface'; sealed: string }>(services.kv, 'download_key', { log }),
            ])
            const jobs = new CollectionDownloadJobs(jobRecords, services.clock)
            const keys = new CollectionSourceKeys(keyRecords, services.fieldCipher)
            // keys of an account that is gone (deleted while this sidecar was away, or a removal that
            // failed); best effort: a store that refuses a removal now must not keep the downloads closed
            await sweepOrphanKeys(keys, services.users).then(
              (orphans) => orphans > 0 && log.info({ keys: orphans }, 'removed the download keys of deleted accounts'),
              (err: unknown) => log.warn({ err }, 'the store refused removing a deleted account\'s download key; the store\'s retry removes it'),
            )
            const landing: Landing = {
              landed: (job, folder, item) => landed()(job.user_id, job.username, folder, item),
            }
            const queue = new DownloadQueue(services, jobs, keys, landing, log)
            opened = { queue, jobs, keys }
            resolveReady(opened)
            await queue.start()
          },
          async stop() {
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
