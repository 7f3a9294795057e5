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

/** Addresses an IpSet remembers its answer for (then it starts over): a client sends many requests. */
const MEMO_MAX = 4096

/** A compiled list of addresses and networks. */
export class IpSet {
  private readonly list = new BlockList()
  readonly size: number
  /**
   * answers by the address as given: BlockList.check builds a SocketAddress (a native object)
   * each time, about a tenth of a decision's CPU and most of its garbage; the list never changes
   */
  private readonly memo: Map<string, boolean> | null

  /** `remember`: false for sets made by the hundred (one per temporary ban), each of which would hold a memo */
  constructor(entries: readonly string[], remember = true) {
    this.memo = remember ? new Map() : null
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
    const known = this.memo?.get(ip)
    if (known !== undefined) return known
    const normalized = normalizeIp(ip)
    const version = isIP(normalized)
    const found = version !== 0 && this.list.check(normalized, version === 4 ? 'ipv4' : 'ipv6')
    if (this.memo !== null) {
      if (this.memo.size >= MEMO_MAX) this.memo.clear()
      this.memo.set(ip, found)
    }
    return found
  }
}

export function isLoopback(ip: string): boolean {
  const normalized = normalizeIp(ip)
  return normalized === '::1' || /^127\./.test(normalized)
}
