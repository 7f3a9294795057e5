/**
 * Models: the host's model folders (watched), the grants that let a user without
 * `can_view_all_comfyui_items` see and use an item, the host routes that list and serve models,
 * and the admin's grant routes. The other features read the lists through `access()` (prompts
 * and `/object_info` check a model input against them).
 */
import type { FastifyBaseLogger } from 'fastify'
import { behaviourEntry } from '../kernel/behaviours.js'
import type { Feature } from '../kernel/feature.js'
import './events.js'
import type { Clock } from '../kernel/clock.js'
import type { HostFacts } from '../kernel/protocol.js'
import type { Services } from '../services.js'
import { ModelAccess, modelFileBehaviour, modelListBehaviour } from './behaviours.js'
import type { Principal } from '../identity/principal.js'
import type { Decision } from '../kernel/protocol.js'
import { ModelCache, modelFoldersOf } from './model-cache.js'
import { fileIdentity, HostGrantFiles } from './host-grant-files.js'
import { modelGrantRoutes } from './routes.js'

export interface ModelsFeature extends Feature {
  /** the model lists and grants as decisions read them; from bind on */
  access(): ModelAccess
  /**
   * A file that just landed in a model folder (downloads/) at `path`: the cache is walked again now
   * and the item granted to `userId` on this host, as long as the host opens that file for it
   * (host-grant-files.ts), so it is in their lists and usable at once (the same service code as the
   * admin's refresh and grant routes).
   */
  landed(userId: string, username: string, folder: string, item: string, path: string): Promise<void>
  /**
   * A download's file is about to take this name: another user's download of the name was of a file
   * gone since (none is ever replaced), so their grant on this host goes first, names compared as the
   * host resolves them. The undo puts them back (the file did not take the name after all).
   */
  placing(userId: string, folder: string, item: string): Promise<() => Promise<void>>
  /** A check of the downloads' grants against their files (host-grant-files.ts), after any running; resolves when done. */
  checkHostGrants(): Promise<void>
}

export function modelsFeature(
  services: Pick<Services, 'users' | 'roles' | 'modelGrants' | 'host' | 'clock' | 'accessEpoch' | 'events'>,
  log: FastifyBaseLogger,
  clock: Clock,
  /** the content-safety policy's answer for a model's preview image (nsfw/): the blocked answer, or null */
  previewBlocked?: (principal: Principal) => Decision | null,
): ModelsFeature {
  // the host's model folders, watched; read by the decision path and the grant routes
  const cache = new ModelCache(log, clock)
  let access: ModelAccess | undefined
  // a download's grant holds while the host opens its very file for the name; judged only on the
  // folders of complete host facts (every custom node loaded), scanned: before that, a folder a
  // custom node adds is not known yet, and its files would look gone (made at bind: the grants
  // are read from the store)
  let factsSeen = 0
  let complete = false
  let hostFiles: HostGrantFiles | undefined
  return {
    name: 'models',
    routes: async (family) => {
      await family.register(modelGrantRoutes(services, cache))
    },
    async landed(userId, username, folder, item, path) {
      await cache.refresh()
      const file = await fileIdentity(path)
      if (file === null || file === 'unknown') throw new Error('the downloaded file could not be read once it had landed')
      // granted on this host only: the name may be another file on another host of a shared store
      await services.modelGrants.grantOnThisHost({ user_id: userId, folder, item_name: item, granted_by: username, created_at_iso: new Date(services.clock()).toISOString(), file })
      services.events.emit('model_granted', { actor: username, subject: username, folder, item_name: item })
    },
    async placing(userId, folder, item) {
      const same = access === undefined ? undefined : (a: string, b: string) => access!.hostPath(a) === access!.hostPath(b)
      const removed = await services.modelGrants.landedAgain(folder, item, userId, same)
      return async () => {
        for (const record of removed) await services.modelGrants.restoreOnThisHost(record)
      }
    },
    checkHostGrants: () => hostFiles?.check() ?? Promise.resolve(),
    access() {
      if (access === undefined) throw new Error('the model lists are read before the store was opened')
      return access
    },
    bind() {
      const files = new HostGrantFiles(services.modelGrants, (folder) => cache.folder(folder)?.paths, () => (complete ? factsSeen : null), log, (record, why) => {
        const subject = services.users.byId(record.user_id)?.username
        if (subject !== undefined) services.events.emit('model_revoked', { subject, folder: record.folder, item_name: record.item_name, reason: why })
      })
      hostFiles = files
      // the model lists a filter's memo names: their change ends the decisions the plugin keeps;
      // and the host may open another file for a downloaded name now
      cache.onChange = () => {
        services.accessEpoch.bump()
        void files.check()
      }
      services.modelGrants.onHostGrant = () => void files.check()
      const bound = new ModelAccess(cache, services.modelGrants)
      access = bound
      return {
        behaviours: [
          behaviourEntry('model-list', modelListBehaviour({ models: bound }, 'model-list')),
          behaviourEntry('embeddings', modelListBehaviour({ models: bound }, 'embeddings')),
          behaviourEntry('model-file', modelFileBehaviour({ models: bound, ...(previewBlocked ? { previewBlocked } : {}) })),
        ],
        hostFacts(facts: HostFacts) {
          bound.setFacts(facts)
          services.accessEpoch.bump()
          const seen = ++factsSeen
          complete = false
          cache.setFolders(modelFoldersOf(facts)).then(() => {
            if (seen !== factsSeen || facts.all_nodes_loaded !== true || facts.facts_incomplete === true) return
            complete = true
            void files.check()
          }).catch((err: unknown) => log.error({ err }, 'cannot watch the model folders'))
        },
        jobs: [{ name: 'model-folders', stop: () => (files.close(), cache.close()) }],
      }
    },
  }
}
