/**
 * A feature: one folder (identity/, isolation/, models/, workflows/, pages/, and the coming
 * downloads/, content-safety/, notify/, audit/) that says what it adds to the sidecar, built from
 * only the repositories and services it uses. `app.ts` composes the list; adding a feature is its
 * folder and one line there (test/unit/feature-composition.test.ts does exactly that).
 *
 * Two moments, as the sidecar has them (app.ts): the routes are registered before the store is
 * open (a standby registers them before it may touch the data dir), so a feature's factory and its
 * route plugins may hold services but not use them until a request comes; `bind` runs once the
 * store is open and builds what decides.
 */
import type { FastifyPluginAsync } from 'fastify'
import type { HostRouteEntry } from '../access/host-routes.js'
import type { BehaviourEntry } from './behaviours.js'
import type { Job } from './jobs.js'
import type { EventMessage, HelloMessage, HostFacts, PushMessage } from './protocol.js'

export interface Feature {
  /** names the feature in errors and logs */
  readonly name: string
  /** owned routes under `/authsvc` and `/api/authsvc` (registered once per prefix, by the same plugin) */
  readonly routes?: FastifyPluginAsync
  /** owned routes at the root (`/login`, pages, `/api/cpe/...`) */
  readonly rootRoutes?: FastifyPluginAsync
  /** host-route rows this feature adds: keys no other row has (access/host-routes.ts) */
  readonly hostRoutes?: Record<string, HostRouteEntry>
  /** what it adds once the store is open */
  bind?(kernel: BindKernel): BoundFeature
}

/** What the kernel gives a feature at bind. */
export interface BindKernel {
  /** sends an unasked message to the plugin (once the decision socket listens; dropped before) */
  push(message: PushMessage): void
}

export interface BoundFeature {
  /** the behaviours its rows (and other features' rows) name */
  readonly behaviours?: readonly BehaviourEntry[]
  /** background work, started now and stopped when the sidecar stops (kernel/jobs.ts) */
  readonly jobs?: readonly Job[]
  /** a plugin's hello of the right protocol (after the kernel took its host facts) */
  hello?(msg: HelloMessage): void
  /** the host's facts, from a hello or a later `host_facts` event (merged) */
  hostFacts?(facts: HostFacts): void
  /** a host event other than `host_facts` */
  hostEvent?(msg: EventMessage): void
  /** a preview frame (its image bytes) for a socket whose pass said `ws_preview_check`: whether it may be sent */
  preview?(image: Buffer): Promise<boolean>
}
