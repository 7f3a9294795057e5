/** The `jwt_token` cookie (SPEC §3): HttpOnly, SameSite=Lax, Path=/, Secure over HTTPS; Max-Age only with remember_me. */
import type { FastifyReply, FastifyRequest } from 'fastify'
import { SESSION_COOKIE } from '../identity/credentials.js'

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

/** `next` is followed only to same-origin paths: `/x`, never `//host` or `/\host` or a scheme. */
export function safeRedirectPath(next: unknown): string {
  if (typeof next !== 'string' || next.length === 0 || next.length > 2048) return '/'
  if (!next.startsWith('/') || next.startsWith('//') || next.startsWith('/\\')) return '/'
  if (/[\u0000-\u001f\\]/.test(next)) return '/'
  try {
    const url = new URL(next, 'http://authsvc.invalid')
    if (url.origin !== 'http://authsvc.invalid') return '/'
    return url.pathname + url.search + url.hash
  } catch {
    return '/'
  }
}
