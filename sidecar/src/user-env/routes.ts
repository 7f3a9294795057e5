/**
 * `POST /authsvc/api/user-env` (SPEC §5.2; any signed-in user):
 *
 * - `{"action":"status"}`: the caller's own folders (kind, a path relative to the host folder of
 *   that kind, files, bytes) and their workflows (count, bytes). Naming oneself in `user` is the
 *   same; naming anyone else is 403 ADMIN_REQUIRED for a non-admin, whether that user exists or not.
 * - admins: `status` or `list` with `user`: that user's status, with the absolute host paths
 *   (`host_path`); `list` without `user`: the users who have at least one folder of their own
 *   (one look per folder, no walk); `purge` with `user` and `confirm` repeating the username:
 *   empties that user's four folders and answers what was there. Without the confirmation nothing
 *   is touched (400). An unknown user is 404.
 * - an unknown action or key is 400 VALIDATION_FAILED (the schema).
 */
import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Type from 'typebox'
import { isAdministrator } from '../identity/principal.js'
import type { UserRecord } from '../identity/users.js'
import { AuthsvcError } from '../kernel/errors.js'
import type { Services } from '../services.js'
import { isUserId } from '../isolation/user-folders.js'
import { FOLDER_KINDS, type FolderUsage, type StorageStatus, type UserStorage } from './user-storage.js'

const UserEnvBody = Type.Object(
  {
    action: Type.Union([Type.Literal('status'), Type.Literal('list'), Type.Literal('purge')]),
    user: Type.Optional(Type.String({ minLength: 1, maxLength: 256 })),
    /** purge: the username again */
    confirm: Type.Optional(Type.String({ maxLength: 256 })),
  },
  { additionalProperties: false },
)

const Kind = Type.Union([Type.Literal('userdata'), Type.Literal('input'), Type.Literal('output'), Type.Literal('temp')])
const Folder = Type.Object(
  {
    kind: Kind,
    path: Type.String(),
    /** admins only */
    host_path: Type.Optional(Type.Union([Type.String(), Type.Null()])),
    state: Type.Union([Type.Literal('folder'), Type.Literal('none'), Type.Literal('not_own'), Type.Literal('unknown')]),
    files: Type.Integer(),
    bytes: Type.Integer(),
    failed: Type.Optional(Type.String()),
  },
  { additionalProperties: false },
)
const Workflows = Type.Object({ count: Type.Integer(), bytes: Type.Integer() }, { additionalProperties: false })
const StatusAnswer = Type.Object(
  { username: Type.String(), folders: Type.Array(Folder), workflows: Workflows, truncated: Type.Boolean() },
  { additionalProperties: false },
)
const ListAnswer = Type.Object(
  { users: Type.Array(Type.Object({ username: Type.String(), folders: Type.Array(Kind) }, { additionalProperties: false })) },
  { additionalProperties: false },
)
const PurgeAnswer = Type.Object(
  {
    status: Type.Literal('ok'),
    username: Type.String(),
    removed: Type.Object(
      { folders: Type.Array(Folder), workflows: Workflows, files: Type.Integer(), bytes: Type.Integer(), truncated: Type.Boolean() },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false },
)

/** A folder as the answer shows it: the absolute path for administrators only. */
const shown = (folder: FolderUsage & { failed?: string }, admin: boolean) => {
  const { path, label, ...rest } = folder
  return admin ? { ...rest, path: label, host_path: path } : { ...rest, path: label }
}

/** Walks at once, all users together: each stats up to MAX_ENTRIES files on libuv's pool, which argon2 and sqlite share. */
const MAX_WALKS = 2

/**
 * Status walks, shared and bounded: a second request for the same user joins the walk in flight
 * (the account page asks on every load), and at most MAX_WALKS walk at once; the others wait
 * their turn, so a burst of status requests never starves logins and store writes of threads.
 */
export function sharedStatus(storage: Pick<UserStorage, 'status'>): (userId: string) => Promise<StorageStatus> {
  const inFlight = new Map<string, Promise<StorageStatus>>()
  let walking = 0
  const waiting: Array<() => void> = []
  const turn = async (): Promise<void> => {
    if (walking < MAX_WALKS) {
      walking++
      return
    }
    await new Promise<void>((resolve) => waiting.push(resolve)) // the finisher hands its turn over
  }
  const done = (): void => {
    const next = waiting.shift()
    if (next) next()
    else walking--
  }
  return (userId) => {
    const joined = inFlight.get(userId)
    if (joined) return joined
    const walk = (async () => {
      await turn()
      try {
        return await storage.status(userId)
      } finally {
        done()
        inFlight.delete(userId)
      }
    })()
    inFlight.set(userId, walk)
    return walk
  }
}

export function userEnvRoutes(services: Pick<Services, 'users' | 'events'>, storage: UserStorage) {
  const statusOf = sharedStatus(storage)
  return async function (fastify: FastifyInstance): Promise<void> {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
    app.post('/api/user-env', {
      config: { auth: 'user' },
      schema: { body: UserEnvBody, response: { 200: Type.Union([StatusAnswer, ListAnswer, PurgeAnswer]) } },
    }, async (request) => {
      const p = request.principal!
      const admin = isAdministrator(p)
      const { action, user, confirm } = request.body
      if (!admin) {
        // a non-admin learns nothing about another name, not even whether it exists
        if (action !== 'status' || (user !== undefined && services.users.byUsername(user)?.user_id !== p.userId)) throw new AuthsvcError('ADMIN_REQUIRED')
      }
      if (action === 'list' && user === undefined) {
        const users: Array<{ username: string; folders: Array<(typeof FOLDER_KINDS)[number]> }> = []
        for (const u of services.users.list()) {
          if (!isUserId(u.user_id)) continue // no folder is named from anything else (see below)
          const folders = await storage.hasFolders(u.user_id)
          if (folders.length > 0) users.push({ username: u.username, folders })
        }
        return { users }
      }
      // oneself by id (a username may look like someone's id; `find` tries names first)
      const target: UserRecord | undefined = user === undefined ? services.users.byId(p.userId!) : services.users.find(user)
      if (target === undefined) throw new AuthsvcError('NOT_FOUND', 'User not found')
      // every user id is a UUID (UserRepository); a record made otherwise has no folders this route can name
      if (!isUserId(target.user_id)) throw new AuthsvcError('NOT_FOUND', 'No folders are known for this user')
      if (action === 'purge') {
        if (user === undefined) throw new AuthsvcError('VALIDATION_FAILED', 'purge names the user whose folders it empties')
        if (confirm === undefined || confirm.toLowerCase() !== target.username.toLowerCase()) {
          throw new AuthsvcError('VALIDATION_FAILED', `confirm must repeat the username (${target.username}); nothing was removed`)
        }
        const report = await storage.purge(target.user_id)
        const failed = report.folders.some((f) => f.failed !== undefined)
        services.events.emit('user_env_purged', {
          actor: p.username,
          subject: target.username,
          ip: request.facts.ip,
          outcome: failed ? 'failure' : 'success',
          files: report.files,
          bytes: report.bytes,
          folders: report.folders.filter((f) => f.state === 'folder').length,
        })
        return { status: 'ok' as const, username: target.username, removed: { ...report, folders: report.folders.map((f) => shown(f, true)) } }
      }
      const status = await statusOf(target.user_id)
      return { username: target.username, ...status, folders: status.folders.map((f) => shown(f, admin)) }
    })
  }
}
