/**
 * The identity feature's events (kernel/events.ts): who signed in, failed, was locked out,
 * changed what. `actor` is who did it, `subject` whom it concerns (usernames), `ip` the client's
 * address; a token appears as its hash prefix only, never itself.
 */
declare module '../kernel/events.js' {
  interface EventMap {
    user_created: { subject: string; role: string; ip: string }
    /** a session was created: the login is the only way to one */
    user_login: { actor: string; subject: string; ip: string; mfa: boolean }
    user_logout: { actor: string; subject: string; ip: string }
    /** `subject` only when the name typed is an existing user's (what was typed may be a password) */
    login_failure: { ip: string; outcome: 'failure'; attempt: 'password' | 'code' }
    /** once, when a lockout begins: the address's lock or the username's first delay (SPEC §7) */
    login_locked: { ip: string; outcome: 'refused'; locked: 'address' | 'username' | 'address and username'; attempt: 'password' | 'code' }
    password_changed: { subject: string; sessions_revoked: number }
    /** a signed-in user's code was wrong while confirming a change (MFA setup again, MFA off): not a sign-in */
    mfa_code_refused: { actor: string; subject: string; ip: string; outcome: 'failure' }
    mfa_enabled: { actor: string; subject: string; ip: string }
    mfa_disabled: { actor: string; subject: string; ip: string }
    /** the recovery route turned MFA off for every enrolled user */
    mfa_reset_all: { users: number; ip: string }
    api_token_created: { subject: string; token_hash_prefix: string }
    api_token_revoked: { subject: string; token_hash_prefix: string }
    session_revoked: { subject: string; sessions: number }
    user_role_changed: { subject: string; role: string }
    /** `user_id`: the deleted account's id, for what features kept under it (a download's keys and jobs) */
    user_deleted: { subject: string; user_id: string }
    /** an admin's change of a user other than the role: which fields, never their values (a password) */
    user_updated: { subject: string; changes: Array<'password' | 'disabled' | 'enabled' | 'mfa_reset' | 'sfw_check'> }
    settings_changed: { setting: 'allow_guest_jwt' | 'groups' | 'ip_lists' | 'ntfy' | 'users_db_config' | 'token_storage_config'; value?: boolean }
  }
}
export {}
