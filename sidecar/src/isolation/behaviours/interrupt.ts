/**
 * POST /interrupt for a caller who does not see everything: only a running
 * prompt of theirs. With a `prompt_id` it must be theirs; without one the body
 * becomes the id of their running prompt, so the host interrupts that prompt
 * and nothing else even if the run changed meanwhile. Anything else is 403
 * NOT_OWNER and the host is never asked.
 */
import { denyDecision } from '../../kernel/answers.js'
import type { RouteBehaviour } from '../../kernel/behaviour.js'
import type { BehaviourDeps } from './deps.js'
import { passWithBody, textOf } from '../../kernel/behaviour.js'
import { SMALL_BODY_BYTES } from './scoped-delete.js'

export function interruptBehaviour(deps: BehaviourDeps): RouteBehaviour<{ owner: string }> {
  return {
    decide({ pass, owner, seesAll, steps }) {
      if (seesAll) return pass
      return { ...pass, need_body: { max_bytes: SMALL_BODY_BYTES, ctx: steps.body({ owner }) } }
    },
    body(state, payload) {
      const text = textOf(payload) ?? ''
      let body: unknown = {}
      if (text.trim() !== '') {
        try {
          body = JSON.parse(text)
        } catch {
          body = {} // ComfyUI reads a body that is not JSON as {}
        }
      }
      if (typeof body !== 'object' || body === null || Array.isArray(body)) return denyDecision('VALIDATION_FAILED', 'The body must be a JSON object')
      const asked = (body as { prompt_id?: unknown }).prompt_id
      if (asked) {
        if (typeof asked !== 'string' || deps.ownership.ownerOfPrompt(asked) !== state.owner) return denyDecision('NOT_OWNER', 'Not your prompt')
        return passWithBody(JSON.stringify({ prompt_id: asked }))
      }
      const running = deps.ownership.running
      if (running === null || deps.ownership.ownerOfPrompt(running) !== state.owner) {
        return denyDecision('NOT_OWNER', 'The running prompt is not yours')
      }
      return passWithBody(JSON.stringify({ prompt_id: running }))
    },
  }
}
