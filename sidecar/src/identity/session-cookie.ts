/** The `jwt_token` cookie (SPEC §3): HttpOnly, SameSite=Lax, Path=/, Secure over HTTPS; Max-Age only with remember_me. */
import type { FastifyReply, FastifyRequest } from 'fastify'
import Type from 'typebox'
import { SESSION_COOKIE } from './credentials.js'
import { AuthsvcError } from '../kernel/errors.js'
import { fromAnotherOrigin } from '../access/client-facts.js'

/**
 * A step that signs a browser in (a session cookie) or makes the first account must come from our
 * own pages: another site's page (or a sibling origin's: another port of this host is same-site)
 * would sign the visitor in as the page's account (login CSRF), which SameSite cannot stop since no
 * cookie is needed to get one. A browser says where a request comes from (`Sec-Fetch-Site`, else
 * `Origin`); a script says nothing and is let through.
 */
export function refuseCrossSiteSignIn(request: FastifyRequest, message?: string): void {
  if (fromAnotherOrigin(request.headers as Record<string, string | undefined>, request.facts.isHttps)) throw new AuthsvcError('CSRF_REJECTED', message)
}

export function setSessionCookie(request: FastifyRequest, reply: FastifyReply, token: string, rememberMe: boolean, maxAgeSeconds: number): void {
  reply.setCookie(SESSION_COOKIE, token, {
    httpOnly: true,
    sameSite: 'lax',
    path: '/',
    secure: request.facts.isHttps,
    ...(rememberMe ? { maxAge: maxAgeSeconds } : {}),
  })
}

export function clearSessionCookie(request: FastifyRequest, reply: FastifyReply): void {
  reply.clearCookie(SESSION_COOKIE, { path: '/', httpOnly: true, sameSite: 'lax', secure: request.facts.isHttps })
}

/** A path of this origin as written: one leading `/`, no `//` or `/\` start (scheme-relative), no control character or backslash. */
function isPlainPath(path: string): boolean {
  return path.startsWith('/') && !path.startsWith('//') && !path.startsWith('/\\') && !/[\u0000-\u001f\u007f\\]/.test(path)
}

/**
 * `next` is followed only to same-origin paths: `/x`, never `//host`, `/\host`, a scheme or a
 * control character a browser drops (`/\t/host`). Checked before and after the URL parser
 * normalises it: dot segments can make a scheme-relative path of a plain one (`/.//host`).
 * The pages use this same rule (the server writes the target into /loading; its script only
 * reads it back).
 */
export function safeRedirectPath(next: unknown): string {
  if (typeof next !== 'string' || next.length === 0 || next.length > 2048 || !isPlainPath(next)) return '/'
  try {
    const url = new URL(next, 'http://authsvc.invalid')
    if (url.origin !== 'http://authsvc.invalid') return '/'
    const path = url.pathname + url.search + url.hash
    return isPlainPath(path) ? path : '/'
  } catch {
    return '/'
  }
}

/**
 * `?next=` where a route follows it, for the route's schema: read through safeRedirectPath from the
 * raw query (`request.queryParams`, a repeated key by its first value), so the schema admits what
 * the route always took and only documents it.
 */
export const NextQuery = Type.Object({
  next: Type.Optional(Type.Union([Type.String(), Type.Array(Type.String())], { description: 'where to go afterwards: a path of this origin; anything else goes to /' })),
})
