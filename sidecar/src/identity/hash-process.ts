/**
 * The sidecar's side of the password-hash worker (hash-worker.ts): argon2's
 * `hash` and `verify`, answered by a child process at nice 19.
 *
 * Guarantees: the worker is started on first use and again after it exits;
 * a call in flight when it dies fails with AUTHSVC_UNAVAILABLE (never a
 * "wrong password", never a hang); while no call is in flight the worker
 * does not keep the sidecar (or the operator command) alive; `close()` ends it.
 */
import { fork, type ChildProcess } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { AuthsvcError } from '../kernel/errors.js'
import type { HashAnswer, HashRequest } from './hash-worker.js'

/** Run from the TypeScript sources (tests, under tsx) or from the build. */
const FROM_SOURCES = import.meta.url.endsWith('.ts')
const WORKER = fileURLToPath(new URL(FROM_SOURCES ? './hash-worker.ts' : './hash-worker.js', import.meta.url))

interface Pending {
  resolve(value: string | boolean): void
  reject(err: Error): void
}

export interface HashOptions {
  memoryCost: number
  timeCost: number
  parallelism: number
}

export class HashProcess {
  private child: ChildProcess | null = null
  private readonly pending = new Map<number, Pending>()
  private nextId = 1

  /** `threads`: the worker's thread pool, so `threads` hashes can run side by side. */
  constructor(private readonly threads: number) {}

  hash(password: string, options: HashOptions): Promise<string> {
    return this.call({ op: 'hash', password, options }) as Promise<string>
  }

  verify(hash: string, password: string): Promise<boolean> {
    return this.call({ op: 'verify', hash, password }) as Promise<boolean>
  }

  /** The worker's pid while it runs (operators and tests look at its priority). */
  get pid(): number | undefined {
    return this.child?.pid
  }

  close(): void {
    this.child?.kill()
    this.child = null
  }

  private call(request: Omit<HashRequest, 'id'>): Promise<string | boolean> {
    const child = this.child ?? this.start()
    const id = this.nextId++
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject })
      if (this.pending.size === 1) this.hold(child, true)
      child.send({ ...request, id } satisfies HashRequest)
    })
  }

  private start(): ChildProcess {
    const child = fork(WORKER, [], {
      execArgv: FROM_SOURCES ? ['--import', 'tsx'] : [],
      env: { ...process.env, UV_THREADPOOL_SIZE: String(this.threads) },
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
      serialization: 'json',
    })
    child.on('message', (answer: HashAnswer) => this.settle(answer))
    child.on('exit', () => {
      if (this.child === child) this.child = null
      const lost = [...this.pending.values()]
      this.pending.clear()
      for (const p of lost) p.reject(new AuthsvcError('AUTHSVC_UNAVAILABLE', 'The password check was interrupted; try again'))
    })
    child.on('error', () => {}) // reported through 'exit'
    this.hold(child, false)
    this.child = child
    return child
  }

  private settle(answer: HashAnswer): void {
    const p = this.pending.get(answer.id)
    if (!p) return
    this.pending.delete(answer.id)
    if (this.pending.size === 0 && this.child) this.hold(this.child, false)
    if (answer.error !== undefined) p.reject(new Error(`argon2 failed: ${answer.error}`))
    else p.resolve(answer.value as string | boolean)
  }

  /** Whether the worker keeps this process alive: only while an answer is owed. */
  private hold(child: ChildProcess, on: boolean): void {
    const channel = child.channel as { ref(): void; unref(): void } | undefined
    if (on) {
      child.ref()
      channel?.ref()
    } else {
      child.unref()
      channel?.unref()
    }
  }
}
