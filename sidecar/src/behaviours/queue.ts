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
import type { BehaviourDeps, RouteBehaviour } from './context.js'
import { scopedDeleteBody } from './scoped-delete.js'

export function queueReadBehaviour(deps: BehaviourDeps): RouteBehaviour {
  // the edit depends on the host's answer and on whose prompts are whose: the plugin may reuse it
  // for a byte-identical answer while no prompt was recorded (protocol filter.memo); the decision
  // and the filter's answer name it the same way, or the plugin never reuses anything
  const memoOf = (owner: string, seesAll: boolean): string => `${owner} ${seesAll} ${deps.ownership.promptsVersion}`
  return {
    keepable: true,
    decide({ pass, owner, seesAll }) {
      return { ...pass, filter: { name: 'queue', ctx: { kind: 'queue-read', owner, seesAll }, memo: memoOf(owner, seesAll) } }
    },
    async filter(ctx, msg, payload) {
      if (msg.status !== 200) return { action: 'keep' }
      const memo = memoOf(ctx.owner, ctx.seesAll)
      return { answer: { action: 'replace', memo }, payload: await deps.filters.queue(payload, deps.ownership.promptIdsOf(ctx.owner), ctx.seesAll) }
    },
  }
}

export function queueWriteBehaviour(deps: BehaviourDeps): RouteBehaviour {
  return scopedDeleteBody(deps, 'queue-write')
}
