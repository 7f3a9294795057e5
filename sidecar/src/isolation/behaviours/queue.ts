/**
 * GET /queue: non-admins (while users are separated) see only their own items;
 * the comfy.org secrets in `extra_data` reach only their owner, never an admin.
 * POST /queue: non-admins delete only their own items; `clear` becomes a delete
 * of their own ids (403 NOT_OWNER for anyone else's id; nothing changes then).
 *
 * The edit (isolation/host-json-filters.ts) keeps the host's text of every item
 * it keeps, so the 64-bit numbers of the prompts inside come through unchanged;
 * a large queue is edited off the event loop (isolation/filter-pool.ts).
 */
import { denyDecision } from '../../kernel/answers.js'
import { applySplices, lastMember, objectMembers, rootStart } from '../json-spans.js'
import type { RouteBehaviour } from '../../kernel/behaviour.js'
import type { BehaviourDeps } from './deps.js'
import { textOf } from '../../kernel/behaviour.js'
import { scopedDeleteBody, type ScopedDeleteState } from './scoped-delete.js'

/**
 * `{"exec_info": {"queue_remaining": n}}` (GET /prompt, and the `status` the host sends on its
 * WebSockets) with `n` replaced; null when the text is not of that shape.
 */
export function withQueueRemaining(text: string, remaining: number): string | null {
  try {
    const root = objectMembers(text, rootStart(text))
    const exec = lastMember(root.members, 'exec_info')
    if (exec === undefined || text[exec.valueStart] !== '{') return null
    const count = lastMember(objectMembers(text, exec.valueStart).members, 'queue_remaining')
    if (count === undefined) return null
    return applySplices(text, [{ start: count.valueStart, end: count.valueEnd, text: String(remaining) }])
  } catch {
    return null
  }
}

/**
 * GET /prompt: `exec_info.queue_remaining` counts, for a caller who does not see everything,
 * only their own prompts queued or running (the host's number would tell how busy everyone
 * else is, and so whether someone else's prompt is there: issue 21). Anything else is 503 of
 * the plugin's kind: an answer that cannot be edited never reaches the caller unedited.
 */
/** The filter of a caller's queue reads: whose prompts (and, for /queue, whether they see all). */
interface QueueState {
  owner: string
  seesAll: boolean
}

export function queueStatusBehaviour(deps: BehaviourDeps): RouteBehaviour<{ owner: string }> {
  const memoOf = (owner: string): string => `${owner} ${deps.ownership.promptsVersion}`
  return {
    keepable: true,
    decide({ pass, owner, seesAll, steps }) {
      if (seesAll) return pass
      return { ...pass, filter: { ...steps.filter('queue-status', { owner }), memo: memoOf(owner) } }
    },
    filter(state, msg, payload) {
      if (msg.status !== 200) return { action: 'keep' }
      const edited = withQueueRemaining(textOf(payload) ?? '', deps.ownership.remainingOf(state.owner))
      if (edited === null) return denyDecision('AUTHSVC_UNAVAILABLE', 'The host answered in a shape the gate cannot scope')
      return { answer: { action: 'replace', memo: memoOf(state.owner) }, payload: Buffer.from(edited, 'utf8') }
    },
  }
}

export function queueReadBehaviour(deps: BehaviourDeps): RouteBehaviour<QueueState> {
  // the edit depends on the host's answer and on whose prompts are whose: the plugin may reuse it
  // for a byte-identical answer while no prompt was recorded (protocol filter.memo); the decision
  // and the filter's answer name it the same way, or the plugin never reuses anything
  const memoOf = (owner: string, seesAll: boolean): string => `${owner} ${seesAll} ${deps.ownership.promptsVersion}`
  return {
    keepable: true,
    decide({ pass, owner, seesAll, steps }) {
      return { ...pass, filter: { ...steps.filter('queue', { owner, seesAll }), memo: memoOf(owner, seesAll) } }
    },
    // a queue of large prompts too large for a frame: the caller's own items are the whole edit (a
    // non-admin keeps their own secrets), so the plugin's narrowed answer is the answer
    narrow: (state) => (state.seesAll ? null : { keep: [...deps.ownership.promptIdsOf(state.owner)], final: true }),
    async filter(state, msg, payload) {
      if (msg.status !== 200) return { action: 'keep' }
      const memo = memoOf(state.owner, state.seesAll)
      return { answer: { action: 'replace', memo }, payload: await deps.filters.queue(payload, deps.ownership.promptIdsOf(state.owner), state.seesAll) }
    },
  }
}

export function queueWriteBehaviour(deps: BehaviourDeps): RouteBehaviour<ScopedDeleteState> {
  return scopedDeleteBody(deps, 'queue')
}
