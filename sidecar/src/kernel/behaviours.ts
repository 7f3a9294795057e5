/**
 * The route behaviours the features bring (kernel/feature.ts), by the name their policy row
 * gives (access/host-routes.ts), and the dispatch of the later steps (body, form, filter) to the
 * state their decision opened (steps.ts): the ctx the plugin sends back is only the step's id.
 * A step that is unknown, expired, or opened for another kind of step (or another filter) is
 * refused as an outage (503): only the plugin sends a ctx.
 *
 * Composition is checked at start: a name given twice, or a row naming a behaviour no feature
 * brings, is a programming error that stops the sidecar (a row without its behaviour would pass
 * with the permission check alone).
 */
import { isAdministrator, type Principal } from '../identity/principal.js'
import type { HostRoutePolicy } from '../access/host-routes.js'
import type { BehaviourHandlers } from '../access/decide.js'
import { denyDecision } from './answers.js'
import type { Decision, FilterMessage, FormMessage, PassDecision, RequestDescription } from './protocol.js'
import type { BodyAnswer, DecideInput, FilterResult, RouteBehaviour, Steps } from './behaviour.js'
import { ownerKey } from './behaviour.js'
import { NO_HOST, type HostLink } from './host-link.js'
import { stepIdOf, StepStore, type StepLimits } from './steps.js'
import type { Clock } from './clock.js'

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

/** A step waiting for its message, its behaviour and typed state closed over by what runs it. */
export type PendingStep =
  | { kind: 'body'; run: (payload: Buffer, host: HostLink) => BodyAnswer | Promise<BodyAnswer> }
  | { kind: 'form'; run: (msg: FormMessage, host: HostLink) => Decision | Promise<Decision> }
  | {
      kind: 'filter'
      name: string
      run: (msg: FilterMessage, payload: Buffer, host: HostLink) => FilterResult | Promise<FilterResult>
      narrow: () => { keep: string[]; final: boolean } | null
    }

/** A behaviour of the table with its steps bound to the store; its state type stays inside. */
export interface BoundBehaviour {
  decide(input: Omit<DecideInput, 'steps'>): Decision | Promise<Decision>
  keepable: boolean
}

function bind<S>(name: string, behaviour: RouteBehaviour<S>, store: StepStore<PendingStep>): BoundBehaviour {
  const missing = (step: string): Error => new Error(`behaviour ${name} opened a ${step} step it does not have`)
  /** the steps a decision for `owner` opens (and the later steps they open) count against that owner */
  const stepsOf = (owner: string): Steps<S> => {
    const steps: Steps<S> = {
      body(state) {
        const body = behaviour.body
        if (body === undefined) throw missing('body')
        return store.open({ kind: 'body', run: (payload, host) => body(state, payload, host, steps) }, owner)
      },
      form(state) {
        const form = behaviour.form
        if (form === undefined) throw missing('form')
        return store.open({ kind: 'form', run: (msg, host) => form(state, msg, host, steps) }, owner)
      },
      filter(filterName, state) {
        const filter = behaviour.filter
        if (filter === undefined) throw missing('filter')
        const narrow = behaviour.narrow
        const make = (): PendingStep => ({
          kind: 'filter',
          name: filterName,
          run: (msg, payload, host) => filter(state, msg, payload, host),
          narrow: () => (narrow === undefined ? null : narrow(state)),
        })
        // a keepable read's filter: the plugin sends the same ctx for every reuse of the kept decision
        const ctx = behaviour.keepable === true
          ? store.share(`${owner} ${name} ${filterName} ${JSON.stringify(state)}`, make, owner)
          : store.open(make(), owner)
        return { name: filterName, ctx }
      },
    }
    return steps
  }
  return { decide: (input) => behaviour.decide({ ...input, steps: stepsOf(input.owner) }), keepable: behaviour.keepable === true }
}

/** A behaviour under its row's name, its state type kept inside: what a feature lists. */
export interface BehaviourEntry {
  readonly name: string
  bind(store: StepStore<PendingStep>): BoundBehaviour
}

export function behaviourEntry<S>(name: string, behaviour: RouteBehaviour<S>): BehaviourEntry {
  return { name, bind: (store) => bind(name, behaviour, store) }
}

/**
 * A step the sidecar does not know: only the plugin sends a ctx, so this is never the client's
 * doing; the step ended with a sidecar restart, expired or was pushed out (or the plugin is
 * wrong). Refused as the outage it is (503, retry), never passed.
 */
const stepGone = () => denyDecision('AUTHSVC_UNAVAILABLE', 'This request\'s decision step is no longer known (a sidecar restart, or it waited too long); retry')

export class RouteBehaviours implements BehaviourHandlers {
  private readonly byName = new Map<string, BoundBehaviour>()
  /** the later steps waiting for their messages */
  readonly steps: StepStore<PendingStep>

  /**
   * `named`: the behaviour every row of the table names (HostRouteTable.behaviours); each must be
   * among `entries`, and no name twice.
   */
  constructor(
    private readonly options: { clock: Clock; seperateUsers: boolean },
    entries: readonly BehaviourEntry[],
    named: ReadonlySet<string>,
    limits?: StepLimits,
  ) {
    this.steps = new StepStore<PendingStep>(options.clock, limits)
    for (const entry of entries) {
      if (this.byName.has(entry.name)) throw new Error(`behaviour ${entry.name} is brought by two features`)
      this.byName.set(entry.name, entry.bind(this.steps))
    }
    const missing = [...named].filter((name) => !this.byName.has(name))
    if (missing.length > 0) throw new Error(`host route rows name behaviours no feature brings: ${missing.join(', ')}`)
  }

  /** Whether this principal sees and acts on everyone's things. */
  seesAll(principal: Principal): boolean {
    return isAdministrator(principal) || !this.options.seperateUsers
  }

  apply(policy: HostRoutePolicy, desc: RequestDescription, principal: Principal, pass: PassDecision, client: { ip: string; addresses: readonly string[] }): Decision | Promise<Decision> {
    const behaviour = policy.behaviour === undefined ? undefined : this.byName.get(policy.behaviour)
    if (behaviour === undefined) return pass
    const { ip, addresses } = client
    const decided = behaviour.decide({ desc, principal, pass, ip, addresses, owner: ownerKey(principal), seesAll: this.seesAll(principal), host: desc.host ?? NO_HOST })
    return decided instanceof Promise ? decided.then(readsAsChecked) : readsAsChecked(decided)
  }

  keepable(policy: HostRoutePolicy): boolean {
    return policy.behaviour !== undefined && this.byName.get(policy.behaviour)?.keepable === true
  }

  /** The live step a ctx names, and its id. */
  private pending(ctx: unknown): { id: string; step: PendingStep } | null {
    const id = stepIdOf(ctx)
    const step = id === null ? undefined : this.steps.get(id)
    return id === null || step === undefined ? null : { id, step }
  }

  body(ctx: unknown, payload: Buffer, host: HostLink = NO_HOST): BodyAnswer | Promise<BodyAnswer> {
    const found = this.pending(ctx)
    if (found?.step.kind !== 'body') return stepGone()
    this.steps.done(found.id)
    return found.step.run(payload, host)
  }

  form(ctx: unknown, msg: FormMessage, host: HostLink = NO_HOST): Decision | Promise<Decision> {
    const found = this.pending(ctx)
    if (found?.step.kind !== 'form') return stepGone()
    this.steps.done(found.id)
    return found.step.run(msg, host)
  }

  filter(msg: FilterMessage, payload: Buffer, host: HostLink = NO_HOST): FilterResult | Promise<FilterResult> {
    const found = this.pending(msg.ctx)
    if (found?.step.kind !== 'filter' || found.step.name !== msg.name) return stepGone()
    if (msg.too_large === true) {
      // the plugin sends the narrowed answer to the same step again (unless final)
      const narrowed = found.step.narrow()
      if (narrowed === null) return denyDecision('AUTHSVC_UNAVAILABLE', 'The host answer is too large to filter')
      return { action: 'narrow', keep_prompt_ids: narrowed.keep, ...(narrowed.final ? { final: true as const } : {}) }
    }
    this.steps.done(found.id)
    return found.step.run(msg, payload, host)
  }
}
