/**
 * Workflows on the host's disk: each principal's own space (`user/<host user>/`,
 * ComfyUI's per-user storage) and the shared set (`user/default/`, what a
 * single-user install had before authsvc).
 *
 * Paths are resolved the way ComfyUI resolves them (get_request_user_filepath:
 * unquote once when the name holds `%`, join, normalise, refuse what leaves the
 * root), so the gate and the host always mean the same file. Listings follow
 * ComfyUI's (glob without hidden files; `os.walk` for /v2). Writes are atomic.
 *
 * Decisions never touch the disk here (DESIGN §2, issue 25): what a userdata decision or filter
 * needs to know about a path (what is there, a listing, a shared file's text, an administrator's
 * delete of a shared workflow) is asked of the host that sent the request (`onHost`, the
 * `userdata` item of host-plugin/host_paths.py), at the moment of the decision, as the host's own
 * handler would find it. The disk functions below serve the owned routes (workflows/routes.ts),
 * which run on the sidecar's HTTP side, not on its decision path.
 */
import { ESCAPE_RUNS, escapedBytes } from '../kernel/host-query.js'
import { mkdirSync, readdirSync, renameSync, statSync, writeFileSync, type Stats } from 'node:fs'
import { basename, dirname, join, relative, resolve, sep } from 'node:path'
import { HostResolveError, type HostLink, type ResolveItem, type UserdataPlace } from '../kernel/host-link.js'

export const SHARED_HOST_USER = 'default'
export const WORKFLOWS_DIR = 'workflows'

const UTF8_REPLACING = new TextDecoder('utf-8') // not fatal: a byte that is not UTF-8 becomes U+FFFD

/**
 * Decodes %XX once as Python's urllib.parse.unquote does: an escape that is not %XX stays as it is,
 * and bytes that are not UTF-8 become U+FFFD (its errors='replace'), so what follows them is decoded
 * too: `%ff%2F..` is `\ufffd/..`, a real `..` segment for the host.
 */
export function unquoteOnce(text: string): string {
  return text.replace(ESCAPE_RUNS, (run) => UTF8_REPLACING.decode(escapedBytes(run)))
}

/** `root` joined with an already decoded relative name, or null when the result leaves `root`. */
export function joinInside(root: string, name: string): string | null {
  const path = resolve(root, name)
  if (path !== root && !path.startsWith(root + sep)) return null
  return path
}

/** An already decoded name relative to the user root with `/` separators (`workflows/a.json`), or null when it leaves the root. */
export function decodedRelative(name: string): string | null {
  const root = resolve('/', 'u')
  const path = joinInside(root, name)
  return path === null ? null : relative(root, path).split(sep).join('/')
}

/** A name from a request (the host unquotes it once more), relative to the user root, or null. */
export function userRelative(name: string): string | null {
  return decodedRelative(name.includes('%') ? unquoteOnce(name) : name)
}

/**
 * Whether a userdata name from a request (`{file}`, `dir=`, v2's `path=` after its extra unquote)
 * leaves the caller's own space as the host resolves it (a backslash is a plain character: the
 * plugin refuses Windows, docs/platforms.md). Nothing outside `<user_dir>/<comfy-user>/` is any
 * principal's: the shared set is reached by name, and the data dir (`<user_dir>/authsvc`) never
 * (docs/decisions.md "The data dir lives in ComfyUI's user directory").
 */
export function leavesUserSpace(name: string): boolean {
  return userRelative(name) === null
}

/** Whether a user-relative path is in the workflows folder (case does not count: macOS, Windows). */
export function inWorkflows(rel: string): boolean {
  const lower = rel.toLowerCase()
  return lower === WORKFLOWS_DIR || lower.startsWith(`${WORKFLOWS_DIR}/`)
}

export interface ListedFile {
  /** relative to the listed folder, `/` separators */
  rel: string
  size: number
  modified: number
  created: number
}

/** Visits every entry under `dir` (depth first, as readdir gives them), with its stats; unreadable entries are skipped. */
function walk(dir: string, visit: (full: string, name: string, st: Stats) => boolean | void): void {
  let names: string[]
  try {
    names = readdirSync(dir)
  } catch {
    return
  }
  for (const name of names) {
    const full = join(dir, name)
    let st: Stats
    try {
      st = statSync(full)
    } catch {
      continue
    }
    // a visitor returns false to keep out of a folder
    if (visit(full, name, st) !== false && st.isDirectory()) walk(full, visit)
  }
}

/** Files under `dir` as ComfyUI's glob lists them: hidden names skipped, recursive or not. */
export function listFiles(dir: string, recurse: boolean): ListedFile[] {
  const out: ListedFile[] = []
  walk(dir, (full, name, st) => {
    if (name.startsWith('.')) return false
    if (st.isFile()) out.push({ rel: relative(dir, full).split(sep).join('/'), size: st.size, modified: st.mtimeMs / 1000, created: st.ctimeMs / 1000 })
    return recurse
  })
  return out
}

export interface V2Entry {
  name: string
  path: string
  type: 'file' | 'directory'
  size?: number
  modified?: number
}

export type UserdataAsk = Omit<Extract<ResolveItem, { op: 'userdata' }>, 'op' | 'path'>

/** What the host found at one path of its user folder. */
export interface HostUserdata extends UserdataPlace {
  file: boolean
  dir: boolean
  exists: boolean
}

/**
 * The host's look at one absolute path of its user folder (host-plugin/host_paths.py, `userdata`):
 * whether something is there, and what `ask` asks for (a listing, a file's text, a removal). The
 * decision that asks waits for it; it rejects (and the request is refused with a 503) when the
 * host could not look, as a failed read here did.
 */
export async function onHost(host: HostLink, path: string, ask: UserdataAsk = {}): Promise<HostUserdata> {
  const { results } = await host.resolve([{ op: 'userdata', path, ...ask }])
  const r = results[0]
  if (r === undefined || r.status !== undefined || typeof r.file !== 'boolean' || typeof r.dir !== 'boolean' || typeof r.exists !== 'boolean') {
    throw new HostResolveError(`the host could not look at a userdata path (${r?.status ?? 'no answer'})`)
  }
  if ((ask.read === true && r.file && typeof r.text !== 'string') || (ask.remove === true && r.file && r.removed !== true)) {
    throw new HostResolveError('the host could not read or remove a userdata file')
  }
  return { ...r, file: r.file, dir: r.dir, exists: r.exists }
}

export class WorkflowStore {
  constructor(private readonly userDir: () => string | undefined) {}

  /** The root of one host user's userdata, or null while the host has not named its user folder. */
  root(hostUser: string): string | null {
    const dir = this.userDir()
    return dir ? resolve(dir, hostUser) : null
  }

  /**
   * The file a user-relative name means for one host user, or null. The name is already
   * decoded (userRelative, or a checked workflow name): it is never unquoted again here.
   */
  file(hostUser: string, name: string): string | null {
    const root = this.root(hostUser)
    return root === null ? null : joinInside(root, name)
  }

  isFile(path: string | null): path is string {
    if (path === null) return false
    try {
      return statSync(path).isFile()
    } catch {
      return false
    }
  }

  /** Writes atomically (temp file + rename), creating folders as ComfyUI does. */
  write(path: string, body: Buffer | string): void {
    mkdirSync(dirname(path), { recursive: true })
    // hidden, so a listing made meanwhile never shows half a file
    const temp = join(dirname(path), `.${basename(path)}.authsvc-${process.pid}-${Date.now()}.tmp`)
    writeFileSync(temp, body)
    renameSync(temp, path)
  }
}
