/**
 * Audit: every event of the stream is stored (audit-log.ts) and read back as the consoles and the
 * admin's audit view (routes.ts). Pruned by the retention rules at start and then hourly.
 */
import type { Feature } from '../kernel/feature.js'
import type { Services } from '../services.js'
import { auditRoutes } from './routes.js'
import { VolumeGate } from './volume-gate.js'

const PRUNE_EVERY_MS = 60 * 60 * 1000

export function auditFeature(services: Pick<Services, 'audit' | 'users' | 'events'>): Feature {
  return {
    name: 'audit',
    routes: async (family) => {
      await family.register(auditRoutes(services))
    },
    bind() {
      const gate = new VolumeGate()
      services.events.onAny((record) => {
        const admitted = gate.admit(record)
        if (admitted !== null) services.audit.append(admitted)
      })
      return {
        jobs: [
          {
            name: 'audit-prune',
            every: { ms: PRUNE_EVERY_MS, run: async () => void (await services.audit.prune()) },
            async stop() {
              await services.audit.flush().catch(() => {})
            },
          },
        ],
      }
    },
  }
}
