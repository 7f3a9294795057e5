/** The caller's own view: who am I, my sessions, my current token (SPEC §5.2). */
import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Type from 'typebox'
import { AuthsvcError } from '../../kernel/errors.js'
import { PERMISSION_KEYS, can } from '../principal.js'
import { eventContext, requireUser } from '../../access/request-context.js'
import type { Services } from '../../services.js'

export function meRoutes(services: Pick<Services, 'sessions' | 'events'>) {
  return async function (fastify: FastifyInstance): Promise<void> {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
    app.get('/api/me', { config: { auth: 'principal' } }, async (request) => {
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

    app.get('/api/is-https', { config: { auth: 'public' } }, async (request) => ({ is_https: request.facts.isHttps }))

    app.get('/me/sessions', { config: { auth: 'user' } }, async (request) => {
      const p = requireUser(request)
      const sessions = services.sessions.activeForUser(p.userId).map((s) => ({
        jti: s.jti,
        created_at_iso: s.created_at_iso,
        last_used_at_iso: services.sessions.lastUsedIso(s),
        exp_at_iso: s.exp_at_iso,
        is_current: p.authType === 'session' && p.credentialId === s.jti,
      }))
      return { sessions }
    })

    app.post('/me/sessions/revoke', { config: { auth: 'user' }, schema: { body: Type.Object({ jti: Type.String({ maxLength: 64 }) }) } }, async (request) => {
      const p = requireUser(request)
      const { jti } = request.body
      const record = services.sessions.get(jti)
      if (!record || record.user_id !== p.userId || record.revoked) throw new AuthsvcError('NOT_FOUND', 'Session not found')
      await services.sessions.revoke(jti)
      services.events.emit('session_revoked', { ...eventContext(request), subject: p.username, sessions: 1 })
      return { status: 'ok' }
    })

    // Fix: a cookie session's token is never handed to script; only a token the caller already holds.
    app.get('/me/current-token', { config: { auth: 'user' } }, async (request) => {
      if (request.channel === 'cookie' || request.channel === undefined) throw new AuthsvcError('COOKIE_TOKEN_HIDDEN')
      const header = request.headers.authorization
      const token = request.channel === 'bearer' && header ? header.replace(/^Bearer\s+/i, '').trim() : request.queryParams.get('token') ?? request.queryParams.get('access_token')
      return { token }
    })
  }
}
