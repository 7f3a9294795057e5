/**
 * What a person sees of a session so they can tell which one is their phone:
 * the device, browser and system in words, read from the User-Agent the
 * session was created with (ua-parser-js 1.x: MIT; 2.x is AGPL, never it).
 *
 * The User-Agent is what the client chose to send: it names, it never
 * authorises. It is kept as sent, bounded and stripped of control characters
 * (it is shown on pages and written to logs); it is never a secret.
 */
import UAParser from 'ua-parser-js'

/** Longer strings are cut: nobody reads past this, and the parser's regexes never see more. */
export const USER_AGENT_MAX = 512

export type DeviceKind = 'iPhone' | 'Android phone' | 'Desktop' | 'Tablet' | 'Unknown device'

export interface SessionDevice {
  device: DeviceKind
  /** e.g. "Firefox 128"; null when the agent names no browser */
  browser: string | null
  /** e.g. "iOS 17.0"; null when the agent names no system */
  os: string | null
}

/** The User-Agent as stored with a session: undefined when absent or blank. */
export function storedUserAgent(header: string | string[] | undefined): string | undefined {
  const raw = Array.isArray(header) ? header[0] : header
  if (raw === undefined) return undefined
  const clean = raw.replace(/[\u0000-\u001f\u007f]+/g, ' ').trim().slice(0, USER_AGENT_MAX)
  return clean === '' ? undefined : clean
}

/** Some parser names are longer than the browser's own name. */
const BROWSER_NAMES: Record<string, string> = { 'Mobile Safari': 'Safari', 'Mobile Firefox': 'Firefox', 'Chrome WebView': 'Android WebView' }

const DESKTOP_SYSTEMS = new Set(['Windows', 'Mac OS', 'macOS', 'Linux', 'Ubuntu', 'Debian', 'Fedora', 'Chromium OS', 'FreeBSD', 'OpenBSD', 'NetBSD', 'Arch', 'Mint', 'Gentoo', 'openSUSE', 'CentOS', 'RedHat', 'Solaris'])

const cache = new Map<string, SessionDevice>()
const CACHE_LIMIT = 1000

export function describeUserAgent(userAgent: string | undefined): SessionDevice {
  if (userAgent === undefined) return { device: 'Unknown device', browser: null, os: null }
  const known = cache.get(userAgent)
  if (known) return known
  const result = new UAParser(userAgent.slice(0, USER_AGENT_MAX)).getResult()
  const browserName = result.browser.name === undefined ? undefined : BROWSER_NAMES[result.browser.name] ?? result.browser.name
  const browser = browserName === undefined ? null : result.browser.major ? `${browserName} ${result.browser.major}` : browserName
  const os = result.os.name === undefined ? null : result.os.version ? `${result.os.name} ${result.os.version}` : result.os.name
  const described: SessionDevice = { device: deviceKind(result), browser, os }
  if (cache.size >= CACHE_LIMIT) cache.delete(cache.keys().next().value as string)
  cache.set(userAgent, described)
  return described
}

function deviceKind(result: UAParser.IResult): DeviceKind {
  switch (result.device.type) {
    case 'mobile':
      if (result.device.model === 'iPhone' || result.os.name === 'iOS') return 'iPhone'
      if (result.os.name === 'Android') return 'Android phone'
      return 'Unknown device'
    case 'tablet':
      return 'Tablet'
    case undefined:
      // no device type: a desktop browser, if it names a desktop system and a browser
      return result.browser.name !== undefined && result.os.name !== undefined && DESKTOP_SYSTEMS.has(result.os.name) ? 'Desktop' : 'Unknown device'
    default:
      return 'Unknown device'
  }
}

/** The client of a request, as a new session records it: its User-Agent and the address the gate saw. */
export function sessionClientOf(request: { headers: { 'user-agent'?: string | string[] }; facts: { ip: string } }): { userAgent?: string; ip?: string } {
  const userAgent = storedUserAgent(request.headers['user-agent'])
  return { ...(userAgent === undefined ? {} : { userAgent }), ...(request.facts.ip === '' ? {} : { ip: request.facts.ip }) }
}

/** A session's device, browser, system and address, as the session lists show them (unknown: null). */
export function describeSession(record: { user_agent?: string; ip?: string }): SessionDevice & { ip: string | null } {
  return { ...describeUserAgent(record.user_agent), ip: record.ip ?? null }
}
