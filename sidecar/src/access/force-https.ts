/**
 * `force_https` (SPEC §10): a browser navigation (GET/HEAD) that arrived over
 * plain HTTP is answered 301 to the same host, path and query over https;
 * every owned answer over HTTPS carries HSTS. "Over HTTPS" is the scheme the
 * plugin saw, or `X-Forwarded-Proto: https` from a trusted proxy (ClientFacts).
 *
 * Guarantees: API clients and WebSocket upgrades are never redirected (a
 * redirect would break them, not secure them); a credential in the query is
 * never echoed into the Location (it has already crossed plain HTTP once);
 * a Host that is not a plain host[:port] gets no redirect built from it
 * (400 instead), so the redirect can never point at another site.
 */
import type { Config } from '../kernel/config/schema.js'
import type { ClientFacts } from './client-facts.js'
import { denyDecision } from '../kernel/answers.js'
import type { RespondDecision } from '../kernel/protocol.js'
import { queryCredentialKeys } from '../identity/credentials.js'

/** One year; no includeSubDomains: sibling hosts may not serve HTTPS. */
export const HSTS_VALUE = 'max-age=31536000'

const HOST = /^(?:[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$/

export type HttpsUpgrade = { status: 301; location: string } | { status: 400 }

/** What a request needs under force_https: null when it may go on as it is. */
export function httpsUpgrade(config: Pick<Config, 'force_https'>, method: string, facts: ClientFacts, host: string | undefined, path: string, rawQuery: string): HttpsUpgrade | null {
  if (!config.force_https || facts.isHttps || !facts.isNavigation) return null
  if (method !== 'GET' && method !== 'HEAD') return null
  if (host === undefined || !HOST.test(host)) return { status: 400 }
  const query = new URLSearchParams(rawQuery)
  const credentials = queryCredentialKeys(query)
  for (const key of credentials) query.delete(key)
  // untouched unless a credential was dropped: the query stays byte for byte as sent
  const search = credentials.length > 0 ? query.toString() : rawQuery
  return { status: 301, location: `https://${host}${path}${search ? `?${search}` : ''}` }
}

/** The decision path's form: the 301 (or 400) as a respond decision, or null. */
export function httpsUpgradeDecision(config: Pick<Config, 'force_https'>, desc: { method: string; path: string; query: string; headers: Record<string, string | undefined> }, facts: ClientFacts): RespondDecision | null {
  const upgrade = httpsUpgrade(config, desc.method, facts, desc.headers.host, desc.path, desc.query)
  if (upgrade === null) return null
  if (upgrade.status === 400) return denyDecision('VALIDATION_FAILED', 'force_https: the request has no usable Host header')
  return { action: 'respond', status: 301, headers: [['Location', upgrade.location], ['Cache-Control', 'no-store']], body_text: '' }
}
