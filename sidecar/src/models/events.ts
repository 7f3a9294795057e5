/** The models feature's events (kernel/events.ts). */
declare module '../kernel/events.js' {
  interface EventMap {
    model_cache_refreshed: { actor?: string; folders: number; items: number }
    model_granted: { actor?: string; subject: string; folder: string; item_name: string }
    model_revoked: { actor?: string; subject: string; folder: string; item_name: string }
  }
}
export {}
