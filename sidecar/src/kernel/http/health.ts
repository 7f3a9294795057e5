/** Liveness for operators and the test harness: answers only when the store is open. */
import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Type from 'typebox'
import { SERVICE_VERSION, type Services } from '../../services.js'

const Health = Type.Object({
  status: Type.Literal('ok'),
  version: Type.String(),
  users: Type.Boolean({ description: 'whether any account exists yet (the first registration makes the admin)' }),
})

export function healthRoutes(services: Pick<Services, 'users'>) {
  return async function (fastify: FastifyInstance): Promise<void> {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
    app.get('/health', { config: { auth: 'public' }, schema: { summary: 'Liveness: answers once the store is open', tags: ['service'], response: { 200: Health } } }, async () => ({
      status: 'ok' as const,
      version: SERVICE_VERSION,
      users: services.users.count > 0,
    }))
  }
}
