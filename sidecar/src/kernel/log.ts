/**
 * The structured logger (pino, as Fastify uses it). Guarantee: no secret is
 * logged: request URLs lose their query credentials, headers are never
 * serialized, and known secret-bearing fields are redacted wherever they appear.
 */
import pino, { type Logger } from 'pino'
import { QUERY_TOKEN_KEYS } from '../identity/credentials.js'

const SECRET_KEYS: ReadonlySet<string> = new Set(QUERY_TOKEN_KEYS)

/**
 * The URL with the value of every query credential replaced: each key is read as the resolver reads
 * it (URLSearchParams: `%74oken` is decoded before it is compared), in any case.
 */
export function redactUrl(url: string): string {
  const start = url.indexOf('?')
  if (start < 0) return url
  const hash = url.indexOf('#', start)
  const end = hash < 0 ? url.length : hash
  const query = url.slice(start + 1, end).split('&').map((pair) => {
    const key = new URLSearchParams(pair).keys().next().value
    return key !== undefined && SECRET_KEYS.has(key.toLowerCase()) ? `${pair.split('=', 1)[0]}=[REDACTED]` : pair
  })
  return `${url.slice(0, start + 1)}${query.join('&')}${url.slice(end)}`
}

export const REDACT_PATHS = [
  'password', '*.password', 'token', '*.token', 'jwt_token', '*.jwt_token', 'api_token', '*.api_token',
  'authorization', '*.authorization', 'cookie', '*.cookie', 'secret', '*.secret', 'code', '*.code',
  'backup_code', '*.backup_code', 'mfa_temp_token', '*.mfa_temp_token',
]

/** Fastify's own start-up line, which a healthy start must not print (issue 27): demoted to debug. */
const FASTIFY_LISTENING = /^Server listening at /

export function createLogger(options: { level?: string; destination?: pino.DestinationStream } = {}): Logger {
  return pino(
    {
      level: options.level ?? process.env.AUTHSVC_LOG_LEVEL ?? 'info',
      base: { svc: 'authsvc-sidecar' },
      redact: { paths: REDACT_PATHS, censor: '[REDACTED]' },
      hooks: {
        logMethod(args, method, level) {
          if (level === 30 && typeof args[0] === 'string' && FASTIFY_LISTENING.test(args[0])) {
            this.debug(...(args as [string]))
            return
          }
          method.apply(this, args)
        },
      },
      serializers: {
        req: (req: { method?: string; url?: string; headers?: Record<string, string> }) => ({
          method: req.method,
          url: redactUrl(req.url ?? ''),
          peer: req.headers?.['x-authsvc-peer'],
        }),
        res: (res: { statusCode?: number }) => ({ statusCode: res.statusCode }),
      },
    },
    options.destination,
  )
}
