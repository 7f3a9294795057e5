/**
 * An event record as an ntfy notification: a readable title ("Login failed", "User alice
 * created"), a short message of the record's fields, ntfy tags (emoji short codes) and a
 * priority that is higher for failures and lockouts.
 *
 * Guarantees: only named fields are written (who, by whom, from where, the outcome and a fixed
 * list of detail fields): a field this module does not know never reaches ntfy, whatever an
 * emitter adds later; every value is cut to a short line without control characters, and
 * anything shaped like a credential (an API token, a JWT, an ntfy token) is replaced, as a
 * second line behind the emitters, which pass hash prefixes only (kernel/events.ts).
 */
import { hostname } from 'node:os'

/** What ntfy's JSON publishing API takes besides the topic (ntfy: priority 1 = min .. 5 = max). */
export interface NtfyMessage {
  title: string
  message: string
  tags: string[]
  priority: 1 | 2 | 3 | 4 | 5
}

/** A record of the event stream, read without trusting its shape (any kind may arrive). */
export type AnyEventRecord = { kind: string; at: number } & Record<string, unknown>

const TEXT_MAX = 200
const TITLE_MAX = 120
/** an API token (identity/api-tokens.ts), a JWS, an ntfy access token */
const CREDENTIAL_SHAPES = /\bast_[A-Za-z0-9_-]{16,}|\beyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*|\btk_[A-Za-z0-9]{16,}/g

/** the detail fields a message may carry, with their labels, in the order written */
const DETAILS: ReadonlyArray<[field: string, label: string]> = [
  ['role', 'Role'],
  ['setting', 'Setting'],
  ['value', 'Value'],
  ['changes', 'Changed'],
  ['mfa', 'With two-factor'],
  ['token_hash_prefix', 'Token'],
  ['sessions', 'Sessions'],
  ['sessions_revoked', 'Sessions revoked'],
  ['users', 'Users'],
  ['folder', 'Folder'],
  ['item_name', 'Item'],
  ['filename', 'File'],
  ['source', 'Source'],
  ['job_id', 'Job'],
  ['reason', 'Reason'],
  ['version', 'Version'],
]

interface KindStyle {
  title(r: Fields): string
  tags: string[]
  priority: NtfyMessage['priority']
}

/** The record's known fields as short safe text. */
interface Fields {
  subject?: string
  actor?: string
  ip?: string
  outcome?: string
  of(field: string): string | undefined
}

const STYLES: Record<string, KindStyle> = {
  user_created: { title: (r) => (r.subject ? `User ${r.subject} created` : 'User created'), tags: ['bust_in_silhouette'], priority: 3 },
  user_deleted: { title: (r) => (r.subject ? `User ${r.subject} deleted` : 'User deleted'), tags: ['wastebasket'], priority: 4 },
  user_role_changed: { title: (r) => (r.subject && r.of('role') ? `${r.subject} is now ${r.of('role')}` : `Role of ${r.subject ?? 'a user'} changed`), tags: ['busts_in_silhouette'], priority: 4 },
  user_login: { title: (r) => `${r.subject ?? 'Someone'} signed in`, tags: ['key'], priority: 2 },
  user_logout: { title: (r) => `${r.subject ?? 'Someone'} signed out`, tags: ['wave'], priority: 2 },
  login_failure: { title: (r) => (r.subject ? `Login failed for ${r.subject}` : 'Login failed'), tags: ['warning', 'lock'], priority: 4 },
  login_locked: { title: (r) => (r.subject ? `${r.subject} locked out` : r.ip ? `Logins from ${r.ip} locked out` : 'Logins locked out'), tags: ['rotating_light', 'lock'], priority: 5 },
  api_token_created: { title: (r) => `API token created for ${r.subject ?? 'a user'}`, tags: ['key'], priority: 3 },
  mfa_enabled: { title: (r) => `Two-factor sign-in on for ${r.subject ?? 'a user'}`, tags: ['closed_lock_with_key'], priority: 3 },
  mfa_disabled: { title: (r) => `Two-factor sign-in off for ${r.subject ?? 'a user'}`, tags: ['warning', 'unlock'], priority: 4 },
  nsfw_block: { title: (r) => (r.subject ? `NSFW image blocked for ${r.subject}` : 'NSFW image blocked'), tags: ['no_entry'], priority: 3 },
  download_completed: { title: (r) => (r.of('filename') ? `Download finished: ${r.of('filename')}` : 'Download finished'), tags: ['white_check_mark', 'arrow_down'], priority: 3 },
  download_failed: { title: (r) => (r.of('filename') ? `Download failed: ${r.of('filename')}` : 'Download failed'), tags: ['x', 'arrow_down'], priority: 4 },
  settings_changed: { title: (r) => (r.of('setting') ? `Settings changed: ${r.of('setting')}` : 'Settings changed'), tags: ['gear'], priority: 3 },
  server_started: { title: () => 'authsvc started', tags: ['rocket'], priority: 3 },
}

const fallback = (kind: string): KindStyle => ({ title: () => kind.replaceAll('_', ' '), tags: ['information_source'], priority: 3 })

const MACHINE = hostname()

export function notificationOf(record: AnyEventRecord, machine: string = MACHINE): NtfyMessage {
  const fields = fieldsOf(record)
  const style = STYLES[record.kind] ?? fallback(safeText(record.kind) ?? 'event')
  const failed = fields.outcome === 'failure' || fields.outcome === 'refused'
  const lines: string[] = []
  if (fields.subject) lines.push(`User: ${fields.subject}`)
  if (fields.actor && fields.actor !== fields.subject) lines.push(`By: ${fields.actor}`)
  if (fields.ip) lines.push(`From: ${fields.ip}`)
  if (fields.outcome) lines.push(`Outcome: ${fields.outcome}`)
  for (const [field, label] of DETAILS) {
    const value = fields.of(field)
    if (value !== undefined) lines.push(`${label}: ${value}`)
  }
  lines.push(`At: ${Number.isFinite(record.at) ? new Date(record.at).toISOString() : 'unknown'}`)
  lines.push(`Server: ${safeText(machine) ?? 'unknown'}`)
  const tags = failed && !style.tags.includes('warning') ? ['warning', ...style.tags] : style.tags
  return {
    title: cut(style.title(fields), TITLE_MAX),
    message: lines.join('\n'),
    tags: [...tags],
    priority: failed ? (Math.max(style.priority, 4) as NtfyMessage['priority']) : style.priority,
  }
}

function fieldsOf(record: AnyEventRecord): Fields {
  const text = (field: string) => (Object.hasOwn(record, field) ? safeText(record[field]) : undefined)
  return { subject: text('subject'), actor: text('actor'), ip: text('ip'), outcome: text('outcome'), of: text }
}

/** A value as one short line, or undefined for what has no short text form (objects, empty). */
function safeText(value: unknown): string | undefined {
  let text: string
  if (typeof value === 'string') text = value
  else if (typeof value === 'number' && Number.isFinite(value)) text = String(value)
  else if (typeof value === 'boolean') text = value ? 'yes' : 'no'
  else if (Array.isArray(value) && value.every((v) => typeof v === 'string' || typeof v === 'number')) text = value.join(', ')
  else return undefined
  // eslint-disable-next-line no-control-regex
  const clean = text.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]+/g, ' ').replace(CREDENTIAL_SHAPES, '[hidden]').trim()
  return clean === '' ? undefined : cut(clean, TEXT_MAX)
}

function cut(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`
}
