/**
 * The error catalogue is a contract (SPEC §2): clients match on codes and
 * statuses. This pins the whole list; changing it must change this snapshot.
 */
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { AuthsvcError, ERRORS, errorBody, type ErrorCode } from '../../sidecar/src/kernel/errors.js'

const SNAPSHOT: Array<[string, number]> = [
  ['AUTH_REQUIRED', 401],
  ['TOKEN_EXPIRED', 401],
  ['TOKEN_REVOKED', 401],
  ['TOKEN_INVALID', 401],
  ['INVALID_CREDENTIALS', 401],
  ['MFA_REQUIRED', 401],
  ['MFA_INVALID_CODE', 401],
  ['MFA_TOKEN_INVALID', 401],
  ['PERMISSION_DENIED', 403],
  ['ADMIN_REQUIRED', 403],
  ['REGISTRATION_CLOSED', 403],
  ['RECOVERY_DISABLED', 403],
  ['GUEST_DISABLED', 403],
  ['CSRF_REJECTED', 403],
  ['IP_DENIED', 403],
  ['MODEL_NOT_ALLOWED', 403],
  ['WORKFLOW_DENIED', 403],
  ['NSFW_BLOCKED', 403],
  ['CLIENT_ID_TAKEN', 403],
  ['NOT_OWNER', 403],
  ['COOKIE_TOKEN_HIDDEN', 403],
  ['VALIDATION_FAILED', 400],
  ['NOT_FOUND', 404],
  ['METHOD_NOT_ALLOWED', 405],
  ['CONFLICT', 409],
  ['PROMPT_ID_TAKEN', 409],
  ['PRECONDITION_FAILED', 412],
  ['PAYLOAD_TOO_LARGE', 413],
  ['UNSUPPORTED_MEDIA_TYPE', 415],
  ['TOO_MANY_ATTEMPTS', 429],
  ['INTERNAL_ERROR', 500],
  ['NTFY_REJECTED', 502],
  ['NTFY_UNREACHABLE', 502],
  ['AUTHSVC_UNAVAILABLE', 503],
  ['STORE_UNAVAILABLE', 503],
]

/** SPEC §2 "Required codes include". */
const SPEC_REQUIRED = [
  'AUTH_REQUIRED', 'TOKEN_EXPIRED', 'TOKEN_REVOKED', 'INVALID_CREDENTIALS', 'MFA_REQUIRED', 'MFA_INVALID_CODE',
  'MFA_TOKEN_INVALID', 'PERMISSION_DENIED', 'ADMIN_REQUIRED', 'REGISTRATION_CLOSED', 'RECOVERY_DISABLED',
  'TOO_MANY_ATTEMPTS', 'VALIDATION_FAILED', 'NOT_FOUND', 'CONFLICT', 'MODEL_NOT_ALLOWED', 'WORKFLOW_DENIED',
  'NSFW_BLOCKED', 'IP_DENIED', 'CSRF_REJECTED', 'AUTHSVC_UNAVAILABLE',
]

/** SPEC §2: what each status class means. */
const STATUS_MEANING: Record<number, string> = {
  400: 'bad input', 401: 'no/invalid credential', 403: 'not allowed', 404: 'unknown object', 405: 'method',
  409: 'conflict', 412: 'stale version', 413: 'too large', 415: 'media type', 429: 'throttled', 500: 'internal', 502: 'upstream (ntfy) failed', 503: 'unavailable',
}

describe('error catalogue', () => {
  it('is exactly the pinned list of codes and statuses, in order', () => {
    assert.deepEqual(Object.entries(ERRORS).map(([code, e]) => [code, e.status]), SNAPSHOT)
  })

  it('contains every code SPEC §2 requires, with the status class the spec gives it', () => {
    const expectedStatus: Record<string, number> = {
      AUTH_REQUIRED: 401, TOKEN_EXPIRED: 401, TOKEN_REVOKED: 401, INVALID_CREDENTIALS: 401, MFA_REQUIRED: 401,
      MFA_INVALID_CODE: 401, MFA_TOKEN_INVALID: 401, PERMISSION_DENIED: 403, ADMIN_REQUIRED: 403,
      REGISTRATION_CLOSED: 403, RECOVERY_DISABLED: 403, TOO_MANY_ATTEMPTS: 429, VALIDATION_FAILED: 400,
      NOT_FOUND: 404, CONFLICT: 409, MODEL_NOT_ALLOWED: 403, WORKFLOW_DENIED: 403, NSFW_BLOCKED: 403,
      IP_DENIED: 403, CSRF_REJECTED: 403, AUTHSVC_UNAVAILABLE: 503,
    }
    for (const code of SPEC_REQUIRED) {
      assert.ok(Object.hasOwn(ERRORS, code), `missing required code ${code}`)
      assert.equal(ERRORS[code as ErrorCode].status, expectedStatus[code], code)
    }
  })

  it('codes are STABLE_UPPER_SNAKE, statuses are known classes, messages are non-empty and secret-free', () => {
    for (const [code, e] of Object.entries(ERRORS)) {
      assert.match(code, /^[A-Z][A-Z0-9_]*[A-Z0-9]$/, code)
      assert.ok(STATUS_MEANING[e.status], `${code}: unexpected status ${e.status}`)
      assert.ok(e.message.length > 0 && e.message.length < 120, code)
      assert.doesNotMatch(e.message, /\{|\}|\$\{|stack|Error:/, code)
    }
  })

  it('the NSFW message is the compat text of SPEC §2', () => {
    assert.equal(ERRORS.NSFW_BLOCKED.message, 'NSFW content blocked for this user.')
  })

  it('errorBody has exactly {error, code, statusCode}, with the catalogue status and default message', () => {
    for (const code of Object.keys(ERRORS) as ErrorCode[]) {
      const body = errorBody(code)
      assert.deepEqual(Object.keys(body).sort(), ['code', 'error', 'statusCode'])
      assert.deepEqual(body, { error: ERRORS[code].message, code, statusCode: ERRORS[code].status })
      assert.deepEqual(JSON.parse(JSON.stringify(body)), body, 'serialises as plain JSON')
    }
    assert.deepEqual(errorBody('NOT_FOUND', 'User not found'), { error: 'User not found', code: 'NOT_FOUND', statusCode: 404 })
  })

  it('AuthsvcError carries code, status, headers and the same body shape', () => {
    const err = new AuthsvcError('TOO_MANY_ATTEMPTS', undefined, { 'Retry-After': '600' })
    assert.equal(err.code, 'TOO_MANY_ATTEMPTS')
    assert.equal(err.statusCode, 429)
    assert.deepEqual(err.headers, { 'Retry-After': '600' })
    assert.deepEqual(err.body(), errorBody('TOO_MANY_ATTEMPTS'))
    assert.ok(err instanceof Error)
    const custom = new AuthsvcError('VALIDATION_FAILED', 'password must be at least 8 characters')
    assert.deepEqual(custom.body(), { error: 'password must be at least 8 characters', code: 'VALIDATION_FAILED', statusCode: 400 })
  })
})
