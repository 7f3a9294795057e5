/** The models feature's events (kernel/events.ts). */
declare module '../kernel/events.js' {
  interface EventMap {
    model_cache_refreshed: { folders: number; items: number }
    /** to a user (`subject`) or to a role (`role`) */
    model_granted: ({ subject: string } | { role: string }) & { folder: string; item_name: string }
    /** `reason`: set when the service took it back itself (a download's file gone or another: host-grant-files.ts) */
    model_revoked: ({ subject: string } | { role: string }) & { folder: string; item_name: string; reason?: 'file_gone' | 'file_changed' }
  }
}
export {}
