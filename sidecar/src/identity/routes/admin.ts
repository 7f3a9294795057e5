/**
 * The admin API for roles, users, IP lists and guest login (SPEC §5.4).
 * Invariants: user changes and deletions are the identity domain's
 * (identity/user-administration.ts: the last enabled admin remains, sessions
 * and tokens revoked with them); every write is validated whole before
 * anything is stored; the whole-map settings (groups, IP lists) carry an ETag
 * and a PUT with a stale `If-Match` is refused (412).
 */
import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Type, { type Static } from 'typebox'
import { AuthsvcError } from '../../kernel/errors.js'
import { UserAdministration, type UserAdministrationDeps } from '../user-administration.js'
import type { UserRecord } from '../users.js'
import { etagOf, ifMatchAdmits, staleVersion } from '../../kernel/http/etag.js'
import { ipListsProblems } from '../../access/ip-lists.js'
import { validateGroups, type GroupMap } from '../../access/roles.js'
import type { IpListsSetting } from '../../store/settings.js'
import type { Services } from '../../services.js'
import { eventContext } from '../../access/request-context.js'

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

/** a route's `:target_user`: a username or a user id */
export const TargetUser = Type.Object({ target_user: Type.String({ description: 'a username or a user id' }) })

const tags = ['admin: users']
const settingsTags = ['admin: settings']

const PublicUser = Type.Object({
  username: Type.String(),
  user_id: Type.String(),
  role: Type.String(),
  mfa_enabled: Type.Boolean(),
  sfw_check: Type.Boolean(),
  disabled: Type.Boolean(),
  created_at_iso: Type.String(),
})

const GuestJwt = Type.Object({ allow_guest_jwt: Type.Boolean() }, { additionalProperties: false })
const Groups = Type.Object({ groups: Type.Record(Type.String(), Type.Record(Type.String(), Type.Boolean())) }, { description: 'role → permission key → allowed' })
const ETag = { ETag: { type: 'string', description: 'the version to send back in If-Match' } }

const publicUser = (u: UserRecord): Static<typeof PublicUser> => ({
  username: u.username,
  user_id: u.user_id,
  role: u.role,
  mfa_enabled: u.mfa_enabled,
  sfw_check: u.sfw_check,
  disabled: u.disabled,
  created_at_iso: u.created_at_iso,
})

/** What the admin routes use (UserAdministration's included). */
export type AdminRouteServices = UserAdministrationDeps & Pick<Services, 'roles' | 'settings' | 'ipGate' | 'events'>

export function adminRoutes(services: AdminRouteServices) {
  const administration = new UserAdministration(services)

  return async function (fastify: FastifyInstance): Promise<void> {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
    app.get('/api/settings/guest-jwt', { config: { auth: 'principal' }, schema: { summary: 'Whether guest login is on', tags: settingsTags, response: { 200: GuestJwt } } }, async () => ({
      allow_guest_jwt: services.settings.get('allow_guest_jwt'),
    }))
    app.put('/api/settings/guest-jwt', { config: { auth: 'admin' }, schema: { summary: 'Turn guest login on or off', tags: settingsTags, body: GuestJwt, response: { 200: GuestJwt } } }, async (request) => {
      const { allow_guest_jwt } = request.body
      // turning guest login off narrows (at once, retried); turning it on widens (once stored)
      await services.settings.set('allow_guest_jwt', allow_guest_jwt, allow_guest_jwt ? 'widens' : 'narrows')
      services.events.emit('settings_changed', { ...eventContext(request), setting: 'allow_guest_jwt', value: allow_guest_jwt })
      return { allow_guest_jwt }
    })

    app.get('/api/groups', { config: { auth: 'admin' }, schema: { summary: 'Roles and their permissions', tags: settingsTags, response: { 200: { ...Groups, headers: ETag } } } }, async (_request, reply) => {
      const groups = services.roles.snapshot()
      reply.header('ETag', etagOf(groups))
      return { groups }
    })
    app.put('/api/groups', {
      config: { auth: 'admin' },
      schema: {
        summary: 'Replace the whole role map (validated; a stale If-Match is 412)', tags: settingsTags,
        body: Type.Object({ groups: Type.Record(Type.String(), Type.Unknown()) }, { additionalProperties: false }),
        response: { 200: { ...Groups, headers: ETag } },
      },
    }, async (request, reply) => {
      const result = validateGroups(request.body.groups)
      if ('problems' in result) throw new AuthsvcError('VALIDATION_FAILED', result.problems.join('; '))
      const ifMatch = request.headers['if-match']
      const stored = await services.roles.replaceIf((current) => ifMatchAdmits(ifMatch, etagOf(current)), result.groups as GroupMap)
      if (!stored) throw staleVersion(etagOf(services.roles.snapshot()))
      services.events.emit('settings_changed', { ...eventContext(request), setting: 'groups' })
      const groups = services.roles.snapshot()
      reply.header('ETag', etagOf(groups))
      return { groups }
    })

    app.get('/api/users', { config: { auth: 'admin' }, schema: { summary: 'Every user', tags, response: { 200: Type.Object({ users: Type.Array(PublicUser) }) } } }, async () => ({ users: services.users.list().map(publicUser) }))

    app.put('/api/users/:target_user', {
      config: { auth: 'admin' },
      schema: {
        summary: 'Change a user: role, SFW check, disabled, password reset, MFA reset (sessions end on role, password or disable)', tags,
        params: TargetUser, body: UserPatch, response: { 200: Type.Object({ status: Type.Literal('ok'), user: PublicUser }) },
      },
    }, async (request) => {
      const { user, roleChanged } = await administration.patch(request.params.target_user, request.body)
      const context = eventContext(request)
      if (roleChanged) services.events.emit('user_role_changed', { ...context, subject: user.username, role: user.role })
      const body = request.body
      const changes = [
        ...(body.password !== undefined ? ['password' as const] : []),
        ...(body.disabled === true ? ['disabled' as const] : body.disabled === false ? ['enabled' as const] : []),
        ...(body.mfa_reset === true ? ['mfa_reset' as const] : []),
        ...(body.sfw_check !== undefined ? ['sfw_check' as const] : []),
      ]
      if (changes.length > 0) services.events.emit('user_updated', { ...context, subject: user.username, changes })
      return { status: 'ok' as const, user: publicUser(user) }
    })

    app.delete('/api/users/:target_user', {
      config: { auth: 'admin' },
      schema: { summary: 'Delete a user with their sessions, tokens and grants', tags, params: TargetUser, response: { 200: Type.Object({ status: Type.Literal('ok'), message: Type.String() }) } },
    }, async (request) => {
      const user = await administration.delete(request.params.target_user)
      services.events.emit('user_deleted', { ...eventContext(request), subject: user.username, user_id: user.user_id })
      return { status: 'ok' as const, message: `User ${user.username} deleted` }
    })

    app.get('/api/ip-lists', { config: { auth: 'admin' }, schema: { summary: 'The IP allow and deny lists', tags: settingsTags, response: { 200: { ...IpLists, headers: ETag } } } }, async (_request, reply) => {
      const lists = services.settings.get('ip_lists')
      reply.header('ETag', etagOf(lists))
      return lists
    })
    app.put('/api/ip-lists', {
      config: { auth: 'admin' },
      schema: { summary: 'Replace the IP lists (loopback can never be locked out; a stale If-Match is 412)', tags: settingsTags, body: IpLists, response: { 200: { ...IpLists, headers: ETag } } },
    }, async (request, reply) => {
      const lists: IpListsSetting = request.body
      const problems = ipListsProblems(lists)
      if (problems.length > 0) throw new AuthsvcError('VALIDATION_FAILED', problems.join('; '))
      const ifMatch = request.headers['if-match']
      const stored = await services.settings.compareAndSet('ip_lists', (current) => ifMatchAdmits(ifMatch, etagOf(current)), lists)
      if (!stored) throw staleVersion(etagOf(services.settings.get('ip_lists')))
      services.ipGate.update(lists)
      services.events.emit('settings_changed', { ...eventContext(request), setting: 'ip_lists' })
      reply.header('ETag', etagOf(lists))
      return lists
    })
  }
}
