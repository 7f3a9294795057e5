/** The downloads feature's events (kernel/events.ts); the notifier sends them by kind (notify/). */
declare module '../kernel/events.js' {
  interface EventMap {
    download_queued: { job_id: string; source: string; folder: string }
    download_completed: { job_id: string; source: string; folder: string; filename: string; bytes: number; sha256: string }
    download_failed: { job_id: string; source: string; folder: string; filename: string; error: string }
    download_cancelled: { job_id: string; source: string }
    download_key_changed: { source: string; cleared: boolean }
  }
}
export {}
