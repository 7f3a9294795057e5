/**
 * Whether an open WebSocket's credential would still be let in (live-sockets.ts):
 * the same records the identity resolver reads, without the token itself.
 */
import type { ApiTokenService } from '../identity/api-tokens.js'
import type { Clock } from '../kernel/clock.js'
import type { SessionService } from '../identity/sessions.js'
import type { UserRepository } from '../identity/users.js'
import type { StoreHealthView } from '../store/health.js'
import type { CredentialState, SocketEntry } from './live-sockets.js'

export const CLOSE_CREDENTIAL_ENDED = 4401
export const CLOSE_ACCESS_CHANGED = 4403
/** the shared store is unreachable past its grace (store/health.ts); the plugin closes with 4000-4999 only, so 503 in that range */
export const CLOSE_STORE_UNAVAILABLE = 4503

export function credentialState(deps: { sessions: SessionService; tokens: ApiTokenService; users: UserRepository; clock: Clock; storeHealth?: StoreHealthView }): CredentialState {
  const ended = (reason: string) => ({ code: CLOSE_CREDENTIAL_ENDED, reason })
  return {
    check(entry: SocketEntry) {
      if (deps.storeHealth?.refusing === true) return { code: CLOSE_STORE_UNAVAILABLE, reason: 'store unavailable' }
      const now = deps.clock()
      if (entry.authType === 'session' && entry.credentialId !== undefined) {
        const record = deps.sessions.get(entry.credentialId)
        if (!record || record.revoked) return ended('session ended')
        if (Date.parse(record.exp_at_iso) <= now) return ended('session expired')
      }
      if (entry.authType === 'api_token' && entry.credentialId !== undefined) {
        const record = deps.tokens.byHash(entry.credentialId)
        if (!record || record.revoked === true) return ended('token revoked')
        if (Date.parse(record.expires_at_iso) <= now) return ended('token expired')
      }
      if (entry.userId !== null) {
        const user = deps.users.byId(entry.userId)
        if (!user) return ended('user deleted')
        if (user.disabled) return ended('user disabled')
        if (user.role !== entry.role) return { code: CLOSE_ACCESS_CHANGED, reason: 'role changed' }
        if (entry.previewsUnchecked === true && user.sfw_check) return { code: CLOSE_ACCESS_CHANGED, reason: 'content check turned on' }
      }
      return 'ok'
    },
  }
}
