/**
 * Identity: accounts, sign-in, sessions, API tokens, the second factor, and the admin's user,
 * role, settings and IP-list routes. Background work: expired sessions are dropped every hour, so
 * memory and the store do not grow forever (they can never validate again).
 */
import type { Feature } from '../kernel/feature.js'
import './events.js'
import type { Services } from '../services.js'
import { accountRoutes, type AccountRouteServices } from './routes/account.js'
import { adminCredentialRoutes } from './routes/admin-credentials.js'
import { adminRoutes, type AdminRouteServices } from './routes/admin.js'
import { authRoutes, type AuthRouteServices } from './routes/auth.js'
import { meRoutes } from './routes/me.js'
import { mfaRoutes, type MfaRouteServices } from './routes/mfa.js'
import { generateTokenHandler, generateTokenSchema, tokenRoutes, type TokenRouteServices } from './routes/tokens.js'

export type IdentityServices = AccountRouteServices & AdminRouteServices & AuthRouteServices & MfaRouteServices & TokenRouteServices & Pick<Services, 'sessions' | 'tokens'>

export const SESSION_PRUNE_MS = 3600_000

export function identityFeature(services: IdentityServices): Feature {
  return {
    name: 'identity',
    async rootRoutes(root) {
      await root.register(authRoutes(services))
      root.post('/generate_token', { config: { auth: 'public' }, schema: generateTokenSchema }, generateTokenHandler(services))
    },
    async routes(family) {
      await family.register(tokenRoutes(services))
      await family.register(meRoutes(services))
      await family.register(adminRoutes(services))
      await family.register(adminCredentialRoutes(services))
      await family.register(accountRoutes(services))
      await family.register(mfaRoutes(services))
    },
    bind: () => ({
      jobs: [{ name: 'session-prune', every: { ms: SESSION_PRUNE_MS, run: async () => {
        const userIds = services.users.list().map((u) => u.user_id)
        await services.sessions.prune(userIds)
        await services.tokens.prune(userIds)
        await services.mfa.sweepTemps()
      } } }],
    }),
  }
}
