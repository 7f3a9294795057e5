/** The caller's own view: who am I, my sessions, my current token (SPEC §5.2). */
import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Type from 'typebox'
import { AuthsvcError } from '../../kernel/errors.js'
import { PERMISSION_KEYS, can } from '../principal.js'
import { eventContext, requireUser } from '../../access/request-context.js'
import type { Services } from '../../services.js'
import { describeSession } from '../session-device.js'

const tags = ['accounts']

const Me = Type.Object({
  username: Type.String(),
  user_id: Type.Union([Type.String(), Type.Null()], { description: 'null for an anonymous principal (a role without an account)' }),
  role: Type.String(),
  groups: Type.Array(Type.String(), { description: 'the role, as a list (compat)' }),
  is_admin: Type.Boolean(),
  mfa_enabled: Type.Boolean(),
  auth_type: Type.Enum(['session', 'api_token', 'anonymous']),
  permissions: Type.Record(Type.String(), Type.Boolean()),
})

/** What a person recognises a session by (identity/session-device.ts); null where the client did not say. */
export const SessionDeviceFields = {
  device: Type.Enum(['iPhone', 'Android phone', 'Desktop', 'Tablet', 'Unknown device'], { description: 'from the User-Agent the session was created with' }),
  browser: Type.Union([Type.String(), Type.Null()], { description: 'e.g. `Firefox 128`' }),
  os: Type.Union([Type.String(), Type.Null()], { description: 'e.g. `iOS 17.0`' }),
  ip: Type.Union([Type.String(), Type.Null()], { description: 'the client\'s address as the gate saw it when the session was created' }),
}

const Sessions = Type.Object({
  sessions: Type.Array(Type.Object({
    jti: Type.String(),
    created_at_iso: Type.String(),
    last_used_at_iso: Type.String(),
    exp_at_iso: Type.String(),
    is_current: Type.Boolean(),
    ...SessionDeviceFields,
  })),
})

export function meRoutes(services: Pick<Services, 'sessions' | 'events'>) {
  return async function (fastify: FastifyInstance): Promise<void> {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
    app.get('/api/me', { config: { auth: 'principal' }, schema: { summary: 'Who the caller is, and what they may do', tags, response: { 200: Me } } }, async (request) => {
      const p = request.principal!
      return {
        username: p.username,
        user_id: p.userId,
        role: p.role,
        groups: [p.role],
        is_admin: p.isAdmin,
        mfa_enabled: p.mfaEnabled,
        auth_type: p.authType,
        permissions: Object.fromEntries(PERMISSION_KEYS.map((k) => [k, can(p, k)])),
      }
    })

    app.get('/api/is-https', { config: { auth: 'public' }, schema: { summary: 'Whether this request arrived over HTTPS', tags, response: { 200: Type.Object({ is_https: Type.Boolean() }) } } }, async (request) => ({ is_https: request.facts.isHttps }))

    app.get('/me/sessions', { config: { auth: 'user' }, schema: { summary: 'The caller\'s active sessions', tags, response: { 200: Sessions } } }, async (request) => {
      const p = requireUser(request)
      const sessions = (await services.sessions.activeForUser(p.userId)).map((s) => ({
        jti: s.jti,
        created_at_iso: s.created_at_iso,
        last_used_at_iso: services.sessions.lastUsedIso(s),
        exp_at_iso: s.exp_at_iso,
        is_current: p.authType === 'session' && p.credentialId === s.jti,
        ...describeSession(s),
      }))
      return { sessions }
    })

    app.post('/me/sessions/revoke', {
      config: { auth: 'user' },
      schema: { summary: 'End one of the caller\'s sessions', tags, body: Type.Object({ jti: Type.String({ maxLength: 64 }) }), response: { 200: Type.Object({ status: Type.Literal('ok') }) } },
    }, async (request) => {
      const p = requireUser(request)
      const { jti } = request.body
      if (!(await services.sessions.revokeOwn(p.userId, jti))) throw new AuthsvcError('NOT_FOUND', 'Session not found')
      services.events.emit('session_revoked', { ...eventContext(request), subject: p.username, sessions: 1 })
      return { status: 'ok' as const }
    })

    app.post('/me/sessions/revoke-others', {
      config: { auth: 'user' },
      schema: {
        summary: 'Sign out everywhere else: end every session of the caller but the one sending this', tags,
        body: Type.Object({}, { additionalProperties: false, description: 'an empty object' }),
        response: { 200: Type.Object({ status: Type.Literal('ok'), revoked: Type.Integer({ description: 'how many sessions ended' }) }) },
      },
    }, async (request) => {
      const p = requireUser(request)
      // from an API token every session is "another" one: the token itself is no session and stays
      const keep = p.authType === 'session' ? p.credentialId ?? undefined : undefined
      const revoked = await services.sessions.revokeAllForUser(p.userId, keep)
      services.events.emit('session_revoked', { ...eventContext(request), subject: p.username, sessions: revoked })
      return { status: 'ok' as const, revoked }
    })

    // Fix: a cookie session's token is never handed to script; only a token the caller already holds.
    app.get('/me/current-token', {
      config: { auth: 'user' },
      schema: {
        summary: 'The token the caller sent (bearer or query); a cookie session\'s is never handed to script (403)', tags,
        response: { 200: Type.Object({ token: Type.Union([Type.String(), Type.Null()]) }) },
      },
    }, async (request) => {
      if (request.channel === 'cookie' || request.channel === undefined) throw new AuthsvcError('COOKIE_TOKEN_HIDDEN')
      const header = request.headers.authorization
      const token = request.channel === 'bearer' && header ? header.replace(/^Bearer\s+/i, '').trim() : request.queryParams.get('token') ?? request.queryParams.get('access_token')
      return { token }
    })
  }
}
