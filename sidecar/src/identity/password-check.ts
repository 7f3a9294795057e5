/**
 * The password step shared by /login and /generate_token: throttled per IP
 * and per username (SPEC §7), one argon2 verify whether the user exists or
 * not, one answer for every failure; then what the second factor requires.
 */
import type { FastifyRequest } from 'fastify'
import { AuthsvcError } from '../kernel/errors.js'
import { passwordStampOf, type SecondFactor, type TempPurpose } from './mfa.js'
import { stepBindingHolds } from './session-cookie.js'
import type { UserRecord } from './users.js'
import type { Services } from '../services.js'

/** What `checkPassword` uses. */
export type PasswordCheckServices = Pick<Services, 'throttle' | 'users' | 'passwords' | 'events'>

/** Throws 429 with Retry-After while `key` (a username, `mfa:<user id>`, or null for the IP alone) is throttled. */
export function refuseIfThrottled(services: Pick<Services, 'throttle'>, request: FastifyRequest, key: string | null): void {
  const verdict = services.throttle.check(request.facts.ip, key)
  if (!verdict.allowed) throw tooMany(verdict.retryAfterSeconds)
}

function tooMany(retryAfterSeconds: number): AuthsvcError {
  return new AuthsvcError('TOO_MANY_ATTEMPTS', undefined, { 'Retry-After': String(retryAfterSeconds) })
}

/**
 * Runs one throttled attempt: refused while `key` or the client address is
 * locked, or while enough concurrent attempts are already in flight; the
 * outcome is recorded before the reservation is released.
 */
export async function throttledAttempt(
  services: Pick<Services, 'throttle' | 'events'>, request: FastifyRequest, key: string, attempt: () => Promise<boolean>,
  /** the existing user the attempt was for: named in the lockout event */
  subject: () => string | undefined = () => undefined,
): Promise<boolean> {
  const ip = request.facts.ip
  const slot = services.throttle.begin(ip, key)
  if (!slot.allowed) throw tooMany(slot.retryAfterSeconds)
  try {
    const ok = await attempt()
    if (ok) await services.throttle.recordSuccess(ip, key)
    else {
      const started = await services.throttle.recordFailure(ip, key)
      if (started.address || started.username) {
        const who = subject()
        services.events.emit('login_locked', {
          ...(who ? { subject: who } : {}), ip, outcome: 'refused',
          locked: started.address && started.username ? 'address and username' : started.address ? 'address' : 'username',
          attempt: key.startsWith('mfa:') ? 'code' : 'password',
        })
      }
    }
    return ok
  } finally {
    slot.release()
  }
}

/** Password attempts and MFA code attempts never share a throttle key, whatever a username looks like. */
const passwordKey = (username: string) => `password:${username}`
export const mfaKey = (userId: string) => `mfa:${userId}`

export async function checkPassword(services: PasswordCheckServices, request: FastifyRequest, username: string, password: string): Promise<UserRecord> {
  let user: UserRecord | undefined
  const ok = await throttledAttempt(services, request, passwordKey(username), async () => {
    user = await services.users.fetchByUsername(username)
    const valid = user ? await services.passwords.verify(user.password_hash, password) : await services.passwords.verifyDummy(password)
    return valid && user !== undefined && !user.disabled
  }, () => user?.username)
  if (!ok || !user) {
    // named only when such a user exists: what was typed may be a password in the wrong field
    services.events.emit('login_failure', { ...(user ? { subject: user.username } : {}), ip: request.facts.ip, outcome: 'failure', attempt: 'password' })
    throw new AuthsvcError('INVALID_CREDENTIALS')
  }
  return user
}

export type MfaStep =
  | { message: 'MFA verification required'; mfa_required: true; mfa_temp_token: string }
  | { message: 'MFA setup required'; mfa_setup_required: true; mfa_temp_token: string }

/**
 * null when the password alone is enough; otherwise the answer that asks for the second factor.
 * Its temp token is bound to the browser that asked, if a browser did (`bind`: session-cookie.ts
 * bindStepToBrowser, called only when a token is issued).
 */
export async function mfaStep(
  services: Pick<Services, 'mfa' | 'roles'>, user: UserRecord, rememberMe: boolean, redirectUrl: string, bind: () => string | undefined,
): Promise<MfaStep | null> {
  if (user.mfa_enabled) {
    return { message: 'MFA verification required', mfa_required: true, mfa_temp_token: await services.mfa.issueTempToken(user, 'login', rememberMe, redirectUrl, bind()) }
  }
  if (services.roles.mfaRequired(user.role)) {
    return { message: 'MFA setup required', mfa_setup_required: true, mfa_temp_token: await services.mfa.issueTempToken(user, 'setup', rememberMe, redirectUrl, bind()) }
  }
  return null
}

/**
 * The live temp token of that purpose and its user, or MFA_TOKEN_INVALID: unknown, expired or
 * spent, a user gone or disabled since, a password changed since the password step (the step
 * proved the old one: a reset after a suspected compromise must end what it started), or used by
 * another browser than the one it was issued to (or by a browser, when a script got it: login
 * CSRF through our own /mfa page, session-cookie.ts).
 */
export async function tempTokenUser(services: Pick<Services, 'mfa' | 'users'>, request: FastifyRequest, token: unknown, purpose: TempPurpose) {
  const temp = await services.mfa.tempToken(token, purpose)
  const user = temp ? await services.users.fetchById(temp.userId) : undefined
  if (!temp || !user || user.disabled || temp.passwordStamp !== passwordStampOf(user.password_hash)) throw new AuthsvcError('MFA_TOKEN_INVALID')
  if (!stepBindingHolds(request, temp.browser)) {
    throw new AuthsvcError('MFA_TOKEN_INVALID', 'This sign-in was started in another browser or program: sign in again here')
  }
  return { temp, user }
}

/**
 * A TOTP code or backup code of `user`, throttled per user (`mfa:<user id>`);
 * a wrong one also counts against the temp token that carried it.
 */
export async function checkSecondFactor(
  services: Pick<Services, 'throttle' | 'mfa' | 'events'>, request: FastifyRequest, user: UserRecord, factor: SecondFactor, tempId?: string,
  /** a sign-in (a wrong code is a `login_failure`), or a signed-in user confirming a change (`mfa_code_refused`) */
  purpose: 'sign-in' | 'confirm' = 'sign-in',
): Promise<void> {
  refuseIfThrottled(services, request, mfaKey(user.user_id))
  if (!factor.code && !factor.backup_code) throw new AuthsvcError('MFA_REQUIRED', 'A code or a backup code is required')
  const ok = await throttledAttempt(services, request, mfaKey(user.user_id), () => services.mfa.verify(user.user_id, factor), () => user.username)
  if (!ok) {
    if (purpose === 'sign-in') services.events.emit('login_failure', { subject: user.username, ip: request.facts.ip, outcome: 'failure', attempt: 'code' })
    else services.events.emit('mfa_code_refused', { actor: user.username, subject: user.username, ip: request.facts.ip, outcome: 'failure' })
    if (tempId) await services.mfa.failTempToken(tempId)
    throw new AuthsvcError('MFA_INVALID_CODE')
  }
}
