/**
 * TOTP second factor (SPEC §5.3): RFC 6238 with SHA-1, 6 digits, 30 s steps,
 * codes of the step before and after the current one also accepted (clock drift
 * between the server and the phone), on top of otplib 13.
 *
 * Guarantees: a code is accepted at most once per secret, provided the caller
 * stores the `timeStep` of every accepted code and passes it back as
 * `lastAcceptedStep`: any code of that step or an earlier one is refused, so
 * neither a replayed code nor an older code after a newer one gets through.
 * Input that is not exactly six ASCII digits is refused, never thrown on.
 * Time comes from the caller (`nowMs`), never from the system clock.
 * Secrets are 160 random bits (RFC 4226 §4 recommends at least 160), base32.
 */
import { generateSecret, generateURI, verifySync } from 'otplib'

const PERIOD_SECONDS = 30
const DIGITS = 6
/** Steps accepted on either side of the current one. */
const WINDOW_STEPS = 1
const SECRET_BYTES = 20
const CODE_PATTERN = /^[0-9]{6}$/

export type TotpCheck = { valid: true; timeStep: number } | { valid: false }

/** A fresh base32 secret of 160 random bits, for one enrolment. */
export function generateTotpSecret(): string {
  return generateSecret({ length: SECRET_BYTES })
}

/**
 * The `otpauth://totp/<issuer>:<username>?secret=...&issuer=...` URI that
 * authenticator apps scan. The Key URI format forbids a colon in the issuer
 * and in the account name (it is the separator between them, and otplib
 * leaves it unescaped in the label), so one is refused rather than mangled.
 */
export function provisioningUri(secret: string, username: string, issuer = 'authsvc'): string {
  if (username.includes(':') || issuer.includes(':')) {
    throw new RangeError('a TOTP issuer or account name cannot contain ":"')
  }
  return generateURI({ issuer, label: username, secret, algorithm: 'sha1', digits: DIGITS, period: PERIOD_SECONDS })
}

/**
 * Checks `code` against `secret` at `nowMs`. On success the caller must store
 * the returned `timeStep` and pass it as `lastAcceptedStep` next time.
 * A malformed secret or a corrupt stored step throws (a server-side fault,
 * not the user's input: it must surface, not read as "wrong code").
 */
export function verifyTotp(secret: string, code: unknown, nowMs: number, lastAcceptedStep: number | null): TotpCheck {
  if (typeof code !== 'string' || !CODE_PATTERN.test(code)) return { valid: false }
  const epoch = Math.floor(nowMs / 1000)
  const newestStep = Math.floor(epoch / PERIOD_SECONDS) + WINDOW_STEPS
  // otplib throws when afterTimeStep lies beyond the window (the server clock
  // moved back since the last acceptance); every step in reach is then spent anyway.
  if (lastAcceptedStep !== null && lastAcceptedStep >= newestStep) return { valid: false }
  const result = verifySync({
    secret,
    token: code,
    epoch,
    algorithm: 'sha1',
    digits: DIGITS,
    period: PERIOD_SECONDS,
    // otplib 13 takes the window in seconds, not steps: ±30 s from any instant
    // reaches exactly the previous and the next step.
    epochTolerance: WINDOW_STEPS * PERIOD_SECONDS,
    afterTimeStep: lastAcceptedStep ?? undefined,
  })
  // The functional API types its result as TOTP or HOTP; only a TOTP match carries timeStep.
  return result.valid && 'timeStep' in result ? { valid: true, timeStep: result.timeStep } : { valid: false }
}
