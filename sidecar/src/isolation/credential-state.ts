/**
 * Whether an open WebSocket's credential would still be let in (live-sockets.ts):
 * the same records the identity resolver reads, without the token itself.
 */
import type { ApiTokenService } from '../identity/api-tokens.js'
import type { Clock } from '../kernel/clock.js'
import type { SessionService } from '../identity/sessions.js'
import type { UserRepository } from '../identity/users.js'
import type { StoreHealthView } from '../store/health.js'
import type { SettingsRepository } from '../store/settings.js'
import type { IpGate } from '../access/pipeline.js'
import type { CredentialState, SocketEntry } from './live-sockets.js'

export const CLOSE_CREDENTIAL_ENDED = 4401
export const CLOSE_ACCESS_CHANGED = 4403
/** the shared store is unreachable past its grace (store/health.ts); the plugin closes with 4000-4999 only, so 503 in that range */
export const CLOSE_STORE_UNAVAILABLE = 4503

export interface CredentialStateDeps {
  sessions: SessionService
  tokens: ApiTokenService
  users: UserRepository
  clock: Clock
  storeHealth?: StoreHealthView
  /** guest login turned off ends guests' sockets, as the resolver refuses their next request */
  settings: Pick<SettingsRepository, 'get'>
  /** the IP lists, judged on every address a socket came from, as the decision's first step does */
  ipGate: IpGate
}

export function credentialState(deps: CredentialStateDeps): CredentialState {
  const ended = (reason: string) => ({ code: CLOSE_CREDENTIAL_ENDED, reason })
  /**
   * Session and token records are held lazily (a bounded number; store/collection.ts): each
   * check reads an open socket's record, which keeps it among the most recently used, but one
   * may still not be held (the replicas are read again after the feed reconnected). It is then
   * read from the store; the socket is judged by what the store says, at the next check.
   */
  const reading = new Map<string, 'reading' | 'absent'>()
  const held = <R>(id: string, get: (id: string) => R | undefined, fetch: (id: string) => Promise<R | undefined>): R | 'absent' | 'reading' => {
    const record = get(id)
    if (record !== undefined) {
      reading.delete(id)
      return record
    }
    const state = reading.get(id)
    if (state !== undefined) return state
    reading.set(id, 'reading')
    fetch(id).then(
      (r) => (r === undefined ? reading.set(id, 'absent') : reading.delete(id)),
      () => reading.delete(id), // the store is down: store/health.ts closes the sockets past its grace
    )
    return 'reading'
  }
  return {
    check(entry: SocketEntry) {
      if (deps.storeHealth?.refusing === true) return { code: CLOSE_STORE_UNAVAILABLE, reason: 'store unavailable' }
      const now = deps.clock()
      if (entry.addresses?.some((ip) => deps.ipGate.refuse(ip) !== null) === true) return { code: CLOSE_ACCESS_CHANGED, reason: 'address refused' }
      // a guest session (no user): the resolver refuses it once guest login is off
      if (entry.authType === 'session' && entry.userId === null && !deps.settings.get('allow_guest_jwt')) return ended('guest login turned off')
      if (entry.authType === 'session' && entry.credentialId !== undefined) {
        const record = held(entry.credentialId, (id) => deps.sessions.get(id), (id) => deps.sessions.fetch(id))
        if (record === 'absent') {
          reading.delete(entry.credentialId)
          return ended('session ended')
        }
        if (record !== 'reading') {
          if (record.revoked) return ended('session ended')
          if (Date.parse(record.exp_at_iso) <= now) return ended('session expired')
          // unused past session_idle_minutes: its next request is refused, so its socket closes
          if (deps.sessions.isIdle(record, now)) return ended('session idle')
        }
      }
      if (entry.authType === 'api_token' && entry.credentialId !== undefined) {
        const record = held(entry.credentialId, (id) => deps.tokens.byHash(id), (id) => deps.tokens.fetch(id))
        if (record === 'absent') {
          reading.delete(entry.credentialId)
          return ended('token revoked')
        }
        if (record !== 'reading') {
          if (record.revoked === true) return ended('token revoked')
          if (Date.parse(record.expires_at_iso) <= now) return ended('token expired')
        }
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
