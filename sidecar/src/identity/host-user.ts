/**
 * The host's userdata space a principal acts in: the `comfy-user` the gate sets.
 *
 * A user acts as their user id. A guest session has no user, but it is someone on its
 * own: it gets a space of its own, named after its session (hashed, so the id reveals
 * nothing of the session). Anonymous principals of `local_anonymous_role` cannot be told
 * apart, and share one space. Nobody ever acts as `default`, the shared set.
 * ComfyUI accepts user ids of [A-Za-z0-9_-].
 */
import { createHash } from 'node:crypto'
import type { Principal } from './principal.js'

export const ANONYMOUS_HOST_USER = 'authsvc-anonymous'

export function hostUserOf(p: Principal): string {
  if (p.userId !== null) return p.userId
  if (p.credentialId !== undefined) return `authsvc-guest-${createHash('sha256').update(p.credentialId).digest('hex').slice(0, 16)}`
  return ANONYMOUS_HOST_USER
}

/** The name ComfyUI's users.json shows for that space. */
export const hostUserName = (p: Principal): string => (p.userId !== null ? p.username : p.credentialId !== undefined ? 'guest' : 'anonymous')
