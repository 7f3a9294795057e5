/**
 * Where users and API tokens are stored (SPEC §5.4), admin only:
 *
 * - `GET /api/users-db-config`: `{backend, sqlite_path, postgres_url_redacted, redis_url_redacted,
 *   encryption_level, restart_required}` as `config.json` holds them now (what the next start
 *   uses; `restart_required` says whether that differs from what runs);
 * - `PUT /api/users-db-config`: `{backend, sqlite_path?, postgres_url?, redis_url?,
 *   encryption_level?}`; a field left out keeps its value, a URL sent back in its redacted form
 *   too; validated (the URL parses, has the right scheme and a host; a path is absolute and not in
 *   a folder the host serves; a backend has its URL), written into `config.json` atomically;
 *   answers `{status: "ok", restart_required: true}`;
 * - `GET`/`PUT /api/token-storage-config`: the same for `store.tokens`, plus `json` and
 *   `json_path`; `same_as_users: true` keeps tokens with the users (the default).
 *
 * A URL's password is never in an answer, a log line or an event (rules.ts `redactUrl`).
 * `encryption_level` changes what every stored value looks like, so it is changed only by an
 * operator moving the store (docs/decisions.md); a PUT of another level is 409 CONFLICT.
 */
import type { FastifyBaseLogger, FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Type from 'typebox'
import { resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { eventContext } from '../access/request-context.js'
import type { Config } from '../kernel/config/schema.js'
import { AuthsvcError } from '../kernel/errors.js'
import type { Events } from '../kernel/events.js'
import type { HostFacts } from '../kernel/protocol.js'
import type { ConfigFile, RawConfig } from './config-file.js'
import { isRedactedOf, pathProblem, redactUrl, urlProblem, type PathLimits, type UrlKind } from './rules.js'

export interface StoreConfigLive {
  file: ConfigFile
  /** the configuration this sidecar runs with */
  running: Config
  dataDir: string
  host: { facts: HostFacts }
  events: Events
  log: FastifyBaseLogger
}

const UserBackend = Type.Union([Type.Literal('sqlite'), Type.Literal('postgres'), Type.Literal('redis')])
const TokenBackend = Type.Union([Type.Literal('sqlite'), Type.Literal('postgres'), Type.Literal('redis'), Type.Literal('json')])
const Level = Type.Union([Type.Literal('fields'), Type.Literal('all')])
const Url = Type.String({ maxLength: 2048, description: "'' clears it; its redacted form (as GET shows it) keeps the stored one" })
const Path = Type.String({ maxLength: 4096, description: "an absolute path; '' is the default in the data dir" })

const UsersAnswer = Type.Object(
  {
    backend: UserBackend,
    sqlite_path: Type.String({ description: 'the sqlite file (the default in the data dir when none is set)' }),
    postgres_url_redacted: Type.String({ description: 'the URL without its password (***)' }),
    redis_url_redacted: Type.String({ description: 'the URL without its password (***)' }),
    encryption_level: Level,
    restart_required: Type.Boolean({ description: 'the saved settings differ from the ones this sidecar runs with' }),
  },
  { additionalProperties: false },
)

const UsersBody = Type.Object(
  {
    backend: UserBackend,
    sqlite_path: Type.Optional(Path),
    postgres_url: Type.Optional(Url),
    redis_url: Type.Optional(Url),
    encryption_level: Type.Optional(Level),
  },
  { additionalProperties: false },
)

const TokensAnswer = Type.Object(
  {
    backend: TokenBackend,
    same_as_users: Type.Boolean({ description: 'tokens are kept in the users\' store (the default)' }),
    sqlite_path: Type.String(),
    postgres_url_redacted: Type.String(),
    redis_url_redacted: Type.String(),
    json_path: Type.String(),
    encryption_level: Level,
    restart_required: Type.Boolean(),
  },
  { additionalProperties: false },
)

const TokensBody = Type.Object(
  {
    same_as_users: Type.Optional(Type.Boolean({ description: 'true: tokens go back to the users\' store (then no other field)' })),
    backend: Type.Optional(TokenBackend),
    sqlite_path: Type.Optional(Path),
    postgres_url: Type.Optional(Url),
    redis_url: Type.Optional(Url),
    json_path: Type.Optional(Path),
  },
  { additionalProperties: false },
)

const Saved = Type.Object({ status: Type.Literal('ok'), restart_required: Type.Literal(true) }, { additionalProperties: false })

type Store = Config['store']
type TokenStore = Store['tokens']

const defaultSqlite = (dataDir: string) => resolve(dataDir, 'authsvc.sqlite')
const defaultTokensJson = (dataDir: string) => resolve(dataDir, 'authsvc_tokens.json')

function usersAnswer(store: Store, running: Store, dataDir: string) {
  return {
    backend: store.backend,
    sqlite_path: store.sqlite_path || defaultSqlite(dataDir),
    postgres_url_redacted: redactUrl(store.postgres_url),
    redis_url_redacted: redactUrl(store.redis_url),
    encryption_level: store.encryption_level,
    restart_required: !sameUsersStore(store, running),
  }
}

function tokensAnswer(store: Store, running: Store, dataDir: string) {
  const t = store.tokens
  const same = t.backend === 'users'
  return {
    backend: t.backend === 'users' ? store.backend : t.backend,
    same_as_users: same,
    sqlite_path: (same ? store.sqlite_path : t.sqlite_path) || defaultSqlite(dataDir),
    postgres_url_redacted: redactUrl(same ? store.postgres_url : t.postgres_url),
    redis_url_redacted: redactUrl(same ? store.redis_url : t.redis_url),
    json_path: t.json_path || defaultTokensJson(dataDir),
    encryption_level: store.encryption_level,
    restart_required: !sameTokenStore(t, running.tokens) || (same && !sameUsersStore(store, running)),
  }
}

const sameTokenStore = (a: TokenStore, b: TokenStore): boolean =>
  a.backend === b.backend && a.sqlite_path === b.sqlite_path && a.postgres_url === b.postgres_url && a.redis_url === b.redis_url && a.json_path === b.json_path

const sameUsersStore = (a: Store, b: Store): boolean =>
  a.backend === b.backend && a.sqlite_path === b.sqlite_path && a.postgres_url === b.postgres_url && a.redis_url === b.redis_url && a.encryption_level === b.encryption_level

/** The package's `web/` (sidecar/src|dist/store-config/ → <package>/web): the host serves it at /extensions/<package>/. */
export const PACKAGE_WEB_DIR = fileURLToPath(new URL('../../../web', import.meta.url))

/** The folders a store file must stay out of: what the host serves or lists. */
function limits(live: StoreConfigLive): PathLimits {
  const f = live.host.facts
  const served = [f.output_dir, f.input_dir, f.temp_dir, f.user_dir, ...Object.values(f.model_folders ?? {}).flat(), PACKAGE_WEB_DIR]
    .filter((d): d is string => typeof d === 'string' && d !== '')
  return { dataDir: live.dataDir, served }
}

/** A section of the file's object ({} made when missing). */
function section(raw: RawConfig, key: string): Record<string, unknown> {
  const value = raw[key]
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) return value as Record<string, unknown>
  const made: Record<string, unknown> = {}
  raw[key] = made
  return made
}

function checkPath(field: string, value: string | undefined, live: StoreConfigLive): void {
  if (value === undefined) return
  const problem = pathProblem(value, limits(live))
  if (problem !== null) throw new AuthsvcError('VALIDATION_FAILED', `${field} ${problem}`)
}

/** The URL to store: the sent one once valid, or the stored one when the redacted form came back. */
function nextUrl(kind: UrlKind, field: string, sent: string | undefined, stored: string): string | undefined {
  if (sent === undefined) return undefined
  if (sent === '' || isRedactedOf(sent, stored)) return sent === '' ? '' : stored
  const problem = urlProblem(kind, sent)
  if (problem !== null) throw new AuthsvcError('VALIDATION_FAILED', `${field} ${problem}`)
  return sent
}

export function storeConfigRoutes(live: () => StoreConfigLive) {
  return async function (fastify: FastifyInstance): Promise<void> {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>()

    app.get('/api/users-db-config', { config: { auth: 'admin' }, schema: { response: { 200: UsersAnswer } } }, async () => {
      const l = live()
      return usersAnswer(l.file.saved().store, l.running.store, l.dataDir)
    })

    app.put('/api/users-db-config', { config: { auth: 'admin' }, schema: { body: UsersBody, response: { 200: Saved } } }, async (request) => {
      const l = live()
      const body = request.body
      checkPath('sqlite_path', body.sqlite_path, l)
      const saved = await l.file.update((raw) => {
        const store = section(raw, 'store')
        const current = l.file.saved().store
        if (body.encryption_level !== undefined && body.encryption_level !== current.encryption_level) {
          throw new AuthsvcError('CONFLICT', 'encryption_level changes how every stored value is written; it is set when a store is made or moved, not here')
        }
        const postgres = nextUrl('postgres', 'postgres_url', body.postgres_url, current.postgres_url)
        const redis = nextUrl('redis', 'redis_url', body.redis_url, current.redis_url)
        store.backend = body.backend
        if (body.sqlite_path !== undefined) store.sqlite_path = body.sqlite_path
        if (postgres !== undefined) store.postgres_url = postgres
        if (redis !== undefined) store.redis_url = redis
        if (body.backend === 'postgres' && (postgres ?? current.postgres_url) === '') throw new AuthsvcError('VALIDATION_FAILED', 'backend postgres needs a postgres_url')
        if (body.backend === 'redis' && (redis ?? current.redis_url) === '') throw new AuthsvcError('VALIDATION_FAILED', 'backend redis needs a redis_url')
      })
      l.log.info({ setting: 'users-db-config', backend: saved.store.backend, sqlite_path: saved.store.sqlite_path, postgres_url: redactUrl(saved.store.postgres_url), redis_url: redactUrl(saved.store.redis_url) }, 'store settings saved; they apply at the next start')
      l.events.emit('settings_changed', { ...eventContext(request), setting: 'users_db_config' })
      return { status: 'ok' as const, restart_required: true as const }
    })

    app.get('/api/token-storage-config', { config: { auth: 'admin' }, schema: { response: { 200: TokensAnswer } } }, async () => {
      const l = live()
      return tokensAnswer(l.file.saved().store, l.running.store, l.dataDir)
    })

    app.put('/api/token-storage-config', { config: { auth: 'admin' }, schema: { body: TokensBody, response: { 200: Saved } } }, async (request) => {
      const l = live()
      const body = request.body
      const { same_as_users: same, ...rest } = body
      if (same === true && Object.keys(rest).length > 0) throw new AuthsvcError('VALIDATION_FAILED', 'same_as_users: true takes no other field')
      if (same !== true && body.backend === undefined) throw new AuthsvcError('VALIDATION_FAILED', 'name a backend, or send same_as_users: true')
      checkPath('sqlite_path', body.sqlite_path, l)
      checkPath('json_path', body.json_path, l)
      const saved = await l.file.update((raw) => {
        const tokens = section(section(raw, 'store'), 'tokens')
        if (same === true) {
          for (const key of Object.keys(tokens)) delete tokens[key]
          return
        }
        const current: TokenStore = l.file.saved().store.tokens
        const postgres = nextUrl('postgres', 'postgres_url', body.postgres_url, current.postgres_url)
        const redis = nextUrl('redis', 'redis_url', body.redis_url, current.redis_url)
        tokens.backend = body.backend
        if (body.sqlite_path !== undefined) tokens.sqlite_path = body.sqlite_path
        if (body.json_path !== undefined) tokens.json_path = body.json_path
        if (postgres !== undefined) tokens.postgres_url = postgres
        if (redis !== undefined) tokens.redis_url = redis
        if (body.backend === 'postgres' && (postgres ?? current.postgres_url) === '') throw new AuthsvcError('VALIDATION_FAILED', 'backend postgres needs a postgres_url')
        if (body.backend === 'redis' && (redis ?? current.redis_url) === '') throw new AuthsvcError('VALIDATION_FAILED', 'backend redis needs a redis_url')
      })
      const t = saved.store.tokens
      l.log.info({ setting: 'token-storage-config', backend: t.backend, sqlite_path: t.sqlite_path, json_path: t.json_path, postgres_url: redactUrl(t.postgres_url), redis_url: redactUrl(t.redis_url) }, 'token store settings saved; they apply at the next start')
      l.events.emit('settings_changed', { ...eventContext(request), setting: 'token_storage_config' })
      return { status: 'ok' as const, restart_required: true as const }
    })
  }
}
