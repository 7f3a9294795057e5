/**
 * Facts about the client derived from a request description or an owned
 * request: real address (forwarded headers only from trusted proxies: SPEC §1
 * "Fix"), locality, HTTPS, and whether it is a browser navigation.
 */
import { IpSet, normalizeIp } from '../policy/ip.js'

export interface ClientFacts {
  ip: string
  isLocal: boolean
  isHttps: boolean
  isNavigation: boolean
}

export interface NetworkPolicy {
  localNetworks: IpSet
  trustedProxies: IpSet
}

export function clientIp(peer: string, headers: Record<string, string | undefined>, net: NetworkPolicy): string {
  const direct = normalizeIp(peer)
  if (!net.trustedProxies.has(direct)) return direct
  const forwarded = headers['x-forwarded-for']
  if (forwarded) {
    // walk from the right: the first hop that is not one of our proxies is the client
    const hops = forwarded.split(',').map((h) => normalizeIp(h)).filter(Boolean)
    for (let i = hops.length - 1; i >= 0; i--) {
      if (!net.trustedProxies.has(hops[i])) return hops[i]
    }
    if (hops.length > 0) return hops[0]
  }
  const real = headers['x-real-ip']
  return real ? normalizeIp(real) : direct
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
  const ip = clientIp(peer, headers, net)
  const viaTrustedProxy = net.trustedProxies.has(normalizeIp(peer))
  const forwardedProto = viaTrustedProxy ? headers['x-forwarded-proto']?.split(',')[0]?.trim().toLowerCase() : undefined
  return {
    ip,
    isLocal: net.localNetworks.has(ip),
    isHttps: scheme === 'https' || forwardedProto === 'https',
    isNavigation: isBrowserNavigation(headers),
  }
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
