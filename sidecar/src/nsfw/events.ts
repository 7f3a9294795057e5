/** The content-safety feature's events (kernel/events.ts). */
declare module '../kernel/events.js' {
  interface EventMap {
    /**
     * An sfw_check user was refused an image (or a preview frame): `reason` says why. At most one
     * per user and image per BLOCK_EVENT_MS, and per user at most BLOCK_EVENTS_PER_MINUTE (policy.ts):
     * a page of thumbnails reloaded is one event per image, not one per request.
     */
    nsfw_block: { subject: string; ip: string; outcome: 'refused'; filename: string; reason: 'tagged' | 'detected' | 'unclassifiable' | 'preview' }
    /** a manual tag was set or cleared (mark-nsfw) */
    nsfw_marked: { ip: string; filename: string; is_nsfw: boolean }
  }
}
export {}
