/**
 * Reading the audit log (SPEC §5.2, §5.4; issue 24):
 * - `GET /authsvc/me/console`: the caller's own lines (what they did and what was done to their
 *   account), newest last, at most 500, and none from before their account was created (a new
 *   user who takes a deleted user's name never reads the old one's lines); the address shown only
 *   where they acted themselves (an admin's address is not theirs to read);
 * - `GET /authsvc/api/admin/consoles` and `/{username}`: the names with lines, and one name's lines;
 * - `GET /authsvc/api/audit`: the admin's view, filtered by user, kinds and time, newest first,
 *   paged with `before` (the `seq` of the last event seen).
 *
 * Each answer carries `lines` (text, one per event) and/or `events` (the same, structured).
 */
import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Type from 'typebox'
import { requireUser } from '../access/request-context.js'
import { AuthsvcError } from '../kernel/errors.js'
import type { Services } from '../services.js'
import { consoleLine, type AuditEntry } from './audit-log.js'

export const CONSOLE_MAX_LINES = 500
const AUDIT_PAGE_DEFAULT = 100

const PublicEntry = Type.Object({
  seq: Type.Integer(),
  at_iso: Type.String(),
  kind: Type.String(),
  actor: Type.Union([Type.String(), Type.Null()]),
  subject: Type.Union([Type.String(), Type.Null()]),
  ip: Type.Union([Type.String(), Type.Null()]),
  outcome: Type.Union([Type.Literal('success'), Type.Literal('failure'), Type.Literal('refused')]),
  details: Type.Record(Type.String(), Type.Unknown()),
})

const ConsoleAnswer = Type.Object({ lines: Type.Array(Type.String()), events: Type.Array(PublicEntry) })
const UserConsoleAnswer = Type.Object({ username: Type.String(), lines: Type.Array(Type.String()), events: Type.Array(PublicEntry) })
// Other query keys are not refused: `?token=` / `?access_token=` carry the credential on any route (SPEC §3)
const ConsoleQuery = Type.Object(
  { limit: Type.Optional(Type.String({ pattern: '^[1-9][0-9]{0,3}$', description: `lines at most (1 to ${CONSOLE_MAX_LINES}; default ${CONSOLE_MAX_LINES})` })) },
)
const AuditQuery = Type.Object(
  {
    user: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
    kind: Type.Optional(Type.String({ pattern: '^[a-z_]{1,64}(,[a-z_]{1,64}){0,31}$', description: 'event kinds, comma-separated' })),
    since: Type.Optional(Type.String({ maxLength: 40, description: 'ISO 8601 time, inclusive' })),
    until: Type.Optional(Type.String({ maxLength: 40, description: 'ISO 8601 time, inclusive' })),
    before: Type.Optional(Type.String({ pattern: '^[1-9][0-9]{0,15}$', description: 'the seq of the last event seen: the next page' })),
    limit: Type.Optional(Type.String({ pattern: '^[1-9][0-9]{0,3}$', description: `events at most (1 to ${CONSOLE_MAX_LINES}; default ${AUDIT_PAGE_DEFAULT})` })),
  },
)
const AuditAnswer = Type.Object({ events: Type.Array(PublicEntry), next_before: Type.Union([Type.Integer(), Type.Null()]) })
const Username = Type.Object({ username: Type.String({ minLength: 1, maxLength: 64 }) })

const publicEntry = (entry: AuditEntry) => ({
  seq: entry.seq, at_iso: new Date(entry.at).toISOString(), kind: entry.kind, actor: entry.actor, subject: entry.subject,
  ip: entry.ip, outcome: entry.outcome, details: entry.details,
})

function limitOf(raw: string | undefined, fallback: number): number {
  if (raw === undefined) return fallback
  const n = Number(raw)
  if (n > CONSOLE_MAX_LINES) throw new AuthsvcError('VALIDATION_FAILED', `limit must be at most ${CONSOLE_MAX_LINES}`)
  return n
}

function timeOf(raw: string | undefined, name: string): number | undefined {
  if (raw === undefined) return undefined
  const at = Date.parse(raw)
  if (!Number.isFinite(at)) throw new AuthsvcError('VALIDATION_FAILED', `${name} must be an ISO 8601 time, such as 2026-11-26T09:00:00Z`)
  return at
}

/** newest last, as a console reads */
const asConsole = (entries: AuditEntry[]) => {
  const oldestFirst = [...entries].reverse()
  return { lines: oldestFirst.map(consoleLine), events: oldestFirst.map(publicEntry) }
}

export function auditRoutes(services: Pick<Services, 'audit' | 'users'>) {
  return async function (fastify: FastifyInstance): Promise<void> {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>()

    app.get('/me/console', { config: { auth: 'user' }, schema: { querystring: ConsoleQuery, response: { 200: ConsoleAnswer } } }, async (request) => {
      const principal = requireUser(request)
      const user = services.users.byId(principal.userId)
      if (!user) throw new AuthsvcError('AUTH_REQUIRED')
      const entries = await services.audit.query({
        user: user.username, since: Date.parse(user.created_at_iso), limit: limitOf(request.query.limit, CONSOLE_MAX_LINES),
      })
      // what an admin did to the account is the user's to read; the admin's address is not
      return asConsole(entries.map((e) => (e.actor === user.username ? e : { ...e, ip: null })))
    })

    app.get('/api/admin/consoles', { config: { auth: 'admin' }, schema: { response: { 200: Type.Object({ users: Type.Array(Type.String()) }) } } }, async () => ({
      users: await services.audit.usernames(),
    }))

    app.get('/api/admin/consoles/:username', {
      config: { auth: 'admin' }, schema: { params: Username, querystring: ConsoleQuery, response: { 200: UserConsoleAnswer } },
    }, async (request) => {
      const { username } = request.params
      const entries = await services.audit.query({ user: username, limit: limitOf(request.query.limit, CONSOLE_MAX_LINES) })
      if (entries.length === 0 && !services.users.byUsername(username)) throw new AuthsvcError('NOT_FOUND', 'No such user and no lines of that name')
      return { username, ...asConsole(entries) }
    })

    app.get('/api/audit', { config: { auth: 'admin' }, schema: { querystring: AuditQuery, response: { 200: AuditAnswer } } }, async (request) => {
      const q = request.query
      const limit = limitOf(q.limit, AUDIT_PAGE_DEFAULT)
      const since = timeOf(q.since, 'since')
      const until = timeOf(q.until, 'until')
      if (since !== undefined && until !== undefined && since > until) throw new AuthsvcError('VALIDATION_FAILED', 'since must not be after until')
      const entries = await services.audit.query({
        user: q.user, kinds: q.kind?.split(','), since, until, before: q.before === undefined ? undefined : Number(q.before), limit,
      })
      return { events: entries.map(publicEntry), next_before: entries.length === limit ? entries[entries.length - 1].seq : null }
    })
  }
}
