/**
 * Who a request acts for. Built once per request by the identity resolver
 * (DESIGN §2.4); everything downstream reads it and never decodes a token again.
 */
export const PERMISSION_KEYS = [
  'can_run',
  'can_access_api',
  'can_upload',
  'can_modify_workflows',
  'can_have_api_tokens',
  'can_view_all_comfyui_items',
  'can_download_models',
] as const

export type PermissionKey = (typeof PERMISSION_KEYS)[number]
export type Permissions = Record<PermissionKey, boolean>

export const ADMIN_ROLE = 'admin'

export type AuthType = 'session' | 'api_token' | 'anonymous'

export interface Principal {
  /** null for an anonymous client acting as a role (local_anonymous_role, guest without login). */
  userId: string | null
  username: string
  role: string
  isAdmin: boolean
  permissions: Permissions
  authType: AuthType
  /** the session jti or the API token hash; absent for anonymous principals */
  credentialId?: string
  sfwCheck: boolean
  mfaEnabled: boolean
}

export function can(principal: Principal, key: PermissionKey): boolean {
  return principal.isAdmin || principal.permissions[key] === true
}

/**
 * The administrator: the `admin` role (SPEC §4), on a principal the resolver built as one. The only
 * test of "is admin" for admin routes, admin pages and registration by an admin.
 */
export function isAdministrator(principal: Principal | null): boolean {
  return principal !== null && principal.isAdmin && principal.role === ADMIN_ROLE
}
