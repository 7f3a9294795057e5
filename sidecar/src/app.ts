/**
 * buildApp(services): the Fastify instance for owned routes, and the
 * decision handlers, with no I/O of their own (main.ts listens).
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
import { RouteBehaviours } from './kernel/behaviours.js'
import { credentialState } from './isolation/credential-state.js'
import { HostFileWatcher } from './isolation/file-watcher.js'
import { applyHostEvent, hostPromptsReport } from './isolation/host-events.js'
import { LiveSockets } from './isolation/live-sockets.js'
import { FilterPool } from './isolation/filter-pool.js'
import { ModelCache, modelFoldersOf } from './models/model-cache.js'
import { ModelAccess } from './models/behaviours.js'
import { modelGrantRoutes } from './models/routes.js'
import { createDecider, type OwnedRoutes } from './access/decide.js'
import { PROTOCOL_VERSION, type PushMessage, type HelloMessage } from './kernel/protocol.js'
import type { DecisionHandlers } from './kernel/server.js'
import { AuthsvcError } from './kernel/errors.js'
import { AccessLog, accessLogLevel } from './kernel/http/access-log.js'
import { registerErrorHandling } from './kernel/http/errors.js'
import { registerRequestContext } from './access/request-context.js'
import { sharedSchemaCompilers } from './kernel/http/schema-compilers.js'
import { adminRoutes } from './identity/routes/admin.js'
import { adminCredentialRoutes } from './identity/routes/admin-credentials.js'
import { accountRoutes } from './identity/routes/account.js'
import { authRoutes } from './identity/routes/auth.js'
import { healthRoutes } from './kernel/http/health.js'
import { meRoutes } from './identity/routes/me.js'
import { mfaRoutes } from './identity/routes/mfa.js'
import { assetRoutes, pageRoutes } from './pages/routes.js'
import { generateTokenHandler, generateTokenSchema, tokenRoutes } from './identity/routes/tokens.js'
import { workflowAdminRoutes, workflowRoutes } from './workflows/routes.js'
import { SERVICE_VERSION, type Services } from './services.js'
import type { Clock } from './kernel/clock.js'

export const OWNED_BODY_LIMIT = 1024 * 1024

export interface BuiltApp {
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
  /** stops the host-folder watcher and the WebSocket checks */
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

export function buildApp(services: Services, logger: FastifyBaseLogger): BuiltApp {
  return prepareApp(logger, services.clock).bind(services)
}

export function prepareApp(logger: FastifyBaseLogger, clock: Clock): PreparedApp {
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
  app.addHook('onSend', async (_request, reply) => {
    reply.header('X-Authsvc-Version', SERVICE_VERSION)
  })
  // An answer to a request that changed something decisions read leaves only after the `forget`
  // it caused has left for the plugin: a forget held in our write buffer (the plugin busy reading
  // a large answer) must not be overtaken by the change's own answer (kernel/access-epoch.ts).
  let flushed: () => Promise<void> = async () => {}
  // the host's model folders, watched; read by the decision path and the model admin routes
  const modelCache = new ModelCache(logger, clock)
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

  void app.register(authRoutes(services))
  void app.register(workflowRoutes(services))
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
        await family.register(workflowAdminRoutes(services))
        await family.register(adminCredentialRoutes(services))
        await family.register(modelGrantRoutes(services, modelCache))
        await family.register(accountRoutes(services))
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
    methodsAt(path) {
      return [...routedMethods].filter((method) => router.find(method as 'GET', path) !== null)
    },
  }

  return { app, owned, bind: (opened) => bindDecisions(app, owned, modelCache, logger, opened, late.bind, (fn) => (flushed = fn)) }
}

function bindDecisions(
  app: FastifyInstance, owned: OwnedRoutes, modelCache: ModelCache, logger: FastifyBaseLogger, services: Services,
  bindLate: (services: Services) => void, setFlushed: (fn: () => Promise<void>) => void,
): BuiltApp {
  bindLate(services)

  let push: (message: PushMessage) => void = () => {}
  // every change a decision reads reaches the plugin before that change's own answer leaves
  services.accessEpoch.onBump((epoch) => push({ type: 'forget', epoch }))
  const liveSockets = new LiveSockets(
    credentialState({ sessions: services.sessions, tokens: services.tokens, users: services.users, clock: services.clock }),
    (tags, code, reason) => {
      logger.info({ sockets: tags.length, code, reason }, 'closing WebSockets whose access ended')
      push({ type: 'close_ws', tags, code, reason })
    },
  )
  const watcher = new HostFileWatcher(services.ownership, logger)
  const filters = new FilterPool()
  // the model lists a filter's memo names: their change ends the decisions the plugin keeps
  modelCache.onChange = () => services.accessEpoch.bump()
  const models = new ModelAccess(modelCache, services.modelGrants)
  /** Host facts of a hello or a `host_facts` event (sent once every custom node has loaded). */
  const takeModelFacts = (facts: Record<string, unknown>): void => {
    models.setFacts(facts)
    services.accessEpoch.bump()
    modelCache.setFolders(modelFoldersOf(facts)).catch((err: unknown) => logger.error({ err }, 'cannot watch the model folders'))
  }
  const behaviours = new RouteBehaviours({
    config: services.config,
    clock: services.clock,
    ownership: services.ownership,
    clientIds: services.clientIds,
    liveSockets,
    host: services.host,
    models,
    workflows: services.workflows,
    filters,
  })
  const decide = createDecider({
    config: services.config,
    net: services.net,
    owned,
    resolver: services.resolver,
    ipGate: services.ipGate,
    behaviours,
    adminPatterns: new Set(services.config.admin_route_patterns),
    log: logger,
    decisionCache: { ms: decisionCacheMs(), epoch: services.accessEpoch },
  })

  /** Every owner's prompts queued or running, for the plugin's edit of WebSocket `status` frames (absent: 0). */
  const queueChanged = (seq: number): void => push({ type: 'queue_counts', seq, counts: services.ownership.remainingByOwner() })

  const takeHostFacts = (facts: Record<string, unknown>): void => {
    services.host.facts = { ...services.host.facts, ...(facts as HelloMessage['host']) }
    takeModelFacts(services.host.facts as Record<string, unknown>)
  }

  const handlers = (httpSocket: string): DecisionHandlers => ({
    hello(msg: HelloMessage) {
      if (msg.protocol !== PROTOCOL_VERSION) {
        logger.error({ plugin_protocol: msg.protocol, sidecar_protocol: PROTOCOL_VERSION }, 'protocol version mismatch with the plugin; every request on its connection is refused')
      } else {
        if (msg.host) {
          services.host.facts = msg.host
          takeModelFacts(msg.host as Record<string, unknown>)
          const { output_dir: output, input_dir: input, temp_dir: temp } = msg.host
          watcher.watch({ output, input, temp }).catch((err: unknown) => logger.error({ err }, 'cannot watch the host folders'))
        }
        if (Array.isArray(msg.sockets)) liveSockets.adopt(msg.sockets)
        const prompts = msg.prompts === undefined ? null : hostPromptsReport(msg.prompts, true)
        if (prompts !== null) {
          services.ownership.hostPrompts(prompts)
          // after the hello's own answer has gone: the plugin reads pushes only once it agreed
          setImmediate(() => queueChanged(prompts.seq))
        }
        for (const run of Array.isArray(msg.running) ? msg.running : []) {
          if (typeof run?.prompt_id === 'string' && typeof run.t === 'number') services.ownership.runStarted(run.prompt_id, run.t * 1000)
        }
      }
      return { type: 'hello', protocol: PROTOCOL_VERSION, sidecar_version: SERVICE_VERSION, http_socket: httpSocket, epoch: services.accessEpoch.value }
    },
    decide,
    body: (msg, payload, host) => behaviours.body(msg.ctx, payload, host),
    form: (msg, host) => behaviours.form(msg.ctx, msg, host),
    filter: (msg, payload, host) => behaviours.filter(msg, payload, host),
    event: (msg) => msg.name === 'host_facts' ? takeHostFacts(msg.data) : applyHostEvent(msg, { ownership: services.ownership, watcher, liveSockets, log: logger, now: services.clock, queueChanged }),
  })

  return {
    app,
    owned,
    handlers,
    liveSockets,
    hostFiles: watcher,
    setPush(fn) {
      push = fn
    },
    setFlushed,
    async stop() {
      liveSockets.stop()
      await watcher.close()
      await filters.close()
      await modelCache.close()
    },
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
