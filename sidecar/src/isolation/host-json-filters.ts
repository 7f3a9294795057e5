/**
 * The per-owner edits of the host's large JSON answers, as pure functions of
 * (text, what the caller owns): the same code runs inline for small answers and
 * in the filter worker for large ones (filter-pool.ts), so a history of
 * thousands of entries never holds up other users' decisions.
 *
 * Every edit keeps the host's text of what it keeps (json-spans.ts): 64-bit
 * seeds inside prompts come through unchanged.
 */
import { applySplices, arrayElements, keepElements, keepMembers, objectMembers, rootStart, type MemberSpan, type Splice } from './json-spans.js'

export const SECRET_KEYS: ReadonlySet<string> = new Set(['auth_token_comfy_org', 'api_key_comfy_org'])

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

/** `/history`: the caller's own entries, windowed as ComfyUI windows them. */
export function filterHistory(text: string, own: ReadonlySet<string>, maxItems: number | null, offset: number): string {
  const mine = objectMembers(text, rootStart(text)).members.filter((m) => own.has(m.key))
  const keep = new Set<MemberSpan>(historyWindow(mine, maxItems, offset))
  return keepMembers(text, mine, (m) => keep.has(m))
}

/**
 * `/queue`: items of others dropped unless the caller sees all; the comfy.org
 * secrets in `extra_data` kept only in the caller's own items.
 */
export function filterQueue(text: string, own: ReadonlySet<string>, seesAll: boolean): string {
  const root = objectMembers(text, rootStart(text))
  const splices: Splice[] = []
  for (const member of root.members) {
    if (member.key !== 'queue_running' && member.key !== 'queue_pending') continue
    if (text[member.valueStart] !== '[') continue
    const items = arrayElements(text, member.valueStart).elements
    const kept = keepElements(text, items, (item) => {
      const parts = text[item.start] === '[' ? arrayElements(text, item.start).elements : []
      const promptId = parts[1] ? (JSON.parse(text.slice(parts[1].start, parts[1].end)) as unknown) : undefined
      const mine = typeof promptId === 'string' && own.has(promptId)
      if (!seesAll && !mine) return null
      const extra = parts[3]
      if (mine || !extra || text[extra.start] !== '{') return text.slice(item.start, item.end)
      const members = objectMembers(text, extra.start).members
      if (!members.some((m) => SECRET_KEYS.has(m.key))) return text.slice(item.start, item.end)
      return text.slice(item.start, extra.start) + keepMembers(text, members, (m) => !SECRET_KEYS.has(m.key)) + text.slice(extra.end, item.end)
    })
    splices.push({ start: member.valueStart, end: member.valueEnd, text: kept })
  }
  return applySplices(text, splices)
}
