/**
 * What a route behaviour is (DESIGN §3.1): one typed unit found from its policy
 * row, deciding the request and, optionally, the body step, the form step and
 * the filter of the host's answer. Adding a behaviour adds a file and a row.
 *
 * Every step can only narrow what the permission check allowed: refuse, hide,
 * or rewrite towards the caller's own things.
 */
import type { HostLink } from './host-link.js'
import type { Principal } from '../identity/principal.js'
import type {
  Decision,
  FilterAnswer,
  FilterMessage,
  FormMessage,
  PassDecision,
  RequestDescription,
  WithPayload,
} from './protocol.js'
import type { StepToken } from './steps.js'

/** The owner key of a principal: a user by id; a guest session by its session; an anonymous role by the role. */
export const ownerKey = (p: Principal): string => p.userId ?? (p.credentialId ? `session:${p.credentialId}` : `role:${p.role}`)

/** What every decide step gets. */
export interface DecideInput<S = never> {
  desc: RequestDescription
  principal: Principal
  pass: PassDecision
  /** the client's address (after trusted proxies), for the events a behaviour emits */
  ip: string
  /** every address the request may come from (access/client-facts.ts): what the IP lists judge */
  addresses: readonly string[]
  owner: string
  /** sees and acts on everything: an admin, or anyone while users are not separated */
  seesAll: boolean
  /** resolves names on the host that asked (kernel/host-link.ts) */
  host: HostLink
  /** opens the behaviour's later steps with their state (kept in the sidecar: steps.ts) */
  steps: Steps<S>
}

/**
 * Opens a later step of a behaviour: its state stays in the sidecar (steps.ts), the decision
 * carries an opaque token as the step's ctx, and the step gets the state back as it was given.
 * A behaviour opens only the steps it has (else a programming error, refused as a failed decision).
 */
export interface Steps<S> {
  /** the ctx of a `need_body` */
  body(state: S): StepToken
  /** the ctx of a `need_form` */
  form(state: S): StepToken
  /** the `{name, ctx}` of a pass's `filter`; a filter message of another name is refused */
  filter(name: string, state: S): { name: string; ctx: StepToken }
}

export type BodyAnswer = Decision | WithPayload<Decision>
export type FilterResult = FilterAnswer | WithPayload<FilterAnswer>

/**
 * A route behaviour and the state `S` its later steps need (`never`: it has none). Its steps
 * get the state its decision (or an earlier step) opened them with, typed, never a bag.
 */
export interface RouteBehaviour<S = never> {
  decide(input: DecideInput<S>): Decision | Promise<Decision>
  /**
   * Its GET decision reads nothing but the request, the principal and what its filter's memo
   * names (prompt and file ownership, the model cache), each of which moves the access epoch:
   * the plugin may keep a pass of it like a plain route's (decide.ts, docs/architecture.md).
   * Its filter state is then shared and outlives each filter step (the plugin reuses the ctx).
   */
  keepable?: true
  /** `host` resolves names on the host that asked (kernel/host-link.ts); `steps` opens the filter of its answer */
  body?(state: S, payload: Buffer, host: HostLink, steps: Steps<S>): BodyAnswer | Promise<BodyAnswer>
  form?(state: S, msg: FormMessage, host: HostLink, steps: Steps<S>): Decision | Promise<Decision>
  filter?(state: S, msg: FilterMessage, payload: Buffer, host: HostLink): FilterResult | Promise<FilterResult>
  /** the prompts the caller may see, when the host's answer is too large to travel whole (filter `too_large`) */
  narrow?(state: S): { keep: string[]; final: boolean } | null
}

export const replaced = (text: string): WithPayload<FilterAnswer> => ({ answer: { action: 'replace' }, payload: Buffer.from(text, 'utf8') })
export const passWithBody = (body: string): WithPayload<Decision> => ({ answer: { action: 'pass', body_replaced: true }, payload: Buffer.from(body, 'utf8') })

const utf8 = new TextDecoder('utf-8', { fatal: true })
/** The bytes as text, or null when they are not UTF-8 (never silently replaced). */
export function textOf(payload: Buffer): string | null {
  try {
    return utf8.decode(payload)
  } catch {
    return null
  }
}
