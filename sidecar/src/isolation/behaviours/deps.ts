/** What the isolation behaviours are built from (isolation/feature.ts builds it once the store is open). */
import type { Config } from '../../kernel/config/schema.js'
import type { Clock } from '../../kernel/clock.js'
import type { Events } from '../../kernel/events.js'
import type { HostFacts } from '../../kernel/protocol.js'
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
}
