/**
 * Updates: whether a newer authsvc exists, from the source the operator configured
 * (`update_check.url`; empty = offline), checked by a background job shortly after start and
 * then at most once a day (update-check.ts); the admin route answers from memory.
 */
import type { FastifyBaseLogger } from 'fastify'
import type { Clock } from '../kernel/clock.js'
import type { Feature } from '../kernel/feature.js'
import { Collection } from '../store/collection.js'
import { SERVICE_VERSION, type Services } from '../services.js'
import { CHECK_TIMEOUT_MS, UpdateCheck, type UpdateCheckRecord } from './update-check.js'
import { updateStatusRoutes } from './routes.js'

/** after start, before the first check: the start's own work (host facts, model folders) goes first */
export const FIRST_CHECK_MS = 3000
/** how often the job looks whether a check is due (the check itself is at most daily) */
export const DUE_LOOK_MS = 10 * 60 * 1000

export interface UpdatesFeature extends Feature {
  /** the check; from bind on */
  check(): UpdateCheck
}

export interface UpdateTiming {
  /** null: no first check by timer (tests that drive the checks themselves) */
  firstCheckMs: number | null
  dueLookMs: number
  /** one ask's deadline */
  timeoutMs: number
}

export function updatesFeature(
  services: Pick<Services, 'config' | 'localKv'>, log: FastifyBaseLogger, clock: Clock,
  timing: UpdateTiming = { firstCheckMs: FIRST_CHECK_MS, dueLookMs: DUE_LOOK_MS, timeoutMs: CHECK_TIMEOUT_MS },
): UpdatesFeature {
  let check: UpdateCheck | undefined
  const bound = (): UpdateCheck => {
    if (check === undefined) throw new Error('the update check is read before the store was opened')
    return check
  }
  return {
    name: 'updates',
    routes: async (family) => {
      await family.register(updateStatusRoutes(bound))
    },
    check: bound,
    bind() {
      let records: Collection<UpdateCheckRecord> | undefined
      const made = new UpdateCheck({
        url: services.config.update_check.url,
        current: SERVICE_VERSION,
        clock,
        log,
        timeoutMs: timing.timeoutMs,
        memory: {
          load: async () => {
            records = await Collection.load<UpdateCheckRecord>(services.localKv, 'update_check', { log })
            return records.get('last')
          },
          save: async (record) => {
            records ??= await Collection.load<UpdateCheckRecord>(services.localKv, 'update_check', { log })
            await records.put('last', record)
          },
        },
      })
      check = made
      // no source, no job: nothing is read or stored, no timer runs
      if (services.config.update_check.url === '') return {}
      // at once, not when the job's turn comes: the route shows the stored answer from the start
      void made.restore()
      let first: NodeJS.Timeout | undefined
      return {
        jobs: [{
          name: 'update-check',
          async start() {
            await made.restore()
            if (timing.firstCheckMs === null) return
            // checkIfDue never rejects: every failure of an ask is logged inside it
            first = setTimeout(() => void made.checkIfDue(), timing.firstCheckMs)
            first.unref()
          },
          every: { ms: timing.dueLookMs, run: () => made.checkIfDue() },
          async stop() {
            clearTimeout(first)
            await made.stop()
          },
        }],
      }
    },
  }
}
