/**
 * The admin API for model folders, the model cache and per-user model grants
 * (SPEC §5.4; admin only).
 *
 * - `available-*` lists are live: the folders the host reports now and a fresh
 *   walk of a folder's paths; `model-cache/*` lists are the watched cache that
 *   the decision path reads.
 * - A grant names an item of a known folder (400 VALIDATION_FAILED otherwise;
 *   the cache is checked first, then the disk, so a file copied a moment ago can
 *   be granted before the watcher reports it); granting twice keeps the first
 *   grant. A revocation of a grant that exists always works (even when its file
 *   is gone); of one that does not, it is 400 for an unknown folder or item and a
 *   no-op otherwise. Both answer the user's grants as they are afterwards.
 * - A role's grants (`/api/roles/:role/shared-items`) follow the same rules and apply to
 *   every user of the role (models/model-grants.ts); an unknown role is 404 NOT_FOUND.
 */
import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Type from 'typebox'
import { eventContext } from '../access/request-context.js'
import { AuthsvcError } from '../kernel/errors.js'
import { listFolderNow, modelFoldersOf, type ModelCache } from './model-cache.js'
import type { ModelGrantRecord, RoleGrantRecord } from './model-grants.js'
import type { UserRecord } from '../identity/users.js'
import type { Services } from '../services.js'

const GrantBody = Type.Object(
  {
    folder: Type.String({ minLength: 1, maxLength: 255 }),
    item_name: Type.String({ minLength: 1, maxLength: 4096 }),
  },
  { additionalProperties: false },
)

const tags = ['admin: models']
const Folder = Type.Object({ folder: Type.String({ description: 'a model folder of the host (checkpoints, loras...)' }) })
const Username = Type.Object({ username: Type.String({ description: 'a username or a user id' }) })
const RoleName = Type.Object({ role: Type.String({ description: 'a role of the role map (GET /api/groups)' }) })
const Folders = Type.Object({ folders: Type.Array(Type.String()) })
const FolderItems = Type.Object({ folder: Type.String(), items: Type.Array(Type.String()) })
const Grants = Type.Object({
  username: Type.String(),
  items: Type.Array(Type.Object({
    folder: Type.String(),
    item_name: Type.String(),
    granted_by: Type.String(),
    created_at_iso: Type.String(),
    host_only: Type.Boolean({ description: 'granted on this ComfyUI only (a model the user downloaded here); a shared store\'s other hosts do not grant it' }),
  })),
})
const RoleGrants = Type.Object({
  role: Type.String(),
  items: Type.Array(Type.Object({ folder: Type.String(), item_name: Type.String(), granted_by: Type.String(), created_at_iso: Type.String() })),
})
const Refreshed = Type.Object({ status: Type.Literal('ok'), folders_count: Type.Integer(), items_count: Type.Integer(), refreshed_at_iso: Type.String() })

const publicGrant = (g: ModelGrantRecord | RoleGrantRecord) => ({ folder: g.folder, item_name: g.item_name, granted_by: g.granted_by, created_at_iso: g.created_at_iso })

export function modelGrantRoutes(services: Pick<Services, 'users' | 'roles' | 'modelGrants' | 'host' | 'clock' | 'events'>, cache: ModelCache) {
  const liveFolder = (name: string) => {
    const folder = modelFoldersOf(services.host.facts).find((f) => f.name === name)
    if (!folder) throw new AuthsvcError('NOT_FOUND', 'Unknown model folder')
    return folder
  }
  /** Whether the item is in the folder: the cache, else the disk (the watcher may not have reported it yet). */
  const itemExists = async (folder: string, item: string): Promise<boolean> => {
    if (cache.has(folder, item)) return true
    const live = modelFoldersOf(services.host.facts).find((f) => f.name === folder)
    return live !== undefined && (await listFolderNow(live)).includes(item)
  }
  const knownFolder = (folder: string): boolean => cache.folder(folder) !== undefined || modelFoldersOf(services.host.facts).some((f) => f.name === folder)
  const grantsOf = (user: UserRecord) => ({ username: user.username, items: services.modelGrants.list(user.user_id).map((g) => ({ ...publicGrant(g), host_only: g.host_only })) })
  const knownRole = (role: string): string => {
    if (!services.roles.has(role)) throw new AuthsvcError('NOT_FOUND', 'Unknown role')
    return role
  }
  const roleGrantsOf = (role: string) => ({ role, items: services.modelGrants.listRole(role).map(publicGrant) })
  /** An unknown folder or item is 400 (the same check as a user's grant). */
  const assertItem = async (folder: string, item_name: string): Promise<void> => {
    if (!knownFolder(folder)) throw new AuthsvcError('VALIDATION_FAILED', `Unknown model folder: ${folder}`)
    if (!(await itemExists(folder, item_name))) throw new AuthsvcError('VALIDATION_FAILED', `Unknown item in ${folder}: ${item_name}`)
  }

  return async function (fastify: FastifyInstance): Promise<void> {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
    app.get('/api/available-model-folders', { config: { auth: 'admin' }, schema: { summary: 'The host\'s model folders, as it reports them now', tags, response: { 200: Folders } } }, async () => ({
      folders: modelFoldersOf(services.host.facts).map((f) => f.name),
    }))
    app.get('/api/available-models/:folder', {
      config: { auth: 'admin' },
      schema: { summary: 'The items of a model folder, read from the disk now', tags, params: Folder, response: { 200: FolderItems } },
    }, async (request) => {
      const folder = liveFolder(request.params.folder)
      return { folder: folder.name, items: await listFolderNow(folder) }
    })

    app.get('/api/model-cache/folders', { config: { auth: 'admin' }, schema: { summary: 'The model folders of the watched cache', tags, response: { 200: Folders } } }, async () => ({ folders: cache.folderNames() }))
    app.get('/api/model-cache/folders/:folder/items', {
      config: { auth: 'admin' },
      schema: { summary: 'The items of a model folder in the watched cache', tags, params: Folder, response: { 200: FolderItems } },
    }, async (request) => {
      const folder = request.params.folder
      const items = cache.list(folder)
      if (items === undefined) throw new AuthsvcError('NOT_FOUND', 'Unknown model folder')
      return { folder, items }
    })
    app.post('/api/model-cache/refresh', { config: { auth: 'admin' }, schema: { summary: 'Walk the model folders again now', tags, response: { 200: Refreshed } } }, async (request) => {
      await cache.refresh()
      services.events.emit('model_cache_refreshed', { ...eventContext(request), folders: cache.folderNames().length, items: cache.itemsCount })
      return { status: 'ok' as const, folders_count: cache.folderNames().length, items_count: cache.itemsCount, refreshed_at_iso: new Date(cache.refreshedAt).toISOString() }
    })

    app.get('/api/users/:username/shared-items', {
      config: { auth: 'admin' },
      schema: { summary: 'The model items granted to a user', tags, params: Username, response: { 200: Grants } },
    }, async (request) => grantsOf(services.users.find(request.params.username)))

    app.post('/api/users/:username/shared-items', {
      config: { auth: 'admin' },
      schema: { summary: 'Grant a user a model item (an unknown folder or item is 400); the user\'s grants after', tags, params: Username, body: GrantBody, response: { 200: Grants } },
    }, async (request) => {
      const user = services.users.find(request.params.username)
      const { folder, item_name } = request.body
      if (!knownFolder(folder)) throw new AuthsvcError('VALIDATION_FAILED', `Unknown model folder: ${folder}`)
      if (!(await itemExists(folder, item_name))) throw new AuthsvcError('VALIDATION_FAILED', `Unknown item in ${folder}: ${item_name}`)
      await services.modelGrants.grant({
        user_id: user.user_id,
        folder,
        item_name,
        granted_by: request.principal?.username ?? '',
        created_at_iso: new Date(services.clock()).toISOString(),
      })
      services.events.emit('model_granted', { ...eventContext(request), subject: user.username, folder, item_name })
      return grantsOf(user)
    })

    app.delete('/api/users/:username/shared-items', {
      config: { auth: 'admin' },
      schema: { summary: 'Take a model item back from a user; the user\'s grants after', tags, params: Username, body: GrantBody, response: { 200: Grants } },
    }, async (request) => {
      const user = services.users.find(request.params.username)
      const { folder, item_name } = request.body
      const revoked = await services.modelGrants.revoke(user.user_id, folder, item_name)
      if (!revoked) {
        if (!knownFolder(folder)) throw new AuthsvcError('VALIDATION_FAILED', `Unknown model folder: ${folder}`)
        if (!(await itemExists(folder, item_name))) throw new AuthsvcError('VALIDATION_FAILED', `Unknown item in ${folder}: ${item_name}`)
      } else {
        services.events.emit('model_revoked', { ...eventContext(request), subject: user.username, folder, item_name })
      }
      return grantsOf(user)
    })

    app.get('/api/roles/:role/shared-items', {
      config: { auth: 'admin' },
      schema: { summary: 'The model items granted to a role (every user of the role may use them)', tags, params: RoleName, response: { 200: RoleGrants } },
    }, async (request) => roleGrantsOf(knownRole(request.params.role)))

    app.post('/api/roles/:role/shared-items', {
      config: { auth: 'admin' },
      schema: { summary: 'Grant a role a model item (an unknown role is 404, an unknown folder or item 400); the role\'s grants after', tags, params: RoleName, body: GrantBody, response: { 200: RoleGrants } },
    }, async (request) => {
      const role = knownRole(request.params.role)
      const { folder, item_name } = request.body
      await assertItem(folder, item_name)
      await services.modelGrants.grantRole({
        role,
        folder,
        item_name,
        granted_by: request.principal?.username ?? '',
        created_at_iso: new Date(services.clock()).toISOString(),
      })
      services.events.emit('model_granted', { ...eventContext(request), role, folder, item_name })
      return roleGrantsOf(role)
    })

    app.delete('/api/roles/:role/shared-items', {
      config: { auth: 'admin' },
      schema: { summary: 'Take a model item back from a role; the role\'s grants after', tags, params: RoleName, body: GrantBody, response: { 200: RoleGrants } },
    }, async (request) => {
      const role = knownRole(request.params.role)
      const { folder, item_name } = request.body
      if (await services.modelGrants.revokeRole(role, folder, item_name)) {
        services.events.emit('model_revoked', { ...eventContext(request), role, folder, item_name })
      } else {
        await assertItem(folder, item_name)
      }
      return roleGrantsOf(role)
    })
  }
}
