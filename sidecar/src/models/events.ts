/** The models feature's events (kernel/events.ts). */
declare module '../kernel/events.js' {
  interface EventMap {
    model_cache_refreshed: { folders: number; items: number }
    model_granted: { subject: string; folder: string; item_name: string }
    model_revoked: { subject: string; folder: string; item_name: string }
  }
}
export {}
