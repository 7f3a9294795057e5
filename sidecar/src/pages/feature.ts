/** Pages: sign-in, account, admin and the loading page, with their assets. */
import type { Feature } from '../kernel/feature.js'
import type { Services } from '../services.js'
import { assetRoutes, pageRoutes } from './routes.js'

export function pagesFeature(services: Pick<Services, 'users' | 'settings'>): Feature {
  return {
    name: 'pages',
    rootRoutes: async (root) => {
      await root.register(pageRoutes(services))
    },
    routes: async (family) => {
      await family.register(assetRoutes)
    },
  }
}
