/**
 * The identity feature's events (kernel/events.ts): who signed in, failed, was locked out,
 * changed what. `actor` is who did it, `subject` whom it concerns (usernames), `ip` the client's
 * address; a token appears as its hash prefix only, never itself.
 */
declare module '../kernel/events.js' {
  interface EventMap {
    user_created: { subject: string; role: string; actor?: string; ip: string }
    user_login: { subject: string; ip: string; mfa: boolean }
    user_logout: { subject: string; ip: string }
    login_failure: { ip: string }
    login_locked: { ip: string }
    password_changed: { subject: string; sessions_revoked: number }
    mfa_enabled: { subject: string }
    mfa_disabled: { subject: string }
    /** the recovery route turned MFA off for every enrolled user */
    mfa_reset_all: { users: number; ip: string }
    api_token_created: { subject: string; token_hash_prefix: string }
    api_token_revoked: { actor?: string; subject: string; token_hash_prefix: string }
    session_revoked: { actor?: string; subject: string; sessions: number }
    user_role_changed: { actor?: string; subject: string; role: string }
    user_deleted: { actor?: string; subject: string }
    /** an admin's change of a user other than the role: which fields, never their values (a password) */
    user_updated: { actor?: string; subject: string; changes: Array<'password' | 'disabled' | 'enabled' | 'mfa_reset' | 'sfw_check'> }
    settings_changed: { actor?: string; setting: 'allow_guest_jwt' | 'groups' | 'ip_lists' | 'ntfy'; value?: boolean }
  }
}
export {}
