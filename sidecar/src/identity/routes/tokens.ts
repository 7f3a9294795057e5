/**
 * API tokens (SPEC §5.2): create (password or session), list, revoke by hash
 * prefix. The raw token appears once, in the creation answer.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Type, { type Static } from 'typebox'
import { AuthsvcError } from '../../kernel/errors.js'
import { JSON_OR_FORM } from '../../kernel/http/openapi.js'
import { MfaStepAnswer } from './auth.js'
import { tokenHashPrefix } from '../api-tokens.js'
import { can } from '../principal.js'
import type { UserRecord } from '../users.js'
import { eventContext, requireUser } from '../../access/request-context.js'
import { checkPassword, checkSecondFactor, mfaStep, tempTokenUser } from '../password-check.js'
import { bindStepToBrowser, clearStepCookie, refuseCrossSiteSignIn } from '../session-cookie.js'
import type { Services } from '../../services.js'

const GenerateBody = Type.Object({
  username: Type.Optional(Type.String({ maxLength: 256 })),
  password: Type.Optional(Type.String({ maxLength: 4096 })),
  label: Type.Optional(Type.String({ maxLength: 128 })),
  // forms post numbers as text
  expire_hours: Type.Optional(Type.Union([Type.Number({ exclusiveMinimum: 0 }), Type.String({ pattern: '^[0-9]{1,6}(\\.[0-9]{1,3})?$' })])),
  mfa_temp_token: Type.Optional(Type.String({ maxLength: 512 })),
  code: Type.Optional(Type.String({ maxLength: 16 })),
  backup_code: Type.Optional(Type.String({ maxLength: 32 })),
})

const RevokeBody = Type.Object({ token_hash_prefix: Type.String({ maxLength: 80 }) })

const tags = ['API tokens']

const Created = Type.Object({
  message: Type.String({ description: '`API token created.`' }),
  token: Type.String({ description: 'the raw token (`ast_...`): shown once, never again' }),
  jwt_token: Type.String({ description: 'the same token (compat)' }),
  expires_in_hours: Type.Number(),
  expires_iso: Type.String(),
  token_hash_prefix: Type.String({ description: 'the first 12 hex characters of its SHA-256: its name from now on' }),
})

const TokenList = Type.Object({
  tokens: Type.Array(Type.Object({
    token_hash_prefix: Type.String(),
    label: Type.String(),
    expires_iso: Type.String(),
    created_at_iso: Type.String(),
    last_used_at_iso: Type.Union([Type.String(), Type.Null()]),
  })),
})

const Revoked = Type.Object({ message: Type.String({ description: '`Token revoked.`' }) })

export const DEFAULT_TOKEN_HOURS = 720

/** What token creation, listing and revocation use (the password and MFA steps included). */
export type TokenRouteServices = Pick<Services, 'users' | 'tokens' | 'mfa' | 'resolver' | 'config' | 'throttle' | 'passwords' | 'roles' | 'events'>

/** POST /authsvc/generate_token and its legacy alias POST /generate_token. */
export function generateTokenHandler(services: TokenRouteServices) {
  return async function (request: FastifyRequest<{ Body: Static<typeof GenerateBody> }>, reply: FastifyReply) {
    const body = request.body
    let user: UserRecord | undefined
    // a password or a second step from another origin's page is no one's own request (and its step
    // cookie would replace the one of a sign-in in progress in that browser)
    if (body.mfa_temp_token !== undefined || body.password !== undefined) refuseCrossSiteSignIn(request, 'A token is made from this site\'s own pages, or by a program')
    if (body.mfa_temp_token !== undefined) {
      const { temp, user: found } = await tempTokenUser(services, request, body.mfa_temp_token, 'login')
      await checkSecondFactor(services, request, found, body, temp.id)
      if (!(await services.mfa.consumeTempToken(temp.id))) throw new AuthsvcError('MFA_TOKEN_INVALID')
      clearStepCookie(request, reply)
      user = found
    } else if (body.username !== undefined || body.password !== undefined) {
      if (typeof body.username !== 'string' || typeof body.password !== 'string') {
        throw new AuthsvcError('VALIDATION_FAILED', 'username and password are required together')
      }
      const found = await checkPassword(services, request, body.username, body.password)
      if (found.mfa_enabled && (body.code || body.backup_code)) {
        await checkSecondFactor(services, request, found, body)
      } else {
        const step = await mfaStep(services, found, false, '/', () => bindStepToBrowser(request, reply))
        if (step) return step
      }
      user = found
    } else if (request.principal?.authType === 'session' && request.principal.userId !== null) {
      user = services.users.byId(request.principal.userId)
    } else if (request.credentialError) {
      throw new AuthsvcError(request.credentialError)
    }
    if (!user) throw new AuthsvcError('AUTH_REQUIRED', 'A password or a session is required')
    const principal = services.resolver.userPrincipal(user, 'session', '')
    if (!can(principal, 'can_have_api_tokens')) throw new AuthsvcError('PERMISSION_DENIED', 'Your role may not create API tokens')
    const maxHours = services.config.max_token_expiration_hours
    const hours = body.expire_hours === undefined ? Math.min(DEFAULT_TOKEN_HOURS, maxHours) : Number(body.expire_hours)
    if (!(hours > 0)) throw new AuthsvcError('VALIDATION_FAILED', 'expire_hours must be positive')
    if (hours > maxHours) throw new AuthsvcError('VALIDATION_FAILED', `expire_hours must be at most ${maxHours}`)
    const { token, record } = await services.tokens.issue(user.user_id, body.label ?? '', hours)
    services.events.emit('api_token_created', { actor: user.username, subject: user.username, ip: request.facts.ip, token_hash_prefix: record.hash.slice(0, 8) })
    return {
      message: 'API token created.',
      token,
      jwt_token: token,
      expires_in_hours: hours,
      expires_iso: record.expires_at_iso,
      token_hash_prefix: record.hash.slice(0, 12),
    }
  }
}

export const generateTokenSchema = {
  summary: 'Create an API token: with a password (and second factor), a session, or an MFA temp token and code',
  tags,
  consumes: JSON_OR_FORM,
  body: GenerateBody,
  response: { 200: Type.Union([Created, MfaStepAnswer]) },
}

export function tokenRoutes(services: TokenRouteServices) {
  return async function (fastify: FastifyInstance): Promise<void> {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
    app.post('/generate_token', { config: { auth: 'public' }, schema: generateTokenSchema }, generateTokenHandler(services))

    app.get('/api/tokens', { config: { auth: 'user' }, schema: { summary: 'The caller\'s unexpired API tokens (never the tokens themselves)', tags, response: { 200: TokenList } } }, async (request) => {
      const principal = requireUser(request)
      const tokens = (await services.tokens.activeForUser(principal.userId)).map((t) => ({
        token_hash_prefix: t.hash.slice(0, 12),
        label: t.label,
        expires_iso: t.expires_at_iso,
        created_at_iso: t.created_at_iso,
        last_used_at_iso: t.last_used_at_iso,
      }))
      return { tokens }
    })

    app.delete('/api/tokens', { config: { auth: 'user' }, schema: { summary: 'Revoke one of the caller\'s API tokens by its hash prefix', tags, body: RevokeBody, response: { 200: Revoked } } }, async (request) => {
      const principal = requireUser(request)
      const prefix = tokenHashPrefix(request.body.token_hash_prefix)
      await services.tokens.revokeByPrefix(principal.userId, prefix)
      services.events.emit('api_token_revoked', { ...eventContext(request), subject: principal.username, token_hash_prefix: prefix.slice(0, 8) })
      return { message: 'Token revoked.' }
    })
  }
}
