/**
 * The outbound rules of a download (issue 22 item 5), for the source's API calls and for the
 * transfer itself: where each request may go, which headers go along, how redirects are followed.
 *
 * Rules (each one an attack row in test/unit/download-hops.test.ts):
 * - the first request goes to the configured base URL of the source (the caller builds it from
 *   the base; `firstProblem` refuses anything else: another origin, a user name or password in
 *   the URL, a scheme other than https or http to this machine);
 * - redirects are followed by hand, at most MAX_HOPS; each target must be `https` and its host
 *   must not be this machine, a private, shared or link-local address, neither written as such
 *   nor as a name that resolves to one (the address is checked in the connection's own lookup,
 *   so the address checked is the address connected to); `allow_private_hosts` lifts the last
 *   two rules (and lets http reach such hosts) for test stand-ins only;
 * - the user's key (`Authorization`) goes only to the base URL's origin, never to a redirect
 *   target on another origin; no cookie or Referer is ever sent;
 * - a URL in an error message never shows its query (signed URLs carry credentials there).
 */
import { lookup as dnsLookup, type LookupAddress } from 'node:dns'
import http, { type IncomingMessage, type IncomingHttpHeaders } from 'node:http'
import https from 'node:https'
import { isIP, type LookupFunction } from 'node:net'
import { IpSet } from '../access/ip.js'
import { DirectConnection } from './direct-body.js'
import { loggableUrl, outboundUrlProblem } from '../kernel/http/outbound.js'

export const MAX_HOPS = 5

/** What went wrong with a source, in words a user reads; `retryable`: worth another try later. */
export class SourceError extends Error {
  constructor(message: string, readonly retryable: boolean, readonly status?: number) {
    super(message)
  }
}

export interface HopPolicy {
  /** the configured base URL of the source */
  base: string
  allowPrivate: boolean
  /** `Bearer <key>`, sent to the base origin only */
  authorization?: string
}

/** Addresses that are not the internet's (also: multicast, broadcast, documentation nets do no harm but never serve models). */
const NOT_PUBLIC = new IpSet([
  '0.0.0.0/8', '10.0.0.0/8', '100.64.0.0/10', '127.0.0.0/8', '169.254.0.0/16', '172.16.0.0/12', '192.168.0.0/16', '224.0.0.0/4', '240.0.0.0/4',
  // IETF protocol assignments (192.0.0.8 and kin), and the benchmarking net labs route inside
  '192.0.0.0/24', '198.18.0.0/15',
  '::/128', '::1/128', 'fc00::/7', 'fe80::/10', 'fec0::/10', 'ff00::/8', '100::/64',
  // IPv4 carried in IPv6 (NAT64, 6to4, Teredo, IPv4-compatible, IPv4-translated): a gateway or a
  // tunnel turns them back into IPv4
  '64:ff9b::/96', '64:ff9b:1::/48', '2002::/16', '2001::/32', '::/96', '::ffff:0:0:0/96',
])

export function isPrivateAddress(address: string): boolean {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)
  return NOT_PUBLIC.has(mapped ? mapped[1] : address)
}

const bare = (hostname: string) => hostname.replace(/^\[|\]$/g, '').replace(/\.+$/, '').toLowerCase()

/** Why the first request may not go to `url`, or null. */
export function firstProblem(url: string, base: string): string | null {
  const problem = outboundUrlProblem(url)
  if (problem !== null) return problem
  if (new URL(url).origin !== new URL(base).origin) return 'the first request may go only to the configured source'
  return null
}

/** Why a redirect to `url` may not be followed, or null (a name's addresses are checked when it is connected to). */
export function redirectTargetProblem(url: string, allowPrivate: boolean): string | null {
  let target: URL
  try {
    target = new URL(url)
  } catch {
    return 'not an absolute URL'
  }
  if (target.username !== '' || target.password !== '') return 'a URL may not carry a user name or password'
  if (target.protocol !== 'https:' && target.protocol !== 'http:') return `the scheme ${target.protocol.slice(0, -1)} is not allowed`
  if (allowPrivate) return null
  if (target.protocol !== 'https:') return 'a redirect must go to https'
  const host = bare(target.hostname)
  if (host === 'localhost' || host.endsWith('.localhost')) return 'a redirect may not go to this machine'
  if (isIP(host) !== 0 && isPrivateAddress(host)) return 'a redirect may not go to this machine or a private or link-local address'
  return null
}

/** A lookup that refuses a name resolving to a non-public address (so the address checked is the one connected to). */
export const publicOnlyLookup: LookupFunction = (hostname, options, callback) => {
  dnsLookup(hostname, { ...options, all: true }, (err, addresses: LookupAddress[]) => {
    if (err) return callback(err, '', 4)
    const refused = addresses.find((a) => isPrivateAddress(a.address))
    if (refused !== undefined || addresses.length === 0) {
      const error = Object.assign(new Error(`${hostname} resolves to a private address`), { code: 'EPRIVATEADDRESS' })
      return callback(error, '', 4)
    }
    if ((options as { all?: boolean }).all) return (callback as unknown as (e: null, a: LookupAddress[]) => void)(null, addresses)
    callback(null, addresses[0].address, addresses[0].family)
  })
}

const agents = { http: new http.Agent({ keepAlive: false }), https: new https.Agent({ keepAlive: false }) }

/**
 * One GET, answered with its headers (the body is the caller's to read or drop). `direct`: over
 * a DirectConnection (direct-body.ts), whose body the caller may then read without Node's body
 * path; the request, head and everything else are Node's as ever.
 */
function get(url: string, headers: Record<string, string>, signal: AbortSignal, checkAddress: boolean, direct: boolean): Promise<{ response: IncomingMessage; connection?: DirectConnection }> {
  return new Promise((resolve, reject) => {
    const target = new URL(url)
    const client = target.protocol === 'https:' ? https : http
    const lookup = checkAddress ? publicOnlyLookup : undefined
    let connection: DirectConnection | undefined
    const request = client.get(target, {
      headers,
      signal,
      ...(direct
        ? { createConnection: () => (connection = new DirectConnection(target, lookup)).socket }
        : { agent: target.protocol === 'https:' ? agents.https : agents.http, ...(lookup !== undefined ? { lookup } : {}) }),
    })
    if (connection !== undefined) connection.request = request
    request.once('response', (response) => resolve({ response, ...(connection !== undefined ? { connection } : {}) }))
    request.once('error', reject)
  })
}

export interface Hop {
  url: string
  status: number
  headers: IncomingHttpHeaders
}

/**
 * GETs `first` (which must pass `firstProblem`), following redirects under the rules above;
 * resolves with the last answer (any status but a redirect) and the hops before it.
 */
export async function openFollowing(first: string, policy: HopPolicy, headers: Record<string, string>, signal: AbortSignal, direct = false): Promise<{ response: IncomingMessage; url: string; hops: Hop[]; connection?: DirectConnection }> {
  const baseOrigin = new URL(policy.base).origin
  const hops: Hop[] = []
  let url = first
  for (let hop = 0; ; hop++) {
    const problem = hop === 0 ? firstProblem(url, policy.base) : redirectTargetProblem(url, policy.allowPrivate)
    if (problem !== null) throw new SourceError(`${hop === 0 ? 'The source URL' : `A redirect to ${loggableUrl(url)}`} was refused: ${problem}`, false)
    const sameOrigin = new URL(url).origin === baseOrigin
    const sent: Record<string, string> = { ...headers, 'user-agent': 'authsvc-model-download', 'accept-encoding': 'identity' }
    if (sameOrigin && policy.authorization !== undefined) sent.authorization = policy.authorization
    let response: IncomingMessage
    let connection: DirectConnection | undefined
    try {
      ;({ response, connection } = await get(url, sent, signal, hop > 0 && !policy.allowPrivate, direct))
    } catch (err) {
      if (signal.aborted) throw err
      const code = (err as { code?: string }).code
      if (code === 'EPRIVATEADDRESS') throw new SourceError(`A redirect to ${loggableUrl(url)} was refused: its name resolves to a private address`, false)
      throw new SourceError(`${new URL(url).host} could not be reached (${code ?? (err as Error).message})`, true)
    }
    const location = response.headers.location
    if (response.statusCode !== undefined && response.statusCode >= 300 && response.statusCode < 400 && location !== undefined) {
      response.resume()
      hops.push({ url, status: response.statusCode, headers: response.headers })
      if (hop + 1 > MAX_HOPS) throw new SourceError(`The source redirected more than ${MAX_HOPS} times`, false)
      try {
        url = new URL(location, url).href
      } catch {
        throw new SourceError('The source redirected to something that is not a URL', false)
      }
      continue
    }
    return { response, url, hops, ...(connection !== undefined ? { connection } : {}) }
  }
}

/** Reads at most `max` bytes of a body (an error answer, a JSON document); more is an error. */
export async function readSmall(response: IncomingMessage, max: number): Promise<Buffer> {
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of response) {
    size += (chunk as Buffer).length
    if (size > max) {
      response.destroy()
      throw new SourceError(`The source answered more than ${max} bytes where a short answer was expected`, false)
    }
    chunks.push(chunk as Buffer)
  }
  return Buffer.concat(chunks)
}
