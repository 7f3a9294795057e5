/**
 * buildApp(services): the Fastify instance for owned routes, and the
 * decision handlers, with no I/O of their own (main.ts listens).
 *
 * Every `/authsvc/...` route is registered twice, as `/authsvc/...` and
 * `/api/authsvc/...`, by the same plugin, so the prefix can never change who
 * is authenticated or what is allowed.
 */
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify'
import fastifyCookie from '@fastify/cookie'
import fastifyFormbody from '@fastify/formbody'
import FindMyWay from 'find-my-way'
import { ClientIdBindings, HostBehaviours } from './decide/behaviours.js'
import { createDecider, type OwnedRoutes } from './decide/decide.js'
import { PROTOCOL_VERSION, type HelloMessage } from './decide/protocol.js'
import type { DecisionHandlers } from './decide/server.js'
import { AuthsvcError } from './errors.js'
import { registerErrorHandling } from './http/errors.js'
import { registerRequestContext } from './http/request-context.js'
import { adminRoutes } from './routes/admin.js'
import { authRoutes } from './routes/auth.js'
import { healthRoutes } from './routes/health.js'
import { meRoutes } from './routes/me.js'
import { mfaRoutes } from './routes/mfa.js'
import { assetRoutes, pageRoutes } from './routes/pages.js'
import { generateTokenHandler, generateTokenSchema, tokenRoutes } from './routes/tokens.js'
import { SERVICE_VERSION, type Services } from './services.js'

export const OWNED_BODY_LIMIT = 1024 * 1024

export interface BuiltApp {
  app: FastifyInstance
  owned: OwnedRoutes
  handlers: (httpSocket: string) => DecisionHandlers
}

export function buildApp(services: Services, logger: FastifyBaseLogger): BuiltApp {
  const app = Fastify({
    loggerInstance: logger,
    bodyLimit: OWNED_BODY_LIMIT,
    // wrong types are refused, never converted ({"disabled": 0} is not false); where a schema
    // closes its object, an unknown key is refused, never silently dropped
    ajv: { customOptions: { coerceTypes: false, removeAdditional: false } },
    return503OnClosing: true,
  })
  const router = FindMyWay()
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method]
    for (const method of methods) {
      if (!router.find(method as 'GET', route.url)) router.on(method as 'GET', route.url, () => {})
    }
  })
  registerRequestContext(app, services)
  registerErrorHandling(app)
  app.addHook('onSend', async (_request, reply) => {
    reply.header('X-Authsvc-Version', SERVICE_VERSION)
  })
  // An empty body of any type (a form-less POST /logout) is no body; a non-empty one of an unknown type is 415.
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body: Buffer, done) => {
    if (body.length === 0) return done(null, undefined)
    done(new AuthsvcError('UNSUPPORTED_MEDIA_TYPE'), undefined)
  })
  void app.register(fastifyCookie)
  void app.register(fastifyFormbody, { bodyLimit: OWNED_BODY_LIMIT })

  void app.register(authRoutes(services))
  void app.register(pageRoutes(services))
  void app.register(async (legacy) => {
    legacy.post('/generate_token', { config: { auth: 'public' }, schema: generateTokenSchema }, generateTokenHandler(services))
  })
  for (const prefix of ['/authsvc', '/api/authsvc']) {
    void app.register(
      async (family) => {
        await family.register(tokenRoutes(services))
        await family.register(meRoutes(services))
        await family.register(adminRoutes(services))
        await family.register(healthRoutes(services))
        await family.register(mfaRoutes(services))
        await family.register(assetRoutes)
      },
      { prefix },
    )
  }

  const owned: OwnedRoutes = {
    has(method, path) {
      return router.find((method === 'HEAD' ? 'GET' : method) as 'GET', path) !== null
    },
  }

  const behaviours = new HostBehaviours(services.config.max_json_body_bytes, new ClientIdBindings())
  const decide = createDecider({
    config: services.config,
    net: services.net,
    owned,
    resolver: services.resolver,
    ipGate: services.ipGate,
    behaviours,
    adminPatterns: new Set(services.config.admin_route_patterns),
    log: logger,
  })

  const handlers = (httpSocket: string): DecisionHandlers => ({
    hello(msg: HelloMessage) {
      if (msg.protocol !== PROTOCOL_VERSION) {
        logger.error({ plugin_protocol: msg.protocol, sidecar_protocol: PROTOCOL_VERSION }, 'protocol version mismatch with the plugin; every request on its connection is refused')
      } else if (msg.host) {
        services.host.facts = msg.host
      }
      return { type: 'hello', protocol: PROTOCOL_VERSION, sidecar_version: SERVICE_VERSION, http_socket: httpSocket }
    },
    decide,
    body: (msg) => behaviours.body(msg),
    filter: (msg) => behaviours.filter(msg),
  })

  return { app, owned, handlers }
}
