/**
 * GET /ws: a `clientId` is bound to the first owner that used it (CLIENT_ID_TAKEN
 * for anyone else), and the socket is tagged so the sidecar can close it when its
 * credential ends or changes (live-sockets.ts).
 */
import { randomUUID } from 'node:crypto'
import { denyDecision } from '../decide/answers.js'
import type { BehaviourDeps, RouteBehaviour } from './context.js'

export function websocketBehaviour(deps: BehaviourDeps): RouteBehaviour {
  return {
    decide({ desc, pass, principal, owner }) {
      const clientId = new URLSearchParams(desc.query).get('clientId')
      if (clientId && !deps.clientIds.claim(clientId, owner)) return denyDecision('CLIENT_ID_TAKEN')
      const tag = randomUUID()
      deps.liveSockets.register({
        tag,
        userId: principal.userId,
        role: principal.role,
        authType: principal.authType,
        ...(principal.credentialId !== undefined ? { credentialId: principal.credentialId } : {}),
      })
      return { ...pass, ws_tag: tag }
    },
  }
}
