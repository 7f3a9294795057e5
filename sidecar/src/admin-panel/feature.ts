/**
 * The admin panel's own routes (issue 26): network facts and the shared workflows as an admin
 * manages them. The pages themselves are served by pages/.
 */
import type { Feature } from '../kernel/feature.js'
import type { Services } from '../services.js'
import { adminPanelRoutes } from './routes.js'

export function adminPanelFeature(services: Pick<Services, 'config' | 'users' | 'workflows' | 'events'>): Feature {
  return {
    name: 'admin-panel',
    routes: async (family) => {
      await family.register(adminPanelRoutes(services))
    },
  }
}
