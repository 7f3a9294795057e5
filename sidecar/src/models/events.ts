/** The models feature's events (kernel/events.ts). */
declare module '../kernel/events.js' {
  interface EventMap {
    model_cache_refreshed: { folders: number; items: number }
    /** to a user (`subject`) or to a role (`role`) */
    model_granted: ({ subject: string } | { role: string }) & { folder: string; item_name: string }
    model_revoked: ({ subject: string } | { role: string }) & { folder: string; item_name: string }
  }
}
export {}
