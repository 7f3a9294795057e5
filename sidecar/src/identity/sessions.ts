/**
 * Session JWTs (SPEC §3): HS256 with the derived key, claims sub, username,
 * jti, iat, exp, typ "session". The session record, not the signature alone,
 * decides validity: a missing, revoked, expired or idle record refuses the
 * token. `last_used` is persisted at most once a minute per session.
 * Guest sessions are bounded (identity/guest-sessions.ts): their number per
 * address and in all never exceeds the limits, also right after a start.
 *
 * Session records are held lazily (a store may hold a million): read from the store on first
 * use, a bounded number kept; a user's sessions are found through their index record
 * (identity/owner-index.ts), which is also how expired records are swept.
 */
import { randomUUID } from 'node:crypto'
import { SignJWT, jwtVerify, errors as joseErrors } from 'jose'
import type { ErrorCode } from '../kernel/errors.js'
import type { Collection } from '../store/collection.js'
import { AuthsvcError } from '../kernel/errors.js'
import { iso, type Clock } from '../kernel/clock.js'
import { GUEST_LIMITS, GUEST_ROLE, GUEST_SUBJECT, GuestLoginRate, guestEvictions, type GuestLimits } from './guest-sessions.js'
import { addressKey } from './throttle.js'
import { OwnerIndex, buildIndexesOnce } from './owner-index.js'

export interface SessionRecord {
  jti: string
  user_id: string
  created_at_iso: string
  last_used_at_iso: string
  exp_at_iso: string
  remember_me: boolean
  revoked: boolean
  /** guest sessions only: the throttle bucket of the address that logged in */
  guest_key?: string
  /** the User-Agent the session was created with (identity/session-device.ts); absent on older records */
  user_agent?: string
  /** the client's address as the gate saw it at creation; absent on older records */
  ip?: string
}

/** Who created a session, as the person will recognise it later: never a secret. */
export interface SessionClient {
  userAgent?: string
  ip?: string
}

export interface SessionSettings {
  lifetimeHours: number
  idleMinutes: number
}

const LAST_USED_PERSIST_MS = 60_000
/** Signature checks are cached per exact token string; the session record is still checked every time. */
const VERIFIED_CACHE_LIMIT = 10_000

interface VerifiedClaims {
  sub: string
  jti: string
  expMs: number
}

export type SessionCheck = { record: SessionRecord } | { error: ErrorCode }

export class SessionService {
  private readonly lastUsed = new Map<string, number>()
  private readonly verified = new Map<string, VerifiedClaims>()
  /** guest session jti → its address bucket, oldest first */
  private readonly guests = new Map<string, string>()
  private readonly guestRate: GuestLoginRate

  private readonly index: OwnerIndex<SessionRecord>

  constructor(
    private readonly sessions: Collection<SessionRecord>,
    private readonly key: Uint8Array,
    private readonly clock: Clock,
    private readonly settings: SessionSettings,
    private readonly guestLimits: GuestLimits = GUEST_LIMITS,
  ) {
    this.guestRate = new GuestLoginRate(clock, guestLimits)
    this.index = new OwnerIndex('session_index', sessions, 'session', clock)
  }

  /** Builds the users' indexes of a store written before them (once); reads the guest sessions held in the store (their bounds hold from the start). */
  async open(): Promise<void> {
    await buildIndexesOnce<SessionRecord>(this.sessions.store, this.index, 'session', (s) =>
      typeof s?.jti === 'string' && typeof s.user_id === 'string' ? { userId: s.user_id, entry: [s.jti, Date.parse(s.exp_at_iso) || 0] } : null,
    )
    const guests = await this.ofUser(GUEST_SUBJECT)
    guests.sort((a, b) => a.created_at_iso.localeCompare(b.created_at_iso))
    // a guest record written before addresses were kept counts only against the total bound
    for (const s of guests) this.guests.set(s.jti, s.guest_key ?? `unknown:${s.jti}`)
  }

  async issue(user: { user_id: string; username: string }, rememberMe: boolean, client: SessionClient = {}): Promise<{ token: string; record: SessionRecord }> {
    return this.issueSession(user, rememberMe, this.settings.lifetimeHours, client)
  }

  /**
   * A guest session for a client at `ip`: refused with 429 beyond the
   * per-address login rate; short-lived; the oldest guest sessions beyond the
   * per-address and total bounds are removed before this one is handed out.
   */
  async issueGuest(ip: string, userAgent?: string): Promise<{ token: string; record: SessionRecord }> {
    const rate = this.guestRate.take(ip)
    if (!rate.allowed) throw new AuthsvcError('TOO_MANY_ATTEMPTS', 'Too many guest logins from this address; try again later', { 'Retry-After': String(rate.retryAfterSeconds) })
    const lifetime = Math.min(this.settings.lifetimeHours, this.guestLimits.lifetimeHours)
    const issued = await this.issueSession({ user_id: GUEST_SUBJECT, username: GUEST_ROLE }, false, lifetime, { ip, userAgent }, addressKey(ip))
    await this.enforceGuestBounds()
    return issued
  }

  /** Guest sessions held now (for the bounds' tests and the operator). */
  get guestCount(): number {
    return this.guests.size
  }

  private async enforceGuestBounds(): Promise<number> {
    const evict = guestEvictions(this.guests, this.guestLimits)
    await this.dropAll(GUEST_SUBJECT, evict)
    return evict.length
  }

  /** Forgets a session: gone from memory at once, the deletion retried until stored. */
  private async drop(jti: string): Promise<void> {
    this.guests.delete(jti)
    this.lastUsed.delete(jti)
    await this.sessions.narrowRemove(jti)
  }

  /** Forgets sessions of one user, and their entries in the user's index. */
  private async dropAll(userId: string, jtis: string[]): Promise<void> {
    if (jtis.length === 0) return
    await Promise.all(jtis.map((jti) => this.drop(jti)))
    await this.index.remove(userId, jtis)
  }

  private async issueSession(user: { user_id: string; username: string }, rememberMe: boolean, lifetimeHours: number, client: SessionClient, guestKey?: string): Promise<{ token: string; record: SessionRecord }> {
    const now = this.clock()
    const jti = randomUUID()
    const expMs = now + lifetimeHours * 3600_000
    const token = await new SignJWT({ username: user.username, typ: 'session' })
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .setSubject(user.user_id)
      .setJti(jti)
      .setIssuedAt(Math.floor(now / 1000))
      .setExpirationTime(Math.floor(expMs / 1000))
      .sign(this.key)
    const record: SessionRecord = {
      jti,
      user_id: user.user_id,
      created_at_iso: iso(now),
      last_used_at_iso: iso(now),
      exp_at_iso: iso(expMs),
      remember_me: rememberMe,
      revoked: false,
      ...(guestKey === undefined ? {} : { guest_key: guestKey }),
      ...(client.userAgent === undefined ? {} : { user_agent: client.userAgent }),
      ...(client.ip === undefined || client.ip === '' ? {} : { ip: client.ip }),
    }
    // a new session widens access: it exists only once stored, and findable by its user's index
    await this.index.addWith(user.user_id, jti, expMs, record)
    this.lastUsed.set(jti, now)
    if (guestKey !== undefined) this.guests.set(jti, guestKey)
    return { token, record }
  }

  get lifetimeSeconds(): number {
    return Math.floor(this.settings.lifetimeHours * 3600)
  }

  /**
   * Verifies signature and claims (once per token string: HMAC verification is
   * asynchronous WebCrypto work, too slow for every request), then the live
   * session record (every time); marks the session used.
   */
  check(token: string): SessionCheck | Promise<SessionCheck> {
    const claims = this.verified.get(token)
    if (claims !== undefined) return this.checkHeld(claims)
    return this.verifySignature(token).then((result) => ('error' in result ? result : this.checkHeld(result)))
  }

  /**
   * With several instances, a session this replica does not hold yet may have been made on
   * another one a moment ago (the feed has not delivered it): it is read from the store.
   */
  private checkHeld(claims: VerifiedClaims): SessionCheck | Promise<SessionCheck> {
    // not held: read from the store (records are held lazily; on several instances it may also be new)
    if (this.sessions.get(claims.jti) !== undefined || claims.expMs <= this.clock()) return this.checkRecord(claims)
    return this.sessions.fetch(claims.jti).then(
      () => this.checkRecord(claims),
      (): SessionCheck => ({ error: 'STORE_UNAVAILABLE' }),
    )
  }

  private async verifySignature(token: string): Promise<VerifiedClaims | { error: ErrorCode }> {
    let payload
    try {
      ;({ payload } = await jwtVerify(token, this.key, { algorithms: ['HS256'], currentDate: new Date(this.clock()) }))
    } catch (err) {
      return { error: err instanceof joseErrors.JWTExpired ? 'TOKEN_EXPIRED' : 'TOKEN_INVALID' }
    }
    if (payload.typ !== 'session' || typeof payload.jti !== 'string' || typeof payload.sub !== 'string' || typeof payload.exp !== 'number') {
      return { error: 'TOKEN_INVALID' }
    }
    const claims: VerifiedClaims = { sub: payload.sub, jti: payload.jti, expMs: payload.exp * 1000 }
    if (this.verified.size >= VERIFIED_CACHE_LIMIT) this.verified.delete(this.verified.keys().next().value as string)
    this.verified.set(token, claims)
    return claims
  }

  private checkRecord(claims: VerifiedClaims): SessionCheck {
    const now = this.clock()
    if (claims.expMs <= now) return { error: 'TOKEN_EXPIRED' }
    const record = this.sessions.get(claims.jti)
    if (!record || record.user_id !== claims.sub || record.revoked) return { error: 'TOKEN_REVOKED' }
    if (Date.parse(record.exp_at_iso) <= now) return { error: 'TOKEN_EXPIRED' }
    if (this.isIdle(record, now)) {
      // The refusal does not depend on the write: the revocation holds in memory at once and is
      // retried until stored (the collection logs the failure); the decision path never waits on it.
      void this.revoke(record.jti).catch(() => {})
      return { error: 'TOKEN_EXPIRED' }
    }
    this.markUsed(record, now)
    return { record }
  }

  /**
   * Whether the session went unused for longer than `session_idle_minutes`: since the newer of this
   * instance's own last use and the stored one (another instance's uses arrive as the record, so a
   * session used elsewhere for an hour is not idle here). Open WebSockets are judged by it too
   * (isolation/credential-state.ts): a socket is no use of its session.
   */
  isIdle(record: SessionRecord, now: number): boolean {
    if (this.settings.idleMinutes <= 0) return false
    const stored = Date.parse(record.last_used_at_iso)
    // a stored time that does not parse counts as the session's start of time: never as "never idle"
    const lastUsed = Math.max(this.lastUsed.get(record.jti) ?? 0, Number.isFinite(stored) ? stored : 0)
    return now - lastUsed > this.settings.idleMinutes * 60_000
  }

  private markUsed(record: SessionRecord, now: number): void {
    this.lastUsed.set(record.jti, now)
    // stored at least every minute, and well inside the idle limit (other instances judge idleness by it)
    const every = this.settings.idleMinutes > 0 ? Math.min(LAST_USED_PERSIST_MS, (this.settings.idleMinutes * 60_000) / 4) : LAST_USED_PERSIST_MS
    if (now - Date.parse(record.last_used_at_iso) >= every) {
      this.sessions.touch(record.jti, { ...record, last_used_at_iso: iso(now) })
    }
  }

  lastUsedIso(record: SessionRecord): string {
    const ms = this.lastUsed.get(record.jti)
    return ms === undefined || ms < Date.parse(record.last_used_at_iso) ? record.last_used_at_iso : iso(ms)
  }

  /** The record if held here (open sockets' checks read it every 250 ms, so theirs stay held). */
  get(jti: string): SessionRecord | undefined {
    return this.sessions.get(jti)
  }

  /** The record, read from the store when not held. */
  fetch(jti: string): Promise<SessionRecord | undefined> {
    return this.sessions.fetch(jti)
  }

  /** Every session record the user's index names (missing ones left out). */
  private ofUser(userId: string): Promise<SessionRecord[]> {
    return this.index.recordsOf(userId, (s) => s.user_id)
  }

  async activeForUser(userId: string): Promise<SessionRecord[]> {
    const now = this.clock()
    return (await this.ofUser(userId)).filter((s) => !s.revoked && Date.parse(s.exp_at_iso) > now)
  }

  async revoke(jti: string): Promise<boolean> {
    const record = await this.sessions.fetch(jti)
    if (!record || record.revoked) return false
    await this.sessions.narrow(jti, { ...record, revoked: true })
    return true
  }

  /** Ends one of `userId`'s live sessions; false when it is not theirs, or already ended. */
  async revokeOwn(userId: string, jti: string): Promise<boolean> {
    const record = await this.sessions.fetch(jti)
    if (!record || record.user_id !== userId || record.revoked) return false
    return this.revoke(jti)
  }

  async revokeAllForUser(userId: string, exceptJti?: string): Promise<number> {
    const targets = (await this.ofUser(userId)).filter((s) => !s.revoked && s.jti !== exceptJti)
    await Promise.all(targets.map((s) => this.sessions.narrow(s.jti, { ...s, revoked: true })))
    return targets.length
  }

  async deleteAllForUser(userId: string): Promise<void> {
    const jtis = (await this.index.ids(userId)).map(([jti]) => jti)
    await this.dropAll(userId, jtis)
  }

  /**
   * Drops records past their expiry (revoked or not): they can never validate again. The
   * store is swept through the users' indexes (`userIds`: every user, read from memory), a
   * slice at a time, each user's expired records deleted with their index write. Then the
   * oldest guest sessions beyond the bounds.
   */
  async prune(userIds: Iterable<string> = []): Promise<number> {
    let dropped = 0
    for (const userId of [GUEST_SUBJECT, ...userIds]) {
      const n = await this.index.sweep(userId)
      dropped += n
      if (n > 0 && userId === GUEST_SUBJECT) {
        const live = new Set((await this.index.ids(GUEST_SUBJECT)).map(([jti]) => jti))
        for (const jti of [...this.guests.keys()]) if (!live.has(jti)) this.guests.delete(jti)
      }
    }
    return dropped + (await this.enforceGuestBounds())
  }
}
