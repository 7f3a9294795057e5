/**
 * Fastify's request log lines, as a LogController.
 *
 * Guarantee: by default (level info, `AUTHSVC_ACCESS_LOG` unset) a healthy sidecar writes
 * nothing per request, because its output is ComfyUI's console (issue 27: Fastify wrote two
 * lines per page or API call). `AUTHSVC_ACCESS_LOG=1` writes one info line per answered request;
 * at `AUTHSVC_LOG_LEVEL=debug` the same line is written at debug. Errors are logged as Fastify
 * logs them. Lines go through the logger's serializers: a query credential is redacted and no
 * header is written.
 */
import { LogController, type FastifyBaseLogger } from 'fastify'

type Level = 'info' | 'debug'

export function accessLogLevel(env: NodeJS.ProcessEnv, logger: FastifyBaseLogger): Level | null {
  if (env.AUTHSVC_ACCESS_LOG === '1' || env.AUTHSVC_ACCESS_LOG === 'true') return 'info'
  return logger.level === 'debug' || logger.level === 'trace' ? 'debug' : null
}

export class AccessLog extends LogController {
  constructor(private readonly level: Level | null) {
    super()
  }

  incomingRequest(): void {
    // the completed line says everything; one line per request at most
  }

  requestCompleted(...args: Parameters<LogController['requestCompleted']>): void {
    const [error, request, reply] = args
    if (error) {
      super.requestCompleted(...args)
      return
    }
    if (this.level === null) return
    reply.log[this.level]({ req: request, res: reply, responseTime: Math.round(reply.elapsedTime * 10) / 10 }, 'request')
  }

  routeNotFound(request: Parameters<LogController['routeNotFound']>[0]): void {
    if (this.level !== null) request.log[this.level]({ req: request }, 'route not found')
  }
}
