/**
 * Notifications (SPEC §8): events of the stream whose kind an admin enabled go to an ntfy topic,
 * through a bounded, retrying queue that no request ever waits for (publisher.ts); the settings
 * API and the test notification (routes.ts); the settings themselves, from config.json until an
 * admin saves them (ntfy-settings.ts).
 */
import type { FastifyBaseLogger } from 'fastify'
import type { Clock } from '../kernel/clock.js'
import type { Feature } from '../kernel/feature.js'
import type { Services } from '../services.js'
import { notificationOf, type AnyEventRecord } from './notification.js'
import { NtfySettings } from './ntfy-settings.js'
import { NtfyPublisher, PUBLISHER_DEFAULTS, type PublisherOptions } from './publisher.js'
import { notifyRoutes, type NotifyLive } from './routes.js'

export type NotifyServices = Pick<Services, 'config' | 'settings' | 'fieldCipher' | 'events'>

export function notifyFeature(services: NotifyServices, log: FastifyBaseLogger, clock: Clock, options: Partial<PublisherOptions> = {}): Feature {
  let live: NotifyLive | undefined
  return {
    name: 'notify',
    routes: notifyRoutes(() => {
      if (live === undefined) throw new Error('the ntfy settings are used before the store was opened')
      return live
    }),
    bind() {
      const settings = new NtfySettings({ settings: services.settings, config: services.config.ntfy, cipher: services.fieldCipher, log, clock })
      const publisher = new NtfyPublisher(() => settings.destination(), log, clock, options)
      live = { settings, publisher, events: services.events, timeoutMs: options.timeoutMs ?? PUBLISHER_DEFAULTS.timeoutMs, clock }
      services.events.onAny((record) => {
        if (settings.enables(record.kind)) publisher.offer(notificationOf(record as unknown as AnyEventRecord))
      })
      return { jobs: [{ name: 'ntfy', stop: () => publisher.stop() }] }
    },
  }
}
