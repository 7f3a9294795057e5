/**
 * A prompt of a caller who does not see everything (issue 21), checked and edited so that it
 * reads only what they may read and writes only into their own folders.
 *
 * - **Reads.** Every string the graph gives a node (after ComfyUI's `{"__value__": x}`
 *   unwrapping, inside lists and objects too, whatever its length or characters) is resolved by
 *   the host (kernel/host-link.ts `name`: the annotated input path, the output and temp folders,
 *   the name as given), and every existing place it lands on inside the host's folders must be
 *   one the caller may read (isolation/user-folders.ts); a place inside another owner's folder is
 *   refused whether or not anything is there (the answer says nothing of what exists); a file outside those folders named by
 *   its annotated path (an absolute name, `..`) is refused too. This holds for every node, of
 *   any package: no table of loaders. The folders themselves are not judged (`""` names the
 *   input folder; the host's nodes list a folder without descending).
 * - **Writes.** Every `filename_prefix` (the input by which save nodes name their files), and every
 *   text input ending in `prefix` of a node the host reports as an output node (host facts
 *   `writer_inputs`: SaveLoRANode's `prefix`), is placed under the caller's own output folder: `ComfyUI` → `u_<id>/ComfyUI`, kept when it
 *   already starts there; a prefix with `..`, an absolute one, or one that is not a text (a
 *   link computed at run time) is refused (400 VALIDATION_FAILED).
 * - **The execution cache.** ComfyUI keys its cache on a node's inputs, every input the prompt
 *   gives, known to the node or not. Every node except those that only load models gets
 *   `authsvc_scope: "<the caller's folder>"`, so nobody's cached results answer another user's
 *   prompt (no outputs, previews or timings of theirs); model loads stay shared.
 */
import { denyDecision } from '../../kernel/answers.js'
import type { HostLink } from '../../kernel/host-link.js'
import type { HostFacts, RespondDecision } from '../../kernel/protocol.js'
import { lastMember, objectMembers, rootStart, setMembers, type Splice } from '../json-spans.js'
import type { Ownership } from '../ownership.js'
import { folderOfRel, mayRead, placeOf, userFolder } from '../user-folders.js'
import { hostInputValue, type ModelAccess } from '../../models/behaviours.js'

export const SCOPE_INPUT = 'authsvc_scope'
const PREFIX_INPUT = 'filename_prefix'
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v)

/**
 * Every string inside an input's value, at any depth (wrappers such as `__value__` and their
 * siblings included), and each as nodes that tidy a pasted path read it: without surrounding
 * spaces and quotes (a popular video pack's loaders strip them before they open the file).
 */
function collect(value: unknown, into: Set<string>): void {
  const stack: unknown[] = [value]
  while (stack.length > 0) {
    const v = stack.pop()
    if (typeof v === 'string') {
      into.add(v)
      const tidied = v.trim().replace(/^["']+|["']+$/g, '').trim()
      if (tidied !== v) into.add(tidied)
    } else if (Array.isArray(v)) stack.push(...v)
    else if (isObject(v)) stack.push(...Object.values(v))
  }
}

/** The inputs by which a node names where it writes: `filename_prefix` on any node, and those the host reports for its class. */
function prefixInputs(node: Record<string, unknown>, writers: HostFacts['writer_inputs']): string[] {
  const reported = typeof node.class_type === 'string' ? writers?.[node.class_type] : undefined
  return [PREFIX_INPUT, ...(Array.isArray(reported) ? reported.filter((n) => typeof n === 'string' && n !== PREFIX_INPUT) : [])]
}

/** The strings the graph gives its nodes, except the prefixes it writes by and its scopes (both are rewritten). */
function namesOf(prompt: unknown, writers: HostFacts['writer_inputs']): Set<string> {
  const names = new Set<string>()
  if (!isObject(prompt)) return names
  for (const node of Object.values(prompt)) {
    if (!isObject(node) || !isObject(node.inputs)) continue
    const rewritten = new Set([...prefixInputs(node, writers), SCOPE_INPUT])
    for (const [input, given] of Object.entries(node.inputs)) if (!rewritten.has(input)) collect(given, names)
  }
  return names
}

/**
 * A refusal naming the first string that lands on something the caller may not read, or null.
 * `checks.ownership`: another owner's files (a caller who does not see everything);
 * `checks.marked`: files the content-safety policy marked NSFW (a caller it applies to: a copy
 * through a prompt would lose the mark).
 */
export async function promptFileRefusal(
  prompt: unknown, host: HostLink, ownership: Ownership, owner: string, writers: HostFacts['writer_inputs'] = {},
  checks: { ownership: boolean; marked?: (paths: readonly string[]) => Promise<boolean> } = { ownership: true },
): Promise<RespondDecision | null> {
  const names = [...namesOf(prompt, writers)]
  if (names.length === 0) return null
  const { results, roots } = await host.resolve(names.map((name) => ({ op: 'name' as const, name })))
  const files: string[] = []
  for (let i = 0; i < names.length; i++) {
    for (const place of results[i]?.places ?? []) {
      if (place.path === undefined) continue
      if (place.file === true) files.push(place.path)
      if (!checks.ownership) continue
      const where = placeOf(place.path, roots)
      if (where === null) {
        if (place.file !== true && place.dir !== true) continue
        // outside the host's folders: a file named by its input-folder reading, or by a name that
        // climbs (`..`) or is absolute whichever folder a node joins it to
        const climbs = names[i].startsWith('/') || names[i].split(/[\\/]/).includes('..')
        if (place.file === true && (place.via === 'annotated' || climbs)) return denyDecision('NOT_OWNER', "The prompt names a file outside the host's folders")
        continue
      }
      if (where.rel === '') continue
      if (place.file !== true && place.dir !== true) {
        // nothing there yet: refused only inside another owner's folder, decided on the path so
        // that a name of theirs and a name nobody has get the same answer (no existence oracle)
        if (folderOfRel(where.rel) !== null && !mayRead(where, place, owner, ownership)) return denyDecision('NOT_OWNER', 'The prompt reads a file that is not yours')
        continue
      }
      if (!mayRead(where, place, owner, ownership)) return denyDecision('NOT_OWNER', 'The prompt reads a file that is not yours')
    }
  }
  if (checks.marked !== undefined && files.length > 0 && (await checks.marked(files))) {
    return denyDecision('PERMISSION_DENIED', 'The prompt reads an image marked NSFW, which your account may not use')
  }
  return null
}

/** The prefix inside `own` for a prefix a client gave, or null when it is not one we place. */
export function ownPrefix(prefix: string, own: string): string | null {
  if (prefix.startsWith('/') || prefix.startsWith('\\') || prefix.split(/[\\/]/).includes('..')) return null
  const parts = prefix.split('/').filter((p) => p !== '' && p !== '.')
  if (parts[0] === own) parts.shift()
  if (parts.length === 0) return null
  return [own, ...parts].join('/')
}

/**
 * The edits that put the prompt's writes and cache entries in the caller's own place (see the
 * file's comment), or a refusal. `prompt` is the parsed graph, `text` the body it came from.
 */
export function promptOwnEdits(
  text: string, prompt: unknown, owner: string, models: ModelAccess, writers: HostFacts['writer_inputs'] = {},
  /** the owner's grants, for a principal limited to them: cached results depend on which models the run could load */
  grants?: string,
): Splice[] | RespondDecision {
  if (!isObject(prompt)) return [] // the host refuses it itself
  const root = objectMembers(text, rootStart(text))
  const promptMember = lastMember(root.members, 'prompt')
  if (promptMember === undefined || text[promptMember.valueStart] !== '{') return []
  const own = userFolder(owner)
  const nodes = objectMembers(text, promptMember.valueStart)
  const splices: Splice[] = []
  for (const [nodeId, node] of Object.entries(prompt)) {
    if (!isObject(node) || !isObject(node.inputs)) continue
    const nodeSpan = lastMember(nodes.members, nodeId)
    if (nodeSpan === undefined || text[nodeSpan.valueStart] !== '{') continue
    const inputsSpan = lastMember(objectMembers(text, nodeSpan.valueStart).members, 'inputs')
    if (inputsSpan === undefined || text[inputsSpan.valueStart] !== '{') continue
    const inputs = objectMembers(text, inputsSpan.valueStart)
    const set: Array<[string, string]> = []
    for (const input of prefixInputs(node, writers)) {
      if (!(input in node.inputs)) continue
      const given = hostInputValue(node.inputs[input])
      const placed = typeof given === 'string' ? ownPrefix(given, own) : null
      if (placed === null) {
        return denyDecision('VALIDATION_FAILED', `${input} of node ${nodeId} must be a text naming files inside your own folder (no "..", not absolute, not a link)`)
      }
      set.push([input, JSON.stringify(placed)])
    }
    if (!models.onlyLoadsModels(node.class_type, node.inputs)) set.push([SCOPE_INPUT, JSON.stringify(grants === undefined ? own : `${own}:${grants}`)])
    splices.push(...setMembers(inputs, set))
  }
  return splices
}
