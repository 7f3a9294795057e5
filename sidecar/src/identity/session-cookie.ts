/** The `jwt_token` cookie (SPEC §3): HttpOnly, SameSite=Lax, Path=/, Secure over HTTPS; Max-Age only with remember_me. */
import type { FastifyReply, FastifyRequest } from 'fastify'
import Type from 'typebox'
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto'
import { SESSION_COOKIE, cookieValues } from './credentials.js'
import { AuthsvcError } from '../kernel/errors.js'
import { fromABrowser, fromAnotherOrigin } from '../access/client-facts.js'
import { TEMP_TOKEN_TTL_MS } from './mfa.js'

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

/**
 * The second step of a sign-in belongs to the browser that took the first (login CSRF through our
 * own page: another site's page sends its visitor to `/mfa#setup:<a temp token of its own
 * account>`; a visitor who enrols there is signed in as that account). When the password step
 * issues a temp token to a browser, that browser also gets a secret in a cookie (HttpOnly,
 * SameSite=Strict, `__Host-` over HTTPS, the temp token's life) and the token keeps its digest;
 * a temp token is then used only by the browser holding that cookie, and one issued to a script
 * (no cookie) only by a script. A browser is what says where it comes from (client-facts.ts
 * fromABrowser), as for the cross-site checks.
 */
const STEP_COOKIE = 'authsvc_mfa_step'
const STEP_SECRET = /^[A-Za-z0-9_-]{43}$/
/**
 * The step cookie's name: `__Host-` (Secure, no Domain: no sibling host can set it) whenever the
 * browser is on HTTPS, which its `Origin` says even where the service, behind a proxy it does not
 * trust, believes it is on plain HTTP.
 */
const stepCookieName = (request: FastifyRequest): string => (onHttps(request) ? `__Host-${STEP_COOKIE}` : STEP_COOKIE)
const onHttps = (request: FastifyRequest): boolean => request.facts.isHttps || /^https:\/\//i.test(String(request.headers.origin ?? ''))
/** The digest a temp token keeps: of the secret under the cookie's name (a secret from the `__Host-` cookie is no good in the other). */
const digest = (name: string, secret: string): Buffer => createHash('sha256').update(`mfa-step:${name}:${secret}`).digest()

/**
 * For a browser: the secret of its step cookie (a well-formed one it holds already, so that a
 * second sign-in, or another site's form post of some password, never voids a step in progress;
 * else a new one, set now), and the digest its temp token keeps; for a script, undefined.
 */
export function bindStepToBrowser(request: FastifyRequest, reply: FastifyReply): string | undefined {
  if (!fromABrowser(request.headers as Record<string, string | undefined>)) return undefined
  const name = stepCookieName(request)
  let secret = cookieValues(request.headers.cookie, name).find((v) => STEP_SECRET.test(v))
  if (secret === undefined) secret = randomBytes(32).toString('base64url')
  reply.setCookie(name, secret, { httpOnly: true, sameSite: 'strict', path: '/', secure: onHttps(request), maxAge: TEMP_TOKEN_TTL_MS / 1000 })
  return digest(name, secret).toString('hex')
}

/** Whether this request may use a temp token bound so: by the browser holding its cookie (any of the values sent under its name), or, unbound, by a script. */
export function stepBindingHolds(request: FastifyRequest, binding: string | undefined): boolean {
  if (binding === undefined) return !fromABrowser(request.headers as Record<string, string | undefined>)
  const name = stepCookieName(request)
  const want = Buffer.from(binding, 'hex')
  return cookieValues(request.headers.cookie, name).some((secret) => {
    const got = digest(name, secret)
    return want.length === got.length && timingSafeEqual(want, got)
  })
}

/** The step is over (a session was issued): its cookie goes. */
export function clearStepCookie(request: FastifyRequest, reply: FastifyReply): void {
  reply.clearCookie(stepCookieName(request), { path: '/', httpOnly: true, sameSite: 'strict', secure: onHttps(request) })
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
