/**
 * Requests the sidecar makes on its own to another server (the update check; any later notifier
 * may share it): where they may go and what they may cost.
 *
 * Guarantees:
 * - `https:` to any host; `http:` only to a loopback host (127.0.0.0/8, ::1, `localhost`), so
 *   nothing travels in plain text over a network; no other scheme; never a URL that carries a
 *   user name or password (fetch would send them as Basic credentials);
 * - nothing of ours goes along: no cookie, no Authorization, no Referer; only the headers the
 *   caller names;
 * - a redirect is followed by hand, at most `MAX_REDIRECTS` times, and its target must pass the
 *   same rule (an https source cannot send us to plain http on another machine); a source that is
 *   not on this machine cannot send us to one that is, nor to a private, link-local or shared
 *   address written as such (a remote answer must not make the sidecar a client of ComfyUI or
 *   of the LAN's services; a name that resolves to such an address is not checked);
 * - one deadline for the whole exchange (every redirect, the headers and the body), and a cap on
 *   the body: an answer announced or found larger is cut off and refused, never read whole.
 * Every failure is an `OutboundError` whose message names what went wrong but never the URL's
 * query (where a source's key could sit).
 */
import { isIP } from 'node:net'
import { IpSet, isLoopback } from '../../access/ip.js'

export const MAX_REDIRECTS = 3

export class OutboundError extends Error {}

/** Why `raw` may not be fetched, or null when it may. */
export function outboundUrlProblem(raw: string): string | null {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    return 'not an absolute URL'
  }
  if (url.username !== '' || url.password !== '') return 'a URL may not carry a user name or password'
  if (url.protocol === 'https:') return null
  if (url.protocol !== 'http:') return `the scheme ${url.protocol.slice(0, -1)} is not allowed (https, or http to this machine)`
  if (isLoopbackHost(url.hostname)) return null
  return 'plain http is allowed only to this machine (127.0.0.1, ::1, localhost); use https'
}

/**
 * Whether a URL's hostname is this machine: `localhost`, or a loopback address literal. Any other
 * name counts for nothing (`127.0.0.1.nip.io` resolves wherever its owner likes); the WHATWG
 * parser has already turned `127.1`, `0x7f000001` and `[0:0::1]` into their plain forms.
 */
export function isLoopbackHost(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, '')
  return host === 'localhost' || (isIP(host) !== 0 && isLoopback(host))
}

/** Addresses that are not the internet's: this machine, private and shared networks, link-local. */
const NOT_PUBLIC = new IpSet([
  '0.0.0.0/8', '10.0.0.0/8', '100.64.0.0/10', '127.0.0.0/8', '169.254.0.0/16', '172.16.0.0/12', '192.168.0.0/16',
  '::/128', '::1/128', 'fc00::/7', 'fe80::/10',
])

/** Whether a URL names this machine or a non-public address (a literal, or `localhost`). */
function isInward(url: URL): boolean {
  const host = url.hostname.replace(/^\[|\]$/g, '')
  if (host === 'localhost' || host.endsWith('.localhost')) return true
  return isIP(host) !== 0 && NOT_PUBLIC.has(host)
}

/** Why a redirect from `from` to `to` may not be followed, or null when it may. */
export function redirectProblem(from: string, to: string): string | null {
  const problem = outboundUrlProblem(to)
  if (problem !== null) return problem
  if (!isInward(new URL(from)) && isInward(new URL(to))) return 'a source elsewhere may not send us to this machine or a private address'
  return null
}

/** The URL as a log line may show it: scheme, host and path, no query. */
export const loggableUrl = (raw: string): string => {
  try {
    const url = new URL(raw)
    return `${url.origin}${url.pathname}`
  } catch {
    return '(not a URL)'
  }
}

export interface OutboundOptions {
  /** the whole exchange, redirects and body included */
  timeoutMs: number
  /** the most body bytes read */
  maxBytes: number
  headers?: Record<string, string>
  /** the caller's own stop (the sidecar stopping) */
  signal?: AbortSignal
}

/** GETs `raw` within the rules above and returns its body; any status but 2xx is an error. */
export async function fetchCapped(raw: string, options: OutboundOptions): Promise<Buffer> {
  const deadline = AbortSignal.timeout(options.timeoutMs)
  const signal = options.signal ? AbortSignal.any([deadline, options.signal]) : deadline
  let url = raw
  try {
    for (let hop = 0, from = ''; ; hop++) {
      const problem = hop === 0 ? outboundUrlProblem(url) : redirectProblem(from, url)
      if (problem !== null) throw new OutboundError(`${hop === 0 ? 'the URL' : 'a redirect'}: ${problem}`)
      const response = await fetch(url, { method: 'GET', redirect: 'manual', credentials: 'omit', referrerPolicy: 'no-referrer', headers: options.headers, signal })
      const location = response.headers.get('location')
      if (response.status >= 300 && response.status < 400 && location !== null) {
        await response.body?.cancel()
        if (hop >= MAX_REDIRECTS) throw new OutboundError(`more than ${MAX_REDIRECTS} redirects`)
        from = url
        url = new URL(location, url).href
        continue
      }
      if (response.status < 200 || response.status > 299) {
        await response.body?.cancel()
        throw new OutboundError(`answered ${response.status}`)
      }
      return await readCapped(response, options.maxBytes)
    }
  } catch (err) {
    if (err instanceof OutboundError) throw err
    if (deadline.aborted) throw new OutboundError(`no complete answer within ${options.timeoutMs} ms`)
    if (options.signal?.aborted) throw new OutboundError('stopped')
    throw new OutboundError(`could not be reached (${(err as { cause?: { code?: string } }).cause?.code ?? (err as Error).name})`)
  }
}

async function readCapped(response: Response, maxBytes: number): Promise<Buffer> {
  const announced = Number(response.headers.get('content-length') ?? NaN)
  if (announced > maxBytes) {
    await response.body?.cancel()
    throw new OutboundError(`the answer is larger than ${maxBytes} bytes`)
  }
  const chunks: Uint8Array[] = []
  let size = 0
  if (response.body === null) return Buffer.alloc(0)
  const reader = response.body.getReader()
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    size += value.byteLength
    if (size > maxBytes) {
      await reader.cancel()
      throw new OutboundError(`the answer is larger than ${maxBytes} bytes`)
    }
    chunks.push(value)
  }
  return Buffer.concat(chunks)
}
