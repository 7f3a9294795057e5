/**
 * GET /queue: non-admins (while users are separated) see only their own items;
 * the comfy.org secrets in `extra_data` reach only their owner, never an admin.
 * POST /queue: non-admins delete only their own items; `clear` becomes a delete
 * of their own ids (403 NOT_OWNER for anyone else's id; nothing changes then).
 *
 * The answer is edited from the host's text (items kept verbatim but for the
 * secrets), so the 64-bit numbers of the prompts inside come through unchanged.
 */
import { applySplices, arrayElements, keepElements, keepMembers, objectMembers, rootStart, type Splice } from '../isolation/json-spans.js'
import type { BehaviourDeps, RouteBehaviour } from './context.js'
import { replaced } from './context.js'
import { scopedDeleteBody } from './scoped-delete.js'

export const SECRET_KEYS: ReadonlySet<string> = new Set(['auth_token_comfy_org', 'api_key_comfy_org'])

export function queueReadBehaviour(deps: BehaviourDeps): RouteBehaviour {
  return {
    decide({ pass, owner, seesAll }) {
      return { ...pass, filter: { name: 'queue', ctx: { kind: 'queue-read', owner, seesAll } } }
    },
    filter(ctx, msg, payload) {
      if (msg.status !== 200) return { action: 'keep' }
      const text = payload.toString('utf8')
      const root = objectMembers(text, rootStart(text))
      const splices: Splice[] = []
      for (const member of root.members) {
        if (member.key !== 'queue_running' && member.key !== 'queue_pending') continue
        if (text[member.valueStart] !== '[') continue
        const items = arrayElements(text, member.valueStart).elements
        const kept = keepElements(text, items, (item) => {
          const parts = arrayElements(text, item.start).elements
          const promptId = parts[1] ? (JSON.parse(text.slice(parts[1].start, parts[1].end)) as unknown) : undefined
          const itemOwner = typeof promptId === 'string' ? deps.ownership.ownerOfPrompt(promptId) : undefined
          if (!ctx.seesAll && itemOwner !== ctx.owner) return null
          const extra = parts[3]
          if (itemOwner === ctx.owner || !extra || text[extra.start] !== '{') return text.slice(item.start, item.end)
          const members = objectMembers(text, extra.start).members
          if (!members.some((m) => SECRET_KEYS.has(m.key))) return text.slice(item.start, item.end)
          return text.slice(item.start, extra.start) + keepMembers(text, members, (m) => !SECRET_KEYS.has(m.key)) + text.slice(extra.end, item.end)
        })
        splices.push({ start: member.valueStart, end: member.valueEnd, text: kept })
      }
      return replaced(applySplices(text, splices))
    },
  }
}

export function queueWriteBehaviour(deps: BehaviourDeps): RouteBehaviour {
  return scopedDeleteBody(deps, 'queue-write')
}
