/**
 * The one identity resolution of a request (DESIGN §2.4): credential channel
 * → verified credential → live user → principal with its role's permissions.
 *
 * Every check is against live state (session record, token record, user
 * record, groups), so a logout, revocation, disable or role change refuses
 * the very next request. A present but invalid credential is refused, never
 * downgraded to anonymous.
 */
import { isIP } from 'node:net'
import type { Config } from '../kernel/config/schema.js'
import type { ClientFacts } from '../access/client-facts.js'
import type { PrincipalResolver, Resolution } from '../access/pipeline.js'
import type { RoleStore } from '../access/roles.js'
import type { SettingsRepository } from '../store/settings.js'
import type { ApiTokenRecord, ApiTokenService, TokenCheck } from './api-tokens.js'
import { presentedCredential, type Channel } from './credentials.js'
import { GUEST_ROLE, GUEST_SUBJECT } from './guest-sessions.js'
import { ADMIN_ROLE, type AuthType, type Principal } from './principal.js'
import type { SessionCheck, SessionRecord, SessionService } from './sessions.js'
import type { UserRecord, UserRepository } from './users.js'

export { GUEST_ROLE, GUEST_SUBJECT }

export interface ResolverDeps {
  config: Config
  users: UserRepository
  sessions: SessionService
  tokens: ApiTokenService
  roles: RoleStore
  settings: SettingsRepository
}

export class IdentityResolver implements PrincipalResolver {
  constructor(private readonly deps: ResolverDeps) {}

  resolve(headers: Record<string, string | undefined>, query: URLSearchParams, facts: ClientFacts): Resolution | Promise<Resolution> {
    const presented = presentedCredential(headers, query)
    if (presented === 'malformed') return { error: 'TOKEN_INVALID' }
    if (presented === null) return { principal: this.anonymous(facts, headers.host, headers['x-forwarded-host']) }
    const { channel, value } = presented
    if (value.includes('.')) return this.fromSession(value, channel)
    if (value.startsWith('ast_')) return this.fromApiToken(value, channel)
    return { error: 'TOKEN_INVALID' }
  }

  private fromSession(token: string, channel: Channel): Resolution | Promise<Resolution> {
    const checked = this.deps.sessions.check(token)
    if (checked instanceof Promise) return checked.then((c) => this.sessionPrincipal(c, channel))
    return this.sessionPrincipal(checked, channel)
  }

  private sessionPrincipal(checked: SessionCheck, channel: Channel): Resolution | Promise<Resolution> {
    if ('error' in checked) return checked
    const { record } = checked
    if (record.user_id === GUEST_SUBJECT) return this.sessionPrincipalHeld(record, channel)
    return this.withUserHeld(record.user_id, () => this.sessionPrincipalHeld(record, channel))
  }

  /**
   * Runs `next` once this replica holds the user: with several instances, a user made on another
   * one a moment ago is read from the store first (503 when it cannot be read).
   */
  private withUserHeld(userId: string, next: () => Resolution): Resolution | Promise<Resolution> {
    if (this.deps.users.byId(userId) !== undefined || !this.deps.users.shared) return next()
    return this.deps.users.fetchById(userId).then(next, (): Resolution => ({ error: 'STORE_UNAVAILABLE' }))
  }

  private sessionPrincipalHeld(record: SessionRecord, channel: Channel): Resolution {
    if (record.user_id === GUEST_SUBJECT) {
      if (!this.deps.settings.get('allow_guest_jwt')) return { error: 'TOKEN_REVOKED' }
      // guests share no identity: no user id (no comfy-user, no 'user' routes), their own session only
      return { principal: this.rolePrincipal(GUEST_ROLE, 'session', null, record.jti), channel }
    }
    const user = this.deps.users.byId(record.user_id)
    if (!user) return { error: 'TOKEN_REVOKED' }
    if (user.disabled) return { error: 'TOKEN_REVOKED' }
    return { principal: this.userPrincipal(user, 'session', record.jti), channel }
  }

  private fromApiToken(token: string, channel: Channel): Resolution | Promise<Resolution> {
    const checked = this.deps.tokens.check(token)
    if (checked instanceof Promise) return checked.then((c) => this.tokenPrincipal(c, channel))
    return this.tokenPrincipal(checked, channel)
  }

  private tokenPrincipal(checked: TokenCheck, channel: Channel): Resolution | Promise<Resolution> {
    if ('error' in checked) return checked
    const { record } = checked
    return this.withUserHeld(record.user_id, () => this.tokenPrincipalHeld(record, channel))
  }

  private tokenPrincipalHeld(record: ApiTokenRecord, channel: Channel): Resolution {
    const user = this.deps.users.byId(record.user_id)
    if (!user || user.disabled) return { error: 'TOKEN_REVOKED' }
    return { principal: this.userPrincipal(user, 'api_token', record.hash), channel }
  }

  /**
   * Anonymous clients act as `local_anonymous_role` only where the config allows it. Where the
   * grant rests on the client's address being local, the request must also name the host by a name
   * no other site can hold (an IP literal, `localhost`, `*.localhost`): a page elsewhere can point a
   * name of its own at a local address (DNS rebinding), and a browser on that address then sends it
   * requests its page may read. Behind a proxy that names the upstream itself (nginx's
   * `proxy_pass http://127.0.0.1:8188` sends that Host), the name the browser used is in
   * `X-Forwarded-Host`: when present it must pass too (a client that sends one only narrows itself).
   */
  anonymous(facts: ClientFacts, host: string | undefined, forwardedHost?: string): Principal | null {
    const role = this.deps.config.local_anonymous_role
    if (role === null || !this.deps.roles.has(role) || role === ADMIN_ROLE) return null
    const named = rebindProofHost(host) && (forwardedHost === undefined || forwardedHost.split(',').every((h) => rebindProofHost(h.trim())))
    if (this.deps.config.require_auth_for_remote_api && (!facts.isLocal || !named)) return null
    return this.rolePrincipal(role, 'anonymous', null)
  }

  userPrincipal(user: UserRecord, authType: AuthType, credentialId: string): Principal {
    return {
      userId: user.user_id,
      username: user.username,
      role: user.role,
      isAdmin: user.role === ADMIN_ROLE,
      permissions: this.deps.roles.permissions(user.role),
      authType,
      credentialId,
      sfwCheck: user.sfw_check,
      mfaEnabled: user.mfa_enabled,
    }
  }

  private rolePrincipal(role: string, authType: AuthType, userId: string | null, credentialId?: string): Principal {
    return {
      userId,
      username: userId ?? role,
      role,
      isAdmin: false,
      permissions: this.deps.roles.permissions(role),
      authType,
      credentialId,
      sfwCheck: true,
      mfaEnabled: false,
    }
  }
}

/** A Host header no DNS answer can move elsewhere: an IP literal, `localhost` or a `.localhost` name (browsers keep those on loopback), with an optional port. */
export function rebindProofHost(host: string | undefined): boolean {
  if (host === undefined) return false
  const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:\[\]]+))(?::\d{1,5})?$/.exec(host)
  if (match === null) return false
  if (match[1] !== undefined) return isIP(match[1]) === 6
  const name = match[2].toLowerCase()
  return isIP(name) === 4 || name === 'localhost' || name.endsWith('.localhost')
}
