/**
 * The ntfy settings API (SPEC §5.4, §8):
 *
 * - `GET /api/settings/ntfy` (any principal): `{topic, base_url, enabled_events, has_api_token}`;
 *   the topic is left out for everyone but admins (on ntfy.sh a topic is its own password);
 * - `PUT /api/settings/ntfy` (admin): `{topic, base_url, enabled_events, api_token?}`, validated
 *   whole (notify/settings-rules.ts); `api_token` absent keeps the token, `""` removes it; answers
 *   as GET does for an admin and emits `settings_changed` (`setting: "ntfy"`, no value);
 * - `POST /api/settings/ntfy/test` (admin): one notification now, outside the queue; `{status:"ok"}`
 *   when ntfy took it, 502 `NTFY_REJECTED` (ntfy answered an error: the message says which) or 502
 *   `NTFY_UNREACHABLE` (no answer in time, or not reached);
 * - `GET /api/settings/ntfy/status` (admin): where the settings come from and the queue's counts.
 *
 * The token is never in an answer: the response schemas name every field, and the serializer
 * writes only those.
 */
import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Type from 'typebox'
import { eventContext } from '../access/request-context.js'
import { isAdministrator } from '../identity/principal.js'
import { AuthsvcError } from '../kernel/errors.js'
import { publishToNtfy } from './ntfy-client.js'
import type { Events } from '../kernel/events.js'
import type { NtfySettings, EffectiveNtfySettings } from './ntfy-settings.js'
import type { NtfyPublisher } from './publisher.js'

/** What the routes use, once the store is open (notify/feature.ts). */
export interface NotifyLive {
  settings: NtfySettings
  publisher: NtfyPublisher
  events: Events
  /** one request's limit for the test notification */
  timeoutMs: number
  clock: () => number
}

const Topic = Type.String({ maxLength: 64, description: 'ntfy topic: 1 to 64 letters, digits, _ or -; empty turns notifications off' })
const BaseUrl = Type.String({ minLength: 1, maxLength: 2048, description: 'https:// (http:// only for a loopback host)' })
const EnabledEvents = Type.Array(Type.String({ maxLength: 64 }), { maxItems: 64, description: 'event kinds sent to ntfy (SPEC §8)' })

const SettingsAnswer = Type.Object(
  {
    topic: Type.Optional(Topic),
    base_url: Type.String(),
    enabled_events: Type.Array(Type.String()),
    has_api_token: Type.Boolean(),
  },
  { additionalProperties: false },
)

const SettingsBody = Type.Object(
  {
    topic: Topic,
    base_url: BaseUrl,
    enabled_events: EnabledEvents,
    api_token: Type.Optional(Type.String({ maxLength: 1024, description: 'write only; absent keeps the token, empty removes it' })),
  },
  { additionalProperties: false },
)

const StatusAnswer = Type.Object(
  {
    source: Type.Union([Type.Literal('config'), Type.Literal('saved')]),
    queued: Type.Integer(),
    in_flight: Type.Integer(),
    delivered: Type.Integer(),
    dropped: Type.Integer(),
    failed: Type.Integer(),
    last_error: Type.Union([Type.String(), Type.Null()]),
    last_delivered_at_iso: Type.Union([Type.String(), Type.Null()]),
  },
  { additionalProperties: false },
)

const Ok = Type.Object({ status: Type.Literal('ok') }, { additionalProperties: false })

const answer = (s: EffectiveNtfySettings, admin: boolean) => ({
  ...(admin ? { topic: s.topic } : {}),
  base_url: s.base_url,
  enabled_events: [...s.enabled_events],
  has_api_token: s.api_token !== '',
})

export function notifyRoutes(live: () => NotifyLive) {
  return async function (fastify: FastifyInstance): Promise<void> {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>()

    app.get('/api/settings/ntfy', { config: { auth: 'principal' }, schema: { response: { 200: SettingsAnswer } } }, async (request) =>
      answer(live().settings.current(), isAdministrator(request.principal)),
    )

    app.put('/api/settings/ntfy', { config: { auth: 'admin' }, schema: { body: SettingsBody, response: { 200: SettingsAnswer } } }, async (request) => {
      const { settings, events } = live()
      const saved = await settings.save(request.body)
      events.emit('settings_changed', { ...eventContext(request), setting: 'ntfy' })
      return answer(saved, true)
    })

    app.post('/api/settings/ntfy/test', { config: { auth: 'admin' }, schema: { response: { 200: Ok } } }, async (request) => {
      const { settings, timeoutMs, clock } = live()
      const to = settings.destination()
      if (to === null) throw new AuthsvcError('VALIDATION_FAILED', 'No ntfy topic is set: save a topic first')
      const outcome = await publishToNtfy(to, {
        title: 'authsvc test notification',
        message: `Sent from the admin panel by ${request.principal?.username ?? 'an admin'} at ${new Date(clock()).toISOString()}.`,
        tags: ['bell'],
        priority: 3,
      }, { timeoutMs })
      if (outcome.kind === 'delivered') return { status: 'ok' as const }
      if (outcome.kind === 'unavailable' && outcome.status === null) throw new AuthsvcError('NTFY_UNREACHABLE', `ntfy at ${to.base_url}: ${outcome.detail}`)
      throw new AuthsvcError('NTFY_REJECTED', outcome.detail)
    })

    app.get('/api/settings/ntfy/status', { config: { auth: 'admin' }, schema: { response: { 200: StatusAnswer } } }, async () => {
      const { settings, publisher } = live()
      return { source: settings.current().source, ...publisher.status() }
    })
  }
}
