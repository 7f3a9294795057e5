/**
 * Password hashing (argon2id, PHC strings) and the password policy.
 *
 * Guarantees: passwords are compared exactly as typed (no trim, no
 * truncation); hashes run in a worker process at the lowest CPU priority
 * (hash-process.ts), so the decision path and the host always run first;
 * at most `max_concurrent_hashes` run at once, never more than the cores;
 * others queue; an unknown user costs one verify against a dummy hash, like
 * a known one.
 */
import { readFileSync } from 'node:fs'
import { availableParallelism } from 'node:os'
import type { Config } from '../kernel/config/schema.js'
import { AuthsvcError } from '../kernel/errors.js'
import { HashProcess, type HashOptions } from './hash-process.js'

const COMMON = new Set(
  readFileSync(new URL('../../data/common-passwords.txt', import.meta.url), 'utf8')
    .split('\n')
    .map((line) => line.trim().toLowerCase())
    .filter(Boolean),
)

export function passwordProblem(password: unknown): string | null {
  if (typeof password !== 'string') return 'password must be a string'
  if (password.length < 8) return 'password must be at least 8 characters'
  if (password.length > 1024) return 'password must be at most 1024 characters'
  if (COMMON.has(password.toLowerCase())) return 'this password is too common'
  return null
}

class Semaphore {
  active = 0
  private readonly waiting: Array<() => void> = []
  constructor(private readonly limit: number) {}

  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.active >= this.limit) await new Promise<void>((resolve) => this.waiting.push(resolve))
    this.active++
    try {
      return await task()
    } finally {
      this.active--
      this.waiting.shift()?.()
    }
  }
}

/** The two argon2 calls the hasher makes (argon2id); a test passes a wrapper to observe them. */
export interface Argon2Calls {
  hash(password: string, options: HashOptions): Promise<string>
  verify(hash: string, password: string): Promise<boolean>
}

/**
 * Concurrent hashes allowed: the configured cap, never more than the cores, at least one.
 * Every core may hash: the worker runs at nice 19, so it only takes CPU nobody else wants.
 */
export function hashConcurrencyLimit(configured: number, cores = availableParallelism()): number {
  return Math.max(1, Math.min(configured, cores))
}

const DUMMY_PASSWORD = 'authsvc-dummy-password'

export class PasswordHasher {
  readonly concurrencyLimit: number
  private readonly argon: Argon2Calls
  private readonly worker: HashProcess | null
  private readonly gate: Semaphore
  private readonly options: HashOptions
  private dummy: Promise<string> | null

  constructor(config: Config['argon2'], deps: { argon2?: Argon2Calls; cores?: number } = {}) {
    this.concurrencyLimit = hashConcurrencyLimit(config.max_concurrent_hashes, deps.cores)
    this.worker = deps.argon2 ? null : new HashProcess(this.concurrencyLimit)
    this.argon = deps.argon2 ?? this.worker!
    this.gate = new Semaphore(this.concurrencyLimit)
    this.options = { memoryCost: config.memory_kib, timeCost: config.time_cost, parallelism: config.parallelism }
    // Built now, through the gate like any hash, so the first unknown user does not pay for it.
    this.dummy = this.buildDummy()
  }

  /** A failed build (the worker died, argon2 broke) is not kept: the next check builds it again. */
  private buildDummy(): Promise<string> {
    const built = this.hash(DUMMY_PASSWORD)
    built.catch(() => {
      if (this.dummy === built) this.dummy = null
    })
    return built
  }

  private dummyHash(): Promise<string> {
    this.dummy ??= this.buildDummy()
    return this.dummy
  }

  /**
   * Settles once the dummy hash exists: from then on an unknown user costs one verify, like a
   * known one. Rejects while it cannot be built.
   */
  get ready(): Promise<void> {
    return this.dummyHash().then(() => undefined)
  }

  /** Whether a hash is running: the CPU is then spoken for, and nothing should busy-wait. */
  get hashing(): boolean {
    return this.gate.active > 0
  }

  hash(password: string): Promise<string> {
    return this.gate.run(() => this.argon.hash(password, this.options))
  }

  async verify(hash: string, password: string): Promise<boolean> {
    // Every check waits for the dummy hash (built at start, no longer awaited by the start):
    // otherwise, just after a start, an unknown user's check (dummy, then verify) would take
    // longer than a known one's, and a broken argon2 would fail only unknown users.
    await this.ready
    return this.gate.run(async () => {
      try {
        return await this.argon.verify(hash, password)
      } catch (err) {
        if (err instanceof AuthsvcError) throw err // the worker died: no answer, not a wrong password
        return false
      }
    })
  }

  /** Ends the worker process (the sidecar or the operator command is stopping). */
  close(): void {
    this.worker?.close()
  }

  /** Burns the same time as a real verify, for users that do not exist. */
  async verifyDummy(password: string): Promise<false> {
    await this.verify(await this.dummyHash(), password)
    return false
  }
}
