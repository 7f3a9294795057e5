/**
 * MFA backup codes (SPEC §5.3): 10 per enrolment, 10 characters each from an
 * alphabet without look-alikes (no 0/O, 1/I/L), so they survive being read
 * off paper.
 *
 * Guarantees: codes come from the CSPRNG with no modulo bias (randomInt);
 * only HMAC-SHA256 hex of a code is ever stored, keyed by the caller's key
 * derived from the master secret (a copied store alone cannot be brute-forced
 * offline, the codes having only ~50 bits each); what a user types is
 * normalised first (case, spaces, dashes), so `abcd-efgh-jk` works; a
 * presented code is compared in constant time against every stored hash, and
 * a matching code is removed from the returned list (single use).
 */
import { createHmac, randomInt, timingSafeEqual } from 'node:crypto'

export const BACKUP_CODE_ALPHABET = '23456789ABCDEFGHJKMNPQRSTUVWXYZ'
export const BACKUP_CODE_LENGTH = 10
export const BACKUP_CODE_COUNT = 10
const MIN_KEY_BYTES = 32
const SHAPE = new RegExp(`^[${BACKUP_CODE_ALPHABET}]{${BACKUP_CODE_LENGTH}}$`)

export type BackupCodeUse = { ok: true; remaining: string[] } | { ok: false }

/** `count` distinct fresh codes, to be shown once and then stored only as hashes. */
export function generateBackupCodes(count = BACKUP_CODE_COUNT): string[] {
  const codes = new Set<string>()
  while (codes.size < count) {
    let code = ''
    for (let i = 0; i < BACKUP_CODE_LENGTH; i++) code += BACKUP_CODE_ALPHABET[randomInt(BACKUP_CODE_ALPHABET.length)]
    codes.add(code)
  }
  return [...codes]
}

/** What the user typed, in the form codes are generated in: upper case, no spaces or dashes. */
export function normaliseBackupCode(input: string): string {
  return input.replace(/[\s-]/g, '').toUpperCase()
}

/** The stored form of a code: HMAC-SHA256 (hex) under `key`, after normalisation. */
export function hashBackupCode(key: Buffer, code: string): string {
  if (key.length < MIN_KEY_BYTES) throw new RangeError(`backup-code key must be at least ${MIN_KEY_BYTES} bytes`)
  return createHmac('sha256', key).update(normaliseBackupCode(code), 'utf8').digest('hex')
}

/**
 * Spends `code` if one of `hashes` matches: `remaining` is the list without it
 * (the caller stores that). Every hash is compared, whether or not one already
 * matched, so the time taken does not reveal which one did.
 */
export function consumeBackupCode(key: Buffer, hashes: readonly string[], code: unknown): BackupCodeUse {
  if (typeof code !== 'string' || !SHAPE.test(normaliseBackupCode(code))) return { ok: false }
  const presented = Buffer.from(hashBackupCode(key, code), 'hex')
  let match = -1
  hashes.forEach((stored, i) => {
    const candidate = Buffer.from(stored, 'hex')
    const equal = candidate.length === presented.length && timingSafeEqual(candidate, presented)
    if (equal && match === -1) match = i
  })
  if (match === -1) return { ok: false }
  return { ok: true, remaining: hashes.filter((_, i) => i !== match) }
}
