/**
 * What some host routes need beyond the permission check (SPEC §6):
 * - prompt: the body is read (capped) and stamped with its owner; client
 *   spoofs of the owner keys are removed; `client_id` must be the caller's;
 * - userdata-write: writes under `workflows/` need can_modify_workflows;
 * - system-stats: non-admins get the answer without the server's argv;
 * - websocket: a clientId is bound to the first principal that used it.
 */
import { posix } from 'node:path'
import { AuthsvcError } from '../errors.js'
import { can, type Principal } from '../identity/principal.js'
import type { HostRoutePolicy } from '../policy/host-routes.js'
import { denyDecision, jsonDecision } from './answers.js'
import type { BehaviourHandlers } from './decide.js'
import type { BodyMessage, Decision, FilterAnswer, FilterMessage, PassDecision, RequestDescription } from './protocol.js'

export const OWNER_KEYS = ['authsvc_user', 'authsvc_user_id'] as const
/** clientIds one principal may hold; past it, that principal's oldest binding is forgotten, nobody else's */
export const CLIENT_IDS_PER_OWNER = 256

interface PromptContext {
  kind: 'prompt'
  user_id: string | null
  username: string
  owner: string
}

/**
 * clientId → owner. Bounded per owner: a principal that floods new ids only
 * ever evicts its own oldest bindings, so it can never free someone else's.
 */
export class ClientIdBindings {
  private readonly owners = new Map<string, string>()
  private readonly byOwner = new Map<string, Set<string>>()

  claim(clientId: string, owner: string): boolean {
    const current = this.owners.get(clientId)
    if (current !== undefined) return current === owner
    let mine = this.byOwner.get(owner)
    if (!mine) this.byOwner.set(owner, (mine = new Set()))
    if (mine.size >= CLIENT_IDS_PER_OWNER) {
      const oldest = mine.values().next().value as string
      mine.delete(oldest)
      this.owners.delete(oldest)
    }
    mine.add(clientId)
    this.owners.set(clientId, owner)
    return true
  }
}

/** Decodes %XX once, leniently, as Python's urllib.parse.unquote does (invalid escapes stay). */
function unquoteOnce(text: string): string {
  return text.replace(/(%[0-9A-Fa-f]{2})+/g, (run) => {
    try {
      return decodeURIComponent(run)
    } catch {
      return run
    }
  })
}

/**
 * Whether a userdata file name lands in `workflows/` the way ComfyUI resolves
 * it (get_request_user_filepath: unquote once when it holds `%`, join,
 * normalise); backslashes count as separators (Windows hosts).
 */
export function isWorkflowsPath(file: string): boolean {
  const decoded = file.includes('%') ? unquoteOnce(file) : file
  const normalized = posix.normalize(`/${decoded.replace(/\\/g, '/')}`)
  return normalized === '/workflows' || normalized.startsWith('/workflows/')
}

/** A user by id; a guest session by its own session; an anonymous role by the role. */
export const ownerKey = (p: Principal): string => p.userId ?? (p.credentialId ? `session:${p.credentialId}` : `role:${p.role}`)

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
        const touched = [desc.match_info.file, desc.match_info.dest].filter((f): f is string => typeof f === 'string')
        if (touched.some(isWorkflowsPath) && !can(principal, 'can_modify_workflows')) {
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
