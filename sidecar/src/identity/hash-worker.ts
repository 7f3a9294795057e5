/**
 * The password-hash worker: a child process of the sidecar that runs argon2
 * at the lowest CPU priority (nice 19), so a login storm takes only the CPU
 * nobody else wants: the decision path and ComfyUI itself always run first.
 *
 * On Linux a priority belongs to a thread: the worker lowers every thread it
 * has at start (libuv's pool, where argon2 runs, may already exist: the module
 * loader reads files through it), and threads made later inherit it from the
 * main thread.
 * Messages (IPC, JSON): `{id, op:"hash", password, options}` →
 * `{id, value: PHC string}`; `{id, op:"verify", hash, password}` →
 * `{id, value: boolean}` (a malformed hash is `false`); `{id, error}` when
 * hashing itself failed. The worker never logs a password.
 */
import argon2 from 'argon2'
import { readdirSync } from 'node:fs'
import { setPriority } from 'node:os'

export interface HashRequest {
  id: number
  op: 'hash' | 'verify'
  password: string
  hash?: string
  options?: { memoryCost: number; timeCost: number; parallelism: number }
}

export interface HashAnswer {
  id: number
  value?: string | boolean
  error?: string
}

const LOWEST = 19

function lowerPriority(): void {
  let threads: string[]
  try {
    threads = readdirSync('/proc/self/task')
  } catch {
    setPriority(LOWEST) // no /proc: elsewhere the priority is the whole process's
    return
  }
  for (const tid of threads) setPriority(Number(tid), LOWEST)
}

try {
  lowerPriority()
} catch {
  // not permitted (some sandboxes): hashes then run at normal priority, still capped in number
}

async function answer(request: HashRequest): Promise<HashAnswer> {
  if (request.op === 'verify') {
    try {
      return { id: request.id, value: await argon2.verify(request.hash ?? '', request.password) }
    } catch {
      return { id: request.id, value: false }
    }
  }
  try {
    return { id: request.id, value: await argon2.hash(request.password, { type: argon2.argon2id, ...request.options }) }
  } catch (err) {
    return { id: request.id, error: (err as Error).message }
  }
}

process.on('message', (request: HashRequest) => {
  void answer(request).then((reply) => process.send?.(reply))
})
// the sidecar is gone: nothing is left to answer
process.on('disconnect', () => process.exit(0))
