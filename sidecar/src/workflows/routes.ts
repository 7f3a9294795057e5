/**
 * The per-user workflow family (SPEC §6.1: `/api/cpe/...` and `/cpe/...`) and
 * publishing to the shared set, over the same storage as ComfyUI's userdata
 * routes (workflows/workflow-store.ts): a workflow saved here is listed and
 * loaded by `GET /userdata?dir=workflows` for the same user, and the reverse.
 *
 * Invariants: names stay inside `workflows/` (traversal, absolute paths and
 * hidden names are refused with 400); the caller's own file wins over a shared
 * one of the same name; writes are atomic; nothing here reads another user's
 * space.
 */
import type { FastifyInstance, FastifyReply } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Type from 'typebox'
import { readFileSync } from 'node:fs'
import { hostUserOf } from '../identity/host-user.js'
import { AuthsvcError } from '../kernel/errors.js'
import { ErrorRef } from '../kernel/http/errors.js'
import { can, type PermissionKey, type Principal } from '../identity/principal.js'
import { listFiles, SHARED_HOST_USER, WORKFLOWS_DIR } from './workflow-store.js'
import type { Services } from '../services.js'

const tags = ['workflows']

/** The cpe family's own error shape (SPEC §6.1); the access checks before a handler still answer ErrorAnswer. */
const CpeError = Type.Object({ status: Type.Literal('error'), message: Type.String() })
const cpeErrorOr = (description: string) => ({ description, ...Type.Union([CpeError, ErrorRef]) })

const WorkflowList = Type.Object({
  status: Type.Literal('success'),
  workflows: Type.Array(Type.Object({
    filename: Type.String({ description: 'relative to the workflows folder' }),
    size: Type.Integer(),
    modified: Type.Number({ description: 'seconds since the epoch' }),
  }), { description: 'the caller\'s own and the shared ones; the own one wins a name both have' }),
})
const WorkflowFile = Type.Object({ status: Type.Literal('success'), filename: Type.String(), workflow: Type.Unknown({ description: 'the workflow JSON as stored' }) })
const WorkflowSaved = Type.Object({ status: Type.Literal('success'), message: Type.String({ description: '`Workflow saved successfully`' }), filename: Type.String() })

/** A workflow name: a relative path of visible segments, `.json` added when missing. */
export function workflowName(raw: string): string | null {
  const name = raw.trim().replace(/\\/g, '/')
  if (name === '' || name.length > 255 || name.startsWith('/')) return null
  const segments = name.split('/')
  if (segments.some((s) => s === '' || s === '.' || s === '..' || s.startsWith('.') || /[\0<>:"|?*]/.test(s))) return null
  const joined = segments.join('/')
  return joined.toLowerCase().endsWith('.json') ? joined : `${joined}.json`
}

function need(p: Principal | null | undefined, key: PermissionKey): Principal {
  if (!p) throw new AuthsvcError('AUTH_REQUIRED')
  if (!can(p, key)) throw new AuthsvcError('PERMISSION_DENIED')
  return p
}

/** The cpe family answers its own error shape (SPEC §6.1). */
function cpeError(reply: FastifyReply, status: number, message: string): FastifyReply {
  return reply.code(status).send({ status: 'error', message })
}

export function workflowRoutes(services: Pick<Services, 'workflows' | 'clock'>) {
  // read at request time: the store is opened after the routes are registered (a standby's app)
  const store = () => services.workflows
  const dirOf = (hostUser: string): string | null => store().file(hostUser, WORKFLOWS_DIR)

  return async function (fastify: FastifyInstance): Promise<void> {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
    for (const prefix of ['/api/cpe', '/cpe']) {
      app.get(`${prefix}/workflow/list`, {
        config: { auth: 'principal' },
        schema: { summary: 'The caller\'s workflows and the shared ones (can_access_api)', tags, response: { 200: WorkflowList } },
      }, async (request) => {
        const p = need(request.principal, 'can_access_api')
        const own = dirOf(hostUserOf(p))
        const shared = dirOf(SHARED_HOST_USER)
        const mine = own === null ? [] : listFiles(own, true)
        const names = new Set(mine.map((f) => f.rel))
        const all = [...mine, ...(shared === null ? [] : listFiles(shared, true).filter((f) => !names.has(f.rel)))]
        return { status: 'success' as const, workflows: all.map((f) => ({ filename: f.rel, size: f.size, modified: f.modified })) }
      })

      app.get(`${prefix}/workflow/get`, {
        config: { auth: 'principal' },
        schema: {
          summary: 'One workflow: the caller\'s own, else the shared one', tags,
          querystring: Type.Object({ filename: Type.String({ maxLength: 300 }) }),
          response: { 200: WorkflowFile, 400: cpeErrorOr('an invalid name (or query)'), 404: cpeErrorOr('no such workflow'), 422: cpeErrorOr('the file is not valid JSON') },
        },
      }, async (request, reply) => {
        const p = request.principal!
        const name = workflowName(request.query.filename)
        if (name === null) return cpeError(reply, 400, 'Invalid workflow name')
        for (const hostUser of [hostUserOf(p), SHARED_HOST_USER]) {
          const path = store().file(hostUser, `${WORKFLOWS_DIR}/${name}`)
          if (!store().isFile(path)) continue
          let workflow: unknown
          try {
            workflow = JSON.parse(readFileSync(path, 'utf8'))
          } catch {
            return cpeError(reply, 422, 'The workflow file is not valid JSON')
          }
          return { status: 'success' as const, filename: name, workflow }
        }
        return cpeError(reply, 404, 'Workflow not found')
      })

      app.post(`${prefix}/workflow/save`, {
        config: { auth: 'principal' },
        schema: {
          summary: 'Save a workflow into the caller\'s own folder (can_modify_workflows)', tags,
          body: Type.Object({ workflow: Type.Union([Type.Object({}, { additionalProperties: true }), Type.String()]), name: Type.Optional(Type.String({ maxLength: 255 })) }),
          response: { 200: WorkflowSaved, 400: cpeErrorOr('an invalid name, or a workflow that is not JSON'), 503: cpeErrorOr('the host has not named its user folder yet') },
        },
      }, async (request, reply) => {
        const p = need(request.principal, 'can_modify_workflows')
        const body = request.body
        let text: string
        if (typeof body.workflow === 'string') {
          try {
            JSON.parse(body.workflow)
          } catch {
            return cpeError(reply, 400, 'workflow is not valid JSON')
          }
          text = body.workflow
        } else {
          text = JSON.stringify(body.workflow)
        }
        const name = workflowName(body.name ?? `workflow-${new Date(services.clock()).toISOString().replace(/[:.]/g, '-')}`)
        if (name === null) return cpeError(reply, 400, 'Invalid workflow name')
        const path = store().file(hostUserOf(p), `${WORKFLOWS_DIR}/${name}`)
        if (path === null) return cpeError(reply, 503, 'The host has not named its user folder yet')
        store().write(path, text)
        return { status: 'success' as const, message: 'Workflow saved successfully', filename: name }
      })

      app.get(`${prefix}/health`, {
        config: { auth: 'public' },
        schema: { summary: 'Liveness of the workflow family (a remote client needs a principal)', tags, response: { 200: Type.Object({ status: Type.Literal('success') }) } },
      }, async (request) => {
        if (!request.principal && !request.facts.isLocal) throw new AuthsvcError('AUTH_REQUIRED')
        return { status: 'success' as const }
      })
    }
  }
}

/** Admin: publish one of the admin's own workflows to the shared set (under /authsvc and /api/authsvc). */
export function workflowAdminRoutes(services: Pick<Services, 'workflows'>) {
  // read at request time: the store is opened after the routes are registered (a standby's app)
  const store = () => services.workflows
  return async function (fastify: FastifyInstance): Promise<void> {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
    app.post('/api/workflows/publish', {
      config: { auth: 'admin' },
      schema: {
        summary: 'Copy one of the admin\'s own workflows into the shared set', tags,
        body: Type.Object({ filename: Type.String({ maxLength: 255 }) }, { additionalProperties: false }),
        response: { 200: Type.Object({ status: Type.Literal('ok'), filename: Type.String() }) },
      },
    }, async (request) => {
      const name = workflowName(request.body.filename)
      if (name === null) throw new AuthsvcError('VALIDATION_FAILED', 'Invalid workflow name')
      const own = store().file(hostUserOf(request.principal!), `${WORKFLOWS_DIR}/${name}`)
      if (!store().isFile(own)) throw new AuthsvcError('NOT_FOUND', 'No workflow of yours by that name')
      const shared = store().file(SHARED_HOST_USER, `${WORKFLOWS_DIR}/${name}`)
      if (shared === null) throw new AuthsvcError('AUTHSVC_UNAVAILABLE', 'The host has not named its user folder yet')
      store().write(shared, readFileSync(own))
      return { status: 'ok' as const, filename: name }
    })
  }
}
