/**
 * The body step shared by POST /queue and POST /history (`{"delete": [ids]}`,
 * `{"clear": true}`): for a caller who does not see everything, every id to
 * delete must be theirs (else 403 NOT_OWNER, and the host is never asked), and
 * `clear` becomes a delete of their own ids that are there (waiting in the queue, or
 * finished in the history), so nobody else's item can go.
 */
import { denyDecision } from '../../kernel/answers.js'
import type { RouteBehaviour } from '../../kernel/behaviour.js'
import type { BehaviourDeps } from './deps.js'
import { passWithBody, textOf } from '../../kernel/behaviour.js'

/** Bodies of these routes are a few ids; a larger one is refused with 413 by the plugin. */
export const SMALL_BODY_BYTES = 1024 * 1024

/** The body step's state: whose ids may go. */
export interface ScopedDeleteState {
  owner: string
}

/** `list`: which of the host's lists the route clears (`clear` is scoped to what is there). */
export function scopedDeleteBody(deps: BehaviourDeps, list: 'queue' | 'history'): RouteBehaviour<ScopedDeleteState> {
  return {
    decide({ pass, owner, seesAll, steps }) {
      // a delete changes what the host knows without a queue event (history): the plugin reports it after
      if (seesAll) return { ...pass, report_prompts: true }
      return { ...pass, report_prompts: true, need_body: { max_bytes: SMALL_BODY_BYTES, ctx: steps.body({ owner }) } }
    },
    body(state, payload) {
      const text = textOf(payload)
      let body: unknown
      try {
        body = text === null ? undefined : JSON.parse(text)
      } catch {
        body = undefined
      }
      if (typeof body !== 'object' || body === null || Array.isArray(body)) {
        return denyDecision('VALIDATION_FAILED', 'The body must be a JSON object with "delete" and/or "clear"')
      }
      const { delete: toDelete, clear } = body as { delete?: unknown; clear?: unknown }
      if (toDelete !== undefined && !(Array.isArray(toDelete) && toDelete.every((id) => typeof id === 'string'))) {
        return denyDecision('VALIDATION_FAILED', '"delete" must be a list of prompt ids')
      }
      const own = deps.ownership.promptIdsOf(state.owner)
      const ids = (toDelete ?? []) as string[]
      const foreign = ids.filter((id) => !own.has(id))
      if (foreign.length > 0) return denyDecision('NOT_OWNER', `Not your prompt: ${foreign.slice(0, 5).join(', ')}`)
      // clear: the caller's own ids the host still holds there (queue: waiting, not running; history:
      // finished), not every id they ever had
      const scoped = clear ? (list === 'queue' ? deps.ownership.pendingIdsOf(state.owner) : deps.ownership.finishedIdsOf(state.owner)) : ids
      return passWithBody(JSON.stringify({ delete: scoped }))
    },
  }
}
