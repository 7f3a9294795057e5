/**
 * GET /view: a caller who does not see everything gets only files they may read
 * (isolation/user-folders.ts), decided on the real path the host will open, resolved by the
 * host (the handler's own steps: annotation, type, subfolder, base name). Every file they may
 * not read answers exactly as a file that does not exist (the gate's 404 NOT_FOUND), so names
 * of other users' files cannot be probed. A shape the host refuses by itself whatever exists
 * (its 400 for a name with `..`, an unknown type or an unreadable name such as one with NUL, on
 * which the handler would fail with a 500; its 403 for a subfolder leaving its folder) gets the
 * gate's JSON error with the same status.
 */
import { denyDecision } from '../../kernel/answers.js'
import { mayReadFile } from '../user-folders.js'
import type { RouteBehaviour } from '../../kernel/behaviour.js'
import type { BehaviourDeps } from './deps.js'

export function viewBehaviour(deps: BehaviourDeps): RouteBehaviour {
  return {
    async decide({ desc, pass, owner, seesAll, host }) {
      if (seesAll) return pass
      const { results, roots } = await host.resolve([{ op: 'view', query: desc.query }])
      const place = results[0]
      if (place?.status === 404) return pass // no file named at all: the host's own 404
      if (place?.status === 403) return denyDecision('PERMISSION_DENIED', 'The subfolder leaves its folder')
      if (place?.status === 400) return denyDecision('VALIDATION_FAILED', 'Not a file name the host reads')
      return mayReadFile(place, roots, owner, deps.ownership) ? pass : denyDecision('NOT_FOUND')
    },
  }
}
