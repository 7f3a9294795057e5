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

export function cookieValue(cookieHeader: string | undefined, name: string): string | undefined {
  if (!cookieHeader) return undefined
  for (const part of cookieHeader.split(';')) {
    const eq = part.indexOf('=')
    if (eq < 0) continue
    if (part.slice(0, eq).trim() === name) {
      const raw = part.slice(eq + 1).trim()
      try {
        return decodeURIComponent(raw.startsWith('"') && raw.endsWith('"') ? raw.slice(1, -1) : raw)
      } catch {
        return raw
      }
    }
  }
  return undefined
}

/** Which query keys carry credentials and so must never reach the host. */
export function queryCredentialKeys(query: URLSearchParams): string[] {
  return QUERY_TOKEN_KEYS.filter((k) => query.has(k))
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
