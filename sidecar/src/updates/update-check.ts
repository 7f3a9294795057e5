/**
 * Whether a newer authsvc exists: the source named by `update_check.url` is asked in the
 * background, at most once a day, and the update-status route answers from what the last ask
 * learned (SPEC §5.4, docs/decisions.md "Update status").
 *
 * Guarantees:
 * - no ask on a request's path: `status()` reads memory only, so a slow or hanging source never
 *   holds an answer up;
 * - at most one ask per `CHECK_INTERVAL_MS` of the injected clock (an hour after a failed one),
 *   across restarts (the last ask is stored), and never two at once (a second `checkIfDue` joins the one in flight); a
 *   change of the URL makes the next ask due at once;
 * - `mode` is `online` only when the last ask of the configured URL succeeded; with no URL, a
 *   failed ask or none yet, it is `offline` and `latest_version` is the current one;
 * - an ask is an outbound request within kernel/http/outbound.ts's rules (https, or http to
 *   loopback; a deadline; a size cap); its failure is one warning line naming the origin only.
 *
 * Sources (the first field found wins): a GitHub "latest release" document (`tag_name`, a leading
 * `v` dropped), an npm registry package document (`dist-tags.latest`), or any document with a
 * top-level `version` (npm's `/<package>/latest`, or a file an operator serves). The value must
 * be a semantic version; versions compare by semver precedence.
 */
import type { FastifyBaseLogger } from 'fastify'
import semver from 'semver'
import type { Clock } from '../kernel/clock.js'
import { fetchCapped, loggableUrl, OutboundError } from '../kernel/http/outbound.js'

export const CHECK_INTERVAL_MS = 24 * 60 * 60 * 1000
/** after a failed ask: a source that was down for a moment is not "offline" for a whole day */
export const RETRY_AFTER_FAILURE_MS = 60 * 60 * 1000
export const CHECK_TIMEOUT_MS = 10_000
/** a package document with every version ever published fits easily; anything larger is not a version answer */
export const MAX_ANSWER_BYTES = 1024 * 1024

export interface UpdateStatus {
  current_version: string
  latest_version: string
  update_available: boolean
  mode: 'online' | 'offline'
}

/** What the last ask learned, as stored: `latest` null when it failed. */
export interface UpdateCheckRecord {
  url: string
  checked_at: number
  latest: string | null
}

/** Where the last ask is kept between restarts. */
export interface UpdateCheckMemory {
  load(): Promise<UpdateCheckRecord | undefined>
  save(record: UpdateCheckRecord): Promise<void>
}

/** The version a source document names, or null when it names none that is a semantic version. */
export function latestVersionOf(doc: unknown): string | null {
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) return null
  const d = doc as Record<string, unknown>
  const tags = d['dist-tags']
  const candidates = [d.tag_name, typeof tags === 'object' && tags !== null ? (tags as Record<string, unknown>).latest : undefined, d.version]
  const found = candidates.find((c) => typeof c === 'string')
  if (typeof found !== 'string') return null
  return semver.valid(semver.clean(found, { loose: false }))
}

export class UpdateCheck {
  private last: UpdateCheckRecord | undefined
  private running: Promise<void> | undefined
  private restoring: Promise<void> | undefined
  private readonly stopping = new AbortController()

  constructor(private readonly options: {
    /** '' = no source (offline) */
    url: string
    current: string
    clock: Clock
    log: FastifyBaseLogger
    memory: UpdateCheckMemory
    /** one ask's deadline (default CHECK_TIMEOUT_MS) */
    timeoutMs?: number
  }) {}

  /** The answer of the update-status route: memory only. */
  status(): UpdateStatus {
    const { url, current } = this.options
    const last = this.last
    if (url === '' || last === undefined || last.url !== url || last.latest === null) {
      return { current_version: current, latest_version: current, update_available: false, mode: 'offline' }
    }
    const comparable = semver.valid(current) !== null
    return { current_version: current, latest_version: last.latest, update_available: comparable && semver.gt(last.latest, current), mode: 'online' }
  }

  /** Takes what an earlier run stored; once (a second call is the same promise); a failure is logged. */
  restore(): Promise<void> {
    this.restoring ??= this.options.memory.load().then(
      (stored) => {
        // an ask that finished meanwhile is newer than anything stored
        if (stored !== undefined && this.last === undefined) this.last = stored
      },
      (err: unknown) => this.options.log.error({ err }, 'could not read the last update check; the next check is due at once'),
    )
    return this.restoring
  }

  /** Asks the source when no ask of this URL happened within the interval; joins an ask in flight. */
  checkIfDue(): Promise<void> {
    if (this.options.url === '' || this.stopping.signal.aborted) return Promise.resolve()
    if (this.running !== undefined) return this.running
    const last = this.last
    const interval = last?.latest === null ? RETRY_AFTER_FAILURE_MS : CHECK_INTERVAL_MS
    if (last !== undefined && last.url === this.options.url && this.options.clock() - last.checked_at < interval) return Promise.resolve()
    const running = this.ask().finally(() => {
      this.running = undefined
    })
    this.running = running
    return running
  }

  /** Ends an ask in flight (it counts as failed, and is not stored) and asks no more. */
  async stop(): Promise<void> {
    this.stopping.abort()
    await this.running
  }

  private async ask(): Promise<void> {
    const { url, clock, log, current, memory } = this.options
    const checkedAt = clock()
    let latest: string | null = null
    try {
      const body = await fetchCapped(url, {
        timeoutMs: this.options.timeoutMs ?? CHECK_TIMEOUT_MS,
        maxBytes: MAX_ANSWER_BYTES,
        headers: { Accept: 'application/json', 'User-Agent': `authsvc/${current}` },
        signal: this.stopping.signal,
      })
      let doc: unknown
      try {
        doc = JSON.parse(body.toString('utf8'))
      } catch {
        throw new OutboundError('the answer is not JSON')
      }
      latest = latestVersionOf(doc)
      if (latest === null) throw new OutboundError('the answer names no semantic version (tag_name, dist-tags.latest or version)')
    } catch (err) {
      if (this.stopping.signal.aborted) return
      log.warn({ source: loggableUrl(url), reason: err instanceof OutboundError ? err.message : String(err) }, 'the update check failed; update status is offline until the next check')
    }
    const record: UpdateCheckRecord = { url, checked_at: checkedAt, latest }
    this.last = record
    try {
      await memory.save(record)
    } catch (err) {
      log.error({ err }, 'could not store the update check; the next start checks again')
    }
  }
}
