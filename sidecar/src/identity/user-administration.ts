/**
 * An admin's changes to another user (SPEC §5.4: `PUT` / `DELETE /authsvc/api/users/{target_user}`).
 *
 * Invariants: the last enabled admin cannot be deleted, disabled or demoted: every change runs in
 * the users' serialised queue, reads the user again there and checks that an enabled admin
 * remains (409 `CONFLICT`); a role, password or disable change revokes the user's sessions (a
 * password reset or disable also revokes the user's API tokens); a patch that widens access
 * applies only once stored, one that narrows it applies at once and every narrowing step is tried
 * even when another fails; a deletion takes the user's sessions, tokens, MFA and model grants
 * with it.
 */
import { AuthsvcError } from '../kernel/errors.js'
import type { ModelGrants } from '../models/model-grants.js'
import type { RoleStore } from '../access/roles.js'
import type { ApiTokenService } from './api-tokens.js'
import type { MfaService } from './mfa.js'
import { passwordProblem, type PasswordHasher } from './passwords.js'
import type { SessionService } from './sessions.js'
import type { UserRecord, UserRepository } from './users.js'

/** What an admin may change of a user; absent fields stay as they are. */
export interface UserChanges {
  role?: string
  sfw_check?: boolean
  disabled?: boolean
  /** a reset: the new password, checked like any other */
  password?: string
  /** true: the user's MFA goes (secret and backup codes, not only the flag) */
  mfa_reset?: boolean
}

export interface UserAdministrationDeps {
  users: UserRepository
  sessions: Pick<SessionService, 'revokeAllForUser' | 'deleteAllForUser'>
  tokens: Pick<ApiTokenService, 'revokeAllForUser'>
  roles: Pick<RoleStore, 'has' | 'widens'>
  passwords: Pick<PasswordHasher, 'hash'>
  mfa: Pick<MfaService, 'disable'>
  modelGrants: Pick<ModelGrants, 'removeAllForUser'>
  /** turns a user's MFA off (services.ts) */
  resetMfa(userId: string): Promise<void>
}

/** Waits for every step (none is abandoned half-way), then rejects with the first failure if any. */
async function allOrFirstFailure(steps: Array<Promise<unknown>>): Promise<void> {
  const results = await Promise.allSettled(steps)
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected')
  if (failed) throw failed.reason
}

/** An admin's user changes; `target` is a username or a user id (UserRepository.find). */
export class UserAdministration {
  constructor(private readonly deps: UserAdministrationDeps) {}

  /** Applies `changes`; the user as it is afterwards, and whether its role changed. */
  async patch(target: string, changes: UserChanges): Promise<{ user: UserRecord; roleChanged: boolean }> {
    const { users, sessions, tokens, roles, passwords } = this.deps
    const userId = users.find(target).user_id
    if (changes.role !== undefined && !roles.has(changes.role)) throw new AuthsvcError('VALIDATION_FAILED', 'Unknown role')
    if (changes.password !== undefined) {
      const problem = passwordProblem(changes.password)
      if (problem) throw new AuthsvcError('VALIDATION_FAILED', problem)
    }
    // the slow hash runs before the queue, so it never holds up other admin changes
    const passwordHash = changes.password === undefined ? undefined : await passwords.hash(changes.password)
    return users.serialised(async () => {
      // read again inside the queue: a change queued before this one may have touched the user
      const user = users.byId(userId)
      if (!user) throw new AuthsvcError('NOT_FOUND', 'User not found')
      const patch: Partial<UserRecord> = {}
      if (changes.role !== undefined) patch.role = changes.role
      if (changes.sfw_check !== undefined) patch.sfw_check = changes.sfw_check
      if (changes.disabled !== undefined) patch.disabled = changes.disabled
      if (passwordHash !== undefined) patch.password_hash = passwordHash
      users.assertAdminRemains(user.user_id, { ...user, ...patch })
      const roleChanged = changes.role !== undefined && changes.role !== user.role
      // A disable narrows whatever else the patch says; otherwise any grant (role up, re-enable,
      // sfw_check off, a new password) makes the patch widening, and it applies only once stored.
      const widens =
        (roleChanged && roles.widens(user.role, changes.role as string)) ||
        (changes.disabled === false && user.disabled) ||
        (changes.sfw_check === false && user.sfw_check) ||
        passwordHash !== undefined
      const narrows = changes.disabled === true || !widens
      // a widening patch first, durably: when the store refuses it, nothing at all has changed
      if (!narrows) await users.update(user.user_id, patch, 'widens')
      // then every narrowing step at once, so each holds even when the store fails on another
      const narrowing: Array<Promise<unknown>> = []
      if (narrows) narrowing.push(users.update(user.user_id, patch, 'narrows'))
      if (roleChanged || changes.password !== undefined || changes.disabled === true) narrowing.push(sessions.revokeAllForUser(user.user_id))
      if (changes.password !== undefined || changes.disabled === true) narrowing.push(tokens.revokeAllForUser(user.user_id))
      await allOrFirstFailure(narrowing)
      // the secret and backup codes go too, not only the flag
      if (changes.mfa_reset === true) await this.deps.resetMfa(user.user_id)
      return { user: users.byId(user.user_id)!, roleChanged }
    })
  }

  /** Deletes the user and its sessions, API tokens, MFA and model grants; the deleted record. */
  async delete(target: string): Promise<UserRecord> {
    const { users } = this.deps
    const userId = users.find(target).user_id
    return users.serialised(async () => {
      const user = users.byId(userId)
      if (!user) throw new AuthsvcError('NOT_FOUND', 'User not found')
      users.assertAdminRemains(user.user_id, null)
      await allOrFirstFailure([
        users.delete(user.user_id),
        this.deps.sessions.deleteAllForUser(user.user_id),
        this.deps.tokens.revokeAllForUser(user.user_id),
        this.deps.mfa.disable(user.user_id),
        this.deps.modelGrants.removeAllForUser(user.user_id),
      ])
      return user
    })
  }
}
