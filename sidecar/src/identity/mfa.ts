/**
 * TOTP second factor (SPEC §5.3): enrolment, verification, backup codes and
 * the short-lived `mfa_temp_token` that bridges a password check to a code.
 *
 * Guarantees:
 * - the TOTP secret and the backup-code hashes are stored sealed
 *   (AES-256-GCM bound to the user's record), never in clear;
 * - a code is accepted at most once per user, and never one of an older step
 *   than the last accepted (the step is stored with the record);
 * - backup codes are single use, stored only as keyed hashes;
 * - temp tokens are opaque (`mfa_` + 256 bits), held only as SHA-256, expire
 *   after 300 s, are bound to a user and a purpose, are consumed on success
 *   and after 5 wrong codes. With several instances on one store they live in
 *   the store (`mfa_temp:<sha256>`), so the password step on one instance and
 *   the code on another work; consuming one is a claim, so one token gives one
 *   session however many instances are asked at once, and the wrong codes of
 *   all instances count together.
 */
import { createHash, randomBytes } from 'node:crypto'
import { storeUnavailable, type Collection } from '../store/collection.js'
import type { SharedStore } from '../store/shared-store.js'
import type { FieldCipher } from '../store/field-crypto.js'
import { consumeBackupCode, generateBackupCodes, hashBackupCode } from './backup-codes.js'
import type { Clock } from '../kernel/clock.js'
import { generateTotpSecret, provisioningUri, verifyTotp } from './totp.js'

export interface MfaRecord {
  user_id: string
  /** sealed TOTP secret of the active enrolment, absent until verify-setup */
  secret?: string
  /** sealed JSON list of backup-code hashes of the active enrolment */
  backup?: string
  last_step: number | null
  /** an enrolment started by setup and not yet verified */
  pending?: { secret: string; backup: string }
}

export type TempPurpose = 'login' | 'setup'

interface TempToken {
  userId: string
  purpose: TempPurpose
  expiresMs: number
  failures: number
  rememberMe: boolean
  redirectUrl: string
  /** `passwordStampOf` the user's password hash when the password step issued it */
  passwordStamp: string
  /** issued to a browser: the digest of the secret in its step cookie (session-cookie.ts bindStepToBrowser) */
  browser?: string
}

export const TEMP_TOKEN_TTL_MS = 300_000
export const TEMP_TOKEN_MAX_FAILURES = 5
export const MFA_TEMP_PREFIX = 'mfa_'

const sha256 = (value: string) => createHash('sha256').update(value).digest('hex')

/** What a temp token keeps of the password it was issued under: a digest of its hash (never the hash). */
export const passwordStampOf = (passwordHash: string): string => sha256(`mfa-temp:${passwordHash}`)

export interface SecondFactor {
  code?: string
  backup_code?: string
}

/** A TOTP step's claim outlives the window a code is accepted in (a few 30 s steps) */
const TOTP_CLAIM_TTL_MS = 10 * 60_000
/** A backup code's claim outlives the code (codes are replaced long before) */
const BACKUP_CLAIM_TTL_MS = 400 * 24 * 3600_000

export class MfaService {
  private readonly temps = new Map<string, TempToken>()

  constructor(
    private readonly records: Collection<MfaRecord>,
    private readonly cipher: FieldCipher,
    private readonly backupKey: Buffer,
    private readonly clock: Clock,
  ) {}

  /** A TOTP step or backup code is spent once across every instance: claimed in the shared store. */
  private get claims(): SharedStore | null {
    return this.records.multiInstance
  }

  /** Claims `key` for good (null store: one process, memory's record decides); a refused claim is a replay. */
  private async claimOnce(key: string, ttlMs: number): Promise<boolean> {
    const store = this.claims
    if (store === null) return true
    try {
      return await store.claim(key, ttlMs)
    } catch (err) {
      throw storeUnavailable('mfa', err)
    }
  }

  private context = (userId: string, part: string) => `mfa:${userId}:${part}`

  async issueTempToken(user: { user_id: string; password_hash: string }, purpose: TempPurpose, rememberMe: boolean, redirectUrl: string, browser?: string): Promise<string> {
    this.pruneTemps()
    const token = `${MFA_TEMP_PREFIX}${randomBytes(32).toString('base64url')}`
    const entry: TempToken = {
      userId: user.user_id, purpose, expiresMs: this.clock() + TEMP_TOKEN_TTL_MS, failures: 0, rememberMe, redirectUrl,
      passwordStamp: passwordStampOf(user.password_hash),
      ...(browser === undefined ? {} : { browser }),
    }
    const shared = this.claims
    if (shared === null) this.temps.set(sha256(token), entry)
    else {
      try {
        await shared.set(`mfa_temp:${sha256(token)}`, entry)
      } catch (err) {
        throw storeUnavailable('mfa', err)
      }
    }
    return token
  }

  /** The live temp token of that purpose, or null (unknown, expired, consumed, other purpose). */
  async tempToken(token: unknown, purpose: TempPurpose): Promise<(TempToken & { id: string }) | null> {
    if (typeof token !== 'string' || !token.startsWith(MFA_TEMP_PREFIX)) return null
    const id = sha256(token)
    const shared = this.claims
    let entry: TempToken | undefined
    if (shared === null) entry = this.temps.get(id)
    else {
      try {
        entry = await shared.get<TempToken>(`mfa_temp:${id}`)
        // consumed (or spent by wrong codes) on any instance: the claim says so before the deletion lands
        if (entry !== undefined && (await shared.readCounter(`mfa_temp_spent:${id}`)) > 0) entry = undefined
      } catch (err) {
        throw storeUnavailable('mfa', err)
      }
    }
    if (!entry) return null
    if (entry.expiresMs <= this.clock()) {
      await this.forget(id)
      return null
    }
    return entry.purpose === purpose ? { ...entry, id } : null
  }

  /** Uses the temp token up; false when another request (on any instance) already did. */
  async consumeTempToken(id: string): Promise<boolean> {
    const shared = this.claims
    if (shared === null) return this.temps.delete(id)
    try {
      if (!(await shared.claim(`mfa_temp_used:${id}`, TEMP_TOKEN_TTL_MS))) return false
      await shared.increment(`mfa_temp_spent:${id}`, TEMP_TOKEN_TTL_MS)
    } catch (err) {
      throw storeUnavailable('mfa', err)
    }
    await this.forget(id)
    return true
  }

  /** Counts a wrong code against the temp token; the fifth consumes it (counted across instances). */
  async failTempToken(id: string): Promise<void> {
    const shared = this.claims
    if (shared === null) {
      const entry = this.temps.get(id)
      if (!entry) return
      entry.failures++
      if (entry.failures >= TEMP_TOKEN_MAX_FAILURES) this.temps.delete(id)
      return
    }
    try {
      const failures = await shared.increment(`mfa_temp_failures:${id}`, TEMP_TOKEN_TTL_MS)
      if (failures >= TEMP_TOKEN_MAX_FAILURES) {
        await shared.increment(`mfa_temp_spent:${id}`, TEMP_TOKEN_TTL_MS)
        await this.forget(id)
      }
    } catch (err) {
      throw storeUnavailable('mfa', err)
    }
  }

  private async forget(id: string): Promise<void> {
    const shared = this.claims
    if (shared === null) {
      this.temps.delete(id)
      return
    }
    // the spent mark already refuses it; a deletion that fails is swept later
    await shared.delete(`mfa_temp:${id}`).catch(() => {})
  }

  /** Deletes temp tokens abandoned in the shared store (a password step never followed by a code). */
  async sweepTemps(): Promise<number> {
    const shared = this.claims
    if (shared === null) {
      this.pruneTemps()
      return 0
    }
    const now = this.clock()
    let n = 0
    for (const [key, entry] of await shared.entries<TempToken>('mfa_temp')) {
      if (typeof entry?.expiresMs === 'number' && entry.expiresMs > now) continue
      await shared.delete(key).catch(() => {})
      n++
    }
    return n
  }

  /** Starts an enrolment: a new secret and 10 backup codes, pending until verified. */
  async beginSetup(userId: string, username: string): Promise<{ secret: string; uri: string; backupCodes: string[] }> {
    const secret = generateTotpSecret()
    const backupCodes = generateBackupCodes(10)
    const hashes = backupCodes.map((c) => hashBackupCode(this.backupKey, c))
    const current = this.records.get(userId) ?? { user_id: userId, last_step: null }
    await this.records.put(userId, {
      ...current,
      pending: {
        secret: this.cipher.encrypt(secret, this.context(userId, 'pending-secret')),
        backup: this.cipher.encrypt(JSON.stringify(hashes), this.context(userId, 'pending-backup')),
      },
    })
    return { secret, uri: provisioningUri(secret, username), backupCodes }
  }

  /** Verifies a code against the pending enrolment and makes it the active one. */
  async finishSetup(userId: string, code: unknown): Promise<boolean> {
    const record = this.records.get(userId)
    if (!record?.pending || typeof code !== 'string') return false
    const secret = this.cipher.decrypt(record.pending.secret, this.context(userId, 'pending-secret'))
    const result = verifyTotp(secret, code, this.clock(), null)
    if (!result.valid) return false
    const hashes = this.cipher.decrypt(record.pending.backup, this.context(userId, 'pending-backup'))
    await this.records.put(userId, {
      user_id: userId,
      secret: this.cipher.encrypt(secret, this.context(userId, 'secret')),
      backup: this.cipher.encrypt(hashes, this.context(userId, 'backup')),
      last_step: result.timeStep,
    })
    return true
  }

  /** Checks a TOTP code or a backup code of the active enrolment; consumes what it accepts. */
  async verify(userId: string, factor: SecondFactor): Promise<boolean> {
    const record = this.records.get(userId)
    if (!record?.secret || !record.backup) return false
    if (typeof factor.code === 'string' && factor.code !== '') {
      const secret = this.cipher.decrypt(record.secret, this.context(userId, 'secret'))
      const result = verifyTotp(secret, factor.code, this.clock(), record.last_step)
      if (!result.valid) return false
      // another instance may have taken this step (or a later one) a moment ago
      if (!(await this.claimOnce(`totp:${userId}:${result.timeStep}`, TOTP_CLAIM_TTL_MS))) return false
      // a spent code must stay spent even when the store fails: memory first, retried
      await this.records.narrow(userId, { ...record, last_step: result.timeStep })
      return true
    }
    if (typeof factor.backup_code === 'string' && factor.backup_code !== '') {
      const hashes = JSON.parse(this.cipher.decrypt(record.backup, this.context(userId, 'backup'))) as string[]
      const used = consumeBackupCode(this.backupKey, hashes, factor.backup_code)
      if (!used.ok) return false
      const spent = hashes.find((h) => !used.remaining.includes(h)) ?? ''
      if (!(await this.claimOnce(`backup:${userId}:${spent}`, BACKUP_CLAIM_TTL_MS))) return false
      await this.records.narrow(userId, { ...record, backup: this.cipher.encrypt(JSON.stringify(used.remaining), this.context(userId, 'backup')) })
      return true
    }
    return false
  }

  async disable(userId: string): Promise<void> {
    await this.records.remove(userId)
  }

  private pruneTemps(): void {
    const now = this.clock()
    for (const [id, entry] of this.temps) if (entry.expiresMs <= now) this.temps.delete(id)
  }
}
