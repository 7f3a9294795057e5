/**
 * Credential channels (SPEC §3), in precedence order: Authorization Bearer,
 * cookie `jwt_token`, query `token` / `access_token`. The first channel that
 * is present is the one used: a present but invalid credential is refused,
 * never replaced by a weaker channel.
 */
export type Channel = 'bearer' | 'cookie' | 'query'

export interface PresentedCredential {
  channel: Channel
  value: string
}

export const QUERY_TOKEN_KEYS = ['token', 'access_token'] as const
export const SESSION_COOKIE = 'jwt_token'

/** Every `jwt_token` pair of a Cookie header, also in a second header joined with `, `. */
const SESSION_COOKIE_PAIRS = new RegExp(`(?:^|[;,])\\s*${SESSION_COOKIE}\\s*=[^;,]*`, 'g')

/**
 * The Cookie header without the session cookie, for the host (a session token is nobody else's to
 * read: not ComfyUI's, not another custom node's middleware); `''` when nothing else is left, null
 * when there was no session cookie in it.
 */
export function withoutSessionCookie(header: string | undefined): string | null {
  if (header === undefined || !header.includes(SESSION_COOKIE)) return null
  const left = header.replace(SESSION_COOKIE_PAIRS, '')
  if (left === header) return null
  return left.replace(/^\s*[;,]\s*/, '').trim()
}

/** Whether an Authorization header carries a bearer credential anywhere (two headers are joined with `, `). */
export const carriesBearer = (header: string | undefined): boolean => header !== undefined && /(?:^|[\s,])bearer\s/i.test(header)

export function cookieValue(cookieHeader: string | undefined, name: string): string | undefined {
  return cookieValues(cookieHeader, name)[0]
}

/** Every value a Cookie header gives `name`, in order (a browser sends two of one name when two paths or domains set it). */
export function cookieValues(cookieHeader: string | undefined, name: string): string[] {
  const out: string[] = []
  if (!cookieHeader) return out
  for (const part of cookieHeader.split(';')) {
    const eq = part.indexOf('=')
    if (eq < 0) continue
    if (part.slice(0, eq).trim() === name) {
      const raw = part.slice(eq + 1).trim()
      try {
        out.push(decodeURIComponent(raw.startsWith('"') && raw.endsWith('"') ? raw.slice(1, -1) : raw))
      } catch {
        out.push(raw)
      }
    }
  }
  return out
}

/**
 * Which query keys carry credentials and so must never reach the host: the credential keys, and
 * the same names behind a leading `?` (`/x??token=...`: the host reads the key as `?token`, which
 * is no credential here, yet its value is one the client meant as such).
 */
export function queryCredentialKeys(query: URLSearchParams): string[] {
  const keys = new Set<string>()
  for (const key of query.keys()) if ((QUERY_TOKEN_KEYS as readonly string[]).includes(key.replace(/^\?+/, ''))) keys.add(key)
  return [...keys]
}

export function presentedCredential(
  headers: Record<string, string | undefined>,
  query: URLSearchParams,
): PresentedCredential | null | 'malformed' {
  const authorization = headers['authorization']
  // other schemes (Basic from a reverse proxy, say) are not ours and are ignored
  if (authorization !== undefined && /^bearer(\s|$)/i.test(authorization)) {
    const match = /^Bearer[ ]+(\S+)\s*$/i.exec(authorization)
    if (!match) return 'malformed'
    return { channel: 'bearer', value: match[1] }
  }
  const cookie = cookieValue(headers['cookie'], SESSION_COOKIE)
  if (cookie) return { channel: 'cookie', value: cookie }
  for (const key of QUERY_TOKEN_KEYS) {
    const value = query.get(key)
    if (value) return { channel: 'query', value }
  }
  return null
}
