/**
 * GET /history and /history/{prompt_id}: non-admins (while users are separated)
 * see only their own entries. The list is asked of the host whole (`max_items`
 * and `offset` are applied here, to the caller's own entries, the way ComfyUI
 * applies them); one entry of somebody else answers `{}` like an unknown id,
 * without asking the host. POST /history: see scoped-delete.ts. A long history
 * is edited off the event loop (isolation/filter-pool.ts).
 */
import { hostQuery } from '../../kernel/host-query.js'
import { denyDecision, jsonDecision } from '../../kernel/answers.js'
import type { RouteBehaviour } from '../../kernel/behaviour.js'
import type { BehaviourDeps } from './deps.js'
import { scopedDeleteBody, type ScopedDeleteState } from './scoped-delete.js'

function intParam(query: URLSearchParams, key: string): number | null | 'bad' {
  const raw = query.get(key)
  if (raw === null) return null
  return /^\s*[-+]?\d+\s*$/.test(raw) ? Number.parseInt(raw, 10) : 'bad'
}

/** The history list's filter: whose entries, and the page the caller asked for (-1: no offset). */
interface HistoryListState {
  owner: string
  maxItems: number | null
  offset: number
}

export function historyListBehaviour(deps: BehaviourDeps): RouteBehaviour<HistoryListState> {
  // the plugin may reuse a result for a byte-identical answer while no prompt was recorded
  // (protocol filter.memo); the decision and the filter's answer name it the same way
  const memoOf = (owner: string, maxItems: number | null, offset: number): string =>
    `${owner} ${deps.ownership.promptsVersion} ${maxItems} ${offset}`
  return {
    keepable: true,
    decide({ desc, pass, owner, seesAll, steps }) {
      if (seesAll) return pass
      const query = hostQuery(desc.query)
      const maxItems = intParam(query, 'max_items')
      const offset = intParam(query, 'offset')
      // only plain integers: Python's int() also reads `1_0` or full-width digits, and a value the
      // sidecar cannot read the same way must never reach the host unfiltered
      if (maxItems === 'bad' || offset === 'bad') return denyDecision('VALIDATION_FAILED', 'max_items and offset must be integers')
      const drop = [...(pass.drop_query ?? []), ...['max_items', 'offset'].filter((k) => query.has(k))]
      return {
        ...pass,
        ...(drop.length > 0 ? { drop_query: drop } : {}),
        filter: { ...steps.filter('history', { owner, maxItems, offset: offset ?? -1 }), memo: memoOf(owner, maxItems, offset ?? -1) },
      }
    },
    // a history too large for a frame: only the caller's own entries travel (in the host's order)
    narrow: (state) => ({ keep: [...deps.ownership.promptIdsOf(state.owner)], final: false }),
    async filter(state, msg, payload) {
      if (msg.status !== 200) return { action: 'keep' }
      const own = deps.ownership.promptIdsOf(state.owner)
      const memo = memoOf(state.owner, state.maxItems, state.offset)
      return { answer: { action: 'replace', memo }, payload: await deps.filters.history(payload, own, state.maxItems, state.offset) }
    },
  }
}

export function historyEntryBehaviour(deps: BehaviourDeps): RouteBehaviour {
  return {
    decide({ desc, pass, owner, seesAll }) {
      if (seesAll) return pass
      const promptId = desc.match_info.prompt_id ?? ''
      return deps.ownership.ownerOfPrompt(promptId) === owner ? pass : jsonDecision(200, {})
    },
  }
}

export function historyWriteBehaviour(deps: BehaviourDeps): RouteBehaviour<ScopedDeleteState> {
  return scopedDeleteBody(deps, 'history')
}
