/**
 * The serialiser of an answer's schema is compiled once per process (kernel/http/schema-compilers.ts):
 * asked again for the same schema (another prefix, a HEAD, another plugin context: a new factory
 * call), the compiled function is reused; a different schema, other shared schemas or other
 * options compile anew, so a reuse never serialises with the wrong schema.
 */
import { it } from 'node:test'
import assert from 'node:assert/strict'
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler'
import { reusingSerializers } from '../../sidecar/src/kernel/http/schema-compilers.js'

type Selector = ReturnType<typeof SerializerSelector>

function counting(): { select: Selector; compiles: () => number } {
  const real = SerializerSelector()
  let compiles = 0
  const select: Selector = (externalSchemas, options) => {
    const compile = real(externalSchemas, options)
    return (route) => {
      compiles += 1
      return compile(route)
    }
  }
  return { select, compiles: () => compiles }
}

const User = () => ({ type: 'object', properties: { name: { type: 'string' } } })
const route = (schema: object) => ({ schema, method: 'GET', url: '/x', httpStatus: '200' })

it('the same schema, asked again from another plugin context, is compiled once and serialises the same', () => {
  const { select, compiles } = counting()
  const factory = reusingSerializers(select)
  const first = factory({}, {})(route(User()))
  const again = factory({}, {})(route(User())) // a copy of the schema, as Fastify passes it
  assert.equal(compiles(), 1)
  assert.equal(again, first)
  assert.equal(again({ name: 'alice', secret: 'x' }), '{"name":"alice"}')
})

it('another schema, other shared schemas or other options compile anew', () => {
  const { select, compiles } = counting()
  const factory = reusingSerializers(select)
  const base = factory({}, {})(route(User()))
  const other = factory({}, {})(route({ type: 'object', properties: { role: { type: 'string' } } }))
  const shared = factory({ Extra: { $id: 'Extra', type: 'string' } }, {})(route(User()))
  const options = factory({}, { rounding: 'ceil' })(route(User()))
  assert.equal(compiles(), 4)
  assert.equal(other({ name: 'alice', role: 'admin' }), '{"role":"admin"}')
  assert.notEqual(shared, base)
  assert.notEqual(options, base)
})
