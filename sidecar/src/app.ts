/**
 * The composition: the kernel (Fastify for owned routes, the access pipeline, the decision
 * handlers, jobs) and the list of features (`features()`); adding a feature is its folder and
 * one line in that list (kernel/feature.ts). No I/O of its own beyond the page files the pages
 * feature reads at import (main.ts listens).
 *
 * In two steps, so a standby sidecar can do the first before it may touch the data dir:
 * prepareApp() registers every route (what a start spends most of its time on) against
 * services that are bound later; bind(services) builds what decides. Nothing may use the
 * services before bind(): that throws, it never reads an empty store (issue 27).
 *
 * Every `/authsvc/...` route is registered twice, as `/authsvc/...` and
 * `/api/authsvc/...`, by the same plugin, so the prefix can never change who
 * is authenticated or what is allowed.
 */
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify'
import fastifyCookie from '@fastify/cookie'
import fastifyFormbody from '@fastify/formbody'
import FindMyWay from 'find-my-way'
import { createDecider, type OwnedRoutes } from './access/decide.js'
import { hostRouteTable, operatorPatterns } from './access/host-routes.js'
import { registerRequestContext } from './access/request-context.js'
import { identityFeature } from './identity/feature.js'
import { isolationFeature, type IsolationFeature } from './isolation/feature.js'
import type { LiveSockets } from './isolation/live-sockets.js'
import type { HostFileWatcher } from './isolation/file-watcher.js'
import { RouteBehaviours } from './kernel/behaviours.js'
import type { Clock } from './kernel/clock.js'
import { adminPanelFeature } from './admin-panel/feature.js'
import { auditFeature } from './audit/feature.js'
import { AuthsvcError } from './kernel/errors.js'
import type { BoundFeature, Feature } from './kernel/feature.js'
import { hostFactsOf } from './kernel/frames.js'
import { AccessLog, accessLogLevel } from './kernel/http/access-log.js'
import { registerErrorHandling } from './kernel/http/errors.js'
import { healthRoutes } from './kernel/http/health.js'
import { openApiRoutes, registerOpenApi } from './kernel/http/openapi.js'
import { sharedSchemaCompilers } from './kernel/http/schema-compilers.js'
import { Jobs } from './kernel/jobs.js'
import { PROTOCOL_VERSION, type Decision, type HelloMessage, type PushMessage, type RequestDescription } from './kernel/protocol.js'
import { errorDecision } from './kernel/answers.js'
import type { DecisionHandlers } from './kernel/server.js'
import { downloadsFeature } from './downloads/feature.js'
import { modelsFeature } from './models/feature.js'
import { BLOCKED as NSFW_BLOCKED_ANSWER } from './nsfw/policy.js'
import { notifyFeature } from './notify/feature.js'
import { nsfwFeature } from './nsfw/feature.js'
import { pagesFeature } from './pages/feature.js'
import { SERVICE_VERSION, type Services } from './services.js'
import { storeConfigFeature } from './store-config/feature.js'
import { updatesFeature } from './updates/feature.js'
import { userEnvFeature } from './user-env/feature.js'
import { workflowsFeature } from './workflows/feature.js'

/**
 * The sidecar's features, in the order they are registered and bound. Each gets only what it
 * uses (its factory's parameter type says what); `services` throw if used before the store is open.
 */
export function features(services: Services, log: FastifyBaseLogger, clock: Clock): Feature[] {
  // a model's preview image is refused to the users the content-safety policy looks at
  const models = modelsFeature(services, log, clock, (principal) => (nsfw.gate()?.applies(principal) === true ? NSFW_BLOCKED_ANSWER : null))
  const nsfw = nsfwFeature(services, log)
  return [
    identityFeature(services),
    models,
    isolationFeature(services, log, () => models.access(), () => nsfw.gate()),
    nsfw,
    workflowsFeature(services),
    pagesFeature(services),
    auditFeature(services),
    notifyFeature(services, log, clock),
    updatesFeature(services, log, clock),
    userEnvFeature(services),
    storeConfigFeature(services),
    downloadsFeature(services, log, () => models.landed, () => models.placing),
    adminPanelFeature(services),
  ]
}

/** What composes the sidecar (tests add a feature: `(s, l, c) => [...features(s, l, c), theirs]`). */
export type Composition = (services: Services, log: FastifyBaseLogger, clock: Clock) => Feature[]

const isIsolation = (feature: Feature): feature is IsolationFeature => feature.name === 'isolation' && 'liveSockets' in feature

export const OWNED_BODY_LIMIT = 1024 * 1024

export interface BuiltApp {
  /** the features as composed */
  features: readonly Feature[]
  app: FastifyInstance
  owned: OwnedRoutes
  handlers: (httpSocket: string) => DecisionHandlers
  /** where unasked messages to the plugin go (the decision server's push), set once it listens */
  setPush(push: (message: PushMessage) => void): void
  /** settles once every unasked message sent so far has left for the plugin (the decision server's flushed) */
  setFlushed(flushed: () => Promise<void>): void
  liveSockets: LiveSockets
  /** the watcher of the host's output, input and temp folders (started by the hello) */
  hostFiles: HostFileWatcher
  /** stops every feature's jobs (watchers, the WebSocket checks, the filter workers...) */
  stop(): Promise<void>
}

/** Services that exist once bind() gave them; any use before that throws. */
function lateServices(): { services: Services; bind(target: Services): void } {
  let target: Services | undefined
  const services = new Proxy({} as Services, {
    get(_shape, key) {
      if (target === undefined) throw new Error(`the sidecar used its services before the store was opened (${String(key)})`)
      return Reflect.get(target, key)
    },
  })
  return {
    services,
    bind(value) {
      if (target !== undefined) throw new Error('services are bound once')
      target = value
    },
  }
}

export interface PreparedApp {
  app: FastifyInstance
  owned: OwnedRoutes
  /** the decision side, on the opened services; once */
  bind(services: Services): BuiltApp
}

export function buildApp(services: Services, logger: FastifyBaseLogger, compose: Composition = features): BuiltApp {
  return prepareApp(logger, services.clock, compose).bind(services)
}

export function prepareApp(logger: FastifyBaseLogger, clock: Clock, compose: Composition = features): PreparedApp {
  const late = lateServices()
  const services = late.services
  const app = Fastify({
    loggerInstance: logger,
    bodyLimit: OWNED_BODY_LIMIT,
    // wrong types are refused, never converted ({"disabled": 0} is not false); where a schema
    // closes its object, an unknown key is refused, never silently dropped
    ajv: { customOptions: { coerceTypes: false, removeAdditional: false } },
    schemaController: { compilersFactory: sharedSchemaCompilers },
    return503OnClosing: true,
    // Fastify's two lines per request (incoming, completed) would land in ComfyUI's console for
    // every page and API call; one line per answered request instead, and only when asked for
    logController: new AccessLog(accessLogLevel(process.env, logger)),
  })
  const router = FindMyWay()
  const routedMethods = new Set<string>()
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method]
    for (const method of methods) {
      routedMethods.add(method)
      if (!router.find(method as 'GET', route.url)) router.on(method as 'GET', route.url, () => {})
    }
  })
  registerRequestContext(app, services)
  registerErrorHandling(app)
  registerOpenApi(app, SERVICE_VERSION)
  app.addHook('onSend', async (_request, reply) => {
    reply.header('X-Authsvc-Version', SERVICE_VERSION)
    // the service's answers are about someone (a new token, a TOTP secret, a session list): kept by
    // no cache unless a route says otherwise
    if (!reply.hasHeader('Cache-Control')) reply.header('Cache-Control', 'no-store')
  })
  // An answer to a request that changed something decisions read leaves only after the `forget`
  // it caused has left for the plugin: a forget held in our write buffer (the plugin busy reading
  // a large answer) must not be overtaken by the change's own answer (kernel/access-epoch.ts).
  let flushed: () => Promise<void> = async () => {}
  const epochAtStart = new WeakMap<object, number>()
  app.addHook('onRequest', async (request) => {
    epochAtStart.set(request, services.accessEpoch.value)
  })
  app.addHook('onSend', async (request) => {
    if (epochAtStart.get(request) !== services.accessEpoch.value) await flushed()
  })
  // An empty body of any type (a form-less POST /logout) is no body; a non-empty one of an unknown type is 415.
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body: Buffer, done) => {
    if (body.length === 0) return done(null, undefined)
    done(new AuthsvcError('UNSUPPORTED_MEDIA_TYPE'), undefined)
  })
  void app.register(fastifyCookie)
  void app.register(fastifyFormbody, { bodyLimit: OWNED_BODY_LIMIT })

  const composed = compose(services, logger, clock)
  const names = new Set<string>()
  for (const feature of composed) {
    if (names.has(feature.name)) throw new Error(`feature ${feature.name} is composed twice`)
    names.add(feature.name)
  }
  const routes = hostRouteTable(composed.flatMap((f) => (f.hostRoutes ? [f.hostRoutes] : [])))
  for (const feature of composed) if (feature.rootRoutes) void app.register(feature.rootRoutes)
  for (const prefix of ['/authsvc', '/api/authsvc']) {
    void app.register(
      async (family) => {
        await family.register(healthRoutes(services))
        await family.register(openApiRoutes)
        for (const feature of composed) if (feature.routes) await family.register(feature.routes)
      },
      { prefix },
    )
  }

  const owned: OwnedRoutes = {
    has(method, path) {
      return router.find((method === 'HEAD' ? 'GET' : method) as 'GET', path) !== null
    },
    methodsAt(path) {
      return [...routedMethods].filter((method) => router.find(method as 'GET', path) !== null)
    },
  }

  return { app, owned, bind: (opened) => bindDecisions(app, owned, composed, routes, logger, opened, late.bind, (fn) => (flushed = fn)) }
}

function bindDecisions(
  app: FastifyInstance, owned: OwnedRoutes, composed: Feature[], routes: ReturnType<typeof hostRouteTable>, logger: FastifyBaseLogger,
  services: Services, bindLate: (services: Services) => void, setFlushed: (fn: () => Promise<void>) => void,
): BuiltApp {
  bindLate(services)

  let push: (message: PushMessage) => void = () => {}
  // every change a decision reads reaches the plugin before that change's own answer leaves
  services.accessEpoch.onBump((epoch) => push({ type: 'forget', epoch }))
  const kernel = { push: (message: PushMessage) => push(message) }
  const bound: BoundFeature[] = composed.map((feature) => feature.bind?.(kernel) ?? {})
  const behaviours = new RouteBehaviours(
    { clock: services.clock, seperateUsers: services.config.seperate_users },
    bound.flatMap((each) => each.behaviours ?? []),
    routes.behaviours,
  )
  // once the composition held (the behaviours above refuse a broken one)
  const jobs = new Jobs(logger)
  for (const each of bound) for (const job of each.jobs ?? []) jobs.add(job)
  void jobs.start()
  const decideFromReplica = createDecider({
    config: services.config,
    net: services.net,
    owned,
    resolver: services.resolver,
    ipGate: services.ipGate,
    behaviours,
    operatorPatterns: operatorPatterns(services.config),
    routes,
    log: logger,
    decisionCache: { ms: decisionCacheMs(), epoch: services.accessEpoch },
  })
  // a shared store lost past its grace (store/health.ts): nothing is decided from a stale copy
  const storeDown = errorDecision(new AuthsvcError('STORE_UNAVAILABLE', 'The shared store is unreachable; try again shortly', { 'Retry-After': '5' }))
  const decide = (desc: RequestDescription): Decision | Promise<Decision> => (services.storeHealth.refusing ? storeDown : decideFromReplica(desc))

  /** Host facts of a hello, or of a `host_facts` event (sent once every custom node has loaded, merged). */
  const takeHostFacts = (facts: HelloMessage['host'] & object, merge: boolean): void => {
    services.host.facts = merge ? { ...services.host.facts, ...facts } : facts
    for (const each of bound) each.hostFacts?.(services.host.facts)
  }

  const handlers = (httpSocket: string): DecisionHandlers => ({
    hello(msg: HelloMessage) {
      if (msg.protocol !== PROTOCOL_VERSION) {
        logger.error({ plugin_protocol: msg.protocol, sidecar_protocol: PROTOCOL_VERSION }, 'protocol version mismatch with the plugin; every request on its connection is refused')
      } else {
        if (msg.host) takeHostFacts(msg.host, false)
        for (const each of bound) each.hello?.(msg)
      }
      return { type: 'hello', protocol: PROTOCOL_VERSION, sidecar_version: SERVICE_VERSION, http_socket: httpSocket, epoch: services.accessEpoch.value }
    },
    decide,
    body: (msg, payload, host) => behaviours.body(msg.ctx, payload, host),
    form: (msg, host) => behaviours.form(msg.ctx, msg, host),
    filter: (msg, payload, host) => behaviours.filter(msg, payload, host),
    event(msg) {
      if (msg.name === 'host_facts') takeHostFacts(hostFactsOf(msg.data), true)
      else for (const each of bound) each.hostEvent?.(msg)
    },
    async preview(_msg, payload) {
      // every feature that checks previews must allow the frame (none composed: nothing asked for checks)
      for (const each of bound) if (each.preview && !(await each.preview(payload))) return { allow: false }
      return { allow: true }
    },
  })

  const isolation = composed.find(isIsolation)
  return {
    app,
    owned,
    features: composed,
    handlers,
    get liveSockets(): LiveSockets {
      if (isolation === undefined) throw new Error('no isolation feature is composed')
      return isolation.liveSockets()
    },
    get hostFiles(): HostFileWatcher {
      if (isolation === undefined) throw new Error('no isolation feature is composed')
      return isolation.hostFiles()
    },
    setPush(fn) {
      push = fn
    },
    setFlushed,
    stop: () => jobs.stop(),
  }
}

/**
 * How long the plugin may reuse a plain pass for the same request description
 * (AUTHSVC_DECISION_CACHE_MS, default 1000, at most 5000; 0 turns it off): the bound on
 * how late an expiry or idle timeout is noticed, and on how long a hung (not crashed)
 * sidecar's last answers are still used. Changes are pushed at once and never wait for it.
 */
function decisionCacheMs(): number {
  const raw = Number(process.env.AUTHSVC_DECISION_CACHE_MS ?? 1000)
  return Number.isFinite(raw) ? Math.max(0, Math.min(5000, Math.floor(raw))) : 1000
}
