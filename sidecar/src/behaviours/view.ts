/**
 * GET /view: a caller who does not see everything gets only files visible to
 * them (host-files.ts); any other file answers 404 as if it did not exist, so
 * names of other users' files cannot be probed.
 */
import { denyDecision } from '../decide/answers.js'
import type { BehaviourDeps, RouteBehaviour } from './context.js'
import { mayView, viewedFile } from './host-files.js'

export function viewBehaviour(deps: BehaviourDeps): RouteBehaviour {
  return {
    decide({ desc, pass, owner, seesAll }) {
      if (seesAll) return pass
      const file = viewedFile(new URLSearchParams(desc.query))
      if (file === null) return pass // the host refuses it itself (400/403)
      if (file === 'refuse') return denyDecision('NOT_FOUND')
      return mayView(deps.ownership, file.key, owner) ? pass : denyDecision('NOT_FOUND')
    },
  }
}
