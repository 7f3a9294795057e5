/**
 * Versions of whole-map admin settings (groups, IP lists) for optimistic
 * concurrency: `GET` answers an `ETag`, `PUT` with `If-Match` replaces only
 * the version it names (412 `PRECONDITION_FAILED` otherwise).
 *
 * The tag is a hash of the stored value, so it changes with every content
 * change, however made (the admin API or an edit of the groups file), and
 * two equal values share a tag (saving what is already there is no conflict).
 */
import { createHash } from 'node:crypto'
import { AuthsvcError } from '../errors.js'

export function etagOf(value: unknown): string {
  return `"${createHash('sha256').update(JSON.stringify(value)).digest('base64url').slice(0, 22)}"`
}

/**
 * Whether a request's `If-Match` admits the current tag. Absent: yes (decision:
 * scripts of the replaced service send none). `*`: yes. Otherwise one of the
 * listed strong tags must be the current one (RFC 9110 §13.1.1: a weak tag never matches).
 */
export function ifMatchAdmits(header: string | string[] | undefined, current: string): boolean {
  if (header === undefined) return true
  const text = Array.isArray(header) ? header.join(',') : header
  if (text.trim() === '*') return true
  return text.split(',').map((t) => t.trim()).some((t) => t === current)
}

export function staleVersion(current: string): AuthsvcError {
  return new AuthsvcError('PRECONDITION_FAILED', undefined, { ETag: current })
}
