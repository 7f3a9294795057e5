/**
 * What a route behaviour is (DESIGN §3.1): one typed unit found from its policy
 * row, deciding the request and, optionally, the body step, the form step and
 * the filter of the host's answer. Adding a behaviour adds a file and a row.
 *
 * Every step can only narrow what the permission check allowed: refuse, hide,
 * or rewrite towards the caller's own things.
 */
import type { Config } from '../config/schema.js'
import type { HostLink } from '../decide/host-link.js'
import { ADMIN_ROLE, type Principal } from '../identity/principal.js'
import type { Clock } from '../identity/clock.js'
import type { Ownership } from '../isolation/ownership.js'
import type { ClientIdBindings } from '../isolation/client-ids.js'
import type { LiveSockets } from '../isolation/live-sockets.js'
import type { WorkflowStore } from '../isolation/workflow-store.js'
import type { FilterPool } from '../isolation/filter-pool.js'
import type {
  Decision,
  FilterAnswer,
  FilterMessage,
  FormMessage,
  HostFacts,
  PassDecision,
  RequestDescription,
  WithPayload,
} from '../decide/protocol.js'

export interface BehaviourDeps {
  config: Config
  clock: Clock
  ownership: Ownership
  clientIds: ClientIdBindings
  liveSockets: LiveSockets
  host: { facts: HostFacts }
  workflows: WorkflowStore
  /** where large host answers are edited (off the event loop) */
  filters: FilterPool
}

/** The owner key of a principal: a user by id; a guest session by its session; an anonymous role by the role. */
export const ownerKey = (p: Principal): string => p.userId ?? (p.credentialId ? `session:${p.credentialId}` : `role:${p.role}`)

export { hostUserOf } from '../identity/host-user.js'

/** The administrator role (not merely a role with every permission). */
export const isAdminRole = (p: Principal): boolean => p.isAdmin && p.role === ADMIN_ROLE

/** What every decide step gets. */
export interface DecideInput {
  desc: RequestDescription
  principal: Principal
  pass: PassDecision
  owner: string
  /** sees and acts on everything: an admin, or anyone while users are not separated */
  seesAll: boolean
  /** resolves names on the host that asked (decide/host-link.ts) */
  host: HostLink
}

/** The context a behaviour sends along with need_body / need_form / filter; it comes back in the next message. */
export interface StepContext {
  kind: string
  owner: string
  seesAll: boolean
  [key: string]: unknown
}

export type BodyAnswer = Decision | WithPayload<Decision>
export type FilterResult = FilterAnswer | WithPayload<FilterAnswer>

export interface RouteBehaviour {
  decide(input: DecideInput): Decision | Promise<Decision>
  /**
   * Its GET decision reads nothing but the request, the principal and what its filter's memo
   * names (prompt and file ownership, the model cache), each of which moves the access epoch:
   * the plugin may keep a pass of it like a plain route's (decide.ts, docs/architecture.md).
   */
  keepable?: true
  /** `host` resolves names on the host that asked (decide/host-link.ts) */
  body?(ctx: StepContext, payload: Buffer, host: HostLink): BodyAnswer | Promise<BodyAnswer>
  form?(ctx: StepContext, msg: FormMessage, host: HostLink): Decision | Promise<Decision>
  filter?(ctx: StepContext, msg: FilterMessage, payload: Buffer, host: HostLink): FilterResult | Promise<FilterResult>
  /** the prompts the caller may see, when the host's answer is too large to travel whole (filter `too_large`) */
  narrow?(ctx: StepContext): { keep: string[]; final: boolean } | null
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
