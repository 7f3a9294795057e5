/** What the isolation behaviours are built from (isolation/feature.ts builds it once the store is open). */
import type { Principal } from '../../identity/principal.js'
import type { Config } from '../../kernel/config/schema.js'
import type { Clock } from '../../kernel/clock.js'
import type { Events } from '../../kernel/events.js'
import type { Decision, HostFacts } from '../../kernel/protocol.js'
import type { ClientIdBindings } from '../client-ids.js'
import type { FilterPool } from '../filter-pool.js'
import type { LiveSockets } from '../live-sockets.js'
import type { Ownership } from '../ownership.js'

export interface BehaviourDeps {
  config: Config
  clock: Clock
  /** prompts queued and refused are events (kernel/events.ts) */
  events: Pick<Events, 'emit'>
  ownership: Ownership
  clientIds: ClientIdBindings
  liveSockets: LiveSockets
  host: { facts: HostFacts }
  /** where large host answers are edited (off the event loop) */
  filters: FilterPool
  /** the content-safety policy's gate on /view, when that feature is composed and enabled */
  contentGate?: () => ContentGate | null
}

/**
 * Another feature's say on an image a caller may read (the content-safety policy, nsfw/): whether
 * it looks at this principal at all (`applies`: no resolve is asked for a caller it never blocks),
 * and its decision for the resolved file (null: pass).
 */
export interface ContentGate {
  applies(principal: Principal): boolean
  view(principal: Principal, file: { path: string; size?: number; mtime_ms?: number; head?: Uint8Array }, ip: string): Promise<Decision | null>
  /**
   * Whether any of these files carries an NSFW tag (of any source; one set on an earlier state of
   * the file counts too): what a caller it applies to may not copy by reading it into a prompt or
   * a mask, since the copy would be judged by the detector alone, the very thing a mark corrects.
   */
  marked(paths: readonly string[]): Promise<boolean>
  /** Whether any file carries such a tag at all (when none does, a prompt's names need no resolve for it). */
  marksAny(): Promise<boolean>
}
