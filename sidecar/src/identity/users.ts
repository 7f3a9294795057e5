/**
 * Users (SPEC §4). Usernames are unique case-insensitively (so `Admin` cannot
 * shadow `admin`); the stored spelling is kept. Records hold only the
 * password's argon2id PHC string, never the password.
 */
import { createHmac, randomUUID } from 'node:crypto'
import { AuthsvcError } from '../kernel/errors.js'
import { storeUnavailable, type Collection } from '../store/collection.js'
import type { Check, SharedStore, Write } from '../store/shared-store.js'

/**
 * The store's record of a username → its user: a create claims it atomically. Keyed by a keyed hash
 * of the lower-case name, so the key says nothing under `encryption_level: all`.
 */
export type NameKey = (username: string) => string
export function nameKeyWith(key: Buffer): NameKey {
  return (username) => `username:${createHmac('sha256', key).update(username.toLowerCase(), 'utf8').digest('base64url')}`
}
/** The store's list of enabled admins: every change of an admin checks and rewrites it atomically. */
const ADMINS_KEY = 'meta:admins'
const isEnabledAdmin = (u: Pick<UserRecord, 'role' | 'disabled'> | undefined | null): boolean => u != null && u.role === 'admin' && !u.disabled
/** Attempts of a conditional change that lost a race before it answers 409 */
const COMMIT_ATTEMPTS = 8

export interface UserRecord {
  user_id: string
  username: string
  role: string
  password_hash: string
  mfa_enabled: boolean
  sfw_check: boolean
  created_at_iso: string
  disabled: boolean
}

export const USERNAME_PATTERN = /^[A-Za-z0-9_][A-Za-z0-9_.-]{2,63}$/
const RESERVED = new Set(['guest', 'default', 'defaults'])

export function usernameProblem(username: unknown): string | null {
  if (typeof username !== 'string' || !USERNAME_PATTERN.test(username)) {
    return 'username must be 3 to 64 characters: letters, digits, _ . - (not starting with . or -)'
  }
  if (RESERVED.has(username.toLowerCase())) return 'this username is reserved'
  return null
}

export class UserRepository {
  private readonly byName = new Map<string, string>()
  /** the tail of the queue of changes that may remove an admin */
  private adminChanges: Promise<unknown> = Promise.resolve()

  /** The shared store's atomic verbs when other instances write it too (null: one process decides, in order). */
  private readonly store: SharedStore | null
  /** told of each account another instance deleted (`onDeletedElsewhere`) */
  private readonly deletedElsewhere: Array<(userId: string) => void> = []

  constructor(
    private readonly users: Collection<UserRecord>,
    private readonly nameKey: NameKey = nameKeyWith(Buffer.from('authsvc-username-index')),
  ) {
    for (const user of users.values()) this.byName.set(user.username.toLowerCase(), user.user_id)
    this.store = users.multiInstance
    // another instance's create or delete: the name index follows
    users.observeRemote((id, before, after) => {
      if (before !== undefined && this.byName.get(before.username.toLowerCase()) === id) this.byName.delete(before.username.toLowerCase())
      if (after !== undefined) this.byName.set(after.username.toLowerCase(), id)
      if (before !== undefined && after === undefined) for (const listener of this.deletedElsewhere) listener(id)
    })
  }

  /**
   * `listener` hears each account another instance deleted, once this replica shows it gone (this
   * instance's own deletions are the `user_deleted` event's): what this instance alone holds of
   * the account (its download jobs) can then go too.
   */
  onDeletedElsewhere(listener: (userId: string) => void): void {
    this.deletedElsewhere.push(listener)
  }

  byId(userId: string): UserRecord | undefined {
    return this.users.get(userId)
  }

  /** Whether several instances share the store (then a record may be in it before the feed brings it here). */
  get shared(): boolean {
    return this.store !== null
  }

  /** byId, reading the store when this replica does not hold the user yet (several instances). */
  async fetchById(userId: string): Promise<UserRecord | undefined> {
    return this.users.get(userId) ?? (await this.users.fetch(userId))
  }

  /** byUsername, reading the store's name index when this replica does not hold the name yet (several instances). */
  async fetchByUsername(username: string): Promise<UserRecord | undefined> {
    const held = this.byUsername(username)
    if (held !== undefined || this.store === null) return held
    let entry: { user_id: string } | undefined
    try {
      entry = await this.store.get<{ user_id: string }>(this.nameKey(username))
    } catch (err) {
      throw storeUnavailable('user', err)
    }
    if (entry === undefined) return undefined
    const user = await this.users.fetch(entry.user_id)
    return user?.username.toLowerCase() === username.toLowerCase() ? user : undefined
  }

  byUsername(username: string): UserRecord | undefined {
    const id = this.byName.get(username.toLowerCase())
    return id === undefined ? undefined : this.users.get(id)
  }

  /** The user an admin route names (`{target_user}`): by username, else by id; 404 when neither. */
  find(target: string): UserRecord {
    const user = this.byUsername(target) ?? this.byId(target)
    if (!user) throw new AuthsvcError('NOT_FOUND', 'User not found')
    return user
  }

  list(): UserRecord[] {
    return [...this.users.values()].sort((a, b) => a.created_at_iso.localeCompare(b.created_at_iso))
  }

  get count(): number {
    return this.users.size
  }

  enabledAdmins(): UserRecord[] {
    return this.list().filter((u) => u.role === 'admin' && !u.disabled)
  }

  /**
   * Runs `change` after every change queued before it has finished, writes
   * included. Every change that can remove an admin (demote, disable, delete)
   * runs here and checks `assertAdminRemains` inside: two parallel requests
   * can then never both see two admins and leave none.
   */
  serialised<T>(change: () => Promise<T>): Promise<T> {
    const run = this.adminChanges.then(change, change)
    this.adminChanges = run.catch(() => {})
    return run
  }

  /** Refuses (409) a change that would leave no enabled admin; `after` is the target's record after it (null: deleted). */
  assertAdminRemains(userId: string, after: Pick<UserRecord, 'role' | 'disabled'> | null): void {
    const remains = (u: Pick<UserRecord, 'role' | 'disabled'> | null) => u !== null && u.role === 'admin' && !u.disabled
    const others = this.enabledAdmins().filter((u) => u.user_id !== userId).length
    const before = this.users.get(userId)
    if (before !== undefined && remains(before) && !remains(after) && others === 0) {
      throw new AuthsvcError('CONFLICT', after === null ? 'The last enabled admin cannot be deleted' : 'The last enabled admin cannot be demoted or disabled')
    }
  }

  /**
   * `first`: the registration that opens an empty store; with several instances it holds only
   * if no instance made a first user meanwhile (403 REGISTRATION_CLOSED otherwise), checked in
   * the store's transaction, since each instance's "no user yet" is only its own replica's.
   */
  async create(fields: Pick<UserRecord, 'username' | 'role' | 'password_hash'>, now: Date, first = false): Promise<UserRecord> {
    if (this.byName.has(fields.username.toLowerCase())) throw new AuthsvcError('CONFLICT', 'Username already exists')
    const user: UserRecord = {
      user_id: randomUUID(),
      username: fields.username,
      role: fields.role,
      password_hash: fields.password_hash,
      mfa_enabled: false,
      sfw_check: true,
      created_at_iso: now.toISOString(),
      disabled: false,
    }
    // the name is reserved at once (no second create of it meanwhile); the user exists once stored
    const name = user.username.toLowerCase()
    this.byName.set(name, user.user_id)
    try {
      if (this.store === null) await this.users.put(user.user_id, user)
      else await this.createShared(user, first)
    } catch (err) {
      if (this.byName.get(name) === user.user_id) this.byName.delete(name)
      throw err
    }
    return user
  }

  /**
   * In one transaction: the name is claimed unless another user holds it (on
   * any instance, whatever this one's memory says) and, for an admin, the
   * admin list grows with it.
   */
  private async createShared(user: UserRecord, first: boolean): Promise<void> {
    const store = this.store as SharedStore
    for (let attempt = 0; attempt < COMMIT_ATTEMPTS; attempt++) {
      const [held, admins] = await Promise.all([store.getVersioned<{ user_id: string }>(this.nameKey(user.username)), store.getVersioned<{ ids: string[] }>(ADMINS_KEY)])
      // users exist only with an enabled admin among them (the last-admin rule), so an empty admin
      // list is an empty store; the list is checked below, so a first user made meanwhile is seen
      if (first && this.adminIds(admins?.value).length > 0) throw new AuthsvcError('REGISTRATION_CLOSED')
      // a name record whose user is gone (a delete that did not finish) does not hold the name
      if (held !== undefined && (await store.get(`user:${held.value.user_id}`)) !== undefined) throw new AuthsvcError('CONFLICT', 'Username already exists')
      const checks: Check[] = [{ key: this.nameKey(user.username), seq: held?.seq ?? null }]
      const writes: Write[] = [{ key: this.nameKey(user.username), value: { user_id: user.user_id } }]
      if (isEnabledAdmin(user)) {
        checks.push({ key: ADMINS_KEY, seq: admins?.seq ?? null })
        writes.push({ key: ADMINS_KEY, value: { ids: [...this.adminIds(admins?.value), user.user_id] } })
      }
      if (await this.users.commit(user.user_id, user, checks, writes)) return
    }
    throw new AuthsvcError('CONFLICT', 'Username already exists')
  }

  /** The enabled admins the store lists (its list, or this replica's for a store written before the list existed). */
  private adminIds(stored: { ids: string[] } | undefined): string[] {
    return stored?.ids ?? this.enabledAdmins().map((u) => u.user_id)
  }

  /**
   * A change of a user on a shared store (`null`: the deletion): the patch
   * applies to the user's record as the store holds it, written back in one
   * transaction that holds only if nobody changed it meanwhile (on any
   * instance), so a stale replica never undoes another instance's disable or
   * role change. A change that adds or removes an admin also checks and
   * rewrites the admin list, so two admins demoting each other leave one;
   * 409 when it would leave no enabled admin.
   */
  private async changeShared(userId: string, patch: Partial<UserRecord> | null): Promise<UserRecord | undefined> {
    const store = this.store as SharedStore
    for (let attempt = 0; attempt < COMMIT_ATTEMPTS; attempt++) {
      const [current, admins] = await Promise.all([store.getVersioned<UserRecord>(`user:${userId}`), store.getVersioned<{ ids: string[] }>(ADMINS_KEY)])
      if (current === undefined) throw new AuthsvcError('NOT_FOUND', 'User not found')
      const next = patch === null ? undefined : { ...current.value, ...patch }
      const others = this.adminIds(admins?.value).filter((id) => id !== userId)
      if (isEnabledAdmin(current.value) && !isEnabledAdmin(next) && others.length === 0) {
        throw new AuthsvcError('CONFLICT', next === undefined ? 'The last enabled admin cannot be deleted' : 'The last enabled admin cannot be demoted or disabled')
      }
      const writes: Write[] = []
      const checks: Check[] = [{ key: `user:${userId}`, seq: current.seq }]
      if (isEnabledAdmin(current.value) !== isEnabledAdmin(next)) {
        writes.push({ key: ADMINS_KEY, value: { ids: isEnabledAdmin(next) ? [...others, userId] : others } })
        checks.push({ key: ADMINS_KEY, seq: admins?.seq ?? null })
      }
      if (next === undefined) writes.push({ key: this.nameKey(current.value.username), value: undefined })
      if (await this.users.commit(userId, next, checks, writes)) {
        if (next === undefined && this.byName.get(current.value.username.toLowerCase()) === userId) this.byName.delete(current.value.username.toLowerCase())
        return next
      }
    }
    throw new AuthsvcError('CONFLICT', 'The user changed meanwhile; try again')
  }

  /**
   * `effect` says what the patch does to the user's access: `narrows` (a
   * disable, a role down) applies in memory at once and is retried until
   * stored; `widens` (anything else) applies only once stored.
   */
  async update(userId: string, patch: Partial<Omit<UserRecord, 'user_id' | 'username' | 'created_at_iso'>>, effect: 'narrows' | 'widens' = 'widens'): Promise<UserRecord> {
    const current = this.users.get(userId)
    if (!current) throw new AuthsvcError('NOT_FOUND', 'User not found')
    const next = { ...current, ...patch }
    // on a shared store the patch applies to the store's record, not this replica's (which may not
    // have heard another instance's disable yet), and who is an admin is decided there
    if (this.store !== null) return (await this.changeShared(userId, patch)) as UserRecord
    await (effect === 'narrows' ? this.users.narrow(userId, next) : this.users.put(userId, next))
    return next
  }

  /** Gone at once (memory), the deletion retried until stored; an admin's deletion is decided in the store. */
  async delete(userId: string): Promise<void> {
    const current = this.users.get(userId)
    if (!current) return
    if (this.store !== null) {
      await this.changeShared(userId, null)
      return
    }
    this.byName.delete(current.username.toLowerCase())
    await this.users.narrowRemove(userId)
  }
}
