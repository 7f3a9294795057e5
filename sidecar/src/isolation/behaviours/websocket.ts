/**
 * GET /ws: a `clientId` is bound to the first owner that used it (CLIENT_ID_TAKEN
 * for anyone else), and the socket is tagged so the sidecar can close it when its
 * credential ends or changes (live-sockets.ts), also after a restart of the sidecar
 * (the plugin hands the socket's entry back in its hello). For a caller who does not
 * see everything, the plugin edits the socket's `status` frames so that
 * `queue_remaining` counts only the owner's prompts (queue_counts, pushed by the sidecar).
 */
import { hostQuery } from '../../kernel/host-query.js'
import { randomUUID } from 'node:crypto'
import { denyDecision } from '../../kernel/answers.js'
import type { SocketEntry } from '../live-sockets.js'
import type { RouteBehaviour } from '../../kernel/behaviour.js'
import type { BehaviourDeps } from './deps.js'

export function websocketBehaviour(deps: BehaviourDeps): RouteBehaviour {
  return {
    decide({ desc, pass, principal, owner, seesAll, addresses }) {
      const clientId = hostQuery(desc.query).get('clientId')
      if (clientId && !deps.clientIds.claim(clientId, owner)) return denyDecision('CLIENT_ID_TAKEN')
      // its preview frames wait for the content-safety policy's word (an sfw_check user, nsfw/)
      const gate = deps.contentGate?.()
      const checked = gate?.applies(principal) === true
      const entry: SocketEntry = {
        tag: randomUUID(),
        userId: principal.userId,
        role: principal.role,
        authType: principal.authType,
        ...(principal.credentialId !== undefined ? { credentialId: principal.credentialId } : {}),
        // the IP lists keep judging the socket's addresses while it is open (credential-state.ts)
        addresses: [...addresses],
        // its binding holds while the socket is open, whatever the host forgets (client-ids.ts)
        ...(clientId ? { clientId } : {}),
        // a user whose sfw_check is turned on later must not keep an unchecked socket (credential-state.ts)
        ...(gate != null && !checked && principal.userId !== null ? { previewsUnchecked: true } : {}),
      }
      if (!deps.liveSockets.register(entry)) return denyDecision('TOO_MANY_ATTEMPTS', 'Too many open WebSockets; close some first', [['Retry-After', '5']])
      // the plugin keeps the entry and hands it back after a sidecar restart (live-sockets.ts)
      // its `status` frames count only the owner's prompts, unless the caller sees everything (issue 21)
      const previews = checked ? { ws_preview_check: true as const } : {}
      return { ...pass, ws_tag: entry.tag, ws_entry: entry, ...(seesAll ? {} : { ws_queue_owner: owner }), ...previews }
    },
  }
}
