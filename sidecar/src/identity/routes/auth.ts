/**
 * Accounts in and out: register, login, logout (SPEC §5.2).
 * Login failures never say whether the user exists: unknown users cost one
 * dummy verify, disabled users a real one, and all answer the same 401.
 */
import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Type from 'typebox'
import { AuthsvcError } from '../../kernel/errors.js'
import { htmlPage, JSON_OR_FORM, redirect } from '../../kernel/http/openapi.js'
import { passwordProblem } from '../passwords.js'
import { ADMIN_ROLE, isAdministrator } from '../principal.js'
import { GUEST_ROLE, GUEST_SUBJECT } from '../guest-sessions.js'
import { usernameProblem } from '../users.js'
import { bindStepToBrowser, clearSessionCookie, NextQuery, refuseCrossSiteSignIn, safeRedirectPath, setSessionCookie } from '../session-cookie.js'
import { checkPassword, mfaStep, refuseIfThrottled } from '../password-check.js'
import { sendLogoutConfirmation } from '../../pages/routes.js'
import type { Services } from '../../services.js'
import { eventContext } from '../../access/request-context.js'
import { sessionClientOf, storedUserAgent } from '../session-device.js'

const Flag = Type.Union([Type.Boolean(), Type.String({ maxLength: 8 })])
const truthy = (v: unknown): boolean => v === true || v === 'true' || v === 'on' || v === '1'

const RegisterBody = Type.Object({
  username: Type.String({ maxLength: 256 }),
  password: Type.String({ maxLength: 4096 }),
  role: Type.Optional(Type.String({ maxLength: 64 })),
})

const LoginBody = Type.Object({
  username: Type.Optional(Type.String({ maxLength: 256 })),
  password: Type.Optional(Type.String({ maxLength: 4096 })),
  remember_me: Type.Optional(Flag),
  guest_login: Type.Optional(Flag),
  next: Type.Optional(Type.String({ maxLength: 2048 })),
})

const tags = ['accounts']

const Registered = Type.Object({
  message: Type.String({ description: '`User registered`' }),
  username: Type.String(),
  role: Type.String(),
  signed_in: Type.Optional(Type.Literal(true, { description: 'the first account only: it is signed in at once (a session cookie), unless its role requires MFA' })),
  mfa_setup_required: Type.Optional(Type.Literal(true, { description: 'the first account, when its role requires MFA: set it up with `mfa_temp_token` to get the session' })),
  mfa_temp_token: Type.Optional(Type.String()),
})

const LoggedIn = Type.Object({
  message: Type.String({ description: '`Login successful`' }),
  jwt_token: Type.String({ description: 'the session JWT (also set as the `jwt_token` cookie)' }),
  redirect_url: Type.String({ description: 'where a browser goes next (a same-origin path)' }),
  remember_me: Type.Boolean(),
})

/** The password was right; a second factor comes first (no cookie, no JWT). The MFA routes take the temp token. */
export const MfaStepAnswer = Type.Union([
  Type.Object({ message: Type.String({ description: '`MFA verification required`' }), mfa_required: Type.Literal(true), mfa_temp_token: Type.String() }),
  Type.Object({ message: Type.String({ description: '`MFA setup required`' }), mfa_setup_required: Type.Literal(true), mfa_temp_token: Type.String() }),
])

const LoggedOut = Type.Object({ message: Type.String({ description: '`Logged out`' }) })

/** What register, login and logout use (the password and MFA steps included). */
export type AuthRouteServices = Pick<Services, 'users' | 'sessions' | 'passwords' | 'roles' | 'settings' | 'clock' | 'throttle' | 'mfa' | 'events'>

export function authRoutes(services: AuthRouteServices) {
  // Registrations run one at a time: "is this the first user?" and the create must not interleave,
  // or two racing anonymous registrations would both become admin.
  let registering: Promise<unknown> = Promise.resolve()
  const oneAtATime = <T>(task: () => Promise<T>): Promise<T> => {
    const run = registering.then(task, task)
    registering = run.catch(() => {})
    return run
  }
  return async function (fastify: FastifyInstance): Promise<void> {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
    app.post('/register', {
      config: { auth: 'public' },
      schema: {
        summary: 'Create an account: anyone while none exists (the first is admin), then admins only', tags, consumes: JSON_OR_FORM,
        body: RegisterBody, response: { 201: Registered },
      },
    }, (request, reply) => oneAtATime(async () => {
      const body = request.body
      const first = services.users.count === 0
      refuseIfThrottled(services, request, null)
      // not a failed login: no secret was guessed, and counting it against the address would let
      // anyone there lock its real users out of their password login (issue 21)
      if (!first && !isAdministrator(request.principal)) throw new AuthsvcError('REGISTRATION_CLOSED')
      // the first account is the administrator: another site's page in the operator's browser must
      // not choose its password (a script sends neither header and may make it)
      if (first) refuseCrossSiteSignIn(request, 'The first account cannot be made from another site\'s page')
      const problem = usernameProblem(body.username) ?? passwordProblem(body.password)
      if (problem) throw new AuthsvcError('VALIDATION_FAILED', problem)
      let role = first ? ADMIN_ROLE : 'user'
      if (body.role !== undefined && !first) {
        if (!services.roles.has(body.role)) throw new AuthsvcError('VALIDATION_FAILED', 'Unknown role')
        role = body.role
      }
      if (services.users.byUsername(body.username)) throw new AuthsvcError('CONFLICT', 'Username already exists')
      const hash = await services.passwords.hash(body.password)
      const user = await services.users.create({ username: body.username, role, password_hash: hash }, new Date(services.clock()), first)
      services.events.emit('user_created', { ...eventContext(request), subject: user.username, role })
      const registered = { message: 'User registered', username: user.username, role: user.role }
      // The first account is signed in at once: whoever registered it could sign in with it next
      // anyway. Not from another site's page (a login CSRF), and not past a role that requires MFA.
      if (!first) return reply.code(201).send(registered)
      const step = await mfaStep(services, user, false, '/', () => bindStepToBrowser(request, reply))
      if (step && 'mfa_setup_required' in step) return reply.code(201).send({ ...registered, mfa_setup_required: true as const, mfa_temp_token: step.mfa_temp_token })
      const { token } = await services.sessions.issue(user, false, sessionClientOf(request))
      setSessionCookie(request, reply, token, false, services.sessions.lifetimeSeconds)
      services.events.emit('user_login', { actor: user.username, subject: user.username, ip: request.facts.ip, mfa: false })
      return reply.code(201).send({ ...registered, signed_in: true as const })
    }))

    app.post('/login', {
      config: { auth: 'public' },
      schema: {
        summary: 'Sign in with a password (or as the guest role): a session, or the second-factor step', tags, consumes: JSON_OR_FORM,
        body: LoginBody, querystring: NextQuery,
        response: { 200: Type.Union([LoggedIn, MfaStepAnswer]), 302: redirect('a browser navigation: to `redirect_url`, or to /mfa for the second factor') },
      },
    }, async (request, reply) => {
      const body = request.body
      refuseCrossSiteSignIn(request)
      const rememberMe = truthy(body.remember_me)
      const redirectUrl = safeRedirectPath(body.next ?? request.queryParams.get('next'))
      let subject: { user_id: string; username: string }
      let issued: { token: string }
      if (truthy(body.guest_login)) {
        if (!services.settings.get('allow_guest_jwt')) throw new AuthsvcError('GUEST_DISABLED')
        subject = { user_id: GUEST_SUBJECT, username: GUEST_ROLE }
        // throttled per address, bounded in number, short-lived; never remembered
        issued = await services.sessions.issueGuest(request.facts.ip, storedUserAgent(request.headers['user-agent']))
      } else {
        if (typeof body.username !== 'string' || typeof body.password !== 'string') {
          throw new AuthsvcError('VALIDATION_FAILED', 'username and password are required')
        }
        const user = await checkPassword(services, request, body.username, body.password)
        const step = await mfaStep(services, user, rememberMe, redirectUrl, () => bindStepToBrowser(request, reply))
        if (step) {
          // no cookie, no JWT: the temp token is good only for the MFA routes
          if (request.facts.isNavigation) return reply.header('Location', `/mfa#${'mfa_required' in step ? 'verify' : 'setup'}:${step.mfa_temp_token}`).code(302).send()
          return step
        }
        subject = user
        issued = await services.sessions.issue(subject, rememberMe, sessionClientOf(request))
      }
      const { token } = issued
      const remembered = rememberMe && subject.user_id !== GUEST_SUBJECT
      setSessionCookie(request, reply, token, remembered, services.sessions.lifetimeSeconds)
      services.events.emit('user_login', { actor: subject.username, subject: subject.username, ip: request.facts.ip, mfa: false })
      if (request.facts.isNavigation) return reply.header('Location', redirectUrl).code(302).send()
      return { message: 'Login successful', jwt_token: token, redirect_url: redirectUrl, remember_me: remembered }
    })

    const logout = async (request: import('fastify').FastifyRequest, reply: import('fastify').FastifyReply) => {
      const principal = request.principal
      // the cookie goes even when the store fails (503): the revocation already holds in memory
      clearSessionCookie(request, reply)
      // an event only when a user's session ended (a bearer API token or an anonymous client ends nothing)
      if (principal?.authType === 'session' && principal.credentialId) {
        await services.sessions.revoke(principal.credentialId)
        if (principal.userId !== null) services.events.emit('user_logout', { actor: principal.username, subject: principal.username, ip: request.facts.ip })
      }
      if (request.facts.isNavigation) return reply.code(302).header('Location', '/login').send()
      return { message: 'Logged out' }
    }
    // A cookie rides along on a cross-site GET (SameSite=Lax lets top-level navigations through),
    // so a GET ends a cookie session only when the browser says the navigation started here: typed,
    // bookmarked (`none`) or from one of our pages (`same-origin`). A sibling site is not us either.
    // Without the header (an old browser) the page offers the POST button instead; a HEAD never
    // logs out. POST keeps the same-origin rule of every cookie write (request-context.ts).
    const logoutAnswers = {
      200: { description: 'logged out (an API client); a GET from a page of unknown origin answers a page that asks', content: { 'application/json': { schema: LoggedOut }, ...htmlPage('').content } },
      302: redirect('a browser navigation: logged out, to /login'),
    }
    app.get('/logout', { config: { auth: 'public' }, schema: { summary: 'Log out (a cookie session only from this site)', tags, response: logoutAnswers } }, async (request, reply) => {
      if (request.channel !== 'cookie') return logout(request, reply)
      const site = request.headers['sec-fetch-site']
      if (site === 'cross-site' || site === 'same-site') throw new AuthsvcError('CSRF_REJECTED', 'A page of another site cannot log you out')
      if ((site === 'same-origin' || site === 'none') && request.method === 'GET') return logout(request, reply)
      if (!request.facts.isNavigation) throw new AuthsvcError('CSRF_REJECTED', 'Log out with POST /logout')
      return sendLogoutConfirmation(request, reply)
    })
    app.post('/logout', { config: { auth: 'public' }, schema: { summary: 'Log out: the session is revoked and the cookie cleared', tags, response: { 200: LoggedOut, 302: logoutAnswers[302] } } }, logout)
  }
}
