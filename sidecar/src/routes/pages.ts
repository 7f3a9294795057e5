/**
 * Pages and their static assets (SPEC §5.1). Files are read once at start;
 * the asset route serves only names from that fixed set (no path handling).
 */
import { readFileSync } from 'node:fs'
import type { FastifyInstance } from 'fastify'
import { ADMIN_ROLE } from '../identity/principal.js'
import { redirectToLogin } from '../http/request-context.js'
import type { Services } from '../services.js'

const WEB = new URL('../../web/', import.meta.url)
const read = (name: string) => readFileSync(new URL(name, WEB), 'utf8')

const ASSETS: Record<string, { type: string; body: string }> = {
  'authsvc.css': { type: 'text/css; charset=utf-8', body: read('authsvc.css') },
  'authsvc.js': { type: 'text/javascript; charset=utf-8', body: read('authsvc.js') },
  'mfa.js': { type: 'text/javascript; charset=utf-8', body: read('mfa.js') },
}

const HTML = 'text/html; charset=utf-8'
const PAGE_HEADERS = {
  'Cache-Control': 'no-store',
  'X-Frame-Options': 'DENY',
  'Content-Security-Policy': "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
  'Referrer-Policy': 'same-origin',
}

export function pageRoutes(services: Services) {
  const login = read('login.html')
  const register = read('register.html')
  const mfaPage = read('mfa.html')
  return async function (app: FastifyInstance): Promise<void> {
    app.get('/login', { config: { auth: 'public' } }, async (_request, reply) => {
      const page = services.users.count === 0 ? login.replace('id="register-hint" hidden', 'id="register-hint"') : login
      return reply.headers(PAGE_HEADERS).type(HTML).send(page)
    })
    // Public: the page works from the temp token in its fragment, or from the session cookie.
    app.get('/mfa', { config: { auth: 'public' } }, async (_request, reply) => reply.headers(PAGE_HEADERS).type(HTML).send(mfaPage))
    // Public only while no user exists; then for admins (who add users here).
    app.get('/register', { config: { auth: 'public' } }, async (request, reply) => {
      const p = request.principal
      if (services.users.count > 0 && !(p?.isAdmin && p.role === ADMIN_ROLE)) {
        if (p === null) return redirectToLogin(request, reply)
        return reply.code(403).headers(PAGE_HEADERS).type(HTML).send('<!doctype html><title>Forbidden</title><p>Only an administrator can create accounts.</p>')
      }
      return reply.headers(PAGE_HEADERS).type(HTML).send(register)
    })
  }
}

/** Static assets of the pages, under the authsvc prefixes (`/authsvc/static/...`). */
export async function assetRoutes(app: FastifyInstance): Promise<void> {
  app.get('/static/:name', { config: { auth: 'public' } }, async (request, reply) => {
    const asset = ASSETS[(request.params as { name: string }).name]
    if (!asset) return reply.code(404).send({ error: 'Not found', code: 'NOT_FOUND', statusCode: 404 })
    return reply.header('Cache-Control', 'public, max-age=300').type(asset.type).send(asset.body)
  })
}
