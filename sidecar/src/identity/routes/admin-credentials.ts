/**
 * Admin view of another user's credentials (the admin panel): list and revoke
 * a user's sessions and API tokens, and when each user was last seen. Raw
 * tokens never exist here: sessions are named by `jti`, API tokens by the
 * first 12 hex characters of their SHA-256, as on the user's own page.
 */
import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Type from 'typebox'
import { AuthsvcError } from '../../kernel/errors.js'
import { tokenHashPrefix } from '../api-tokens.js'
import type { UserRecord } from '../users.js'
import type { Services } from '../../services.js'
import { eventContext } from '../../access/request-context.js'
import { TargetUser } from './admin.js'
import { describeSession } from '../session-device.js'
import { SessionDeviceFields } from './me.js'

const TokenPrefix = Type.Object({ token_hash_prefix: Type.String({ maxLength: 80 }) }, { additionalProperties: false })

const tags = ['admin: users']
const TargetSession = Type.Object({ target_user: TargetUser.properties.target_user, jti: Type.String() })

const SessionRow = Type.Object({
  jti: Type.String(),
  created_at_iso: Type.String(),
  last_used_at_iso: Type.String(),
  exp_at_iso: Type.String(),
  remember_me: Type.Boolean(),
  ...SessionDeviceFields,
})
const RevokeSessions = Type.Union([
  Type.Object({ jti: Type.String({ minLength: 1, maxLength: 64 }) }, { additionalProperties: false }),
  Type.Object({ all: Type.Literal(true) }, { additionalProperties: false }),
], { description: '`{"jti"}` ends one session, `{"all":true}` every one' })
const TokenRow = Type.Object({
  token_hash_prefix: Type.String(),
  label: Type.String(),
  created_at_iso: Type.String(),
  expires_iso: Type.String(),
  last_used_at_iso: Type.Union([Type.String(), Type.Null()]),
})
const Ok = Type.Object({ status: Type.Literal('ok') })

export function adminCredentialRoutes(services: Pick<Services, 'users' | 'sessions' | 'tokens' | 'events'>) {
  const sessionsOf = async (user: UserRecord) =>
    (await services.sessions.activeForUser(user.user_id)).map((s) => ({
      jti: s.jti,
      created_at_iso: s.created_at_iso,
      last_used_at_iso: services.sessions.lastUsedIso(s),
      exp_at_iso: s.exp_at_iso,
      remember_me: s.remember_me,
      ...describeSession(s),
    }))
  const tokensOf = async (user: UserRecord) =>
    (await services.tokens.activeForUser(user.user_id)).map((t) => ({
      token_hash_prefix: t.hash.slice(0, 12),
      label: t.label,
      created_at_iso: t.created_at_iso,
      expires_iso: t.expires_at_iso,
      last_used_at_iso: t.last_used_at_iso,
    }))

  return async function (fastify: FastifyInstance): Promise<void> {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
    app.get('/api/admin/last-seen', {
      config: { auth: 'admin' },
      schema: { summary: 'When each user last used a session or token', tags, response: { 200: Type.Object({ last_seen: Type.Record(Type.String(), Type.Union([Type.String(), Type.Null()])) }) } },
    }, async () => {
      const last_seen: Record<string, string | null> = {}
      for (const user of services.users.list()) {
        const times = [...(await sessionsOf(user)).map((s) => s.last_used_at_iso), ...(await tokensOf(user)).map((t) => t.last_used_at_iso)].filter((t): t is string => typeof t === 'string')
        last_seen[user.username] = times.length ? times.reduce((a, b) => (a > b ? a : b)) : null
      }
      return { last_seen }
    })

    app.get('/api/users/:target_user/sessions', {
      config: { auth: 'admin' },
      schema: { summary: 'A user\'s active sessions', tags, params: TargetUser, response: { 200: Type.Object({ username: Type.String(), sessions: Type.Array(SessionRow) }) } },
    }, async (request) => {
      const user = services.users.find(request.params.target_user)
      return { username: user.username, sessions: await sessionsOf(user) }
    })

    app.delete('/api/users/:target_user/sessions/:jti', {
      config: { auth: 'admin' },
      schema: { summary: 'End one of a user\'s sessions', tags, params: TargetSession, response: { 200: Ok } },
    }, async (request) => {
      const { target_user, jti } = request.params
      const user = services.users.find(target_user)
      const record = await services.sessions.fetch(jti)
      if (!record || record.user_id !== user.user_id || record.revoked) throw new AuthsvcError('NOT_FOUND', 'Session not found')
      await services.sessions.revoke(jti)
      services.events.emit('session_revoked', { ...eventContext(request), subject: user.username, sessions: 1 })
      return { status: 'ok' as const }
    })

    app.delete('/api/users/:target_user/sessions', {
      config: { auth: 'admin' },
      schema: { summary: 'End every session of a user', tags, params: TargetUser, response: { 200: Type.Object({ status: Type.Literal('ok'), revoked: Type.Integer() }) } },
    }, async (request) => {
      const user = services.users.find(request.params.target_user)
      const revoked = await services.sessions.revokeAllForUser(user.user_id)
      services.events.emit('session_revoked', { ...eventContext(request), subject: user.username, sessions: revoked })
      return { status: 'ok' as const, revoked }
    })

    app.post('/api/users/:target_user/sessions/revoke', {
      config: { auth: 'admin' },
      schema: {
        summary: 'End one of a user\'s sessions (`jti`) or all of them (`all`)', tags, params: TargetUser, body: RevokeSessions,
        response: { 200: Type.Object({ status: Type.Literal('ok'), revoked: Type.Integer({ description: 'how many sessions ended' }) }) },
      },
    }, async (request) => {
      const user = services.users.find(request.params.target_user)
      const body = request.body
      let revoked: number
      if ('jti' in body) {
        if (!(await services.sessions.revokeOwn(user.user_id, body.jti))) throw new AuthsvcError('NOT_FOUND', 'Session not found')
        revoked = 1
      } else {
        revoked = await services.sessions.revokeAllForUser(user.user_id)
      }
      services.events.emit('session_revoked', { ...eventContext(request), subject: user.username, sessions: revoked })
      return { status: 'ok' as const, revoked }
    })

    app.get('/api/users/:target_user/tokens', {
      config: { auth: 'admin' },
      schema: { summary: 'A user\'s unexpired API tokens (never the tokens themselves)', tags, params: TargetUser, response: { 200: Type.Object({ username: Type.String(), tokens: Type.Array(TokenRow) }) } },
    }, async (request) => {
      const user = services.users.find(request.params.target_user)
      return { username: user.username, tokens: await tokensOf(user) }
    })

    app.delete('/api/users/:target_user/tokens', {
      config: { auth: 'admin' },
      schema: { summary: 'Revoke one of a user\'s API tokens by its hash prefix', tags, params: TargetUser, body: TokenPrefix, response: { 200: Type.Object({ message: Type.String({ description: '`Token revoked.`' }) }) } },
    }, async (request) => {
      const user = services.users.find(request.params.target_user)
      const prefix = tokenHashPrefix(request.body.token_hash_prefix)
      await services.tokens.revokeByPrefix(user.user_id, prefix)
      services.events.emit('api_token_revoked', { ...eventContext(request), subject: user.username, token_hash_prefix: prefix.slice(0, 8) })
      return { message: 'Token revoked.' }
    })
  }
}
