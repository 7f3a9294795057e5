/**
 * One validator and one serializer compiler for every Fastify app of this process.
 *
 * Fastify builds a new pair per app by default, so each app compiles every route schema again.
 * Shared, the schemas (module-level constants) are compiled once per process: a standby sidecar
 * compiles them during its rehearsal and a promotion starts answering without that work (issue 27).
 * The ajv options still come from each app's `ajv` option; the pool is keyed by them.
 */
import { AjvCompiler } from '@fastify/ajv-compiler'
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler'

export const sharedSchemaCompilers = {
  buildValidator: AjvCompiler(),
  buildSerializer: SerializerSelector(),
}
