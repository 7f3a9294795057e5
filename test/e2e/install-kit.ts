/**
 * Shared by the install-*.test.ts suites: the package as a user gets it (a `git clone` of
 * the committed HEAD into the real ComfyUI's custom_nodes/), install.py run as
 * ComfyUI-Manager runs it, and the requests a browser and an API client make.
 *
 * The clone's source is this repository (`AUTHSVC_TEST_CLONE_FROM` names another one,
 * e.g. a repository with a fix committed, when this one's HEAD cannot be built).
 */
import { execFileSync, spawn } from 'node:child_process'
import { once } from 'node:events'
import { readdirSync, symlinkSync, mkdirSync, existsSync } from 'node:fs'
import { join } from 'node:path'
import { ROOT } from '../helpers/stack.js'

export const CLONE_FROM = process.env.AUTHSVC_TEST_CLONE_FROM ?? ROOT
export const COMFY_PYTHON = process.env.COMFYUI_PYTHON ?? '/usr/bin/python3'

/** A browser's top-level navigation (SPEC §1). */
export const NAVIGATION = {
  'Sec-Fetch-Mode': 'navigate',
  Accept: 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8',
}

export function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', args, {
    cwd, encoding: 'utf8',
    env: { ...process.env, GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@t', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@t' },
  })
}

/** `git clone` of `from` (default: this repository's committed HEAD) into `dir`. */
export function clone(dir: string, from = CLONE_FROM): string {
  execFileSync('git', ['clone', '-q', from, dir])
  return dir
}

export interface RunResult { status: number | null; stdout: string; stderr: string; ms: number }

/** `python install.py` as the Manager runs it: ComfyUI's Python, another working directory. */
export async function runInstallPy(clonePath: string, env: NodeJS.ProcessEnv = process.env): Promise<RunResult> {
  const started = Date.now()
  const child = spawn(COMFY_PYTHON, [join(clonePath, 'install.py')], { cwd: '/', env, stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()))
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
  const [status] = (await once(child, 'exit')) as [number | null]
  return { status, stdout, stderr, ms: Date.now() - started }
}

export interface Answer { status: number; type: string; location: string | null; body: string }

export async function get(url: string, headers: Record<string, string> = {}): Promise<Answer> {
  const res = await fetch(url, { headers, redirect: 'manual' })
  return { status: res.status, type: res.headers.get('content-type') ?? '', location: res.headers.get('location'), body: await res.text() }
}

/** Polls `probe` until it returns a value (not undefined); every answer seen on the way goes to `seen`. */
export async function until<T>(probe: () => Promise<T | undefined>, timeoutMs: number, what: string, context: () => string): Promise<T> {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    const value = await probe()
    if (value !== undefined) return value
    await new Promise((r) => setTimeout(r, 100))
  }
  throw new Error(`${what}: not within ${timeoutMs} ms\n${context().slice(-4000)}`)
}

/** Lines of `output` matching `pattern`. */
export function lines(output: string, pattern: RegExp): string[] {
  return output.split('\n').filter((l) => pattern.test(l))
}

/** A folder of links to every program in /usr/bin and /bin but `node`: a PATH where Node.js is missing. */
export function pathWithoutNode(dir: string): string {
  mkdirSync(dir, { recursive: true })
  for (const bin of ['/usr/local/bin', '/usr/bin', '/bin']) {
    if (!existsSync(bin)) continue
    for (const name of readdirSync(bin)) {
      if (name === 'node' || name === 'nodejs' || name.startsWith('npm') || name.startsWith('npx')) continue
      if (!existsSync(join(dir, name))) symlinkSync(join(bin, name), join(dir, name))
    }
  }
  return dir
}
