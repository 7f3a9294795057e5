/** `GET /authsvc/api/update-status` (SPEC §5.4, admin only): what the last background check learned. */
import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Type from 'typebox'
import type { UpdateCheck } from './update-check.js'

export const UpdateStatusSchema = Type.Object(
  {
    current_version: Type.String(),
    latest_version: Type.String(),
    update_available: Type.Boolean(),
    mode: Type.Union([Type.Literal('online'), Type.Literal('offline')]),
  },
  { additionalProperties: false },
)

export function updateStatusRoutes(check: () => UpdateCheck) {
  return async function (fastify: FastifyInstance): Promise<void> {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
    app.get('/api/update-status', { config: { auth: 'admin' }, schema: { response: { 200: UpdateStatusSchema } } }, async () => check().status())
  }
}
