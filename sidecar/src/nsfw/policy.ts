/**
 * The content-safety policy (SPEC §11, issue 23): whether an image is NSFW, and what an sfw_check
 * user gets.
 *
 * - A tag in memory answers at once (tags.ts); the decision path does no I/O.
 * - An image without a (current) tag, asked for by an sfw_check user, is classified then, as
 *   urgent work with a deadline (`view_deadline_ms`); what cannot be classified in time or at all
 *   is blocked for that user (fail safe) and not tagged, so the next view tries again.
 * - Users without sfw_check are never blocked and never wait: their decision does not look.
 * - New outputs are classified in the background as the host reports them (`learn`).
 */
import { sep } from 'node:path'
import type { Principal } from '../identity/principal.js'
import type { Decision } from '../kernel/protocol.js'
import type { Events } from '../kernel/events.js'
import { ERRORS } from '../kernel/errors.js'
import { placeOf, type Roots } from '../isolation/user-folders.js'
import { ClassifyError, isNsfw, type Classified, type Classifier, type Thresholds } from './classifier.js'
import type { NsfwTag, TagStore } from './tags.js'
import { notVisual } from './kinds.js'
import './events.js'

/** The answer (SPEC §2, compat): 403 text/plain, on /view and its twins. */
export const BLOCKED: Decision = {
  action: 'respond',
  status: 403,
  headers: [['Content-Type', 'text/plain; charset=utf-8'], ['Cache-Control', 'no-store']],
  body_text: ERRORS.NSFW_BLOCKED.message,
}

export const BLOCK_EVENT_MS = 10 * 60_000
export const BLOCK_EVENTS_PER_MINUTE = 10

/** A file as the host resolved it: its real path, and its size and mtime when the plugin read them. */
export interface SeenFile {
  path: string
  size?: number
  mtime_ms?: number
  /** its first bytes, when the host sent them (what kind of file it is: kinds.ts) */
  head?: Uint8Array
}

export type Verdict = { blocked: false } | { blocked: true; reason: 'tagged' | 'detected' | 'unclassifiable' }

/** Where a real path is on the host, as clients name it; null outside the host's three folders. */
export function describe(path: string, roots: Roots): Pick<NsfwTag, 'type' | 'subfolder' | 'filename'> | null {
  const where = placeOf(path, roots)
  if (where === null || where.rel === '') return null
  const at = where.rel.lastIndexOf('/')
  return { type: where.type, subfolder: at < 0 ? '' : where.rel.slice(0, at), filename: where.rel.slice(at + 1) }
}

const IMAGE = /\.(png|jpe?g|webp)$/i
export const isImageName = (name: string): boolean => IMAGE.test(name)

export interface PolicyOptions {
  thresholds: Thresholds
  viewDeadlineMs: number
  previewDeadlineMs: number
}

export class NsfwPolicy {
  private readonly lastEvent = new Map<string, number>()
  private readonly perMinute = new Map<string, { start: number; count: number }>()

  constructor(
    private readonly tags: TagStore,
    private readonly classifier: Classifier,
    private readonly options: PolicyOptions,
    private readonly roots: () => Roots,
    private readonly events: Pick<Events, 'emit'>,
    private readonly clock: () => number,
    private readonly log?: { warn(obj: object, msg: string): void },
  ) {}

  /** Whether a tag says NSFW (a manual or metadata tag says it itself; a detector tag by today's thresholds). */
  tagSaysNsfw(tag: NsfwTag): boolean {
    if (tag.source === 'detector' && tag.scores !== undefined) return isNsfw({ source: 'detector', scores: tag.scores }, this.options.thresholds)
    return tag.is_nsfw
  }

  /** The tag a classification makes (a manual tag of the same file is kept, with the new scores beside it). */
  tagOf(path: string, found: Classified, facts: { size: number; mtime_ms: number }): NsfwTag | null {
    const place = describe(path, this.roots())
    if (place === null) return null
    const previous = this.tags.get(path)
    const at_iso = new Date(this.clock()).toISOString()
    if (previous?.source === 'manual' && previous.size === facts.size && previous.mtime_ms === facts.mtime_ms) {
      return found.source === 'detector' ? { ...previous, scores: found.scores } : previous
    }
    return {
      path, ...facts, ...place,
      is_nsfw: isNsfw(found, this.options.thresholds),
      source: found.source,
      ...(found.source === 'detector' ? { scores: found.scores } : {}),
      at_iso,
    }
  }

  /** Classifies the file and stores its tag; the tag, or the reason it could not. */
  async classifyFile(path: string, urgent: boolean, deadlineMs?: number): Promise<NsfwTag> {
    const found = await this.classifier.classify({ path }, { urgent, ...(deadlineMs !== undefined ? { deadlineMs } : {}) })
    if (found.size === undefined || found.mtime_ms === undefined) throw new ClassifyError('failed', 'the classifier did not read the file')
    const tag = this.tagOf(path, found, { size: found.size, mtime_ms: found.mtime_ms })
    if (tag === null) throw new ClassifyError('unreadable', 'the file is outside the host folders')
    // memory at once (the next decision reads it); the write is bookkeeping no decision waits for
    this.tags.put(tag).catch((err: unknown) => this.log?.warn({ err, path }, 'an NSFW tag could not be stored'))
    return tag
  }

  /** A new output the host reported: classified in the background (a full queue leaves it to a /view or a scan). */
  learn(path: string): void {
    if (!isImageName(path) || this.tags.get(path)?.source === 'manual') return
    this.classifyFile(path, false).catch((err: unknown) => {
      if (!(err instanceof ClassifyError && (err.reason === 'queue_full' || err.reason === 'closed'))) this.log?.warn({ err, path }, 'a new output could not be classified')
    })
  }

  /** What an sfw_check principal gets for this file: blocked or not, classifying it first when needed. */
  async verdict(file: SeenFile): Promise<Verdict> {
    const tag = this.tags.current(file.path, file.size, file.mtime_ms)
    if (tag !== undefined) return this.said(tag)
    // audio, a saved latent: nothing a browser shows as a picture (told by its bytes, not its name);
    // a tag on the file (an administrator's mark) decided above
    if (file.head !== undefined && notVisual(file.head)) return { blocked: false }
    const until = performance.now() + this.options.viewDeadlineMs
    try {
      // A classification of this path already under way (the pool merges them by path) may have
      // read the file before it was rewritten: its tag answers only for the state this request
      // saw. Otherwise classified once more, within what is left of the deadline; a file that
      // keeps changing is unclassifiable.
      for (let attempt = 0; attempt < 2; attempt++) {
        const fresh = await this.classifyFile(file.path, true, Math.max(1, Math.round(until - performance.now())))
        if ((file.size === undefined || fresh.size === file.size) && (file.mtime_ms === undefined || fresh.mtime_ms === file.mtime_ms)) return this.said(fresh)
      }
    } catch {
      // unclassifiable: below
    }
    return { blocked: true, reason: 'unclassifiable' }
  }

  private said(tag: NsfwTag): Verdict {
    return this.tagSaysNsfw(tag) ? { blocked: true, reason: tag.source === 'detector' ? 'detected' : 'tagged' } : { blocked: false }
  }

  /** The /view decision's part: null (go on) for anyone without sfw_check, or for an image that is not blocked. */
  async viewDecision(principal: Principal, file: SeenFile, ip: string): Promise<Decision | null> {
    if (!principal.sfwCheck) return null
    const verdict = await this.verdict(file)
    if (!verdict.blocked) return null
    this.blockEvent(principal, describe(file.path, this.roots())?.filename ?? '', verdict.reason, ip, file.path)
    return BLOCKED
  }

  /** A preview frame (bytes) for an sfw_check user: whether it may be sent. Unclassifiable in time: withheld. */
  async previewAllowed(bytes: Uint8Array): Promise<boolean> {
    try {
      const found = await this.classifier.classify({ bytes }, { urgent: true, deadlineMs: this.options.previewDeadlineMs })
      return !isNsfw(found, this.options.thresholds)
    } catch {
      return false
    }
  }

  /** `nsfw_block`, at most once per user and image per BLOCK_EVENT_MS and BLOCK_EVENTS_PER_MINUTE per user. */
  blockEvent(principal: Principal, filename: string, reason: 'tagged' | 'detected' | 'unclassifiable' | 'preview', ip: string, key: string): void {
    const now = this.clock()
    const who = principal.userId ?? principal.username
    const k = `${who}${sep}${key}`
    const last = this.lastEvent.get(k)
    if (last !== undefined && now - last < BLOCK_EVENT_MS) return
    let minute = this.perMinute.get(who)
    if (minute === undefined || now - minute.start >= 60_000) {
      if (this.perMinute.size > 10_000) this.perMinute.clear()
      minute = { start: now, count: 0 }
      this.perMinute.set(who, minute)
    }
    if (minute.count >= BLOCK_EVENTS_PER_MINUTE) return
    minute.count++
    if (this.lastEvent.size > 10_000) this.lastEvent.clear()
    this.lastEvent.set(k, now)
    this.events.emit('nsfw_block', { subject: principal.username, ip, outcome: 'refused', filename, reason })
  }
}
