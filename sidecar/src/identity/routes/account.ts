/**
 * The caller's own password (the account page). The current password is
 * checked by the same throttled step as /login (SPEC §7), so this route is no
 * way around the lockout; a change revokes every other session of the user and
 * keeps the one that made it. API tokens stay: they are listed beside the form,
 * and revoking them is the user's choice (docs/decisions.md).
 */
import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Type from 'typebox'
import { AuthsvcError } from '../../kernel/errors.js'
import { passwordProblem } from '../passwords.js'
import { eventContext, requireUser } from '../../access/request-context.js'
import { checkPassword } from '../password-check.js'
import type { Services } from '../../services.js'

const PasswordChange = Type.Object(
  {
    current_password: Type.String({ maxLength: 4096 }),
    new_password: Type.String({ maxLength: 4096 }),
  },
  { additionalProperties: false },
)

const PasswordChanged = Type.Object({
  message: Type.String({ description: '`Password changed`' }),
  sessions_revoked: Type.Integer({ description: 'the caller\'s other sessions, now ended' }),
})

/** What the account routes use (checkPassword's included). */
export type AccountRouteServices = Pick<Services, 'users' | 'sessions' | 'passwords' | 'throttle' | 'events'>

export function accountRoutes(services: AccountRouteServices) {
  return async function (fastify: FastifyInstance): Promise<void> {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
    app.post('/api/me/password', {
      config: { auth: 'user' },
      schema: { summary: 'Change one\'s own password (from a signed-in session); other sessions end', tags: ['accounts'], body: PasswordChange, response: { 200: PasswordChanged } },
    }, async (request) => {
      const principal = requireUser(request)
      if (principal.authType !== 'session') throw new AuthsvcError('PERMISSION_DENIED', 'The password is changed from a signed-in session')
      const user = services.users.byId(principal.userId)
      if (!user) throw new AuthsvcError('AUTH_REQUIRED')
      const body = request.body
      // the same failure answer and throttle as a login with this username
      await checkPassword(services, request, user.username, body.current_password)
      const problem = passwordProblem(body.new_password)
      if (problem) throw new AuthsvcError('VALIDATION_FAILED', `new_password: ${problem}`)
      if (body.new_password === body.current_password) throw new AuthsvcError('VALIDATION_FAILED', 'new_password: the new password is the current one')
      await services.users.update(user.user_id, { password_hash: await services.passwords.hash(body.new_password) })
      const revoked = await services.sessions.revokeAllForUser(user.user_id, principal.credentialId)
      services.events.emit('password_changed', { ...eventContext(request), subject: user.username, sessions_revoked: revoked })
      return { message: 'Password changed', sessions_revoked: revoked }
    })
  }
}
