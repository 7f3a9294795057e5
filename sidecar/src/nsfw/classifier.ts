/**
 * The classifier interface (issue 23): scores per class for one image, from its bytes or its path.
 * Another model (a stronger one, one on the host's GPU) replaces the bundled one by implementing
 * this; the policy (policy.ts) reads only the scores and the thresholds.
 *
 * Classes are nsfwjs's five (Drawing, Hentai, Neutral, Porn, Sexy); an implementation that knows
 * other classes maps onto them. An image is NSFW when any class with a threshold reaches it
 * (config `nsfw.thresholds`, defaults in kernel/config/schema.ts).
 */
export const CLASSES = ['Drawing', 'Hentai', 'Neutral', 'Porn', 'Sexy'] as const
export type NsfwClass = (typeof CLASSES)[number]
export type Scores = Record<NsfwClass, number>

/** What to classify: a file on this machine, or bytes (a preview frame). */
export type ClassifyTarget = { path: string } | { bytes: Uint8Array }

/** What a classification found: the tag the image's own metadata carries wins (png-tag.ts). */
export type Classified =
  | { source: 'detector'; scores: Scores; size?: number; mtime_ms?: number }
  | { source: 'metadata'; is_nsfw: boolean; size?: number; mtime_ms?: number }

export interface Classifier {
  /**
   * Classifies one image. Rejects when it cannot (not an image, unreadable, the queue is full,
   * `deadlineMs` passed): the caller treats that as unclassifiable (blocked for sfw_check users).
   * `urgent`: a request waits for it (a /view, a preview frame): it goes before background work.
   */
  classify(target: ClassifyTarget, options?: { deadlineMs?: number; urgent?: boolean }): Promise<Classified>
  close(): Promise<void>
}

export type Thresholds = Partial<Record<NsfwClass, number>>

/** Whether these scores reach any threshold. */
export function reachesThreshold(scores: Scores, thresholds: Thresholds): boolean {
  for (const [name, threshold] of Object.entries(thresholds) as Array<[NsfwClass, number | undefined]>) {
    if (threshold !== undefined && (scores[name] ?? 0) >= threshold) return true
  }
  return false
}

export function isNsfw(found: Classified, thresholds: Thresholds): boolean {
  return found.source === 'metadata' ? found.is_nsfw : reachesThreshold(found.scores, thresholds)
}

/** Scores from a list of `{className, probability}` (nsfwjs's answer); a class it did not name is 0. */
export function scoresOf(predictions: ReadonlyArray<{ className: string; probability: number }>): Scores {
  const scores: Scores = { Drawing: 0, Hentai: 0, Neutral: 0, Porn: 0, Sexy: 0 }
  for (const p of predictions) if ((CLASSES as readonly string[]).includes(p.className)) scores[p.className as NsfwClass] = p.probability
  return scores
}

export class ClassifyError extends Error {
  constructor(readonly reason: 'unreadable' | 'not_an_image' | 'timeout' | 'queue_full' | 'closed' | 'failed', message: string) {
    super(message)
  }
}
