/**
 * Long-lived API tokens (SPEC §3): `ast_` + 43 base64url chars (256 bits).
 * Only the SHA-256 hex of a token is stored; lookups hash the presented
 * value, so the raw token exists only in the creation response.
 *
 * A revoked token leaves a tombstone (its record marked `revoked`) until the
 * token would have expired, so a phone can tell "revoked" (TOKEN_REVOKED) from
 * "mistyped" (TOKEN_INVALID); tombstones past their expiry are dropped at start.
 */
import { createHash, randomBytes } from 'node:crypto'
import { AuthsvcError, type ErrorCode } from '../kernel/errors.js'
import type { Collection } from '../store/collection.js'
import { iso, type Clock } from '../kernel/clock.js'

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
  constructor(
    private readonly tokens: Collection<ApiTokenRecord>,
    private readonly clock: Clock,
  ) {
    const now = clock()
    for (const t of [...tokens.values()]) {
      // a failed deletion is retried by the collection until stored; nothing waits on it here
      if (t.revoked === true && Date.parse(t.expires_at_iso) <= now) void tokens.narrowRemove(t.hash).catch(() => {})
    }
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
    await this.tokens.put(record.hash, record)
    return { token, record }
  }

  check(token: string): TokenCheck | Promise<TokenCheck> {
    if (!API_TOKEN_PATTERN.test(token)) return { error: 'TOKEN_INVALID' }
    const hash = hashToken(token)
    if (this.tokens.get(hash) === undefined && this.tokens.multiInstance !== null) {
      // several instances: a token made on another one a moment ago may not have reached this replica yet
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
    if (record.revoked === true) return { error: 'TOKEN_REVOKED' }
    const now = this.clock()
    if (Date.parse(record.expires_at_iso) <= now) return { error: 'TOKEN_EXPIRED' }
    if (record.last_used_at_iso === null || now - Date.parse(record.last_used_at_iso) >= LAST_USED_PERSIST_MS) {
      this.tokens.touch(record.hash, { ...record, last_used_at_iso: iso(now) })
    }
    return { record }
  }

  /** The live record of a token by its hash (no use is recorded): for re-checking open WebSockets. */
  byHash(hash: string): ApiTokenRecord | undefined {
    return this.tokens.get(hash)
  }

  activeForUser(userId: string): ApiTokenRecord[] {
    const now = this.clock()
    return [...this.tokens.values()]
      .filter((t) => t.user_id === userId && t.revoked !== true && Date.parse(t.expires_at_iso) > now)
      .sort((a, b) => a.created_at_iso.localeCompare(b.created_at_iso))
  }

  /** Revokes the caller's token whose hash starts with `prefix` (>= 8 hex chars). */
  async revokeByPrefix(userId: string, prefix: string): Promise<void> {
    const matches = [...this.tokens.values()].filter((t) => t.user_id === userId && t.revoked !== true && t.hash.startsWith(prefix))
    if (matches.length === 0) throw new AuthsvcError('NOT_FOUND', 'Token not found')
    if (matches.length > 1) throw new AuthsvcError('CONFLICT', 'Token prefix is ambiguous; give more characters')
    await this.tombstone(matches[0])
  }

  async revokeAllForUser(userId: string): Promise<void> {
    const targets = [...this.tokens.values()].filter((t) => t.user_id === userId && t.revoked !== true)
    await Promise.all(targets.map((t) => this.tombstone(t)))
  }

  /** Narrows at once (memory first, retried until stored); the label goes, the hash and expiry stay. */
  private tombstone(record: ApiTokenRecord): Promise<void> {
    return this.tokens.narrow(record.hash, { ...record, label: '', revoked: true })
  }
}
