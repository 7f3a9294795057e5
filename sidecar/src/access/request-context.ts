/**
 * Owned routes: who is asking, resolved once per request in `onRequest`, and
 * the auth level every route declares at registration (`config.auth`).
 *
 * The plugin adds `x-authsvc-peer` / `x-authsvc-scheme` (and strips any a
 * client sent); the HTTP socket is reachable only through the plugin (0600),
 * so those headers are the real peer. Under `force_https`, plain-HTTP browser
 * navigations are redirected here too, before any identity work.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { checkAccess, type Requirement, type Resolution } from './pipeline.js'
import { clientFacts, type ClientFacts } from './client-facts.js'
import { AuthsvcError, type ErrorCode } from '../kernel/errors.js'
import type { Channel } from '../identity/credentials.js'
import type { Principal } from '../identity/principal.js'
import { HSTS_VALUE, httpsUpgrade } from './force-https.js'
import type { Services } from '../services.js'

export type AuthLevel = 'public' | 'principal' | 'user' | 'admin'

declare module 'fastify' {
  interface FastifyContextConfig {
    auth?: AuthLevel
    /** pages: a browser navigation without a principal is redirected to /login */
    page?: boolean
  }
  interface FastifyRequest {
    facts: ClientFacts
    principal: Principal | null
    channel: Channel | undefined
    credentialError: ErrorCode | undefined
    queryParams: URLSearchParams
  }
}

/** An owned route's auth level as a requirement of the access pipeline. */
const REQUIREMENTS: Record<AuthLevel, Requirement> = {
  public: { kind: 'public' },
  principal: { kind: 'principal' },
  user: { kind: 'user' },
  admin: { kind: 'admin' },
}

function headerMap(request: FastifyRequest): Record<string, string | undefined> {
  const out: Record<string, string | undefined> = {}
  for (const [name, value] of Object.entries(request.headers)) out[name] = Array.isArray(value) ? value.join(', ') : value
  return out
}

export function registerRequestContext(app: FastifyInstance, services: Pick<Services, 'config' | 'net' | 'resolver'>): void {
  // facts and queryParams have no value before onRequest sets them (which runs before any handler)
  app.decorateRequest('facts')
  app.decorateRequest('principal', null)
  app.decorateRequest('channel', undefined)
  app.decorateRequest('credentialError', undefined)
  app.decorateRequest('queryParams')

  app.addHook('onRoute', (route) => {
    if (route.config?.auth === undefined && !route.url.startsWith('*')) {
      throw new Error(`route ${route.method} ${route.url} declares no auth level`)
    }
  })

  // Identity and the route's auth level are settled before the body is even parsed:
  // a caller without access learns nothing from validation errors.
  app.addHook('onRequest', async (request, reply) => {
    const headers = headerMap(request)
    const peer = headers['x-authsvc-peer'] ?? request.socket.remoteAddress ?? ''
    const scheme = headers['x-authsvc-scheme'] ?? 'http'
    const queryIndex = request.url.indexOf('?')
    request.queryParams = new URLSearchParams(queryIndex >= 0 ? request.url.slice(queryIndex + 1) : '')
    request.facts = clientFacts(peer, scheme, headers, services.net)
    const upgrade = httpsUpgrade(services.config, request.method, request.facts, headers.host, request.url.split('?')[0], queryIndex >= 0 ? request.url.slice(queryIndex + 1) : '')
    if (upgrade?.status === 400) throw new AuthsvcError('VALIDATION_FAILED', 'force_https: the request has no usable Host header')
    if (upgrade?.status === 301) return reply.code(301).header('Location', upgrade.location).header('Cache-Control', 'no-store').send()
    const resolution = await services.resolver.resolve(headers, request.queryParams, request.facts)
    if ('error' in resolution) {
      request.credentialError = resolution.error
    } else {
      request.principal = resolution.principal
      request.channel = resolution.channel
    }
    return enforceAuthLevel(request, reply, headers, resolution)
  })

  // force_https: the browser learns to use https only from this host's answers over https
  // (the config is read per answer: routes are registered before the services are opened)
  app.addHook('onSend', async (request, reply) => {
    if (request.facts?.isHttps && services.config.force_https) reply.header('Strict-Transport-Security', HSTS_VALUE)
  })
}

/** The access pipeline's CSRF and level steps (access/pipeline.ts) for the route's declared level. */
async function enforceAuthLevel(request: FastifyRequest, reply: FastifyReply, headers: Record<string, string | undefined>, resolution: Resolution): Promise<FastifyReply | undefined> {
  const level = request.routeOptions.config.auth
  if (level === undefined) throw new AuthsvcError('NOT_FOUND')
  const verdict = checkAccess({
    method: request.method,
    headers,
    facts: request.facts,
    resolution,
    requirement: REQUIREMENTS[level],
    loginPage: request.routeOptions.config.page === true && request.method === 'GET',
  })
  if (verdict.allow) return undefined
  if (verdict.login) return redirectToLogin(request, reply)
  throw new AuthsvcError(verdict.code)
}

export function redirectToLogin(request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const url = new URL(request.url, 'http://x')
  url.searchParams.delete('token')
  url.searchParams.delete('access_token')
  const next = url.pathname + url.search
  return reply.code(302).header('Location', `/login?next=${encodeURIComponent(next)}`).header('Cache-Control', 'no-store').send()
}

/** The authenticated principal of a route declared `user` or `admin`. */
export function requireUser(request: FastifyRequest): Principal & { userId: string } {
  const principal = request.principal
  if (principal === null || principal.userId === null) throw new AuthsvcError('AUTH_REQUIRED')
  return principal as Principal & { userId: string }
}

/** Who did it and from where, for an event emitted while answering `request` (kernel/events.ts). */
export function eventContext(request: FastifyRequest): { actor?: string; principal?: string; ip: string } {
  return { ...actingAs(request.principal), ip: request.facts.ip }
}

/**
 * The event fields naming who acts: a user by `actor`; a guest or an anonymous client by
 * `principal` only. Their username is the role's name, which a real account may also have: as an
 * actor it would put everything anonymous clients do into that account's console.
 */
export function actingAs(principal: Principal | null): { actor?: string; principal?: string } {
  if (principal === null) return {}
  if (principal.userId !== null) return { actor: principal.username }
  return { principal: principal.credentialId ? 'guest' : `anonymous:${principal.role}` }
}
