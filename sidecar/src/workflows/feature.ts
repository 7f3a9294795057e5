/**
 * Workflows: each user's own and the shared set, in the host's user folder — the host routes
 * `/userdata...` (behaviours) and the owned `/api/cpe/...` and publish routes.
 */
import { behaviourEntry } from '../kernel/behaviours.js'
import type { Feature } from '../kernel/feature.js'
import type { Services } from '../services.js'
import { userdataListBehaviour, userdataListV2Behaviour, userdataReadBehaviour, usersBehaviour } from './behaviours/userdata-read.js'
import { userdataWriteBehaviour } from './behaviours/userdata-write.js'
import { workflowAdminRoutes, workflowRoutes } from './routes.js'

export function workflowsFeature(services: Pick<Services, 'workflows' | 'clock'>): Feature {
  return {
    name: 'workflows',
    rootRoutes: async (root) => {
      await root.register(workflowRoutes(services))
    },
    routes: async (family) => {
      await family.register(workflowAdminRoutes(services))
    },
    bind: () => ({
      behaviours: [
        behaviourEntry('userdata-write', userdataWriteBehaviour(services)),
        behaviourEntry('userdata-list', userdataListBehaviour(services)),
        behaviourEntry('userdata-list-v2', userdataListV2Behaviour(services)),
        behaviourEntry('userdata-read', userdataReadBehaviour(services)),
        behaviourEntry('users', usersBehaviour()),
      ],
    }),
  }
}
