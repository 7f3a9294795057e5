/**
 * What valid ntfy settings are (SPEC §8), for the admin's PUT and for `config.json`'s `ntfy`
 * section alike (kernel/config/load.ts reports these problems with the others at start):
 *
 * - `topic`: empty (notifications off) or an ntfy topic name: 1 to 64 letters, digits, `_`, `-`
 *   (what ntfy itself accepts);
 * - `base_url`: `https://...`, or `http://...` only for a loopback host (`localhost`, 127.0.0.0/8,
 *   `[::1]`), since the token and the events would otherwise cross the network in clear; no user
 *   or password in it (it is shown to every principal; the token has its own field), no query or
 *   fragment; a trailing `/` is dropped;
 * - `enabled_events`: kinds of NOTIFIABLE_EVENTS only (a duplicate counts once);
 * - `api_token`: visible ASCII without spaces, at most 1024 characters (it travels in a header).
 */
import { isLoopbackHost } from '../kernel/http/outbound.js'
import { NOTIFIABLE_EVENTS, isNotifiableEvent, type NotifiableEvent } from './notifiable-events.js'

export const DEFAULT_NTFY_BASE_URL = 'https://ntfy.sh'

const TOPIC = /^[-_A-Za-z0-9]{1,64}$/
const TOKEN = /^[\x21-\x7e]{1,1024}$/

export interface NtfySettingsInput {
  topic: string
  base_url: string
  enabled_events: readonly string[]
  api_token?: string
}

export interface NtfyProblem {
  field: 'topic' | 'base_url' | 'enabled_events' | 'api_token'
  message: string
}

export interface CheckedNtfySettings {
  topic: string
  /** normalised: no trailing `/` */
  base_url: string
  enabled_events: NotifiableEvent[]
}

/** The settings as stored and used, or every problem at once. */
export function checkNtfySettings(input: NtfySettingsInput): { settings: CheckedNtfySettings } | { problems: NtfyProblem[] } {
  const problems: NtfyProblem[] = []
  if (input.topic !== '' && !TOPIC.test(input.topic)) {
    problems.push({ field: 'topic', message: 'must be 1 to 64 letters, digits, _ or - (or empty to turn notifications off)' })
  }
  const base = baseUrlOf(input.base_url)
  if ('problem' in base) problems.push({ field: 'base_url', message: base.problem })
  const unknown = input.enabled_events.filter((kind) => !isNotifiableEvent(kind))
  if (unknown.length > 0) {
    problems.push({ field: 'enabled_events', message: `unknown event kind ${unknown.map((k) => JSON.stringify(k)).join(', ')}; known kinds: ${NOTIFIABLE_EVENTS.join(', ')}` })
  }
  if (input.api_token !== undefined && input.api_token !== '' && !TOKEN.test(input.api_token)) {
    problems.push({ field: 'api_token', message: 'must be visible ASCII characters without spaces, at most 1024' })
  }
  if (problems.length > 0 || 'problem' in base) return { problems }
  const enabled = new Set(input.enabled_events)
  return { settings: { topic: input.topic, base_url: base.url, enabled_events: NOTIFIABLE_EVENTS.filter((kind) => enabled.has(kind)) } }
}

function baseUrlOf(text: string): { url: string } | { problem: string } {
  let url: URL
  try {
    url = new URL(text)
  } catch {
    return { problem: `not a URL: ${JSON.stringify(text.slice(0, 100))}` }
  }
  if (url.username !== '' || url.password !== '') return { problem: 'must not carry a user or password (set api_token instead)' }
  if (url.search !== '' || url.hash !== '') return { problem: 'must not have a query or a fragment' }
  if (url.protocol === 'http:') {
    if (!isLoopbackHost(url.hostname)) return { problem: `http:// is allowed only for a loopback host (localhost, 127.0.0.1, [::1]); use https:// for ${url.hostname}` }
  } else if (url.protocol !== 'https:') {
    return { problem: `must be an https:// URL (http:// only for a loopback host), not ${url.protocol}` }
  }
  return { url: `${url.origin}${url.pathname.replace(/\/+$/, '')}` }
}

