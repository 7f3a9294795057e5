/** GET /system_stats: non-admins get the answer without the server's argv (it can hold secrets). */
import { jsonDecision } from '../../kernel/answers.js'
import type { RouteBehaviour } from '../../kernel/behaviour.js'
import { replaced } from '../../kernel/behaviour.js'

export function systemStatsBehaviour(): RouteBehaviour<null> {
  return {
    decide({ pass, principal, steps }) {
      return principal.isAdmin ? pass : { ...pass, filter: steps.filter('system_stats', null) }
    },
    filter(_state, msg, payload) {
      if (msg.status !== 200) return { action: 'keep' }
      let stats: { system?: Record<string, unknown> }
      try {
        stats = JSON.parse(payload.toString('utf8')) as typeof stats
      } catch {
        return jsonDecision(502, { error: 'Host answered malformed JSON', code: 'INTERNAL_ERROR', statusCode: 502 })
      }
      if (stats.system && typeof stats.system === 'object') delete stats.system.argv
      return replaced(JSON.stringify(stats))
    },
  }
}
