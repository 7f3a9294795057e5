/**
 * The error catalogue: every error the service answers comes from here, with
 * a stable code and its HTTP status. Clients depend on the codes; the list is
 * pinned by test/unit/errors.test.ts and documented in docs/errors.md.
 */
export const ERRORS = {
  AUTH_REQUIRED: { status: 401, message: 'Authentication required' },
  TOKEN_EXPIRED: { status: 401, message: 'Token expired' },
  TOKEN_REVOKED: { status: 401, message: 'Token revoked' },
  TOKEN_INVALID: { status: 401, message: 'Invalid token' },
  INVALID_CREDENTIALS: { status: 401, message: 'Invalid username or password' },
  MFA_REQUIRED: { status: 401, message: 'MFA code required' },
  MFA_INVALID_CODE: { status: 401, message: 'Invalid MFA code' },
  MFA_TOKEN_INVALID: { status: 401, message: 'Invalid or expired MFA token' },
  PERMISSION_DENIED: { status: 403, message: 'Permission denied' },
  ADMIN_REQUIRED: { status: 403, message: 'Administrator role required' },
  REGISTRATION_CLOSED: { status: 403, message: 'Registration is closed' },
  RECOVERY_DISABLED: { status: 403, message: 'Recovery mode is disabled' },
  GUEST_DISABLED: { status: 403, message: 'Guest login is disabled' },
  CSRF_REJECTED: { status: 403, message: 'Cross-site request refused' },
  IP_DENIED: { status: 403, message: 'Access denied for this address' },
  MODEL_NOT_ALLOWED: { status: 403, message: 'Model not allowed' },
  WORKFLOW_DENIED: { status: 403, message: 'Workflow action not allowed' },
  NSFW_BLOCKED: { status: 403, message: 'NSFW content blocked for this user.' },
  CLIENT_ID_TAKEN: { status: 403, message: 'This clientId belongs to another user' },
  NOT_OWNER: { status: 403, message: 'This belongs to another user' },
  COOKIE_TOKEN_HIDDEN: { status: 403, message: 'A cookie session token is never handed to scripts' },
  VALIDATION_FAILED: { status: 400, message: 'Invalid request' },
  NOT_FOUND: { status: 404, message: 'Not found' },
  METHOD_NOT_ALLOWED: { status: 405, message: 'Method not allowed' },
  CONFLICT: { status: 409, message: 'Conflict' },
  PROMPT_ID_TAKEN: { status: 409, message: 'This prompt_id belongs to another user' },
  PRECONDITION_FAILED: { status: 412, message: 'Changed since you read it; reload and try again' },
  PAYLOAD_TOO_LARGE: { status: 413, message: 'Request body too large' },
  UNSUPPORTED_MEDIA_TYPE: { status: 415, message: 'Unsupported content type' },
  TOO_MANY_ATTEMPTS: { status: 429, message: 'Too many attempts; try again later' },
  INTERNAL_ERROR: { status: 500, message: 'Internal error' },
  NTFY_REJECTED: { status: 502, message: 'ntfy refused the notification' },
  NTFY_UNREACHABLE: { status: 502, message: 'ntfy could not be reached' },
  AUTHSVC_UNAVAILABLE: { status: 503, message: 'Authentication service unavailable' },
  STORE_UNAVAILABLE: { status: 503, message: 'The store is unavailable; try again shortly' },
} as const satisfies Record<string, { status: number; message: string }>

export type ErrorCode = keyof typeof ERRORS

export interface ErrorBody {
  error: string
  code: ErrorCode
  statusCode: number
}

/** An error meant for the client: its message is safe to show, its code is stable. */
export class AuthsvcError extends Error {
  readonly code: ErrorCode
  readonly statusCode: number
  readonly headers: Record<string, string>

  /** `cause`: what went wrong underneath (logged, never sent to the client) */
  constructor(code: ErrorCode, message?: string, headers: Record<string, string> = {}, cause?: unknown) {
    super(message ?? ERRORS[code].message, cause === undefined ? undefined : { cause })
    this.code = code
    this.statusCode = ERRORS[code].status
    this.headers = headers
  }

  body(): ErrorBody {
    return { error: this.message, code: this.code, statusCode: this.statusCode }
  }
}

export function errorBody(code: ErrorCode, message?: string): ErrorBody {
  return { error: message ?? ERRORS[code].message, code, statusCode: ERRORS[code].status }
}
