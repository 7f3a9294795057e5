/**
 * The route behaviours, by the name their policy row gives (policy/host-routes.ts),
 * and the dispatch of the later steps (body, form, filter) by the `kind` their
 * context names. A step whose behaviour does not have it is refused.
 */
import { AuthsvcError } from '../errors.js'
import { ADMIN_ROLE, type Principal } from '../identity/principal.js'
import type { HostRouteBehaviour, HostRoutePolicy } from '../policy/host-routes.js'
import type { BehaviourHandlers } from '../decide/decide.js'
import { denyDecision } from '../decide/answers.js'
import type { Decision, FilterMessage, FormMessage, PassDecision, RequestDescription } from '../decide/protocol.js'
import type { BehaviourDeps, BodyAnswer, FilterResult, RouteBehaviour, StepContext } from './context.js'
import { ownerKey } from './context.js'
import { NO_HOST, type HostLink } from '../decide/host-link.js'
import { historyEntryBehaviour, historyListBehaviour, historyWriteBehaviour } from './history.js'
import { interruptBehaviour } from './interrupt.js'
import { modelFileBehaviour, modelListBehaviour, type ModelDeps } from './models.js'
import { objectInfoBehaviour } from './object-info.js'
import { promptBehaviour } from './prompt.js'
import { queueReadBehaviour, queueStatusBehaviour, queueWriteBehaviour } from './queue.js'
import { systemStatsBehaviour } from './system-stats.js'
import { uploadBehaviour } from './upload.js'
import { userdataWriteBehaviour } from './userdata-write.js'
import { userdataListBehaviour, userdataListV2Behaviour, userdataReadBehaviour, usersBehaviour } from './userdata-read.js'
import { viewBehaviour } from './view.js'
import { websocketBehaviour } from './websocket.js'

/**
 * A body the sidecar checks is a body the host must read the same way: the host decodes JSON
 * with the request's charset, so a client-chosen `charset=utf-7` (or any other) would let the
 * host read other keys than the ones checked here. Every pass that reads the body therefore
 * sends it to the host as plain `application/json` (UTF-8, what the sidecar decoded).
 */
function readsAsChecked(decision: Decision): Decision {
  if (decision.action !== 'pass' || decision.need_body === undefined) return decision
  return { ...decision, set_headers: { ...(decision.set_headers ?? {}), 'content-type': 'application/json' } }
}

export class RouteBehaviours implements BehaviourHandlers {
  private readonly byName: Record<HostRouteBehaviour, RouteBehaviour>
  /** the later steps: the kind a behaviour puts in its step context → the behaviour */
  private readonly byKind: Map<string, RouteBehaviour>

  constructor(private readonly deps: BehaviourDeps & ModelDeps) {
    this.byName = {
      prompt: promptBehaviour(deps),
      'queue-status': queueStatusBehaviour(deps),
      'queue-read': queueReadBehaviour(deps),
      'queue-write': queueWriteBehaviour(deps),
      'history-list': historyListBehaviour(deps),
      'history-entry': historyEntryBehaviour(deps),
      'history-write': historyWriteBehaviour(deps),
      interrupt: interruptBehaviour(deps),
      view: viewBehaviour(deps),
      'upload-image': uploadBehaviour(deps, false),
      'upload-mask': uploadBehaviour(deps, true),
      'object-info': objectInfoBehaviour(deps),
      'userdata-write': userdataWriteBehaviour(deps),
      'userdata-list': userdataListBehaviour(deps),
      'userdata-list-v2': userdataListV2Behaviour(deps),
      'userdata-read': userdataReadBehaviour(deps),
      users: usersBehaviour(),
      'system-stats': systemStatsBehaviour(),
      websocket: websocketBehaviour(deps),
      'model-list': modelListBehaviour(deps, 'model-list'),
      embeddings: modelListBehaviour(deps, 'embeddings'),
      'model-file': modelFileBehaviour(deps),
    }
    this.byKind = new Map(Object.entries(this.byName))
  }

  /** Whether this principal sees and acts on everyone's things. */
  seesAll(principal: Principal): boolean {
    return (principal.isAdmin && principal.role === ADMIN_ROLE) || !this.deps.config.seperate_users
  }

  apply(policy: HostRoutePolicy, desc: RequestDescription, principal: Principal, pass: PassDecision): Decision | Promise<Decision> {
    const behaviour = policy.behaviour === undefined ? undefined : this.byName[policy.behaviour]
    if (behaviour === undefined) return pass
    const decided = behaviour.decide({ desc, principal, pass, owner: ownerKey(principal), seesAll: this.seesAll(principal), host: desc.host ?? NO_HOST })
    return decided instanceof Promise ? decided.then(readsAsChecked) : readsAsChecked(decided)
  }

  keepable(policy: HostRoutePolicy): boolean {
    return policy.behaviour !== undefined && this.byName[policy.behaviour]?.keepable === true
  }

  private step(ctx: unknown): { behaviour: RouteBehaviour; ctx: StepContext } | null {
    if (typeof ctx !== 'object' || ctx === null) return null
    const c = ctx as StepContext
    if (typeof c.kind !== 'string' || typeof c.owner !== 'string' || typeof c.seesAll !== 'boolean') return null
    const behaviour = this.byKind.get(c.kind)
    return behaviour ? { behaviour, ctx: c } : null
  }

  body(ctx: unknown, payload: Buffer, host: HostLink = NO_HOST): BodyAnswer | Promise<BodyAnswer> {
    const found = this.step(ctx)
    if (!found?.behaviour.body) return denyDecision('VALIDATION_FAILED', 'Unexpected body')
    return found.behaviour.body(found.ctx, payload, host)
  }

  form(ctx: unknown, msg: FormMessage, host: HostLink = NO_HOST): Decision | Promise<Decision> {
    const found = this.step(ctx)
    if (!found?.behaviour.form) return denyDecision('VALIDATION_FAILED', 'Unexpected form')
    return found.behaviour.form(found.ctx, msg, host)
  }

  filter(msg: FilterMessage, payload: Buffer, host: HostLink = NO_HOST): FilterResult | Promise<FilterResult> {
    const found = this.step(msg.ctx)
    if (!found?.behaviour.filter) throw new AuthsvcError('INTERNAL_ERROR', `unknown filter ${msg.name}`)
    if (msg.too_large === true) {
      const narrowed = found.behaviour.narrow?.(found.ctx) ?? null
      if (narrowed === null) return denyDecision('AUTHSVC_UNAVAILABLE', 'The host answer is too large to filter')
      return { action: 'narrow', keep_prompt_ids: narrowed.keep, ...(narrowed.final ? { final: true as const } : {}) }
    }
    return found.behaviour.filter(found.ctx, msg, payload, host)
  }
}
