/**
 * Pages and their static assets (SPEC §5.1). Every page is one shell
 * (`web/shell.html`: the stylesheet, the header, a module script) around its
 * own fragment. Files are read once at start; the asset route serves only
 * names from that fixed set (no path handling). The Content-Security-Policy
 * allows scripts, styles and connections to this origin only: no inline
 * script or style, nothing from a CDN.
 */
import { readFileSync } from 'node:fs'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Type from 'typebox'
import { AuthsvcError } from '../kernel/errors.js'
import { htmlPage, htmlPageOrError, redirect } from '../kernel/http/openapi.js'
import { isAdministrator, type Principal } from '../identity/principal.js'
import { redirectToLogin } from '../access/request-context.js'
import { NextQuery, safeRedirectPath } from '../identity/session-cookie.js'
import type { Services } from '../services.js'

const WEB = new URL('../../web/', import.meta.url)
const read = (name: string) => readFileSync(new URL(name, WEB), 'utf8')

const SCRIPTS = ['common.js', 'login.js', 'register.js', 'mfa.js', 'token.js', 'loading.js', 'account.js', 'admin.js', 'admin-audit.js', 'admin-notify.js', 'admin-updates.js', 'admin-storage.js', 'admin-stores.js', 'admin-nsfw.js', 'account-storage.js', 'api.js', 'account-downloads.js', 'admin-downloads.js', 'permission-words.js', 'account-codes.js']
const ASSETS: Record<string, { type: string; body: string }> = {
  'authsvc.css': { type: 'text/css; charset=utf-8', body: read('authsvc.css') },
  ...Object.fromEntries(SCRIPTS.map((name) => [name, { type: 'text/javascript; charset=utf-8', body: read(name) }])),
}

const HTML = 'text/html; charset=utf-8'
export const PAGE_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
  "form-action 'self'",
].join('; ')
const PAGE_HEADERS = {
  'Cache-Control': 'no-store',
  'X-Frame-Options': 'DENY',
  'X-Content-Type-Options': 'nosniff',
  'Content-Security-Policy': PAGE_CSP,
  'Referrer-Policy': 'same-origin',
}

const tags = ['pages']
/** The answers of a page: the page; a browser without the session it needs goes to sign in first. */
const PAGE = { 200: htmlPage('the page') }
const SIGNED_IN_PAGE = { ...PAGE, 302: redirect('a browser without a session: to /login?next=<this page>'), 403: htmlPageOrError('not for this principal: a page that says why') }

const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)

interface PageSpec {
  title: string
  fragment: string
  script?: string
  frame: 'narrow' | 'wide'
  /** the header shows no "Sign in" link on the sign-in pages themselves */
  signInPage?: boolean
}

/** The header's account links: who is signed in, account, admin (admins only), log out. */
function nav(principal: Principal | null, spec: PageSpec): string {
  if (principal === null || principal.authType === 'anonymous') {
    return spec.signInPage ? '' : '<nav aria-label="Account"><a href="/login">Sign in</a></nav>'
  }
  const links = [
    `<span class="who" id="nav-user">${escapeHtml(principal.username)} · ${escapeHtml(principal.role)}</span>`,
    principal.userId !== null ? '<a href="/authsvc/account" id="nav-account">Account</a>' : '',
    isAdministrator(principal) ? '<a href="/authsvc/admin" id="nav-admin">Admin</a>' : '',
    '<form method="post" action="/logout"><button type="submit" class="link" id="nav-logout">Log out</button></form>',
  ]
  return `<nav aria-label="Account">${links.join('')}</nav>`
}

const SHELL = read('shell.html')

function render(request: FastifyRequest, page: PageSpec, main = page.fragment): string {
  return SHELL
    .replace('%TITLE%', () => escapeHtml(page.title))
    .replace('%SCRIPT%', () => (page.script ? `<script type="module" src="/authsvc/static/${page.script}"></script>` : ''))
    .replace('%NAV%', () => nav(request.principal, page))
    .replace('%FRAME%', () => page.frame)
    .replace('%MAIN%', () => main)
}

const send = (reply: FastifyReply, html: string, status = 200) => reply.code(status).headers(PAGE_HEADERS).type(HTML).send(html)

/** `GET /logout` that did not say it started on this site: the session stays, the page asks (identity/routes/auth.ts). */
export function sendLogoutConfirmation(request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const main = '<div class="card"><h1>Log out?</h1><p id="logout-question">You stay signed in until you confirm.</p>' +
    '<form method="post" action="/logout"><button type="submit" id="logout-confirm">Log out</button></form>' +
    '<p><a href="/">Back to ComfyUI</a></p></div>'
  return send(reply, render(request, { title: 'Log out', fragment: '', frame: 'narrow' }, main))
}

export function pageRoutes(services: Pick<Services, 'users' | 'settings'>) {
  const spec = (title: string, fragment: string, script: string | undefined, frame: PageSpec['frame'], signInPage = false): PageSpec => ({
    title, fragment: read(fragment), script, frame, signInPage,
  })
  const pages = {
    login: spec('Sign in', 'login.html', 'login.js', 'narrow', true),
    register: spec('Create account', 'register.html', 'register.js', 'narrow', true),
    mfa: spec('Two-factor authentication', 'mfa.html', 'mfa.js', 'narrow', true),
    token: spec('API token', 'token.html', 'token.js', 'narrow'),
    loading: spec('Loading', 'loading.html', 'loading.js', 'narrow'),
    account: spec('Account', 'account.html', 'account.js', 'wide'),
    admin: spec('Admin', 'admin.html', 'admin.js', 'wide'),
    api: spec('API', 'api.html', 'api.js', 'wide'),
  }

  const refusal = (request: FastifyRequest, reply: FastifyReply, title: string, text: string) =>
    send(reply, render(request, { title, fragment: '', frame: 'narrow' }, `<div class="card"><h1>${escapeHtml(title)}</h1><p id="refusal">${text}</p><p><a href="/">Back to ComfyUI</a></p></div>`), 403)

  return async function (app: FastifyInstance): Promise<void> {
    app.get('/login', { config: { auth: 'public' }, schema: { summary: 'The sign-in page (its script goes on to `next` once signed in)', tags, querystring: NextQuery, response: PAGE } }, async (request, reply) => {
      let main = pages.login.fragment
      if (services.users.count === 0) main = main.replace('id="register-hint" hidden', 'id="register-hint"')
      if (services.settings.get('allow_guest_jwt')) main = main.replace('id="guest-form" hidden', 'id="guest-form"')
      return send(reply, render(request, pages.login, main))
    })
    // Public: the page works from the temp token in its fragment; a signed-in user is sent on to the account page by its script.
    app.get('/mfa', { config: { auth: 'public' }, schema: { summary: 'The second-factor page (verify or set up)', tags, response: PAGE } }, async (request, reply) => send(reply, render(request, pages.mfa)))
    // Public only while no user exists; then for admins (who add users here).
    app.get('/register', { config: { auth: 'public' }, schema: { summary: 'The account creation page: anyone while no account exists, then admins', tags, response: SIGNED_IN_PAGE } }, async (request, reply) => {
      const p = request.principal
      if (services.users.count > 0 && !isAdministrator(p)) {
        if (p === null) return redirectToLogin(request, reply)
        return refusal(request, reply, 'Forbidden', 'Only an administrator can create accounts.')
      }
      return send(reply, render(request, pages.register))
    })
    // Public: a holding page that goes on to `next` once the service answers. The server applies
    // its own `next` rule and writes the result into the page; the script reads it from there and
    // never interprets the query itself.
    app.get('/loading', { config: { auth: 'public' }, schema: { summary: 'A holding page that goes on to `next` once the service answers', tags, querystring: NextQuery, response: PAGE } }, async (request, reply) => {
      const next = safeRedirectPath(request.queryParams.get('next'))
      return send(reply, render(request, pages.loading, pages.loading.fragment.replace('href="/" id="continue"', () => `href="${escapeHtml(next)}" id="continue"`)))
    })

    for (const prefix of ['/authsvc', '/api/authsvc']) {
      // Public (SPEC §5.1): the form takes a username and password; a session is not needed.
      app.get(`${prefix}/generate_token`, { config: { auth: 'public' }, schema: { summary: 'The API token page', tags, response: PAGE } }, async (request, reply) => send(reply, render(request, pages.token)))
      app.get(`${prefix}/account`, { config: { auth: 'principal', page: true }, schema: { summary: 'The account page (a principal with an account)', tags, response: SIGNED_IN_PAGE } }, async (request, reply) => {
        if (request.principal?.userId == null) return refusal(request, reply, 'No account', 'This session has no account of its own (guest or anonymous access).')
        return send(reply, render(request, pages.account))
      })
      app.get(`${prefix}/admin`, { config: { auth: 'principal', page: true }, schema: { summary: 'The admin panel (the admin role)', tags, response: SIGNED_IN_PAGE } }, async (request, reply) => {
        if (!isAdministrator(request.principal)) return refusal(request, reply, 'Administrators only', 'The admin panel is for the <code>admin</code> role.')
        return send(reply, render(request, pages.admin))
      })
      // the OpenAPI document made readable; the document itself is for any principal (kernel/http/openapi.ts)
      app.get(`${prefix}/admin/api`, { config: { auth: 'principal', page: true }, schema: { summary: 'The API page: this document, readable (the admin role)', tags, response: SIGNED_IN_PAGE } }, async (request, reply) => {
        if (!isAdministrator(request.principal)) return refusal(request, reply, 'Administrators only', 'The API page is for the <code>admin</code> role; the document itself is at <code>/authsvc/api/openapi.json</code>.')
        return send(reply, render(request, pages.api))
      })
    }
  }
}

const Asset = {
  description: 'a stylesheet or a script of the pages',
  content: { 'text/css': { schema: Type.String() }, 'text/javascript': { schema: Type.String() } },
}

/** Static assets of the pages, under the authsvc prefixes (`/authsvc/static/...`). */
export async function assetRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
  app.get('/static/:name', {
    config: { auth: 'public' },
    schema: { summary: 'The pages\' stylesheet and scripts', tags, params: Type.Object({ name: Type.String({ description: `one of ${Object.keys(ASSETS).join(', ')}` }) }), response: { 200: Asset } },
  }, async (request, reply) => {
    const asset = Object.hasOwn(ASSETS, request.params.name) ? ASSETS[request.params.name] : undefined
    if (!asset) throw new AuthsvcError('NOT_FOUND')
    return reply.header('Cache-Control', 'no-cache').header('X-Content-Type-Options', 'nosniff').type(asset.type).send(asset.body)
  })
}
