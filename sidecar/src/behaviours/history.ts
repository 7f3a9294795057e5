/**
 * GET /history and /history/{prompt_id}: non-admins (while users are separated)
 * see only their own entries. The list is asked of the host whole (`max_items`
 * and `offset` are applied here, to the caller's own entries, the way ComfyUI
 * applies them); one entry of somebody else answers `{}` like an unknown id,
 * without asking the host. POST /history: see scoped-delete.ts.
 */
import { jsonDecision } from '../decide/answers.js'
import { keepMembers, objectMembers, rootStart, type MemberSpan } from '../isolation/json-spans.js'
import type { BehaviourDeps, RouteBehaviour } from './context.js'
import { replaced } from './context.js'
import { scopedDeleteBody } from './scoped-delete.js'

/** ComfyUI's get_history window over the entries in their order: `offset` < 0 with max_items counts from the end. */
export function historyWindow<T>(entries: T[], maxItems: number | null, offset: number): T[] {
  let start = offset
  if (start < 0 && maxItems !== null) start = entries.length - maxItems
  const out: T[] = []
  for (let i = Math.max(0, start); i < entries.length; i++) {
    out.push(entries[i])
    if (maxItems !== null && out.length >= maxItems) break
  }
  return out
}

function intParam(query: URLSearchParams, key: string): number | null | 'bad' {
  const raw = query.get(key)
  if (raw === null) return null
  return /^\s*[-+]?\d+\s*$/.test(raw) ? Number.parseInt(raw, 10) : 'bad'
}

export function historyListBehaviour(deps: BehaviourDeps): RouteBehaviour {
  return {
    decide({ desc, pass, owner, seesAll }) {
      if (seesAll) return pass
      const query = new URLSearchParams(desc.query)
      const maxItems = intParam(query, 'max_items')
      const offset = intParam(query, 'offset')
      // a malformed number is the host's own 500; let it answer that, unfiltered nothing leaks (an error body)
      if (maxItems === 'bad' || offset === 'bad') return pass
      const drop = [...(pass.drop_query ?? []), ...['max_items', 'offset'].filter((k) => query.has(k))]
      return {
        ...pass,
        ...(drop.length > 0 ? { drop_query: drop } : {}),
        filter: { name: 'history', ctx: { kind: 'history-list', owner, seesAll, max_items: maxItems, offset: offset ?? -1 } },
      }
    },
    filter(ctx, msg, payload) {
      if (msg.status !== 200) return { action: 'keep' }
      const text = payload.toString('utf8')
      const own = deps.ownership.promptIdsOf(ctx.owner)
      const mine = objectMembers(text, rootStart(text)).members.filter((m) => own.has(m.key))
      const window = historyWindow<MemberSpan>(mine, ctx.max_items as number | null, ctx.offset as number)
      const keep = new Set(window)
      return replaced(keepMembers(text, mine, (m) => keep.has(m)))
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

export function historyWriteBehaviour(deps: BehaviourDeps): RouteBehaviour {
  return scopedDeleteBody(deps, 'history-write')
}
