/** Liveness for operators and the test harness: answers only when the store is open. */
import type { FastifyInstance } from 'fastify'
import { SERVICE_VERSION, type Services } from '../../services.js'

export function healthRoutes(services: Pick<Services, 'users'>) {
  return async function (app: FastifyInstance): Promise<void> {
    app.get('/health', { config: { auth: 'public' } }, async () => ({
      status: 'ok',
      version: SERVICE_VERSION,
      users: services.users.count > 0,
    }))
  }
}
