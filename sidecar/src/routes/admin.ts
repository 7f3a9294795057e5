/**
 * The admin API for roles, users, IP lists and guest login (SPEC §5.4).
 * Invariants: the last enabled admin cannot be deleted, disabled or demoted:
 * every user change and deletion runs in the users' serialised queue and
 * checks that at least one enabled admin remains inside it;
 * a role, password or disable change revokes the user's sessions (a password
 * reset or disable also revokes the user's API tokens); every write is
 * validated whole before anything is stored; the whole-map settings (groups,
 * IP lists) carry an ETag and a PUT with a stale `If-Match` is refused (412).
 */
import type { FastifyInstance } from 'fastify'
import Type from 'typebox'
import { AuthsvcError } from '../errors.js'
import { passwordProblem } from '../identity/passwords.js'
import type { UserRecord } from '../identity/users.js'
import { etagOf, ifMatchAdmits, staleVersion } from '../http/etag.js'
import { ipListsProblems } from '../policy/ip-lists.js'
import { validateGroups, type GroupMap } from '../policy/roles.js'
import type { IpListsSetting } from '../store/settings.js'
import type { Services } from '../services.js'

const UserPatch = Type.Object(
  {
    role: Type.Optional(Type.String({ maxLength: 64 })),
    sfw_check: Type.Optional(Type.Boolean()),
    disabled: Type.Optional(Type.Boolean()),
    password: Type.Optional(Type.String({ maxLength: 4096 })),
    mfa_reset: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
)

const IpLists = Type.Object(
  {
    whitelist: Type.Array(Type.String({ maxLength: 64 }), { maxItems: 1000 }),
    blacklist: Type.Array(
      Type.Object(
        {
          ip: Type.String({ maxLength: 64 }),
          permanent: Type.Optional(Type.Boolean()),
          expires_at_iso: Type.Optional(Type.String({ maxLength: 40 })),
        },
        { additionalProperties: false },
      ),
      { maxItems: 10000 },
    ),
  },
  { additionalProperties: false },
)

const publicUser = (u: UserRecord) => ({
  username: u.username,
  user_id: u.user_id,
  role: u.role,
  mfa_enabled: u.mfa_enabled,
  sfw_check: u.sfw_check,
  disabled: u.disabled,
  created_at_iso: u.created_at_iso,
})

/** Waits for every step (none is abandoned half-way), then rejects with the first failure if any. */
async function allOrFirstFailure(steps: Array<Promise<unknown>>): Promise<void> {
  const results = await Promise.allSettled(steps)
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected')
  if (failed) throw failed.reason
}

export function adminRoutes(services: Services) {

  return async function (app: FastifyInstance): Promise<void> {
    app.get('/api/settings/guest-jwt', { config: { auth: 'principal' } }, async () => ({
      allow_guest_jwt: services.settings.get('allow_guest_jwt'),
    }))
    app.put('/api/settings/guest-jwt', { config: { auth: 'admin' }, schema: { body: Type.Object({ allow_guest_jwt: Type.Boolean() }, { additionalProperties: false }) } }, async (request) => {
      const { allow_guest_jwt } = request.body as { allow_guest_jwt: boolean }
      // turning guest login off narrows (at once, retried); turning it on widens (once stored)
      await services.settings.set('allow_guest_jwt', allow_guest_jwt, allow_guest_jwt ? 'widens' : 'narrows')
      request.log.info({ event: 'settings_changed', setting: 'allow_guest_jwt', value: allow_guest_jwt }, 'setting changed')
      return { allow_guest_jwt }
    })

    app.get('/api/groups', { config: { auth: 'admin' } }, async (_request, reply) => {
      const groups = services.roles.snapshot()
      reply.header('ETag', etagOf(groups))
      return { groups }
    })
    app.put('/api/groups', { config: { auth: 'admin' }, schema: { body: Type.Object({ groups: Type.Record(Type.String(), Type.Unknown()) }, { additionalProperties: false }) } }, async (request, reply) => {
      const result = validateGroups((request.body as { groups: unknown }).groups)
      if ('problems' in result) throw new AuthsvcError('VALIDATION_FAILED', result.problems.join('; '))
      // compare and replace with no await in between: nothing can change the groups between the two
      const current = etagOf(services.roles.snapshot())
      if (!ifMatchAdmits(request.headers['if-match'], current)) throw staleVersion(current)
      services.roles.replace(result.groups as GroupMap)
      request.log.info({ event: 'settings_changed', setting: 'groups' }, 'groups replaced')
      const groups = services.roles.snapshot()
      reply.header('ETag', etagOf(groups))
      return { groups }
    })

    app.get('/api/users', { config: { auth: 'admin' } }, async () => ({ users: services.users.list().map(publicUser) }))

    app.put('/api/users/:target_user', { config: { auth: 'admin' }, schema: { body: UserPatch } }, async (request) => {
      const target = services.users.find((request.params as { target_user: string }).target_user).user_id
      const body = request.body as { role?: string; sfw_check?: boolean; disabled?: boolean; password?: string; mfa_reset?: boolean }
      if (body.role !== undefined && !services.roles.has(body.role)) throw new AuthsvcError('VALIDATION_FAILED', 'Unknown role')
      if (body.password !== undefined) {
        const problem = passwordProblem(body.password)
        if (problem) throw new AuthsvcError('VALIDATION_FAILED', problem)
      }
      // the slow hash runs before the queue, so it never holds up other admin changes
      const passwordHash = body.password === undefined ? undefined : await services.passwords.hash(body.password)
      return services.users.serialised(async () => {
        // read again inside the queue: a change queued before this one may have touched the user
        const user = services.users.byId(target)
        if (!user) throw new AuthsvcError('NOT_FOUND', 'User not found')
        const patch: Partial<UserRecord> = {}
        if (body.role !== undefined) patch.role = body.role
        if (body.sfw_check !== undefined) patch.sfw_check = body.sfw_check
        if (body.disabled !== undefined) patch.disabled = body.disabled
        if (passwordHash !== undefined) patch.password_hash = passwordHash
        services.users.assertAdminRemains(user.user_id, { ...user, ...patch })
        const roleChanged = body.role !== undefined && body.role !== user.role
        // A disable narrows whatever else the patch says; otherwise any grant (role up, re-enable,
        // sfw_check off, a new password) makes the patch widening, and it applies only once stored.
        const widens =
          (roleChanged && services.roles.widens(user.role, body.role as string)) ||
          (body.disabled === false && user.disabled) ||
          (body.sfw_check === false && user.sfw_check) ||
          passwordHash !== undefined
        const narrows = body.disabled === true || !widens
        // a widening patch first, durably: when the store refuses it, nothing at all has changed
        if (!narrows) await services.users.update(user.user_id, patch, 'widens')
        // then every narrowing step at once, so each holds even when the store fails on another
        const narrowing: Array<Promise<unknown>> = []
        if (narrows) narrowing.push(services.users.update(user.user_id, patch, 'narrows'))
        if (roleChanged || body.password !== undefined || body.disabled === true) narrowing.push(services.sessions.revokeAllForUser(user.user_id))
        if (body.password !== undefined || body.disabled === true) narrowing.push(services.tokens.revokeAllForUser(user.user_id))
        await allOrFirstFailure(narrowing)
        // the secret and backup codes go too, not only the flag
        if (body.mfa_reset === true) await services.resetMfa(user.user_id)
        const updated = services.users.byId(user.user_id)!
        if (roleChanged) request.log.info({ event: 'user_role_changed', username: user.username, role: updated.role }, 'role changed')
        return { status: 'ok', user: publicUser(updated) }
      })
    })

    app.delete('/api/users/:target_user', { config: { auth: 'admin' } }, async (request) => {
      const target = services.users.find((request.params as { target_user: string }).target_user).user_id
      return services.users.serialised(async () => {
        const user = services.users.byId(target)
        if (!user) throw new AuthsvcError('NOT_FOUND', 'User not found')
        services.users.assertAdminRemains(user.user_id, null)
        await allOrFirstFailure([
          services.users.delete(user.user_id),
          services.sessions.deleteAllForUser(user.user_id),
          services.tokens.revokeAllForUser(user.user_id),
          services.mfa.disable(user.user_id),
          services.modelGrants.removeAllForUser(user.user_id),
        ])
        request.log.info({ event: 'user_deleted', username: user.username }, 'user deleted')
        return { status: 'ok', message: `User ${user.username} deleted` }
      })
    })

    app.get('/api/ip-lists', { config: { auth: 'admin' } }, async (_request, reply) => {
      const lists = services.settings.get('ip_lists')
      reply.header('ETag', etagOf(lists))
      return lists
    })
    app.put('/api/ip-lists', { config: { auth: 'admin' }, schema: { body: IpLists } }, async (request, reply) => {
      const lists = request.body as IpListsSetting
      const problems = ipListsProblems(lists)
      if (problems.length > 0) throw new AuthsvcError('VALIDATION_FAILED', problems.join('; '))
      const ifMatch = request.headers['if-match']
      const stored = await services.settings.compareAndSet('ip_lists', (current) => ifMatchAdmits(ifMatch, etagOf(current)), lists)
      if (!stored) throw staleVersion(etagOf(services.settings.get('ip_lists')))
      services.ipGate.update(lists)
      request.log.info({ event: 'settings_changed', setting: 'ip_lists' }, 'ip lists replaced')
      reply.header('ETag', etagOf(lists))
      return lists
    })
  }
}
