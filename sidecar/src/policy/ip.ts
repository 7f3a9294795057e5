/**
 * IP addresses and CIDR lists, on top of node:net's BlockList.
 * IPv4-mapped IPv6 peers (::ffff:a.b.c.d) are matched as the IPv4 address,
 * so a rule for 127.0.0.0/8 cannot be dodged by the mapped spelling.
 */
import { BlockList, isIP } from 'node:net'

export interface Cidr {
  address: string
  prefix: number
  family: 'ipv4' | 'ipv6'
}

export function normalizeIp(raw: string): string {
  let ip = raw.trim()
  if (ip.startsWith('[') && ip.endsWith(']')) ip = ip.slice(1, -1)
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip)
  if (mapped) return mapped[1]
  return ip.toLowerCase()
}

export function parseCidr(text: string): Cidr | null {
  const [addressPart, prefixPart, ...rest] = text.trim().split('/')
  if (rest.length > 0) return null
  const address = normalizeIp(addressPart)
  const version = isIP(address)
  if (version === 0) return null
  const max = version === 4 ? 32 : 128
  let prefix = max
  if (prefixPart !== undefined) {
    if (!/^\d{1,3}$/.test(prefixPart)) return null
    prefix = Number(prefixPart)
    if (prefix > max) return null
  }
  return { address, prefix, family: version === 4 ? 'ipv4' : 'ipv6' }
}

/** A compiled list of addresses and networks. */
export class IpSet {
  private readonly list = new BlockList()
  readonly size: number

  constructor(entries: readonly string[]) {
    let size = 0
    for (const entry of entries) {
      const cidr = parseCidr(entry)
      if (!cidr) throw new Error(`not an IP address or CIDR: ${entry}`)
      this.list.addSubnet(cidr.address, cidr.prefix, cidr.family)
      size++
    }
    this.size = size
  }

  has(ip: string): boolean {
    const normalized = normalizeIp(ip)
    const version = isIP(normalized)
    if (version === 0) return false
    return this.list.check(normalized, version === 4 ? 'ipv4' : 'ipv6')
  }
}

export function isLoopback(ip: string): boolean {
  const normalized = normalizeIp(ip)
  return normalized === '::1' || /^127\./.test(normalized)
}
