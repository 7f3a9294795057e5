/**
 * Keeps routine, cheap-to-cause events from pushing the rest out of the audit log: every stored
 * event shares one count bound (`audit.max_events`), and a user with `can_run` can cause a
 * `prompt_refused` with one small request. Per kind and per who (actor, else principal, else
 * address), at most `perMinute` such events are stored in a minute; the rest are counted, and the
 * next one stored says how many were left out (`suppressed`). Security events (sign-ins, tokens,
 * settings...) are never held back.
 *
 * Bounded: at most `maxKeys` keys are tracked; beyond that the table starts over (a flood from
 * that many different clients at once is stored, which is what the count bound is for).
 */
import type { EventRecord } from '../kernel/events.js'

export const ROUTINE_KINDS: ReadonlySet<string> = new Set(['prompt_queued', 'prompt_refused'])

interface Window {
  start: number
  stored: number
  suppressed: number
}

export class VolumeGate {
  private readonly windows = new Map<string, Window>()

  constructor(private readonly perMinute = 60, private readonly maxKeys = 10_000) {}

  /** the record to store (with `suppressed` when some were left out), or null to leave it out */
  admit(record: EventRecord): EventRecord | null {
    if (!ROUTINE_KINDS.has(record.kind)) return record
    const key = `${record.kind}\u0000${record.actor ?? record.principal ?? record.ip ?? ''}`
    let window = this.windows.get(key)
    if (window === undefined || record.at - window.start >= 60_000) {
      if (window === undefined && this.windows.size >= this.maxKeys) this.windows.clear()
      window = { start: record.at, stored: 0, suppressed: window?.suppressed ?? 0 }
      this.windows.set(key, window)
    }
    if (window.stored >= this.perMinute) {
      window.suppressed++
      return null
    }
    window.stored++
    if (window.suppressed === 0) return record
    const suppressed = window.suppressed
    window.suppressed = 0
    return { ...record, suppressed }
  }
}
