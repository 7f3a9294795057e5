/**
 * User environment (SPEC §5.2 `POST /authsvc/api/user-env`): a user's own folders on the host and
 * what is in them, for themselves; for administrators any user's, the list of users who have
 * folders, and the purge of one user's folders (user-storage.ts says what is theirs).
 */
import type { Feature } from '../kernel/feature.js'
import type { Services } from '../services.js'
import './events.js'
import { userEnvRoutes } from './routes.js'
import { UserStorage } from './user-storage.js'

export function userEnvFeature(services: Pick<Services, 'users' | 'host' | 'events'>): Feature {
  // the host's facts are read at each request (a later hello may change them)
  const storage = new UserStorage(() => services.host.facts)
  return {
    name: 'user-env',
    routes: async (family) => {
      await family.register(userEnvRoutes(services, storage))
    },
  }
}
