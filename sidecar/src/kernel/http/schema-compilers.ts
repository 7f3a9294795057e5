/**
 * One validator and one serializer compiler for every Fastify app of this process.
 *
 * Fastify builds a new pair per app by default, so each app compiles every route schema again.
 * Shared, the schemas (module-level constants) are compiled once per process: a standby sidecar
 * compiles them during its rehearsal and a promotion starts answering without that work (issue 27).
 * The ajv options still come from each app's `ajv` option; the pool is keyed by them.
 *
 * Answers: fast-json-stringify compiles a serialiser per route, status and media type, and Fastify
 * asks again for the same schema wherever a route is registered twice (every `/authsvc` route under
 * its second prefix, the HEAD Fastify adds to each GET), each time with its own copy of the schema;
 * ajv caches what it compiled, fast-json-stringify does not. So the process compiles the serialiser
 * of a schema once, found by the JSON text of the schema, the app's shared schemas and its options
 * (all plain JSON: the compiled function depends on nothing else), and reuses it. Fastify asks for
 * the compiler once per plugin context, so the pool is the module's, not the factory's.
 */
import { AjvCompiler } from '@fastify/ajv-compiler'
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler'

type SerializerFactory = ReturnType<typeof SerializerSelector>
type RouteSerializerCompiler = ReturnType<SerializerFactory>

/** A serialiser factory that compiles each (schema, shared schemas, options) once in the process. */
export function reusingSerializers(select: SerializerFactory): SerializerFactory {
  const compiled = new Map<string, ReturnType<RouteSerializerCompiler>>()
  return (externalSchemas, options) => {
    const compile = select(externalSchemas, options)
    const context = JSON.stringify([externalSchemas, options])
    return (route) => {
      const key = `${context}${JSON.stringify(route.schema)}`
      let serializer = compiled.get(key)
      if (serializer === undefined) {
        serializer = compile(route)
        compiled.set(key, serializer)
      }
      return serializer
    }
  }
}

export const sharedSchemaCompilers = {
  buildValidator: AjvCompiler(),
  buildSerializer: reusingSerializers(SerializerSelector()),
}
