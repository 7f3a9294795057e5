/**
 * The event kinds an admin may have sent to ntfy (SPEC §8): the one list the settings accept in
 * `enabled_events`, the panel offers as checkboxes and the publisher filters on. The publisher
 * reads every kind of the event stream; only these can be enabled.
 */
export const NOTIFIABLE_EVENTS = [
  'user_created',
  'user_deleted',
  'user_role_changed',
  'user_login',
  'user_logout',
  'login_failure',
  'login_locked',
  'api_token_created',
  'mfa_enabled',
  'mfa_disabled',
  'nsfw_block',
  'download_completed',
  'download_failed',
  'settings_changed',
  'server_started',
] as const

export type NotifiableEvent = (typeof NOTIFIABLE_EVENTS)[number]

const KNOWN: ReadonlySet<string> = new Set(NOTIFIABLE_EVENTS)

export function isNotifiableEvent(kind: string): kind is NotifiableEvent {
  return KNOWN.has(kind)
}
