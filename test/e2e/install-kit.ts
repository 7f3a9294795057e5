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
import { readdirSync, symlinkSync, mkdirSync, existsSync, readFileSync } from 'node:fs'
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

/**
 * npm's environment for an install that takes sqlite3's binary from `dir` instead of compiling it.
 *
 * sqlite3's install script asks prebuild-install for a prebuilt binary: first a local prebuild
 * (`npm_config_sqlite3_local_prebuilds`), then npm's cache, then GitHub's release; failing all
 * three it compiles sqlite3 from source (1.5 to 3 minutes of one core here, where GitHub is not
 * reachable). A user's machine downloads the release. This puts the binary this checkout's own
 * install made where prebuild-install looks first, named as the release is, so an install in a
 * test runs every step for real (npm ci, the install script, the unpacking) but the compile.
 */
export function sqlitePrebuildEnv(dir: string): NodeJS.ProcessEnv {
  const pkg = join(ROOT, 'node_modules', 'sqlite3')
  const { version, binary } = JSON.parse(readFileSync(join(pkg, 'package.json'), 'utf8')) as { version: string; binary: { napi_versions: number[] } }
  const napi = Math.max(...binary.napi_versions.filter((v) => v <= Number(process.versions.napi)))
  const stage = join(dir, 'stage')
  mkdirSync(join(stage, 'build', 'Release'), { recursive: true })
  execFileSync('cp', [join(pkg, 'build', 'Release', 'node_sqlite3.node'), join(stage, 'build', 'Release')])
  execFileSync('tar', ['-C', stage, '-czf', join(dir, `sqlite3-v${version}-napi-v${napi}-${process.platform}-${process.arch}.tar.gz`), 'build'])
  return { npm_config_sqlite3_local_prebuilds: dir }
}

/** Whether sqlite3 in `clonePath` was compiled there (its object files are left beside the binary). */
export function sqliteCompiled(clonePath: string): boolean {
  return existsSync(join(clonePath, 'node_modules', 'sqlite3', 'build', 'Release', 'obj.target'))
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
