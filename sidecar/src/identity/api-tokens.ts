/**
 * Long-lived API tokens (SPEC §3): `ast_` + 43 base64url chars (256 bits).
 * Only the SHA-256 hex of a token is stored; lookups hash the presented
 * value, so the raw token exists only in the creation response.
 *
 * A revoked token leaves a tombstone (its record marked `revoked`) until the
 * token would have expired, so a phone can tell "revoked" (TOKEN_REVOKED) from
 * "mistyped" (TOKEN_INVALID); tombstones past their expiry are dropped by the sweep.
 *
 * Token records are held lazily (read from the store on first use, a bounded number kept); a
 * user's tokens are found through their index record (identity/owner-index.ts).
 */
import { createHash, randomBytes } from 'node:crypto'
import { AuthsvcError, type ErrorCode } from '../kernel/errors.js'
import type { Collection } from '../store/collection.js'
import { iso, type Clock } from '../kernel/clock.js'
import { OwnerIndex, buildIndexesOnce } from './owner-index.js'

export interface ApiTokenRecord {
  hash: string
  user_id: string
  label: string
  created_at_iso: string
  expires_at_iso: string
  last_used_at_iso: string | null
  /** a tombstone: the token was revoked; kept until `expires_at_iso` */
  revoked?: boolean
}

export const API_TOKEN_PATTERN = /^ast_[A-Za-z0-9_-]{43}$/
const LAST_USED_PERSIST_MS = 60_000

export const hashToken = (token: string): string => createHash('sha256').update(token).digest('hex')

/**
 * A token named by the first characters of its hash, as the pages show it (`3f9a0c1d2e4b...`):
 * surrounding spaces and a trailing `...` ignored, any case; at least 8 hex characters.
 */
export function tokenHashPrefix(raw: string): string {
  const prefix = raw.trim().replace(/\.{3}$/, '').toLowerCase()
  if (!/^[0-9a-f]{8,64}$/.test(prefix)) throw new AuthsvcError('VALIDATION_FAILED', 'token_hash_prefix must be at least 8 hex characters')
  return prefix
}

export type TokenCheck = { record: ApiTokenRecord } | { error: ErrorCode }

export class ApiTokenService {
  private readonly index: OwnerIndex<ApiTokenRecord>

  constructor(
    private readonly tokens: Collection<ApiTokenRecord>,
    private readonly clock: Clock,
  ) {
    this.index = new OwnerIndex('token_index', tokens, 'token', clock)
  }

  /** Builds the users' indexes of a store written before them (once). */
  async open(): Promise<void> {
    await buildIndexesOnce<ApiTokenRecord>(this.tokens.store, this.index, 'token', (t) =>
      typeof t?.hash === 'string' && typeof t.user_id === 'string' ? { userId: t.user_id, entry: [t.hash, Date.parse(t.expires_at_iso) || 0] } : null,
    )
  }

  async issue(userId: string, label: string, expireHours: number): Promise<{ token: string; record: ApiTokenRecord }> {
    const now = this.clock()
    const token = `ast_${randomBytes(32).toString('base64url')}`
    const record: ApiTokenRecord = {
      hash: hashToken(token),
      user_id: userId,
      label,
      created_at_iso: iso(now),
      expires_at_iso: iso(now + expireHours * 3600_000),
      last_used_at_iso: null,
    }
    await this.index.addWith(userId, record.hash, Date.parse(record.expires_at_iso), record)
    return { token, record }
  }

  check(token: string): TokenCheck | Promise<TokenCheck> {
    if (!API_TOKEN_PATTERN.test(token)) return { error: 'TOKEN_INVALID' }
    const hash = hashToken(token)
    if (this.tokens.get(hash) === undefined) {
      // not held: records are read from the store on first use (and on several instances it may be new)
      return this.tokens.fetch(hash).then(
        () => this.checkHeld(hash),
        (): TokenCheck => ({ error: 'STORE_UNAVAILABLE' }),
      )
    }
    return this.checkHeld(hash)
  }

  private checkHeld(hash: string): TokenCheck {
    const record = this.tokens.get(hash)
    if (!record) return { error: 'TOKEN_INVALID' }
    const now = this.clock()
    if (record.revoked === true) {
      if (Date.parse(record.expires_at_iso) > now) return { error: 'TOKEN_REVOKED' }
      // a tombstone past the token's expiry has done its work: dropped at its first use after it
      // (the hourly sweep drops the ones never presented again); the decision does not wait
      void this.tokens.narrowRemove(hash).catch(() => {})
      return { error: 'TOKEN_INVALID' }
    }
    if (Date.parse(record.expires_at_iso) <= now) return { error: 'TOKEN_EXPIRED' }
    if (record.last_used_at_iso === null || now - Date.parse(record.last_used_at_iso) >= LAST_USED_PERSIST_MS) {
      this.tokens.touch(record.hash, { ...record, last_used_at_iso: iso(now) })
    }
    return { record }
  }

  /** The live record of a token by its hash if held (no use is recorded): for re-checking open WebSockets. */
  byHash(hash: string): ApiTokenRecord | undefined {
    return this.tokens.get(hash)
  }

  /** The record, read from the store when not held. */
  fetch(hash: string): Promise<ApiTokenRecord | undefined> {
    return this.tokens.fetch(hash)
  }

  private ofUser(userId: string): Promise<ApiTokenRecord[]> {
    return this.index.recordsOf(userId, (t) => t.user_id)
  }

  async activeForUser(userId: string): Promise<ApiTokenRecord[]> {
    const now = this.clock()
    return (await this.ofUser(userId))
      .filter((t) => t.revoked !== true && Date.parse(t.expires_at_iso) > now)
      .sort((a, b) => a.created_at_iso.localeCompare(b.created_at_iso))
  }

  /** Revokes the caller's token whose hash starts with `prefix` (>= 8 hex chars). */
  async revokeByPrefix(userId: string, prefix: string): Promise<void> {
    const matches = (await this.ofUser(userId)).filter((t) => t.revoked !== true && t.hash.startsWith(prefix))
    if (matches.length === 0) throw new AuthsvcError('NOT_FOUND', 'Token not found')
    if (matches.length > 1) throw new AuthsvcError('CONFLICT', 'Token prefix is ambiguous; give more characters')
    await this.tombstone(matches[0])
  }

  async revokeAllForUser(userId: string): Promise<void> {
    const targets = (await this.ofUser(userId)).filter((t) => t.revoked !== true)
    await Promise.all(targets.map((t) => this.tombstone(t)))
  }

  /** Drops expired tokens and tombstones of `userIds` (their records and index entries). */
  async prune(userIds: Iterable<string>): Promise<number> {
    let dropped = 0
    for (const userId of userIds) dropped += await this.index.sweep(userId)
    return dropped
  }

  /** Narrows at once (memory first, retried until stored); the label goes, the hash and expiry stay. */
  private tombstone(record: ApiTokenRecord): Promise<void> {
    return this.tokens.narrow(record.hash, { ...record, label: '', revoked: true })
  }
}
