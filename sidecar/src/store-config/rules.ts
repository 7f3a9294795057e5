/**
 * The rules of the store settings an admin edits (SPEC §5.4 users-db-config and
 * token-storage-config): how a store URL is shown (never its password), which URLs and paths
 * are accepted. Pure functions; the routes (routes.ts) and the tests use them.
 */
import { isAbsolute, relative, resolve, sep } from 'node:path'

/** Query parameters that carry a secret in PostgreSQL and Redis connection URLs. */
const SECRET_PARAMS = /^(password|pass|passwd|pwd|secret|token|auth|sslpassword|sslkey|api_key|apikey|access_token)$/i

export const REDACTED = '***'

/**
 * A store URL as an admin may see it: the scheme, the user, the host, the path and the query,
 * with the password (and every query value that names a secret) replaced by `***`. In a Redis
 * URL a user without a password is redacted too (`redis://secret@host`: several clients take
 * it as the password). A text that does not parse is never echoed.
 */
export function redactUrl(raw: string): string {
  if (raw === '') return ''
  const parsed = parseStoreUrl(raw)
  if (parsed === null) return '(not a valid URL)'
  const { url, hostless } = parsed
  const redis = url.protocol === 'redis:' || url.protocol === 'rediss:'
  let userinfo = ''
  if (url.username !== '' || url.password !== '') {
    const user = redis && url.password === '' ? REDACTED : url.username
    userinfo = `${user}${url.password !== '' ? `:${REDACTED}` : ''}@`
  }
  const params = [...url.searchParams.entries()].map(([k, v]) => `${encodeURIComponent(k)}=${SECRET_PARAMS.test(k) ? REDACTED : encodeURIComponent(v)}`)
  const query = params.length > 0 ? `?${params.join('&')}` : ''
  return `${url.protocol}//${userinfo}${hostless ? '' : url.host}${url.pathname}${query}`
}

/**
 * A store URL parsed. WHATWG URL refuses credentials without a host (`postgres://u:p@/db`), which
 * PostgreSQL uses with `?host=/socket/dir`: such a URL is parsed with a stand-in host and marked
 * hostless. Null when it does not parse.
 */
function parseStoreUrl(raw: string): { url: URL; hostless: boolean } | null {
  try {
    return { url: new URL(raw), hostless: false }
  } catch {
    const withHost = raw.replace(/^([a-z][a-z0-9+.-]*:\/\/(?:[^/@?#]*@)?)(?=[/?#]|$)/i, '$1stand-in.invalid')
    if (withHost === raw) return null
    try {
      return { url: new URL(withHost), hostless: true }
    } catch {
      return null
    }
  }
}

export type UrlKind = 'postgres' | 'redis'

const SCHEMES: Record<UrlKind, string[]> = {
  postgres: ['postgres:', 'postgresql:'],
  redis: ['redis:', 'rediss:'],
}

/** A problem with a store URL (never quoting it: it may hold a password), or null. */
export function urlProblem(kind: UrlKind, raw: string): string | null {
  if (/[\s\u0000-\u001f\u007f]/.test(raw)) return 'must not contain spaces or control characters'
  const parsed = parseStoreUrl(raw)
  if (parsed === null) return 'is not a valid URL'
  const { url, hostless } = parsed
  if (!SCHEMES[kind].includes(url.protocol)) return `must start with ${SCHEMES[kind].map((s) => `${s}//`).join(' or ')}`
  // PostgreSQL reaches a Unix socket by `?host=/run/postgresql` with no host in the authority
  const socketHost = kind === 'postgres' && (url.searchParams.get('host') ?? '').startsWith('/')
  if ((hostless || url.hostname === '') && !socketHost) return 'names no host'
  if (url.hash !== '') return 'must not have a #fragment'
  if (kind === 'redis' && url.pathname !== '' && url.pathname !== '/' && !/^\/\d{1,2}$/.test(url.pathname)) return 'may name only a database number as its path (/0 to /99)'
  return null
}

/** Whether a URL sent back is the redacted form of the stored one (the admin did not change it). */
export function isRedactedOf(sent: string, stored: string): boolean {
  return stored !== '' && sent.includes(REDACTED) && redactUrl(stored) === sent
}

const inside = (dir: string, path: string): boolean => {
  const rel = relative(resolve(dir), resolve(path))
  return rel === '' || (!rel.startsWith(`..${sep}`) && rel !== '..' && !isAbsolute(rel))
}

export interface PathLimits {
  dataDir: string
  /** folders the host serves or lists (output, input, temp, its user directory, model folders) */
  served: string[]
}

/**
 * A problem with a store file path (`sqlite_path`, `json_path`), or null. '' is the default in
 * the data dir. Otherwise an absolute path to a file, never inside a folder the host serves or
 * lists (its output, input and temp folders, its user directory but for the data dir, its model
 * folders): a store there could be read or replaced through a host route.
 */
export function pathProblem(path: string, limits: PathLimits): string | null {
  if (path === '') return null
  if (/[\u0000-\u001f\u007f]/.test(path)) return 'must not contain control characters'
  if (!isAbsolute(path)) return 'must be an absolute path (or empty for the default in the data dir)'
  if (path.endsWith('/') || path.endsWith(`${sep}.`) || path.endsWith(`${sep}..`)) return 'must name a file, not a folder'
  if (inside(limits.dataDir, path)) return null
  for (const dir of limits.served) {
    if (dir !== '' && inside(dir, path)) return `is inside ${dir}, which the host serves; keep stores in the data dir or outside the host's folders`
  }
  return null
}
