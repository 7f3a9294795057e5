/**
 * The password step shared by /login and /generate_token: throttled per IP
 * and per username (SPEC §7), one argon2 verify whether the user exists or
 * not, one answer for every failure; then what the second factor requires.
 */
import type { FastifyRequest } from 'fastify'
import { AuthsvcError } from '../errors.js'
import type { SecondFactor } from '../identity/mfa.js'
import type { UserRecord } from '../identity/users.js'
import type { Services } from '../services.js'

/** Throws 429 with Retry-After while `key` (a username, `mfa:<user id>`, or null for the IP alone) is throttled. */
export function refuseIfThrottled(services: Services, request: FastifyRequest, key: string | null): void {
  const verdict = services.throttle.check(request.facts.ip, key)
  if (!verdict.allowed) {
    request.log.warn({ event: 'login_locked', ip: request.facts.ip }, 'throttled')
    throw new AuthsvcError('TOO_MANY_ATTEMPTS', undefined, { 'Retry-After': String(verdict.retryAfterSeconds) })
  }
}

export async function checkPassword(services: Services, request: FastifyRequest, username: string, password: string): Promise<UserRecord> {
  const ip = request.facts.ip
  refuseIfThrottled(services, request, username)
  const user = services.users.byUsername(username)
  const ok = user ? await services.passwords.verify(user.password_hash, password) : await services.passwords.verifyDummy(password)
  if (!user || !ok || user.disabled) {
    await services.throttle.recordFailure(ip, username)
    request.log.info({ event: 'login_failure', ip }, 'password check failed')
    throw new AuthsvcError('INVALID_CREDENTIALS')
  }
  await services.throttle.recordSuccess(ip, username)
  return user
}

export type MfaStep =
  | { message: 'MFA verification required'; mfa_required: true; mfa_temp_token: string }
  | { message: 'MFA setup required'; mfa_setup_required: true; mfa_temp_token: string }

/** null when the password alone is enough; otherwise the answer that asks for the second factor. */
export function mfaStep(services: Services, user: UserRecord, rememberMe: boolean, redirectUrl: string): MfaStep | null {
  if (user.mfa_enabled) {
    return { message: 'MFA verification required', mfa_required: true, mfa_temp_token: services.mfa.issueTempToken(user.user_id, 'login', rememberMe, redirectUrl) }
  }
  if (services.roles.mfaRequired(user.role)) {
    return { message: 'MFA setup required', mfa_setup_required: true, mfa_temp_token: services.mfa.issueTempToken(user.user_id, 'setup', rememberMe, redirectUrl) }
  }
  return null
}

/**
 * A TOTP code or backup code of `user`, throttled per user (`mfa:<user id>`);
 * a wrong one also counts against the temp token that carried it.
 */
export async function checkSecondFactor(services: Services, request: FastifyRequest, user: UserRecord, factor: SecondFactor, tempId?: string): Promise<void> {
  const key = `mfa:${user.user_id}`
  refuseIfThrottled(services, request, key)
  if (!factor.code && !factor.backup_code) throw new AuthsvcError('MFA_REQUIRED', 'A code or a backup code is required')
  if (!(await services.mfa.verify(user.user_id, factor))) {
    await services.throttle.recordFailure(request.facts.ip, key)
    if (tempId) services.mfa.failTempToken(tempId)
    throw new AuthsvcError('MFA_INVALID_CODE')
  }
  await services.throttle.recordSuccess(request.facts.ip, key)
}
