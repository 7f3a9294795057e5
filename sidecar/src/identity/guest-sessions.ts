/**
 * Guest logins (`allow_guest_jwt`, SPEC §4) cost nothing to ask for, so they
 * are bounded here rather than trusted to be rare:
 *
 * - per client address (IPv6: per /64, as the password throttle counts), at
 *   most `loginsPerWindow` guest logins in a sliding `windowMs`, then 429;
 * - at most `sessionsPerAddress` live guest sessions per address and
 *   `sessionsTotal` in all; a new one evicts the oldest beyond either bound;
 * - a guest session lives at most `lifetimeHours` (and the idle limit of every
 *   session still applies).
 *
 * Guarantees: the rate window is memory only and bounded (`maxTrackedAddresses`,
 * least recently used forgotten first): a restart forgets it, which at most
 * lets one more window of logins through, and the session bounds hold anyway;
 * the guest-session index holds exactly the guest records of the session
 * collection, oldest first, so the bounds are enforced without scanning
 * user sessions.
 */
import { addressKey } from './throttle.js'
import type { Clock } from '../kernel/clock.js'

export const GUEST_SUBJECT = 'guest'
export const GUEST_ROLE = 'guest'

export interface GuestLimits {
  loginsPerWindow: number
  windowMs: number
  sessionsPerAddress: number
  sessionsTotal: number
  lifetimeHours: number
  maxTrackedAddresses: number
}

export const GUEST_LIMITS: Readonly<GuestLimits> = Object.freeze({
  loginsPerWindow: 10,
  windowMs: 10 * 60_000,
  sessionsPerAddress: 3,
  sessionsTotal: 500,
  lifetimeHours: 1,
  maxTrackedAddresses: 10_000,
})

/** The per-address sliding window of guest logins. */
export class GuestLoginRate {
  /** address key → login times inside the window, least recently used address first */
  private readonly recent = new Map<string, number[]>()

  constructor(
    private readonly clock: Clock,
    private readonly limits: GuestLimits = GUEST_LIMITS,
  ) {}

  /** Counts a login from `ip`; returns the seconds to wait instead when the window is full. */
  take(ip: string): { allowed: true } | { allowed: false; retryAfterSeconds: number } {
    const now = this.clock()
    const key = addressKey(ip)
    const times = (this.recent.get(key) ?? []).filter((t) => now - t < this.limits.windowMs)
    this.recent.delete(key)
    if (times.length >= this.limits.loginsPerWindow) {
      this.recent.set(key, times)
      return { allowed: false, retryAfterSeconds: Math.max(1, Math.ceil((times[0] + this.limits.windowMs - now) / 1000)) }
    }
    times.push(now)
    this.recent.set(key, times)
    while (this.recent.size > this.limits.maxTrackedAddresses) this.recent.delete(this.recent.keys().next().value as string)
    return { allowed: true }
  }
}

/** Which guest sessions to evict so that both bounds hold, oldest first. */
export function guestEvictions(index: ReadonlyMap<string, string>, limits: GuestLimits = GUEST_LIMITS): string[] {
  const evict: string[] = []
  const perAddress = new Map<string, number>()
  for (const key of index.values()) perAddress.set(key, (perAddress.get(key) ?? 0) + 1)
  let total = index.size
  // the index is oldest first: walking it evicts the oldest of each address, then the oldest overall
  for (const [jti, key] of index) {
    const count = perAddress.get(key) ?? 0
    if (count > limits.sessionsPerAddress || total > limits.sessionsTotal) {
      evict.push(jti)
      perAddress.set(key, count - 1)
      total--
    }
  }
  return evict
}
