/**
 * GET /view: a caller who does not see everything gets only files they may read
 * (isolation/user-folders.ts), decided on the real path the host will open, resolved by the
 * host (the handler's own steps: annotation, type, subfolder, base name). Every file they may
 * not read answers exactly as a file that does not exist (the gate's 404 NOT_FOUND), so names
 * of other users' files cannot be probed. A shape the host refuses by itself whatever exists
 * (its 400 for a name with `..`, an unknown type or an unreadable name such as one with NUL, on
 * which the handler would fail with a 500; its 403 for a subfolder leaving its folder) gets the
 * gate's JSON error with the same status.
 *
 * For a caller the content-safety policy looks at (an sfw_check user, nsfw/), the resolved file
 * then goes to its gate (deps.contentGate), which may answer 403 "NSFW content blocked".
 *
 * A pass for a principal who sees every file and is not checked is decided on the principal alone
 * and kept as a plain route's pass. A pass on a file is kept by the plugin (`cache.file`, docs/architecture.md "Kept decisions")
 * while the path the host opens names the same file in the same state; what else it read (the
 * principal, the file's owner, its tag) moves the access epoch when it changes.
 */
import { denyDecision } from '../../kernel/answers.js'
import { mayReadFile } from '../user-folders.js'
import type { RouteBehaviour } from '../../kernel/behaviour.js'
import type { BehaviourDeps } from './deps.js'

export function viewBehaviour(deps: BehaviourDeps): RouteBehaviour {
  return {
    async decide({ desc, pass, principal, owner, seesAll, host, ip }) {
      // the content-safety policy (nsfw/) looks at the file for its sfw_check users only
      const gate = deps.contentGate?.() ?? null
      const checks = gate !== null && gate.applies(principal)
      // decided on the principal alone (whose role, sfw_check and session move the access epoch;
      // the policy is composed at start): kept as a plain route's pass, whatever the file
      if (seesAll && !checks) return { ...pass, keep_plain: true }
      const { results, roots } = await host.resolve([{ op: 'view', query: desc.query, ...(checks ? { head: true } : {}) }])
      const place = results[0]
      if (place?.status === 404) return pass // no file named at all: the host's own 404
      if (place?.status === 403) return denyDecision('PERMISSION_DENIED', 'The subfolder leaves its folder')
      if (place?.status === 400) return denyDecision('VALIDATION_FAILED', 'Not a file name the host reads')
      if (!seesAll && !mayReadFile(place, roots, owner, deps.ownership)) return denyDecision('NOT_FOUND')
      if (checks && place?.file === true && place.path !== undefined) {
        const file = {
          path: place.path,
          ...(place.size !== undefined ? { size: place.size } : {}),
          ...(place.mtime_ms !== undefined ? { mtime_ms: place.mtime_ms } : {}),
          ...(typeof place.head === 'string' ? { head: Buffer.from(place.head, 'base64') } : {}),
        }
        const refused = await gate.view(principal, file, ip)
        if (refused !== null) return refused
      }
      // Decided on this file and on nothing else but the principal, its ownership and its tag, each
      // of which moves the access epoch: the plugin may repeat the pass while the path the host
      // opens still names this very file, unchanged (kernel/protocol.ts keep_while)
      if (place?.file === true && typeof place.opened === 'string' && typeof place.stamp === 'string') return { ...pass, keep_while: { path: place.opened, stamp: place.stamp } }
      return pass
    },
  }
}
