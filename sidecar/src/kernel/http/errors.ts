/**
 * One error shape for every owned route: `{error, code, statusCode}` from the
 * catalogue. Framework errors (bad JSON, schema, size, media type) become
 * their 4xx code; anything unexpected is a logged 500 with a generic message,
 * never a stack trace or internal detail.
 *
 * The shape is one shared schema, `ErrorAnswer` (`ErrorRef` where a route's schema names it).
 * The OpenAPI document gives it to every operation's 4xx and 5xx answers (kernel/http/openapi.ts);
 * the routes' own schemas leave them out, so errors keep their plain JSON.stringify and a start
 * compiles no serialiser per route for them.
 */
import type { FastifyError, FastifyInstance } from 'fastify'
import Type from 'typebox'
import { AuthsvcError, ERRORS, errorBody, type ErrorCode } from '../errors.js'

/** SPEC §2: every error answer; the codes are the catalogue of docs/errors.md. */
export const ErrorAnswer = Type.Object(
  {
    error: Type.String({ description: 'a message for people; its wording may change' }),
    code: Type.Unsafe<ErrorCode>({ type: 'string', enum: Object.keys(ERRORS) }),
    statusCode: Type.Integer(),
  },
  { $id: 'ErrorAnswer', additionalProperties: false, description: 'An error (SPEC §2): `code` is stable, `error` is for people' },
)

/** Where a route's schema names the shared error shape. */
export const ErrorRef = Type.Ref('ErrorAnswer')

function frameworkCode(err: FastifyError): ErrorCode | null {
  if (err.validation) return 'VALIDATION_FAILED'
  switch (err.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return 'PAYLOAD_TOO_LARGE'
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return 'UNSUPPORTED_MEDIA_TYPE'
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return 'VALIDATION_FAILED'
  }
  if (err instanceof SyntaxError || (err.statusCode !== undefined && err.statusCode >= 400 && err.statusCode < 500)) {
    return err.statusCode === 413 ? 'PAYLOAD_TOO_LARGE' : err.statusCode === 415 ? 'UNSUPPORTED_MEDIA_TYPE' : 'VALIDATION_FAILED'
  }
  return null
}

export function registerErrorHandling(app: FastifyInstance): void {
  app.addSchema(ErrorAnswer)
  app.setErrorHandler((err: FastifyError, request, reply) => {
    if (err instanceof AuthsvcError) {
      // the cause (a store error, say) goes to the log only; the client gets the catalogue message
      if (err.statusCode >= 500) request.log.error({ error_code: err.code, err: err.cause }, err.message) // not `code`: that field is redacted (MFA codes)
      return reply.code(err.statusCode).headers(err.headers).send(err.body())
    }
    const code = frameworkCode(err)
    if (code !== null) {
      const message = code === 'VALIDATION_FAILED' && err.validation ? `Invalid request: ${err.message}` : undefined
      return reply.code(errorBody(code).statusCode).send(errorBody(code, message))
    }
    request.log.error({ err }, 'unexpected error in an owned route')
    return reply.code(500).send(errorBody('INTERNAL_ERROR'))
  })
  app.setNotFoundHandler({}, (_request, reply) => reply.code(404).send(errorBody('NOT_FOUND')))
}
