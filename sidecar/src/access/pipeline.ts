/**
 * The access pipeline, one for host routes (access/decide.ts, decided for the plugin) and owned
 * routes (access/request-context.ts): address → HTTPS → principal → CSRF → level.
 *
 * Each step is a pure function here; the two callers run them in this order and only turn the
 * verdicts into their own answer forms (a decision for the plugin, a Fastify reply). So which
 * check wins first, and with which code, is written once:
 * 1. address: the IP lists refuse any of the client's addresses → `IP_DENIED` (host routes; an owned
 *    route is reached only through a decision that already passed this step);
 * 2. HTTPS: force_https redirects plain-HTTP browser navigations (access/force-https.ts);
 * 3. principal: the one identity resolution (identity/resolver.ts) gives a `Resolution`;
 * 4. without a principal: a public requirement passes, a page navigation goes to the login page,
 *    anything else is refused with the credential's error (or `AUTH_REQUIRED`); no CSRF check,
 *    since no cookie acts;
 * 5. CSRF: a cookie-authenticated request with cross-site risk must be same-origin → `CSRF_REJECTED`
 *    (on public requirements too: an admin's cookie registers users);
 * 6. level: the requirement → `AUTH_REQUIRED` / `ADMIN_REQUIRED` / `PERMISSION_DENIED`.
 */
import type { ErrorCode } from '../kernel/errors.js'
import type { Channel } from '../identity/credentials.js'
import { can, isAdministrator, type Principal } from '../identity/principal.js'
import type { Requirement as HostRequirement } from './host-routes.js'
import { fromAnotherOrigin, isSameOrigin, type ClientFacts } from './client-facts.js'

/** `channel` is how the principal's credential arrived (absent for anonymous principals). */
export type Resolution = { principal: Principal | null; channel?: Channel } | { error: ErrorCode }

/** Resolves the presented credential (or its absence) to a principal. */
export interface PrincipalResolver {
  resolve(headers: Record<string, string | undefined>, query: URLSearchParams, facts: ClientFacts): Resolution | Promise<Resolution>
}

export interface IpGate {
  /** null when admitted; the error code otherwise */
  refuse(ip: string): ErrorCode | null
}

/**
 * What a request needs: a host route's requirement (access/host-routes.ts), or an owned route's
 * auth level (`public`: nothing; `user`: a principal with an account of its own).
 */
export type Requirement = HostRequirement | { kind: 'public' } | { kind: 'user' }

export type Headers = Record<string, string | undefined>

const UNSAFE = new Set(['POST', 'PUT', 'PATCH', 'DELETE'])

/** Step 1: the IP lists' refusal of any of the client's addresses, or null. */
export function addressRefusal(facts: ClientFacts, ipGate: IpGate): ErrorCode | null {
  for (const ip of facts.addresses) {
    const refusal = ipGate.refuse(ip)
    if (refusal) return refusal
  }
  return null
}

/** The principal a resolution names, or null (none, or a credential that failed). */
export function principalOf(resolution: Resolution): Principal | null {
  return 'error' in resolution ? null : resolution.principal
}

/**
 * Step 5: a cookie rides along on cross-site requests, so a cookie-authenticated unsafe method or
 * WebSocket upgrade (which a cross-site page can open and then read) must come from our own
 * origin. (The plugin's proxy drops `Upgrade` as hop-by-hop: owned routes never see one.)
 */
export function csrfRefusal(channel: Channel | undefined, method: string, headers: Headers, facts: ClientFacts): ErrorCode | null {
  if (channel !== 'cookie') return null
  const crossSiteRisk = UNSAFE.has(method) || headers.upgrade?.toLowerCase() === 'websocket'
  return crossSiteRisk && !isSameOrigin(headers, facts.isHttps) ? 'CSRF_REJECTED' : null
}

/**
 * Step 5 for a principal granted by the client's address (`local_anonymous_role`): a browser there
 * carries that grant to every page it opens, as it carries a cookie. A script sends no browser
 * signal and keeps the grant; a browser's cross-site unsafe method or WebSocket upgrade (its
 * `Sec-Fetch-Site` other than same-origin, else an `Origin` that is not ours, `null` included) is
 * refused.
 */
export function anonymousCrossSiteRefusal(principal: Principal, method: string, headers: Headers, facts: ClientFacts): ErrorCode | null {
  if (principal.authType !== 'anonymous') return null
  if (!UNSAFE.has(method) && headers.upgrade?.toLowerCase() !== 'websocket') return null
  return fromAnotherOrigin(headers, facts.isHttps) ? 'CSRF_REJECTED' : null
}

/** Step 6: what the requirement refuses this principal, or null. */
export function levelRefusal(requirement: Requirement, principal: Principal): ErrorCode | null {
  switch (requirement.kind) {
    case 'public':
    case 'principal':
      return null
    case 'user':
      return principal.userId === null || principal.authType === 'anonymous' ? 'AUTH_REQUIRED' : null
    case 'admin':
      return isAdministrator(principal) ? null : 'ADMIN_REQUIRED'
    case 'permission':
      return can(principal, requirement.key) ? null : 'PERMISSION_DENIED'
  }
}

export type AccessVerdict =
  | { allow: true; principal: Principal | null; channel?: Channel }
  /** an unauthenticated browser navigation of a page: the caller answers with its login redirect */
  | { allow: false; login: true }
  | { allow: false; login: false; code: ErrorCode }

export interface AccessRequest {
  method: string
  headers: Headers
  facts: ClientFacts
  resolution: Resolution
  requirement: Requirement
  /** an unauthenticated browser navigation of this request is sent to the login page */
  loginPage: boolean
}

/** Steps 4 to 6, on a resolved principal: who wins first is decided here and only here. */
export function checkAccess(request: AccessRequest): AccessVerdict {
  const { resolution, requirement } = request
  const principal = principalOf(resolution)
  if (principal === null) {
    if (requirement.kind === 'public') return { allow: true, principal: null }
    if (request.loginPage && request.facts.isNavigation) return { allow: false, login: true }
    return { allow: false, login: false, code: 'error' in resolution ? resolution.error : 'AUTH_REQUIRED' }
  }
  const channel = 'error' in resolution ? undefined : resolution.channel
  const code = csrfRefusal(channel, request.method, request.headers, request.facts)
    ?? anonymousCrossSiteRefusal(principal, request.method, request.headers, request.facts)
    ?? levelRefusal(requirement, principal)
  return code === null ? { allow: true, principal, channel } : { allow: false, login: false, code }
}
