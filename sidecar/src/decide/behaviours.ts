/**
 * What some host routes need beyond the permission check (SPEC §6):
 * - prompt: the body is read (capped) and stamped with its owner; client
 *   spoofs of the owner keys are removed; `client_id` must be the caller's;
 * - userdata-write: writes under `workflows/` need can_modify_workflows;
 * - system-stats: non-admins get the answer without the server's argv;
 * - websocket: a clientId is bound to the first principal that used it.
 */
import { AuthsvcError } from '../errors.js'
import { can, type Principal } from '../identity/principal.js'
import type { HostRoutePolicy } from '../policy/host-routes.js'
import { denyDecision, jsonDecision } from './answers.js'
import type { BehaviourHandlers } from './decide.js'
import type { BodyMessage, Decision, FilterAnswer, FilterMessage, PassDecision, RequestDescription } from './protocol.js'

export const OWNER_KEYS = ['authsvc_user', 'authsvc_user_id'] as const
const CLIENT_ID_LIMIT = 10_000

interface PromptContext {
  kind: 'prompt'
  user_id: string | null
  username: string
  owner: string
}

/** clientId → owner key; bounded, oldest binding forgotten first. */
export class ClientIdBindings {
  private readonly owners = new Map<string, string>()

  claim(clientId: string, owner: string): boolean {
    const current = this.owners.get(clientId)
    if (current !== undefined) return current === owner
    if (this.owners.size >= CLIENT_ID_LIMIT) this.owners.delete(this.owners.keys().next().value as string)
    this.owners.set(clientId, owner)
    return true
  }
}

export const ownerKey = (p: Principal): string => p.userId ?? `role:${p.role}`

export class HostBehaviours implements BehaviourHandlers {
  constructor(
    private readonly maxJsonBytes: number,
    private readonly clientIds: ClientIdBindings,
  ) {}

  apply(policy: HostRoutePolicy, desc: RequestDescription, principal: Principal, pass: PassDecision): Decision {
    switch (policy.behaviour) {
      case 'prompt': {
        const ctx: PromptContext = { kind: 'prompt', user_id: principal.userId, username: principal.username, owner: ownerKey(principal) }
        return { ...pass, need_body: { max_bytes: this.maxJsonBytes, ctx } }
      }
      case 'userdata-write': {
        const file = desc.match_info.file ?? ''
        if (file.replace(/^\/+/, '').startsWith('workflows/') && !can(principal, 'can_modify_workflows')) {
          return denyDecision('PERMISSION_DENIED', 'Your role may not modify workflows')
        }
        return pass
      }
      case 'system-stats':
        return principal.isAdmin ? pass : { ...pass, filter: { name: 'system_stats', ctx: null } }
      case 'websocket': {
        const clientId = new URLSearchParams(desc.query).get('clientId')
        if (clientId && !this.clientIds.claim(clientId, ownerKey(principal))) return denyDecision('CLIENT_ID_TAKEN')
        return pass
      }
      default:
        return pass
    }
  }

  /** The second step of `need_body` decisions. */
  body(msg: BodyMessage): Decision {
    const ctx = msg.ctx as PromptContext | null
    if (ctx?.kind !== 'prompt') return denyDecision('VALIDATION_FAILED', 'Unexpected body')
    let prompt: unknown
    try {
      prompt = JSON.parse(msg.body_text)
    } catch {
      return denyDecision('VALIDATION_FAILED', 'The prompt body is not valid JSON')
    }
    if (typeof prompt !== 'object' || prompt === null || Array.isArray(prompt)) {
      return denyDecision('VALIDATION_FAILED', 'The prompt body must be a JSON object')
    }
    const body = prompt as Record<string, unknown>
    const clientId = body.client_id
    if (typeof clientId === 'string' && clientId !== '' && !this.clientIds.claim(clientId, ctx.owner)) {
      return denyDecision('CLIENT_ID_TAKEN')
    }
    const extra = typeof body.extra_data === 'object' && body.extra_data !== null && !Array.isArray(body.extra_data)
      ? { ...(body.extra_data as Record<string, unknown>) }
      : {}
    for (const key of OWNER_KEYS) delete extra[key]
    extra.authsvc_user = ctx.username
    extra.authsvc_user_id = ctx.user_id
    body.extra_data = extra
    return { action: 'pass', body_text: JSON.stringify(body) }
  }

  filter(msg: FilterMessage): FilterAnswer {
    if (msg.name !== 'system_stats') throw new AuthsvcError('INTERNAL_ERROR', `unknown filter ${msg.name}`)
    let stats: { system?: Record<string, unknown> }
    try {
      stats = JSON.parse(msg.body_text) as typeof stats
    } catch {
      return jsonDecision(502, { error: 'Host answered malformed JSON', code: 'INTERNAL_ERROR', statusCode: 502 })
    }
    if (stats.system && typeof stats.system === 'object') delete stats.system.argv
    return { action: 'replace', body_text: JSON.stringify(stats) }
  }
}
