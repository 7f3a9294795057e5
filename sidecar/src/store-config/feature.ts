/**
 * Store settings (SPEC §5.4 users-db-config and token-storage-config): the admin routes that
 * show where users and API tokens are kept and change it in `config.json` for the next start
 * (routes.ts); the rules for URLs and paths (rules.ts); the file itself (config-file.ts).
 */
import type { Feature } from '../kernel/feature.js'
import type { Services } from '../services.js'
import { ConfigFile } from './config-file.js'
import { storeConfigRoutes, type StoreConfigLive } from './routes.js'

export type StoreConfigServices = Pick<Services, 'config' | 'dataDir' | 'host' | 'events' | 'log'>

export function storeConfigFeature(services: StoreConfigServices): Feature {
  let live: StoreConfigLive | undefined
  return {
    name: 'store-config',
    routes: storeConfigRoutes(() => {
      if (live === undefined) throw new Error('the store settings are used before the store was opened')
      return live
    }),
    bind() {
      live = { file: new ConfigFile(services.dataDir), running: services.config, dataDir: services.dataDir, host: services.host, events: services.events, log: services.log }
      return {}
    },
  }
}
