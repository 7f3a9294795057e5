/**
 * MFA routes (SPEC §5.3). Who may do what:
 * - setup / verify-setup: a session, or a setup-purpose temp token (issued
 *   only when the role requires MFA and the user has none); a user who
 *   already has MFA must also give a current code: the password alone never
 *   re-enrols;
 * - verify: a login-purpose temp token plus a code or backup code;
 * - disable: a session plus a current code or backup code;
 * - recovery: no credential, only with RECOVERY_MODE and from a local client.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import QRCode from 'qrcode'
import Type, { type Static } from 'typebox'
import { AuthsvcError } from '../../kernel/errors.js'
import type { UserRecord } from '../users.js'
import { clearStepCookie, refuseCrossSiteSignIn, setSessionCookie } from '../session-cookie.js'
import { sessionClientOf } from '../session-device.js'
import { checkSecondFactor, mfaKey, tempTokenUser, throttledAttempt } from '../password-check.js'
import type { Services } from '../../services.js'

const Body = Type.Object({
  mfa_temp_token: Type.Optional(Type.String({ maxLength: 512 })),
  code: Type.Optional(Type.String({ maxLength: 16 })),
  backup_code: Type.Optional(Type.String({ maxLength: 32 })),
})

type MfaBody = Static<typeof Body>

const tags = ['second factor']

const SetupBegun = Type.Object({
  provisioning_uri: Type.String({ description: 'otpauth://totp/... for the authenticator app' }),
  secret: Type.String({ description: 'the TOTP secret (base32), shown during setup only' }),
  qr_svg: Type.String({ description: 'the provisioning URI as an SVG QR code' }),
  backup_codes: Type.Array(Type.String(), { description: '10 single-use codes, shown once' }),
  message: Type.String(),
  username: Type.String({ description: 'whose second factor this is (the setup page names them)' }),
  required_by_role: Type.Union([Type.String(), Type.Null()], { description: 'begun from a sign-in (a setup temp token): the role that requires MFA; null from a session' }),
})

const Enabled = Type.Union([
  Type.Object({ message: Type.String({ description: '`MFA enabled`' }), jwt_token: Type.String(), redirect_url: Type.String() }, { description: 'from the login flow (a setup temp token): a session too, and its cookie' }),
  Type.Object({ message: Type.String({ description: '`MFA enabled`' }) }),
])

const LoggedIn = Type.Object({ message: Type.String({ description: '`Login successful`' }), jwt_token: Type.String(), redirect_url: Type.String() })

const Message = Type.Object({ message: Type.String() })

/** What the MFA routes use (the second-factor step included). */
export type MfaRouteServices = Pick<Services, 'users' | 'sessions' | 'mfa' | 'throttle' | 'resetMfa' | 'recoveryMode' | 'events'>

export function mfaRoutes(services: MfaRouteServices) {
  /** The user a setup-family call acts for, and the temp token it used (if any). */
  const setupCaller = async (request: FastifyRequest, body: MfaBody): Promise<{ user: UserRecord; tempId?: string; temp?: { rememberMe: boolean; redirectUrl: string } }> => {
    if (body.mfa_temp_token !== undefined) {
      const { temp, user } = await tempTokenUser(services, request, body.mfa_temp_token, 'setup')
      // a setup token exists only for a user without MFA: once enrolled, it is spent
      if (user.mfa_enabled) throw new AuthsvcError('MFA_TOKEN_INVALID')
      return { user, tempId: temp.id, temp }
    }
    const p = request.principal
    if (p === null || p.authType !== 'session' || p.userId === null) throw new AuthsvcError(request.credentialError ?? 'AUTH_REQUIRED')
    const user = services.users.byId(p.userId)
    if (!user) throw new AuthsvcError('AUTH_REQUIRED')
    return { user }
  }

  const issueSession = async (request: FastifyRequest, reply: FastifyReply, user: UserRecord, rememberMe: boolean) => {
    const { token } = await services.sessions.issue(user, rememberMe, sessionClientOf(request))
    setSessionCookie(request, reply, token, rememberMe, services.sessions.lifetimeSeconds)
    clearStepCookie(request, reply)
    return token
  }

  return async function (fastify: FastifyInstance): Promise<void> {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
    app.post('/api/mfa/setup', {
      config: { auth: 'public' },
      schema: { summary: 'Begin enrolling a second factor (a session, or a setup temp token; a current code to re-enrol)', tags, body: Type.Optional(Body), response: { 200: SetupBegun } },
    }, async (request) => {
      // the body is optional here: a session alone may begin the setup
      const body = request.body ?? {}
      const { user, tempId } = await setupCaller(request, body)
      if (user.mfa_enabled) await checkSecondFactor(services, request, user, body, undefined, 'confirm')
      const { secret, uri, backupCodes } = await services.mfa.beginSetup(user.user_id, user.username)
      const qr_svg = await QRCode.toString(uri, { type: 'svg', errorCorrectionLevel: 'M', margin: 1 })
      return {
        provisioning_uri: uri,
        secret,
        qr_svg,
        backup_codes: backupCodes,
        message: 'Scan the QR code, then confirm with a code from the app (verify-setup). Keep the backup codes safe: each works once.',
        username: user.username,
        // a setup temp token is issued only when the user's role requires MFA (password-check.ts mfaStep)
        required_by_role: tempId === undefined ? null : user.role,
      }
    })

    app.post('/api/mfa/verify-setup', {
      config: { auth: 'public' },
      schema: { summary: 'Finish enrolling with a code from the app', tags, body: Body, response: { 200: Enabled } },
    }, async (request, reply) => {
      // with a temp token this step signs the browser in: from our own pages only (login CSRF)
      if (request.body.mfa_temp_token !== undefined) refuseCrossSiteSignIn(request)
      const { user, tempId, temp } = await setupCaller(request, request.body)
      const code = request.body.code
      if (!(await throttledAttempt(services, request, mfaKey(user.user_id), () => services.mfa.finishSetup(user.user_id, code)))) {
        if (tempId) await services.mfa.failTempToken(tempId)
        throw new AuthsvcError('MFA_INVALID_CODE')
      }
      await services.users.update(user.user_id, { mfa_enabled: true })
      services.events.emit('mfa_enabled', { actor: user.username, subject: user.username, ip: request.facts.ip })
      if (tempId && temp) {
        // one temp token gives one session, however many instances are asked at once
        if (!(await services.mfa.consumeTempToken(tempId))) throw new AuthsvcError('MFA_TOKEN_INVALID')
        const jwt_token = await issueSession(request, reply, user, temp.rememberMe)
        services.events.emit('user_login', { actor: user.username, subject: user.username, ip: request.facts.ip, mfa: true })
        return { message: 'MFA enabled', jwt_token, redirect_url: temp.redirectUrl }
      }
      return { message: 'MFA enabled' }
    })

    app.post('/api/mfa/verify', {
      config: { auth: 'public' },
      schema: { summary: 'The second step of a login: the temp token and a code or backup code give the session', tags, body: Body, response: { 200: LoggedIn } },
    }, async (request, reply) => {
      const body = request.body
      refuseCrossSiteSignIn(request) // it signs the browser in: from our own pages only (login CSRF)
      const { temp, user } = await tempTokenUser(services, request, body.mfa_temp_token, 'login')
      await checkSecondFactor(services, request, user, body, temp.id)
      if (!(await services.mfa.consumeTempToken(temp.id))) throw new AuthsvcError('MFA_TOKEN_INVALID')
      const jwt_token = await issueSession(request, reply, user, temp.rememberMe)
      services.events.emit('user_login', { actor: user.username, subject: user.username, ip: request.facts.ip, mfa: true })
      return { message: 'Login successful', jwt_token, redirect_url: temp.redirectUrl }
    })

    app.post('/api/mfa/disable', {
      config: { auth: 'user' },
      schema: { summary: 'Turn the second factor off (a session and a current code); other sessions end', tags, body: Body, response: { 200: Message } },
    }, async (request) => {
      const p = request.principal!
      if (p.authType !== 'session') throw new AuthsvcError('PERMISSION_DENIED', 'MFA is disabled from a signed-in session')
      const user = services.users.byId(p.userId!)
      if (!user) throw new AuthsvcError('AUTH_REQUIRED')
      if (!user.mfa_enabled) throw new AuthsvcError('CONFLICT', 'MFA is not enabled')
      await checkSecondFactor(services, request, user, request.body, undefined, 'confirm')
      await services.resetMfa(user.user_id)
      await services.sessions.revokeAllForUser(user.user_id, p.credentialId)
      services.events.emit('mfa_disabled', { actor: user.username, subject: user.username, ip: request.facts.ip })
      return { message: 'MFA disabled' }
    })

    app.post('/recovery/reset-mfa', {
      config: { auth: 'public' },
      schema: { summary: 'Turn every user\'s second factor off: only with RECOVERY_MODE, from a local client', tags, response: { 200: Message } },
    }, async (request) => {
      const enabled = services.recoveryMode
      if (!enabled || !request.facts.isLocal) throw new AuthsvcError('RECOVERY_DISABLED', enabled ? 'Recovery is only allowed from a local client' : undefined)
      const enrolled = services.users.list().filter((u) => u.mfa_enabled)
      for (const user of enrolled) await services.resetMfa(user.user_id)
      services.events.emit('mfa_reset_all', { users: enrolled.length, ip: request.facts.ip })
      return { message: `MFA reset for ${enrolled.length} user(s).` }
    })
  }
}
