/**
 * Password hashing (argon2id, PHC strings) and the password policy.
 *
 * Guarantees: passwords are compared exactly as typed (no trim, no
 * truncation); at most `max_concurrent_hashes` hashes run at once, and never
 * more than the cores but one, so a login storm always leaves a core to the
 * host and the decision path (which never hashes); others queue; an unknown
 * user costs one verify against a dummy hash, like a known one.
 */
import argon2 from 'argon2'
import { readFileSync } from 'node:fs'
import { availableParallelism } from 'node:os'
import type { Config } from '../config/schema.js'

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

export class PasswordHasher {
  private readonly gate: Semaphore
  private readonly options: argon2.Options & { raw?: false }
  private dummyHash: Promise<string> | undefined

  constructor(config: Config['argon2']) {
    this.gate = new Semaphore(Math.max(1, Math.min(config.max_concurrent_hashes, availableParallelism() - 1)))
    this.options = { type: argon2.argon2id, memoryCost: config.memory_kib, timeCost: config.time_cost, parallelism: config.parallelism }
  }

  /** Whether a hash is running: the CPU is then spoken for, and nothing should busy-wait. */
  get hashing(): boolean {
    return this.gate.active > 0
  }

  hash(password: string): Promise<string> {
    return this.gate.run(() => argon2.hash(password, this.options))
  }

  async verify(hash: string, password: string): Promise<boolean> {
    return this.gate.run(async () => {
      try {
        return await argon2.verify(hash, password)
      } catch {
        return false
      }
    })
  }

  /** Burns the same time as a real verify, for users that do not exist. */
  async verifyDummy(password: string): Promise<false> {
    this.dummyHash ??= argon2.hash('authsvc-dummy-password', this.options)
    await this.verify(await this.dummyHash, password)
    return false
  }
}
