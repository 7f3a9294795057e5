/**
 * Everything the decision path and the owned routes share, built once by
 * `openServices` (the only place that does I/O at start: store, secret, groups).
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { FastifyBaseLogger } from 'fastify'
import type { Config } from './kernel/config/schema.js'
import type { NetworkPolicy } from './access/client-facts.js'
import type { HostFacts } from './kernel/protocol.js'
import { ApiTokenService, type ApiTokenRecord } from './identity/api-tokens.js'
import { systemClock, type Clock } from './kernel/clock.js'
import { PasswordHasher } from './identity/passwords.js'
import { IdentityResolver } from './identity/resolver.js'
import { deriveKeys, loadMasterSecret } from './identity/secrets.js'
import { SessionService, type SessionRecord } from './identity/sessions.js'
import { MfaService, type MfaRecord } from './identity/mfa.js'
import { Throttle } from './identity/throttle.js'
import { FieldCipher } from './store/field-crypto.js'
import { sealedSharedStore } from './store/sealed-kv.js'
import { StoreConfigError, checkSecret, openSharedStore } from './store/open.js'
import { openSqliteSharedStore } from './store/sqlite-store.js'
import type { SharedStore } from './store/shared-store.js'
import { parseBoolean } from './kernel/config/load.js'
import { UserRepository, nameKeyWith, type UserRecord } from './identity/users.js'
import { IpSet } from './access/ip.js'
import { IpListGate } from './access/ip-lists.js'
import { RoleStore } from './access/roles.js'
import { AccessEpoch } from './kernel/access-epoch.js'
import { Events } from './kernel/events.js'
import { SqliteAuditLog, StoreAuditLog, type AuditLog } from './audit/audit-log.js'
import { Collection } from './store/collection.js'
import { ModelGrants, type ModelGrantRecord, type RoleGrantRecord } from './models/model-grants.js'
import { Ownership, type FileRecord, type PromptRecord } from './isolation/ownership.js'
import { ClientIdBindings, type ClientIdRecord } from './isolation/client-ids.js'
import { WorkflowStore } from './workflows/workflow-store.js'
import { openSqliteStore, sqlitePath, type KeyValueStore } from './store/kv.js'
import { SettingsRepository } from './store/settings.js'
import { ALWAYS_UP, StoreHealth, type StoreHealthView } from './store/health.js'

/** The package version (package.json), reported in X-Authsvc-Version and the hello. */
/** Session and API-token records held in memory per kind at most; the rest are read from the store on use. */
export const CREDENTIALS_HELD = 50_000

export const SERVICE_VERSION: string = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version

export interface Services {
  config: Config
  /** bumped by every change a decision reads (users, sessions, tokens, MFA, roles, settings, IP lists, grants) */
  accessEpoch: AccessEpoch
  dataDir: string
  clock: Clock
  log: FastifyBaseLogger
  kv: KeyValueStore
  /** the store under `kv` (sqlite, postgres or redis): its atomic verbs and its feed */
  store: SharedStore
  /**
   * This host's own records (which prompt and file is whose, client ids, download jobs, content
   * tags, the update check): the sqlite file in the data dir whatever the backend, since two
   * ComfyUIs' `output/ComfyUI_00001_.png` are two files. On the sqlite backend the same store as `kv`.
   */
  localKv: KeyValueStore
  net: NetworkPolicy
  users: UserRepository
  sessions: SessionService
  tokens: ApiTokenService
  roles: RoleStore
  settings: SettingsRepository
  ipGate: IpListGate
  /** refusing: the shared store has been unreachable past its grace (store/health.ts); never on sqlite */
  storeHealth: StoreHealthView
  passwords: PasswordHasher
  resolver: IdentityResolver
  mfa: MfaService
  throttle: Throttle
  /** env RECOVERY_MODE: the MFA recovery route works (for local clients) */
  recoveryMode: boolean
  host: { facts: HostFacts }
  /** who owns which prompt and host file (per-user isolation) */
  ownership: Ownership
  clientIds: ClientIdBindings
  /** which model items each user may see and use without can_view_all_comfyui_items */
  modelGrants: ModelGrants
  /** own and shared workflows in the host's user folder */
  workflows: WorkflowStore
  /** the event stream: every security-relevant thing that happens, once (kernel/events.ts) */
  events: Events
  /** the stored events (the audit feature appends the stream; consoles and the audit view read it) */
  audit: AuditLog
  /** seals single stored values (`encryption_level: fields`): the ntfy token */
  fieldCipher: FieldCipher
  /** turns a user's MFA off (admin mfa_reset, recovery, operator command) */
  resetMfa(userId: string): Promise<void>
  flush(): Promise<void>
  close(): Promise<void>
}

export interface OpenOptions {
  config: Config
  dataDir: string
  env: NodeJS.ProcessEnv
  log: FastifyBaseLogger
  clock?: Clock
  watchGroups?: boolean
  /** how long decisions go on from the replica after losing a shared store (tests shorten it) */
  storeGraceMs?: number
  /** wraps the opened store (tests: a store that fails on demand) */
  wrapStore?: (kv: KeyValueStore) => KeyValueStore
}

export async function openServices(options: OpenOptions): Promise<Services> {
  const { config, dataDir, env, log } = options
  const clock = options.clock ?? systemClock
  const keys = deriveKeys(loadMasterSecret(dataDir, env))
  if (config.store.tokens.backend !== 'users') {
    throw new StoreConfigError(`store.tokens.backend ${config.store.tokens.backend} is not built yet; remove it: API tokens live in the users' store`)
  }
  const cipher = new FieldCipher(keys.encryption)
  // the local sqlite file: the audit log's table (sqlite backend; a shared store keeps its own), and the records on the sqlite backend
  const rawKv = await openSqliteStore(sqlitePath(config, dataDir))
  const shared = await openSharedStore(config, dataDir, log, clock)
  // a shared store only: on the embedded one a changed secret is the operator's own rotation (every
  // JWT ends, API tokens stay: they are hashes), with no other instance to disagree with
  if (config.store.backend !== 'sqlite') {
    try {
      await checkSecret(shared, keys.storeCheck, config.store.backend)
    } catch (err) {
      // not starting: nothing may stay open behind the refusal
      await shared.close().catch(() => {})
      await rawKv.close().catch(() => {})
      throw err
    }
  }
  const store = config.store.encryption_level === 'all' ? sealedSharedStore(shared, cipher) : shared
  const kv = options.wrapStore ? options.wrapStore(store) : store
  let localKv: KeyValueStore = kv
  if (config.store.backend !== 'sqlite') {
    const local = await openSqliteSharedStore(sqlitePath(config, dataDir), clock)
    localKv = config.store.encryption_level === 'all' ? sealedSharedStore(local, cipher) : local
  }
  const storeLog = { log }
  const accessEpoch = new AccessEpoch()
  const events = new Events(clock, log)
  // one structured line per event (the audit log and the notifier listen here too); a queued
  // prompt is routine (ComfyUI prints its own "got prompt"), so its line is debug
  events.onAny((record) => log[record.kind === 'prompt_queued' ? 'debug' : 'info']({ ...record, event: record.kind }, record.kind))
  // the kinds decisions read: a change of any of them drops the decisions the plugin keeps
  const accessLog = { log, onChange: () => accessEpoch.bump() }
  const [userRecords, sessionRecords, tokenRecords, settingRecords, mfaRecords] = await Promise.all([
    Collection.load<UserRecord>(kv, 'user', accessLog),
    // sessions and tokens grow with use: held lazily, a bounded number (a store may hold a million)
    Collection.load<SessionRecord>(kv, 'session', { ...accessLog, lazy: { max: CREDENTIALS_HELD } }),
    Collection.load<ApiTokenRecord>(kv, 'token', { ...accessLog, lazy: { max: CREDENTIALS_HELD } }),
    Collection.load<unknown>(kv, 'setting', accessLog),
    Collection.load<MfaRecord>(kv, 'mfa', accessLog),
  ])
  const [promptRecords, fileRecords, clientIdRecords] = await Promise.all([
    Collection.load<PromptRecord>(localKv, 'prompt'),
    Collection.load<FileRecord>(localKv, 'file'),
    Collection.load<ClientIdRecord>(localKv, 'client_id'),
  ])
  const ownership = new Ownership(promptRecords, fileRecords, clock)
  const clientIds = new ClientIdBindings(clientIdRecords, clock)
  ownership.onPromptForgotten = (record, inUse) => clientIds.promptForgotten(record.client_id, inUse)
  // whose prompts and files are whose: filter memos name it, so kept filtered reads end with it
  ownership.onChange = () => accessEpoch.bump()
  const host: { facts: HostFacts } = { facts: {} }
  const users = new UserRepository(userRecords, nameKeyWith(keys.nameIndex))
  const sessions = new SessionService(sessionRecords, keys.jwt, clock, {
    lifetimeHours: config.access_token_expiration_hours,
    idleMinutes: config.session_idle_minutes,
  })
  // the guest bounds hold from the start; expired records are swept by the identity feature's job
  await sessions.open()
  await sessions.prune()
  const tokens = new ApiTokenService(tokenRecords, clock)
  await tokens.open()
  const roles = RoleStore.open(join(dataDir, 'authsvc_groups.json'), log)
  // a deleted role's model grants go with it (models/model-grants.ts); set once the grants are loaded
  let rolesChanged = (): void => {}
  roles.onChange = () => {
    accessEpoch.bump()
    rolesChanged()
  }
  if (options.watchGroups !== false) roles.watch()
  const settings = new SettingsRepository(settingRecords, {
    allow_guest_jwt: config.allow_guest_jwt,
    ip_lists: { whitelist: [], blacklist: [] },
    ntfy: null,
    groups: null,
  })
  const net: NetworkPolicy = { localNetworks: new IpSet(config.local_network_cidrs), trustedProxies: new IpSet(config.trusted_proxies) }
  const ipGate = new IpListGate(settings.get('ip_lists'), clock, () => accessEpoch.bump())
  // another instance's IP-list edit applies here as soon as the feed brings it
  settingRecords.observeRemote((id) => {
    if (id === 'ip_lists') ipGate.update(settings.get('ip_lists'))
    if (id === 'groups') roles.followShared()
  })
  if (settingRecords.multiInstance !== null) {
    await roles.share({
      get: () => settings.get('groups'),
      compareAndSet: (isCurrent, groups) => settings.compareAndSet('groups', isCurrent, groups),
    })
  }
  const resolver = new IdentityResolver({ config, users, sessions, tokens, roles, settings })
  const mfa = new MfaService(mfaRecords, cipher, keys.backupCodes, clock)
  const throttle = await Throttle.open(kv, clock, {}, storeLog)
  const grantRecords = await Collection.load<ModelGrantRecord>(kv, 'model_grant', accessLog)
  const roleGrantRecords = await Collection.load<RoleGrantRecord>(kv, 'model_role_grant', accessLog)
  // a download's grant is of this host only: its own store (the embedded one when there is no other)
  const hostGrantRecords = await Collection.load<ModelGrantRecord>(localKv, 'model_host_grant', accessLog)
  const modelGrants = new ModelGrants(grantRecords, roleGrantRecords, hostGrantRecords)
  // an account deleted on another instance took its shared grants there; this host's own go here
  // (one deleted while this instance was down leaves inert records: an account id is never reused)
  users.onDeletedElsewhere((userId) => {
    modelGrants.removeAllForUser(userId, true).catch((err: unknown) => log.error({ err, user_id: userId }, 'a deleted account\'s grants on this host could not be removed'))
  })
  rolesChanged = () => modelGrants.followRoles((role) => roles.has(role))
  rolesChanged()
  if (!rawKv.sql) throw new Error('the audit log needs the sqlite store')
  const auditLimits = { retentionDays: config.audit.retention_days, maxEvents: config.audit.max_events }
  const auditSealing = config.store.encryption_level === 'all' ? { cipher, nameKey: keys.auditNames } : null
  // on a shared store, one log for every instance (its consoles show every instance's events), pruned by one at a time
  const audit = config.store.backend === 'sqlite'
    ? await SqliteAuditLog.open(rawKv.sql, auditLimits, clock, log, auditSealing)
    : await StoreAuditLog.over(shared.audit, auditLimits, clock, log, auditSealing, shared)
  const passwords = new PasswordHasher(config.argon2)
  // Not awaited: decisions never hash, and a restarted sidecar must answer them at once (issue 27).
  // Every password check waits for the dummy hash instead (PasswordHasher.verify).
  let closing = false // a close during the dummy hash interrupts it: that is not argon2 failing
  passwords.ready.catch((err: unknown) => {
    if (!closing) log.error({ err }, 'argon2 does not work: every password check will fail')
  })
  // several instances on one store: past a short grace after losing it, nothing is decided from a copy
  let storeHealth: StoreHealthView = ALWAYS_UP
  let health: StoreHealth | null = null
  if (userRecords.multiInstance !== null) {
    health = new StoreHealth(userRecords.multiInstance, [userRecords, sessionRecords, tokenRecords, settingRecords, mfaRecords, grantRecords, roleGrantRecords, throttle], log, () => accessEpoch.bump(), options.storeGraceMs)
    health.start()
    storeHealth = health
  }
  const all = [userRecords, sessionRecords, tokenRecords, settingRecords, mfaRecords, promptRecords, fileRecords, grantRecords, roleGrantRecords, hostGrantRecords]
  const flushAll = async (): Promise<void> => {
    await Promise.all([...all.map((c) => c.flush()), throttle.flush(), audit.flush().catch(() => {})])
  }
  return {
    config, accessEpoch, events, audit, fieldCipher: cipher, dataDir, clock, log, kv, store, localKv, net, users, sessions, tokens, roles, settings, ipGate, storeHealth,
    passwords,
    resolver,
    mfa,
    throttle,
    modelGrants,
    recoveryMode: parseBoolean(env.RECOVERY_MODE ?? '') === true,
    host,
    ownership,
    clientIds,
    workflows: new WorkflowStore(() => host.facts.user_dir),
    async resetMfa(userId) {
      await mfa.disable(userId)
      if (users.byId(userId)) await users.update(userId, { mfa_enabled: false })
    },
    flush: flushAll,
    async close() {
      closing = true
      health?.stop()
      await roles.close()
      passwords.close()
      await flushAll()
      await kv.close()
      if (localKv !== kv) await localKv.close()
      await rawKv.close()
    },
  }
}
