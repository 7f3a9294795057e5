/** The user-env feature's events (kernel/events.ts). */
declare module '../kernel/events.js' {
  interface EventMap {
    /** an administrator emptied a user's own folders: how much went (`failure`: something could not be removed) */
    user_env_purged: { actor: string; subject: string; ip: string; outcome: 'success' | 'failure'; files: number; bytes: number; folders: number }
  }
}
export {}
