/**
 * POST/PUT /prompt: the body is read (capped), checked and stamped with its owner.
 *
 * - `extra_data.authsvc_user` / `authsvc_user_id` / `authsvc_folder` / `authsvc_models` are set
 *   (client spoofs overwritten; the folder and the granted models are what the plugin's run-time
 *   guard keeps the running prompt to);
 * - `prompt_id` is the client's only when nobody else owns it and the host does not
 *   know it unless the gate recorded it for the caller (else 409 PROMPT_ID_TAKEN), or
 *   one the sidecar assigns;
 * - both `client_id` fields must be the caller's own (else 403 CLIENT_ID_TAKEN); a
 *   prompt without one gets a fresh id of the owner's, so its events never go to
 *   every socket (ComfyUI broadcasts a prompt without client_id);
 * - without `can_view_all_comfyui_items`, every model the graph references must be
 *   granted (models/behaviours.ts), else 403 MODEL_NOT_ALLOWED before anything is stored;
 * - the owner is stored before the host sees the prompt;
 * - the body is edited, never re-serialised: every byte outside those keys stays.
 */
import { randomUUID } from 'node:crypto'
import { denyDecision } from '../../kernel/answers.js'
import { promptFileRefusal, promptOwnEdits } from './prompt-files.js'
import { applySplices, lastMember, objectMembers, rootStart, setMembers, type Splice } from '../json-spans.js'
import { actingAs } from '../../access/request-context.js'
import type { BodyAnswer, RouteBehaviour, Steps } from '../../kernel/behaviour.js'
import type { HostLink } from '../../kernel/host-link.js'
import type { PassDecision } from '../../kernel/protocol.js'
import type { BehaviourDeps } from './deps.js'
import { passWithBody, replaced, textOf } from '../../kernel/behaviour.js'
import { userFolder, withoutOthersFolders } from '../user-folders.js'
import { promptModelCheck, promptModelRefusal, type ModelCheck, type ModelDeps } from '../../models/behaviours.js'

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v)

/**
 * Whether Python (the host) takes a JSON value as true: ComfyUI puts a prompt first on
 * `if json_data['front']:`, so `1`, `"yes"`, `1e300` and `[0]` count, not only `true` (issue 21).
 * Falsy are exactly null, false, 0 (any zero), "", [] and {}.
 */
export function pythonTruthy(value: unknown): boolean {
  if (value === null || value === false || value === undefined) return false
  if (typeof value === 'number') return value !== 0
  if (typeof value === 'string') return value.length > 0
  if (Array.isArray(value)) return value.length > 0
  if (isObject(value)) return Object.keys(value).length > 0
  return true
}
const nonEmptyString = (v: unknown): v is string => typeof v === 'string' && v !== ''
const PROMPT_ID = /^[A-Za-z0-9_-]{1,128}$/

/** The body step's state: who submits, and the model check their grants call for. */
interface PromptState {
  owner: string
  ip: string
  /** the event fields naming who submits (access/request-context.ts actingAs) */
  who: { actor?: string; subject?: string; principal?: string }
  seesAll: boolean
  /** the content-safety policy applies to the caller: no image it marked may be read into the prompt */
  sfw: boolean
  userId: string | null
  username: string
  models: ModelCheck
  /** once the body named or was given one */
  promptId?: string
}

export function promptBehaviour(deps: BehaviourDeps & ModelDeps): RouteBehaviour<PromptState> {
  return {
    decide({ pass, principal, ip, owner, seesAll, steps }) {
      const acting = actingAs(principal)
      const who = acting.actor ? { actor: acting.actor, subject: acting.actor } : acting
      const state: PromptState = { owner, ip, who, seesAll, sfw: deps.contentGate?.()?.applies(principal) === true, userId: principal.userId, username: principal.username, models: promptModelCheck(deps, principal) }
      return { ...pass, need_body: { max_bytes: deps.config.max_json_body_bytes, ctx: steps.body(state) } }
    },

    async body(state, payload, host, steps) {
      const decided = await promptBody(deps, state, payload, host, steps)
      promptEvent(deps, state, decided)
      return decided
    },

    filter(state, msg, payload) {
      if (msg.status === 200) return { action: 'keep' }
      const text = textOf(payload)
      if (text === null) return { action: 'keep' }
      const scrubbed = withoutOthersFolders(text, state.owner)
      return scrubbed === text ? { action: 'keep' } : replaced(scrubbed)
    },
  }
}

/**
 * One event per submission the gate decided: `prompt_queued` when it passes to the host (which
 * may still refuse the graph: its own validation answers 400), `prompt_refused` with the code.
 */
function promptEvent(deps: BehaviourDeps, state: PromptState, decided: BodyAnswer): void {
  const who = { ...state.who, ip: state.ip }
  const decision = 'answer' in decided ? decided.answer : decided
  if (decision.action === 'respond') {
    deps.events.emit('prompt_refused', { ...who, outcome: 'refused', code: refusalCode(decision.body_text), status: decision.status })
  } else {
    deps.events.emit('prompt_queued', { ...who, prompt_id: state.promptId ?? '' })
  }
}

const refusalCode = (bodyText: string | undefined): string => {
  try {
    const code = (JSON.parse(bodyText ?? '') as { code?: unknown }).code
    return typeof code === 'string' ? code : 'UNKNOWN'
  } catch {
    return 'UNKNOWN'
  }
}

async function promptBody(deps: BehaviourDeps & ModelDeps, state: PromptState, payload: Buffer, host: HostLink, steps: Steps<PromptState>): Promise<BodyAnswer> {
  const text = textOf(payload)
  if (text === null) return denyDecision('VALIDATION_FAILED', 'The prompt body is not UTF-8')
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch {
    return denyDecision('VALIDATION_FAILED', 'The prompt body is not valid JSON')
  }
  if (!isObject(parsed)) return denyDecision('VALIDATION_FAILED', 'The prompt body must be a JSON object')
  const extra = parsed.extra_data
  if (extra !== undefined && !isObject(extra)) return denyDecision('VALIDATION_FAILED', 'extra_data must be an object')
  const modelRefusal = promptModelRefusal(deps, state.models, parsed.prompt)
  if (modelRefusal) return modelRefusal
  let own: Splice[] = []
  if (!state.seesAll) {
    // a limited principal's cached results are also those of one grant set: after a grant or a
    // revocation the same graph runs again (a name it computes may now load, or no longer)
    const grants = state.models === null ? undefined : deps.models.grantSignature(state.models)
    const edits = promptOwnEdits(text, parsed.prompt, state.owner, deps.models, deps.host.facts.writer_inputs, grants)
    if (!Array.isArray(edits)) return edits
    own = edits
  }
  const content = state.sfw ? deps.contentGate?.() ?? null : null
  // (no NSFW tag anywhere: nothing a prompt reads can carry one, and no resolve is asked for it)
  const gate = content !== null && (await content.marksAny()) ? content : null
  if (!state.seesAll || gate !== null) {
    const checks = { ownership: !state.seesAll, ...(gate !== null ? { marked: (paths: readonly string[]) => gate.marked(paths) } : {}) }
    const fileRefusal = await promptFileRefusal(parsed.prompt, host, deps.ownership, state.owner, deps.host.facts.writer_inputs, checks)
    if (fileRefusal) return fileRefusal
  }
  const owner = state.owner

  // the queue position is everyone's: only those who see all may choose it
  if (!state.seesAll && ('number' in parsed || pythonTruthy(parsed.front))) {
    return denyDecision('PERMISSION_DENIED', 'Only an administrator chooses a place in the queue (number, front)')
  }

  let promptId: string
  if ('prompt_id' in parsed) {
    if (!nonEmptyString(parsed.prompt_id) || !PROMPT_ID.test(parsed.prompt_id)) {
      return denyDecision('VALIDATION_FAILED', 'prompt_id must be 1 to 128 letters, digits, - or _')
    }
    promptId = parsed.prompt_id
  } else {
    promptId = randomUUID()
  }
  state.promptId = promptId
  const recordedFor = deps.ownership.ownerOfPrompt(promptId)
  // an id the host knows (queued, running, in its history) is the caller's only if the gate recorded it for them
  if ((recordedFor !== undefined || deps.ownership.hostKnows(promptId)) && recordedFor !== owner) return denyDecision('PROMPT_ID_TAKEN')

  for (const candidate of [parsed.client_id, extra?.client_id]) {
    if (nonEmptyString(candidate) && !deps.clientIds.claim(candidate, owner)) return denyDecision('CLIENT_ID_TAKEN')
  }
  // the id ComfyUI will send events to: the top-level key when present (whatever its value), else extra_data's
  const effective = 'client_id' in parsed ? parsed.client_id : extra?.client_id
  let clientId: string
  if (nonEmptyString(effective)) {
    clientId = effective
  } else {
    // the gate's own id for this prompt: no slot of the owner's, gone with the prompt's record
    clientId = `authsvc-${randomUUID()}`
    deps.clientIds.bindMinted(clientId, owner)
  }

  const root = objectMembers(text, rootStart(text))
  const stamp: Array<[string, string]> = [
    ['authsvc_user', JSON.stringify(state.username)],
    ['authsvc_user_id', JSON.stringify(state.userId)],
    // the folder the plugin's run-time guard (host-plugin/run_guard.py) keeps this prompt to
    ['authsvc_folder', JSON.stringify(state.seesAll ? null : userFolder(owner))],
    // the models it may load, whatever names it computes while it runs (null: every model)
    ['authsvc_models', state.models === null ? 'null' : deps.models.runStamp(state.models)],
  ]
  const top: Array<[string, string]> = []
  if (!('prompt_id' in parsed)) top.push(['prompt_id', JSON.stringify(promptId)])
  if (clientId !== effective) top.push(['client_id', JSON.stringify(clientId)])
  const splices: Splice[] = []
  const extraMember = lastMember(root.members, 'extra_data')
  if (extraMember === undefined) {
    top.push(['extra_data', `{${stamp.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(',')}}`])
  } else {
    splices.push(...setMembers(objectMembers(text, extraMember.valueStart), stamp))
  }
  splices.push(...setMembers(root, top), ...own)

  // taken here, after the last refusal and before the first await: two submissions of one id
  // cannot both pass, and a refused prompt holds no id
  if (!deps.ownership.reservePrompt(promptId, owner)) return denyDecision('PROMPT_ID_TAKEN')
  await deps.ownership.recordPrompt({
    prompt_id: promptId,
    owner,
    user_id: state.userId,
    username: state.username,
    client_id: clientId,
    created_at_iso: new Date(deps.clock()).toISOString(),
  })
  const passed = passWithBody(applySplices(text, splices))
  // the host's validation errors list a combo's options (LoadImageSetFromFolderNode's folders,
  // every subfolder of input/): another owner's folder is named nowhere in the answer
  if (state.seesAll) return passed
  return { ...passed, answer: { ...(passed.answer as PassDecision), filter: { ...steps.filter('prompt-answer', state), errors: true } } }
}
