/**
 * The decision: request description → principal → policy → decision.
 *
 * Order (each step can only refuse, never widen): IP lists, force_https, OPTIONS, owned
 * routes (proxied; the sidecar's HTTP side resolves identity itself; anything else under the
 * service's own prefixes is answered with its JSON 400/404/405, never by the host), host
 * route policy, principal, CSRF, requirement, route behaviour. The host never
 * sees a client's `comfy-user` header or a query credential.
 */
import { hostQuery, hostQueryProblem } from '../kernel/host-query.js'
import type { FastifyBaseLogger } from 'fastify'
import type { Config } from '../kernel/config/schema.js'
import { AuthsvcError } from '../kernel/errors.js'
import { carriesBearer, queryCredentialKeys, withoutSessionCookie } from '../identity/credentials.js'
import { hostUserName, hostUserOf } from '../identity/host-user.js'
import type { Principal } from '../identity/principal.js'
import { addressRefusal, checkAccess, type IpGate, type PrincipalResolver, type Resolution } from './pipeline.js'
import { INERT_HEADERS, framePolicy, loadedAsCode, type HostRoutePolicy, type HostRouteTable, type OperatorPatterns } from './host-routes.js'
import { isDecodablePath, isServicePath } from './service-paths.js'
import { httpsUpgradeDecision } from './force-https.js'
import { denyDecision, errorDecision, loginRedirectDecision } from '../kernel/answers.js'
import { clientFacts, type ClientFacts, type NetworkPolicy } from './client-facts.js'
import type { Decision, PassDecision, RequestDescription } from '../kernel/protocol.js'

// the access pipeline's types, where the decider's callers have always found them
export type { IpGate, PrincipalResolver, Resolution } from './pipeline.js'

export interface OwnedRoutes {
  has(method: string, path: string): boolean
  /** the methods of the owned route at `path` (empty: no owned route there) */
  methodsAt(path: string): string[]
}

/** Route behaviours beyond the permission check (prompt stamping, filters...). */
export interface BehaviourHandlers {
  apply(policy: HostRoutePolicy, desc: RequestDescription, principal: Principal, pass: PassDecision, client: { ip: string; addresses: readonly string[] }): Decision | Promise<Decision>
  /** Whether the behaviour's GET passes may be kept by the plugin (RouteBehaviour.keepable). */
  keepable(policy: HostRoutePolicy): boolean
}

export interface DecideDeps {
  config: Config
  net: NetworkPolicy
  owned: OwnedRoutes
  resolver: PrincipalResolver
  ipGate: IpGate
  behaviours: BehaviourHandlers
  /** the operator's admin-only and inert patterns for other custom nodes' routes (config) */
  operatorPatterns: OperatorPatterns
  /** the host-route table with the features' rows (app.ts; tests may pass HOST_ROUTES) */
  routes: HostRouteTable
  log: FastifyBaseLogger
  /**
   * How long the plugin may reuse a GET/HEAD pass (of a route with no behaviour, or of a keepable
   * one) for the very same request description, and the epoch that keeps it honest
   * (access-epoch.ts); 0 or absent: never.
   */
  decisionCache?: { ms: number; epoch: { readonly value: number } }
}

const OPTIONS_ANSWER: Decision = {
  action: 'respond',
  status: 204,
  headers: [['Allow', 'GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS']],
  body_text: '',
}

export function createDecider(deps: DecideDeps): (desc: RequestDescription) => Decision | Promise<Decision> {
  return function decide(desc: RequestDescription): Decision | Promise<Decision> {
    // the access pipeline (access/pipeline.ts): address, HTTPS, then (below) principal, CSRF, level
    const facts = clientFacts(desc.peer, desc.scheme, desc.headers, deps.net)
    const ipRefusal = addressRefusal(facts, deps.ipGate)
    if (ipRefusal) return denyDecision(ipRefusal)
    const upgrade = httpsUpgradeDecision(deps.config, desc, facts)
    if (upgrade) return upgrade
    // Preflights carry no credential; answered here, with no CORS grant (same-origin only).
    if (desc.method === 'OPTIONS') return OPTIONS_ANSWER
    const badQuery = hostQueryProblem(desc.query)
    if (badQuery !== null) return denyDecision('VALIDATION_FAILED', badQuery)
    const query = hostQuery(desc.query)
    if (isServicePath(desc.path)) {
      if (deps.owned.has(desc.method, desc.path)) return { action: 'proxy' }
      // what no owned route answers is the service's JSON error, for a principal only: anonymous
      // probes of the service's paths learn nothing (401), as for the host's
      const who = deps.resolver.resolve(desc.headers, query, facts)
      if (who instanceof Promise) return who.then((r) => servicePathDecision(deps.owned, desc.method, desc.path, r))
      return servicePathDecision(deps.owned, desc.method, desc.path, who)
    }
    if (deps.owned.has(desc.method, desc.path)) return { action: 'proxy' }
    const policy = deps.routes.policy(desc.method, desc.route, deps.operatorPatterns)
    const epoch = deps.decisionCache?.epoch.value ?? 0
    const resolution = deps.resolver.resolve(desc.headers, query, facts)
    if (resolution instanceof Promise) return resolution.then((r) => decideHost(deps, desc, policy, query, facts, r, epoch))
    return decideHost(deps, desc, policy, query, facts, resolution, epoch)
  }
}

/**
 * A request in the service's own path space (access/service-paths.ts) is the service's: its
 * route, or (for a principal; else the credential's 401) its JSON error. Decided on the prefix, so what no owned route matches (a bad
 * encoding, a parameter longer than the router reads, an unknown method) never reaches the host.
 */
function servicePathDecision(owned: OwnedRoutes, method: string, path: string, resolution: Resolution): Decision {
  if ('error' in resolution || resolution.principal === null) return denyDecision('error' in resolution ? resolution.error : 'AUTH_REQUIRED')
  if (!isDecodablePath(path)) return denyDecision('VALIDATION_FAILED', 'The path is not valid percent-encoded UTF-8')
  if (owned.has(method, path)) return { action: 'proxy' }
  const methods = owned.methodsAt(path)
  if (methods.length > 0) return denyDecision('METHOD_NOT_ALLOWED', undefined, [['Allow', methods.join(', ')]])
  return denyDecision('NOT_FOUND')
}

function decideHost(
  deps: DecideDeps,
  desc: RequestDescription,
  policy: HostRoutePolicy,
  query: URLSearchParams,
  facts: ClientFacts,
  resolution: Resolution,
  epoch: number,
): Decision | Promise<Decision> {
  const dropQuery = queryCredentialKeys(query)
  const verdict = checkAccess({
    method: desc.method,
    headers: desc.headers,
    facts,
    resolution,
    requirement: policy.require,
    loginPage: policy.page && (desc.method === 'GET' || desc.method === 'HEAD'),
  })
  if (!verdict.allow) {
    if (!verdict.login) return denyDecision(verdict.code)
    for (const key of dropQuery) query.delete(key)
    return loginRedirectDecision(desc.path, query.toString())
  }
  const { principal, channel } = verdict
  // no host route is public (access/host-routes.ts): only a principal passes
  if (principal === null) return denyDecision('AUTH_REQUIRED')
  const pass: PassDecision = { action: 'pass' }
  // every principal acts in a userdata space of its own on the host, never in the shared set of
  // `default` (identity/host-user.ts, docs/decisions.md)
  const hostUser = hostUserOf(principal)
  pass.set_headers = { 'comfy-user': hostUser }
  pass.host_user = { id: hostUser, name: hostUserName(principal) }
  // no credential of ours reaches the host: a bearer header, wherever it carries one (a proxy's
  // Basic beside it included), and the session cookie, whichever channel decided
  if (channel === 'bearer' || carriesBearer(desc.headers.authorization)) {
    pass.strip_headers = [...(pass.strip_headers ?? []), 'authorization']
  }
  const cookies = withoutSessionCookie(desc.headers.cookie)
  if (cookies === '') pass.strip_headers = [...(pass.strip_headers ?? []), 'cookie']
  else if (cookies !== null) pass.set_headers.cookie = cookies
  if (dropQuery.length > 0) pass.drop_query = dropQuery
  if (policy.inert === true) {
    if (loadedAsCode(desc.headers)) return denyDecision('PERMISSION_DENIED', 'A file users put on the host is never loaded as a script, worker or style')
    pass.response_headers = { ...INERT_HEADERS }
  }
  const framing = framePolicy(desc.headers, deps.config.frame_ancestors)
  if (framing !== null) {
    const csp = pass.response_headers?.['Content-Security-Policy']
    pass.response_headers = { ...pass.response_headers, 'Content-Security-Policy': csp === undefined ? framing : `${csp}; ${framing}` }
  }
  // A read the plugin may keep: the same description gets the same answer until something it
  // read changes (the epoch moves, and the plugin is told at once) or the time runs out
  // (expiries, idle timeouts, a hung sidecar). A plain route's pass reads only the principal; a
  // keepable behaviour's reads only that and what its filter's memo names, which move the
  // epoch too (services.ts). Decided on the state this decision began with, or not kept.
  const cache = deps.decisionCache
  const onlyRead = (desc.method === 'GET' || desc.method === 'HEAD') && desc.headers.upgrade === undefined
  const keep = onlyRead && (policy.behaviour === undefined || deps.behaviours.keepable(policy))
  const kept = (decision: Decision): Decision => {
    // a behaviour's own answer on such a route may carry a user's file too (a shared workflow's text)
    // (a copy: a behaviour may answer with a decision it keeps)
    if (decision.action === 'respond' && policy.inert === true) return { ...decision, headers: [...(decision.headers ?? []), ...Object.entries(INERT_HEADERS)] }
    if (decision.action !== 'pass') return decision
    // a pass decided on one file (GET /view): kept only while that file stays as it was
    const file = decision.keep_while
    const plain = decision.keep_plain === true
    delete decision.keep_while
    delete decision.keep_plain
    if (cache === undefined || cache.ms <= 0 || cache.epoch.value !== epoch) return decision
    if (file !== undefined && onlyRead) decision.cache = { ms: cache.ms, epoch, file }
    else if (keep || (plain && onlyRead)) decision.cache = { ms: cache.ms, epoch }
    return decision
  }
  if (policy.behaviour === undefined) return kept(pass)
  try {
    const shaped = deps.behaviours.apply(policy, desc, principal, pass, facts)
    if (shaped instanceof Promise) return shaped.then(kept, behaviourFailure)
    return kept(shaped)
  } catch (err) {
    return behaviourFailure(err)
  }
}

function behaviourFailure(err: unknown): Decision {
  if (err instanceof AuthsvcError) return errorDecision(err)
  throw err
}
