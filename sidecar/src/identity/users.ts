/**
 * Users (SPEC §4). Usernames are unique case-insensitively (so `Admin` cannot
 * shadow `admin`); the stored spelling is kept. Records hold only the
 * password's argon2id PHC string, never the password.
 */
import { randomUUID } from 'node:crypto'
import { AuthsvcError } from '../kernel/errors.js'
import type { Collection } from '../store/collection.js'

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

  constructor(private readonly users: Collection<UserRecord>) {
    for (const user of users.values()) this.byName.set(user.username.toLowerCase(), user.user_id)
  }

  byId(userId: string): UserRecord | undefined {
    return this.users.get(userId)
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

  async create(fields: Pick<UserRecord, 'username' | 'role' | 'password_hash'>, now: Date): Promise<UserRecord> {
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
      await this.users.put(user.user_id, user)
    } catch (err) {
      if (this.byName.get(name) === user.user_id) this.byName.delete(name)
      throw err
    }
    return user
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
    await (effect === 'narrows' ? this.users.narrow(userId, next) : this.users.put(userId, next))
    return next
  }

  /** Gone at once (memory), the deletion retried until stored. */
  async delete(userId: string): Promise<void> {
    const current = this.users.get(userId)
    if (!current) return
    this.byName.delete(current.username.toLowerCase())
    await this.users.narrowRemove(userId)
  }
}
