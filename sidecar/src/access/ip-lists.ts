/**
 * IP whitelist and blacklist (SPEC §5.4). Compiled once per change, checked
 * on every request. Loopback is always admitted and can never be
 * blacklisted, so an admin cannot lock the machine itself out.
 */
import type { ErrorCode } from '../kernel/errors.js'
import type { IpGate } from './decide.js'
import type { IpListsSetting } from '../store/settings.js'
import type { Clock } from '../kernel/clock.js'
import { IpSet, isLoopback, parseCidr } from './ip.js'

interface Compiled {
  whitelist: IpSet
  permanent: IpSet
  temporary: Array<{ set: IpSet; until: number }>
}

export function ipListsProblems(lists: IpListsSetting): string[] {
  const problems: string[] = []
  lists.whitelist.forEach((entry, i) => {
    if (!parseCidr(entry)) problems.push(`whitelist[${i}]: not an IP address or CIDR`)
  })
  lists.blacklist.forEach((entry, i) => {
    const cidr = parseCidr(entry.ip)
    if (!cidr) problems.push(`blacklist[${i}].ip: not an IP address or CIDR`)
    else if (isLoopback(cidr.address)) problems.push(`blacklist[${i}].ip: loopback can never be blacklisted`)
    if (entry.expires_at_iso !== undefined && Number.isNaN(Date.parse(entry.expires_at_iso))) {
      problems.push(`blacklist[${i}].expires_at_iso: not a date`)
    }
  })
  return problems
}

export class IpListGate implements IpGate {
  private compiled: Compiled

  constructor(lists: IpListsSetting, private readonly clock: Clock, private readonly onChange: () => void = () => {}) {
    this.compiled = IpListGate.compile(lists)
  }

  update(lists: IpListsSetting): void {
    this.compiled = IpListGate.compile(lists)
    this.onChange()
  }

  refuse(ip: string): ErrorCode | null {
    if (isLoopback(ip)) return null
    const { whitelist, permanent, temporary } = this.compiled
    if (whitelist.size > 0 && !whitelist.has(ip)) return 'IP_DENIED'
    if (permanent.size > 0 && permanent.has(ip)) return 'IP_DENIED'
    if (temporary.length > 0) {
      const now = this.clock()
      for (const entry of temporary) if (entry.until > now && entry.set.has(ip)) return 'IP_DENIED'
    }
    return null
  }

  private static compile(lists: IpListsSetting): Compiled {
    const permanent = lists.blacklist.filter((e) => e.expires_at_iso === undefined).map((e) => e.ip)
    const temporary = lists.blacklist
      .filter((e) => e.expires_at_iso !== undefined)
      .map((e) => ({ set: new IpSet([e.ip], false), until: Date.parse(e.expires_at_iso as string) }))
    return { whitelist: new IpSet(lists.whitelist), permanent: new IpSet(permanent), temporary }
  }
}
