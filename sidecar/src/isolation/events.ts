/** The isolation feature's events (kernel/events.ts): what the gate decided about a prompt. */
declare module '../kernel/events.js' {
  interface EventMap {
    /** the gate passed the prompt to the host (whose own validation may still answer 400) */
    prompt_queued: { ip: string; prompt_id: string }
    /** the gate refused the prompt: `code` as answered (MODEL_NOT_ALLOWED, NOT_OWNER, ...) */
    prompt_refused: { ip: string; outcome: 'refused'; code: string; status: number }
  }
}
export {}
