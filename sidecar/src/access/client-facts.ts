/**
 * Facts about the client derived from a request description or an owned
 * request: real address (forwarded headers only from trusted proxies: SPEC §1
 * "Fix"), locality, HTTPS, and whether it is a browser navigation.
 */
import { isIP } from 'node:net'
import { IpSet, normalizeIp } from './ip.js'

export interface ClientFacts {
  /** the client's address: what the throttles, the guest limits and the logs count */
  ip: string
  /**
   * Every address the request may come from: `ip`, and the other candidate when a trusted proxy's
   * X-Real-IP and X-Forwarded-For name different clients (one of the two is then the client's own
   * claim, passed on by the proxy, and nothing tells which). Privileges need all of them: the
   * client is local only if every address is, and the IP lists refuse it if they refuse any.
   */
  addresses: readonly string[]
  isLocal: boolean
  isHttps: boolean
  isNavigation: boolean
}

export interface NetworkPolicy {
  localNetworks: IpSet
  trustedProxies: IpSet
}

/**
 * Who the client is, from the peer and, only when the peer is a trusted proxy, the forwarded
 * headers (docs/decisions.md, "Which forwarded header a trusted proxy owns"). A proxy owns what
 * it writes: X-Real-IP when it sets one (nginx's `proxy_set_header X-Real-IP`), else the entry it
 * appended to X-Forwarded-For, i.e. the right-most entry that is not one of our proxies. A proxy
 * may pass the other header on from the client unchanged, so when both are present and disagree
 * both addresses are kept (see `addresses`), never the friendlier one alone.
 */
export function clientAddresses(peer: string, headers: Record<string, string | undefined>, net: NetworkPolicy): string[] {
  const direct = normalizeIp(peer)
  if (!net.trustedProxies.has(direct)) return [direct]
  const real = realIpOf(headers['x-real-ip'], net)
  const appended = appendedClientOf(headers['x-forwarded-for'], net)
  if (real === undefined) return [appended ?? direct]
  if (appended === undefined || appended === real) return [real]
  return [real, appended]
}

/** A single valid address that is not one of our proxies (a proxy behind a proxy names its peer). */
function realIpOf(header: string | undefined, net: NetworkPolicy): string | undefined {
  if (header === undefined) return undefined
  const ip = normalizeIp(header)
  return isIP(ip) !== 0 && !net.trustedProxies.has(ip) ? ip : undefined
}

/** Walking X-Forwarded-For from the right: the first valid hop that is not one of our proxies. */
function appendedClientOf(header: string | undefined, net: NetworkPolicy): string | undefined {
  if (header === undefined) return undefined
  const hops = header.split(',').map((h) => normalizeIp(h)).filter((h) => isIP(h) !== 0)
  for (let i = hops.length - 1; i >= 0; i--) {
    if (!net.trustedProxies.has(hops[i])) return hops[i]
  }
  // every hop is one of our proxies: the left-most is the farthest one, the best we know
  return hops[0]
}

/**
 * X-Forwarded-Proto from a trusted proxy: its right-most value, the one the proxy set or appended
 * (`https, http` is a client's `https` followed by the proxy's `http`). From anyone else: none.
 */
function forwardedProtoOf(header: string | undefined): string | undefined {
  if (header === undefined) return undefined
  const values = header.split(',')
  return values[values.length - 1].trim().toLowerCase()
}

export function isBrowserNavigation(headers: Record<string, string | undefined>): boolean {
  if (headers['sec-fetch-mode'] === 'navigate') return true
  if (headers['upgrade']) return false
  const accept = headers['accept'] ?? ''
  return accept.includes('text/html') && !accept.includes('application/json')
}

export function clientFacts(
  peer: string,
  scheme: string,
  headers: Record<string, string | undefined>,
  net: NetworkPolicy,
): ClientFacts {
  const addresses = clientAddresses(peer, headers, net)
  const viaTrustedProxy = net.trustedProxies.has(normalizeIp(peer))
  const forwardedProto = viaTrustedProxy ? forwardedProtoOf(headers['x-forwarded-proto']) : undefined
  return {
    ip: addresses[0],
    addresses,
    isLocal: addresses.every((ip) => net.localNetworks.has(ip)),
    isHttps: scheme === 'https' || forwardedProto === 'https',
    isNavigation: isBrowserNavigation(headers),
  }
}

/**
 * Whether a browser says this request comes from another origin's page: it sent `Sec-Fetch-Site`
 * or `Origin`, and they do not name ours. A script sends neither, and is not such a request.
 */
export function fromAnotherOrigin(headers: Record<string, string | undefined>, isHttps: boolean): boolean {
  return fromABrowser(headers) && !isSameOrigin(headers, isHttps)
}

/** Whether a browser sent this request: it says where it comes from (`Sec-Fetch-Site`, or `Origin`, which browsers send on every unsafe fetch); a script says neither. */
export function fromABrowser(headers: Record<string, string | undefined>): boolean {
  return headers['sec-fetch-site'] !== undefined || headers.origin !== undefined
}

/** Same-origin check for cookie-authenticated unsafe requests (SPEC §3 CSRF). */
export function isSameOrigin(headers: Record<string, string | undefined>, isHttps: boolean): boolean {
  const site = headers['sec-fetch-site']
  if (site !== undefined) return site === 'same-origin'
  const origin = headers['origin']
  const host = headers['host']
  if (!origin || !host) return false
  return origin === `${isHttps ? 'https' : 'http'}://${host}`
}
