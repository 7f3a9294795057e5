/**
 * Throttling of password and code guesses (SPEC §7), per client address and
 * per username.
 *
 * - Address: 10 failures (any usernames) within a sliding 10 minutes lock the
 *   address for 10 minutes from the 10th. Loopback is not exempt (a local
 *   reverse proxy would otherwise exempt the whole internet). An IPv6 client
 *   counts per /64: one host is routinely given a whole /64, so counting single
 *   addresses would hand it 2^64 fresh budgets.
 * - Username (trimmed, lower case; the caller passes whatever was typed and
 *   this module never learns whether such a user exists, so the answers cannot
 *   tell): the first 5 consecutive failures are free; after the 5th each further
 *   attempt waits 30 s from the last failure, doubling per failure, at most
 *   15 minutes. A success resets the username, never the address window (one
 *   good password must not buy an address a fresh budget). A username with no
 *   failure for 24 hours starts over.
 *
 * Guarantees: check() is synchronous and does no I/O (it runs before every
 * password hash); every counter is written through to the store (kind
 * `throttle`), so it holds across restarts; on a shared store the counts are
 * the store's own atomic counters (every instance's failures count, each
 * exactly once) and the resulting records reach every instance by the feed; usernames are stored only as
 * SHA-256, since people type their password into the username field; the
 * state is bounded: expired entries are dropped on every write, and beyond
 * `maxKeys` tracked keys the least recently written are evicted.
 */
import { createHash } from 'node:crypto'
import { isIP } from 'node:net'
import { normalizeIp } from '../access/ip.js'
import { Collection, storeUnavailable, type CollectionOptions } from '../store/collection.js'
import type { KeyValueStore } from '../store/kv.js'
import type { Clock } from '../kernel/clock.js'

/** What one failure started: the address's lock, the username's delays (each true once per lockout). */
export interface LockStart {
  address: boolean
  username: boolean
}

export interface ThrottleLimits {
  addressMaxFailures: number
  addressWindowMs: number
  addressLockMs: number
  usernameFreeFailures: number
  usernameBaseDelayMs: number
  usernameMaxDelayMs: number
  usernameMemoryMs: number
  /** keys tracked at most, addresses and usernames together */
  maxKeys: number
}

/** SPEC §7. */
export const THROTTLE_LIMITS: Readonly<ThrottleLimits> = Object.freeze({
  addressMaxFailures: 10,
  addressWindowMs: 10 * 60_000,
  addressLockMs: 10 * 60_000,
  usernameFreeFailures: 5,
  usernameBaseDelayMs: 30_000,
  usernameMaxDelayMs: 15 * 60_000,
  usernameMemoryMs: 24 * 3600_000,
  maxKeys: 100_000,
})

/** Recent failures of one address (or IPv6 /64): at most `addressMaxFailures`, oldest first. */
export interface AddressThrottleRecord {
  key: `ip:${string}`
  failures_ms: number[]
  locked_until_ms: number
}

/** Consecutive failures of one username, keyed by its SHA-256. */
export interface UsernameThrottleRecord {
  key: `user:${string}`
  failures: number
  last_failure_ms: number
}

export type ThrottleRecord = AddressThrottleRecord | UsernameThrottleRecord

export type ThrottleCheck = { allowed: true } | { allowed: false; retryAfterSeconds: number; reason: 'address' | 'username' }

export class Throttle {
  // Key -> time of its last write, least recent first (a rewrite moves the key
  // to the end). Within one family the expiry is a fixed time after the last
  // write, so pruning walks from the front and stops at the first live key.
  private readonly addressOrder = new Map<string, number>()
  private readonly usernameOrder = new Map<string, number>()
  /** Attempts let through by `begin` and not yet released: they may still turn into failures. */
  private readonly inFlight = new Map<string, number>()

  private constructor(
    private readonly records: Collection<ThrottleRecord>,
    private readonly clock: Clock,
    private readonly limits: ThrottleLimits,
  ) {}

  /** Reads the lock records again from the store (store/health.ts, after an outage). */
  resync(): Promise<boolean> {
    return this.records.resync()
  }

  static async open(kv: KeyValueStore, clock: Clock, limits: Partial<ThrottleLimits> = {}, options: CollectionOptions = {}): Promise<Throttle> {
    const merged = { ...THROTTLE_LIMITS, ...limits }
    // Two keys are written per failure; a smaller cap would evict the one just written.
    if (!(merged.maxKeys >= 2)) throw new RangeError('throttle maxKeys must be at least 2')
    const throttle = new Throttle(await Collection.load<ThrottleRecord>(kv, 'throttle', options), clock, merged)
    await throttle.index()
    return throttle
  }

  /** Settles when every counter written so far is durable. */
  flush(): Promise<void> {
    return this.records.flush()
  }

  /** Whether an attempt for `username` (null: none, e.g. a guest login) from `ip` may go ahead now. */
  check(ip: string, username: string | null): ThrottleCheck {
    const now = this.clock()
    const addressWait = this.addressWaitMs(addressKey(ip), now)
    const usernameWait = username === null ? 0 : this.usernameWaitMs(usernameKey(username), now)
    if (addressWait <= 0 && usernameWait <= 0) return { allowed: true }
    return {
      allowed: false,
      retryAfterSeconds: Math.ceil(Math.max(addressWait, usernameWait) / 1000),
      reason: addressWait >= usernameWait ? 'address' : 'username',
    }
  }

  /**
   * Like `check`, but also counts attempts still being verified, and reserves
   * a place for this one until `release` (call it after recording the
   * outcome). Without this, a burst sent at once would all pass `check`
   * before the first failure is written, and the limits would not hold.
   * In the backoff regime (5 failures or more) a username allows one
   * attempt at a time.
   */
  begin(ip: string, username: string | null): ({ allowed: true; release: () => void }) | Extract<ThrottleCheck, { allowed: false }> {
    const verdict = this.check(ip, username)
    if (!verdict.allowed) return verdict
    const now = this.clock()
    const akey = addressKey(ip)
    const recent = (this.addressRecord(akey)?.failures_ms ?? []).filter((t) => now - t < this.limits.addressWindowMs).length
    if (recent + this.pendingFor(akey) >= this.limits.addressMaxFailures) return { allowed: false, retryAfterSeconds: 1, reason: 'address' }
    const ukey = username === null ? null : usernameKey(username)
    if (ukey !== null) {
      const failures = this.liveUsername(ukey, now)?.failures ?? 0
      const pending = this.pendingFor(ukey)
      const limit = failures >= this.limits.usernameFreeFailures ? 1 : this.limits.usernameFreeFailures - failures
      if (pending >= limit) return { allowed: false, retryAfterSeconds: 1, reason: 'username' }
    }
    const keys = ukey === null ? [akey] : [akey, ukey]
    for (const key of keys) this.inFlight.set(key, this.pendingFor(key) + 1)
    let released = false
    return {
      allowed: true,
      release: () => {
        if (released) return
        released = true
        for (const key of keys) {
          const left = this.pendingFor(key) - 1
          if (left > 0) this.inFlight.set(key, left)
          else this.inFlight.delete(key)
        }
      },
    }
  }

  private pendingFor(key: string): number {
    return this.inFlight.get(key) ?? 0
  }

  /**
   * Counts a failed attempt against the address and, if given, the username. Settles once durable,
   * with what this failure started: the address's lock, or the username's first delay (a lockout
   * is reported once, when it begins, not on each refused attempt during it).
   */
  async recordFailure(ip: string, username: string | null): Promise<LockStart> {
    const now = this.clock()
    const { addressMaxFailures, addressWindowMs, addressLockMs } = this.limits
    const key = addressKey(ip)
    const previous = this.addressRecord(key)
    const recent = (previous?.failures_ms ?? []).filter((t) => now - t < addressWindowMs)
    const failures = [...recent, now].slice(-addressMaxFailures)
    // on a shared store the counts are the store's (every instance's failures), taken atomically
    const ukey = username === null ? null : usernameKey(username)
    const [addressCount, usernameCount] = await Promise.all([
      this.sharedCount(key, addressWindowMs, false),
      ukey === null ? Promise.resolve(null) : this.sharedCount(ukey, this.limits.usernameMemoryMs, true),
    ])
    // failures other instances counted show here as now: they expire no sooner than they should
    while (addressCount !== null && failures.length < Math.min(addressCount, addressMaxFailures)) failures.unshift(now)
    const wasLocked = (previous?.locked_until_ms ?? 0) > now
    // the window slides over the failures this replica knows of (other instances' included)
    const reached = failures.length >= addressMaxFailures
    const locked = reached ? now + addressLockMs : (previous?.locked_until_ms ?? 0)
    // one instance reports the lock: the one whose failure the store counted as the limit
    const mine = addressCount === null || addressCount <= addressMaxFailures
    const started: LockStart = { address: !wasLocked && locked > now && mine, username: false }
    const writes = [this.write(this.addressOrder, { key, failures_ms: failures, locked_until_ms: locked }, now)]
    if (ukey !== null) {
      const count = usernameCount ?? (this.liveUsername(ukey, now)?.failures ?? 0) + 1
      started.username = count === this.limits.usernameFreeFailures
      writes.push(this.write(this.usernameOrder, { key: ukey, failures: count, last_failure_ms: now }, now))
    }
    await Promise.all([...writes, ...this.prune(now)])
    return started
  }

  /** Resets the username after a successful attempt; the address window stays as it is. */
  async recordSuccess(_ip: string, username: string | null): Promise<void> {
    const removals = this.prune(this.clock())
    if (username !== null) {
      const key = usernameKey(username)
      if (this.records.get(key) !== undefined) removals.push(this.drop(this.usernameOrder, key))
      const shared = this.records.multiInstance
      if (shared !== null) removals.push(shared.resetCounter(`throttle:${key}`).catch((err: unknown) => Promise.reject(storeUnavailable('throttle', err))))
    }
    await Promise.all(removals)
  }

  /**
   * The store's count of failures under `key` after this one (null: no shared
   * store, or it failed: memory counts, and the write that follows reports the store's state).
   */
  private async sharedCount(key: string, ttlMs: number, refresh: boolean): Promise<number | null> {
    const shared = this.records.multiInstance
    if (shared === null) return null
    try {
      return await shared.increment(`throttle:${key}`, ttlMs, refresh)
    } catch {
      return null
    }
  }

  /** Keys currently tracked (addresses and usernames). */
  get trackedKeys(): number {
    return this.addressOrder.size + this.usernameOrder.size
  }

  private addressWaitMs(key: string, now: number): number {
    const record = this.addressRecord(key)
    if (record === undefined) return 0
    // Capped so a clock stepped back cannot stretch a lock past its length.
    return Math.min(record.locked_until_ms - now, this.limits.addressLockMs)
  }

  private usernameWaitMs(key: string, now: number): number {
    const record = this.liveUsername(key, now)
    if (record === undefined) return 0
    const delay = this.usernameDelayMs(record.failures)
    return delay === 0 ? 0 : Math.min(record.last_failure_ms + delay - now, delay)
  }

  private usernameDelayMs(failures: number): number {
    const { usernameFreeFailures, usernameBaseDelayMs, usernameMaxDelayMs } = this.limits
    if (failures < usernameFreeFailures) return 0
    return Math.min(usernameBaseDelayMs * 2 ** (failures - usernameFreeFailures), usernameMaxDelayMs)
  }

  // Reads check the shape: a record mangled in the store must not turn into a NaN Retry-After.
  private addressRecord(key: string): AddressThrottleRecord | undefined {
    const record = this.records.get(key)
    return isAddressRecord(record) ? record : undefined
  }

  /** The username's record unless it has been forgotten (no failure for usernameMemoryMs), pruned or not. */
  private liveUsername(key: string, now: number): UsernameThrottleRecord | undefined {
    const record = this.records.get(key)
    return isUsernameRecord(record) && now - record.last_failure_ms < this.limits.usernameMemoryMs ? record : undefined
  }

  private write(order: Map<string, number>, record: ThrottleRecord, now: number): Promise<void> {
    order.delete(record.key)
    order.set(record.key, now)
    // a counter only ever narrows: it holds in memory at once and is retried until stored
    return this.records.narrow(record.key, record)
  }

  private drop(order: Map<string, number>, key: string): Promise<void> {
    order.delete(key)
    return this.records.narrowRemove(key)
  }

  /** Drops expired keys, then the least recently written beyond maxKeys. */
  private prune(now: number): Array<Promise<void>> {
    const removals: Array<Promise<void>> = []
    const expire = (order: Map<string, number>, ttlMs: number) => {
      for (const [key, writtenMs] of order) {
        if (now - writtenMs < ttlMs) break
        // the order knows this instance's writes only: on a shared store another instance may have
        // written the record since (a lock it set), so the record's own last failure decides
        const last = this.lastFailureOf(key)
        if (last !== undefined && now - last < ttlMs) {
          order.delete(key)
          order.set(key, last)
          continue
        }
        removals.push(this.drop(order, key))
      }
    }
    expire(this.addressOrder, Math.max(this.limits.addressWindowMs, this.limits.addressLockMs))
    expire(this.usernameOrder, this.limits.usernameMemoryMs)
    while (this.trackedKeys > this.limits.maxKeys) {
      const address = this.addressOrder.entries().next().value
      const username = this.usernameOrder.entries().next().value
      const evictAddress = username === undefined || (address !== undefined && address[1] <= username[1])
      const [order, oldest] = evictAddress ? [this.addressOrder, address] : [this.usernameOrder, username]
      const [key, writtenMs] = oldest as [string, number]
      // the least recently written by the record itself: one another instance wrote since (a lock
      // it set a moment ago) goes to its place, and the next oldest is evicted instead
      const last = this.lastFailureOf(key)
      if (last !== undefined && last > writtenMs) {
        order.delete(key)
        order.set(key, last)
        continue
      }
      removals.push(this.drop(order, key))
    }
    return removals
  }

  /** The time of the record's last failure, as stored (whichever instance wrote it). */
  private lastFailureOf(key: string): number | undefined {
    const record = this.records.get(key)
    if (isAddressRecord(record)) return Math.max(...record.failures_ms, record.locked_until_ms - this.limits.addressLockMs)
    if (isUsernameRecord(record)) return record.last_failure_ms
    return undefined
  }

  /** Rebuilds the write order from the stored records, then prunes what expired while the process was down. */
  private async index(): Promise<void> {
    const known: Array<[string, number, Map<string, number>]> = []
    for (const record of this.records.values()) {
      if (isAddressRecord(record)) known.push([record.key, Math.max(...record.failures_ms), this.addressOrder])
      else if (isUsernameRecord(record)) known.push([record.key, record.last_failure_ms, this.usernameOrder])
    }
    known.sort((a, b) => a[1] - b[1])
    for (const [key, writtenMs, order] of known) order.set(key, writtenMs)
    await Promise.all(this.prune(this.clock()))
  }
}

/** The throttling bucket of a client address: the address itself, or its /64 for IPv6. */
export function addressKey(ip: string): `ip:${string}` {
  const address = normalizeIp(ip)
  if (isIP(address) === 6) return `ip:${ipv6Network64(address)}`
  // Not an address at all (the caller's fault): still one bounded bucket.
  return `ip:${address.slice(0, 64)}`
}

function usernameKey(username: string): `user:${string}` {
  return `user:${createHash('sha256').update(username.trim().toLowerCase(), 'utf8').digest('hex')}`
}

/** `2001:db8:0:1:…` → `2001:db8:0:1::/64`, for a valid IPv6 address (node:net isIP said so). */
function ipv6Network64(address: string): string {
  const halves = address.split('%')[0].split('::')
  // An embedded IPv4 tail takes the room of two groups; it never reaches the first four.
  const groups = (part: string) => (part === '' ? [] : part.split(':').flatMap((g) => (g.includes('.') ? ['0', '0'] : [g])))
  const front = groups(halves[0])
  const back = halves.length === 2 ? groups(halves[1]) : []
  const full = [...front, ...Array<string>(8 - front.length - back.length).fill('0'), ...back]
  return `${full
    .slice(0, 4)
    .map((g) => parseInt(g, 16).toString(16))
    .join(':')}::/64`
}

function isAddressRecord(record: unknown): record is AddressThrottleRecord {
  const r = record as Partial<AddressThrottleRecord> | null
  return (
    typeof r?.key === 'string' &&
    r.key.startsWith('ip:') &&
    Array.isArray(r.failures_ms) &&
    r.failures_ms.length > 0 &&
    r.failures_ms.every(Number.isFinite) &&
    Number.isFinite(r.locked_until_ms)
  )
}

function isUsernameRecord(record: unknown): record is UsernameThrottleRecord {
  const r = record as Partial<UsernameThrottleRecord> | null
  return typeof r?.key === 'string' && r.key.startsWith('user:') && Number.isInteger(r.failures) && Number.isFinite(r.last_failure_ms)
}
