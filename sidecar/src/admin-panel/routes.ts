/**
 * What the admin panel needs beyond the other features' routes (issue 26): the network facts
 * the gate works with (trusted proxies from config, read only; the caller's address as the gate
 * saw it), and the shared set of workflows as an admin manages it: list it, list a user's own
 * workflows, publish one of them into the shared set, remove a shared one.
 *
 * Invariants: every name is checked by workflowName (no traversal, no hidden or absolute name)
 * and resolved inside the host user's root (joinInside); a user's space is named by their user
 * id (identity/host-user.ts), never by a name from the request; writes are atomic.
 */
import { readFileSync, unlinkSync } from 'node:fs'
import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Type from 'typebox'
import { AuthsvcError } from '../kernel/errors.js'
import { eventContext } from '../access/request-context.js'
import { listFiles, SHARED_HOST_USER, WORKFLOWS_DIR, type WorkflowStore } from '../workflows/workflow-store.js'
import { workflowName } from '../workflows/routes.js'
import type { Services } from '../services.js'
import './events.js'

const Workflow = Type.Object({
  filename: Type.String({ description: 'relative to the workflows folder' }),
  size: Type.Integer(),
  modified_iso: Type.String(),
})
const Username = Type.Object({ username: Type.String({ description: 'a username or a user id' }) })
const FileName = Type.Object({ filename: Type.String({ maxLength: 255 }) }, { additionalProperties: false })

function rootOf(store: WorkflowStore, hostUser: string): string {
  const root = store.root(hostUser)
  if (root === null) throw new AuthsvcError('AUTHSVC_UNAVAILABLE', 'The host has not named its user folder yet')
  return root
}

function workflowsOf(store: WorkflowStore, hostUser: string) {
  const dir = store.file(hostUser, WORKFLOWS_DIR)
  if (dir === null) throw new AuthsvcError('AUTHSVC_UNAVAILABLE', 'The host has not named its user folder yet')
  return listFiles(dir, true)
    .filter((f) => f.rel.toLowerCase().endsWith('.json'))
    .map((f) => ({ filename: f.rel, size: f.size, modified_iso: new Date(f.modified * 1000).toISOString() }))
    .sort((a, b) => a.filename.localeCompare(b.filename))
}

/** A checked workflow name from a request, or a 400 that says what a name may be. */
function checkedName(raw: string): string {
  const name = workflowName(raw)
  if (name === null) throw new AuthsvcError('VALIDATION_FAILED', 'filename: a workflow name is a relative path of visible names, without .. or a leading /')
  return name
}

export function adminPanelRoutes(services: Pick<Services, 'config' | 'users' | 'workflows' | 'events'>) {
  // read at request time: the store is opened after the routes are registered (a standby's app)
  const store = () => services.workflows
  return async function (fastify: FastifyInstance): Promise<void> {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
    const tags = ['admin: panel']

    app.get('/api/admin/network', {
      config: { auth: 'admin' },
      schema: {
        summary: 'The trusted proxies from config (read only) and the caller\'s address as the gate saw it', tags,
        response: { 200: Type.Object({ trusted_proxies: Type.Array(Type.String()), your_ip: Type.String() }) },
      },
    }, async (request) => ({ trusted_proxies: [...services.config.trusted_proxies], your_ip: request.facts.ip }))

    app.get('/api/workflows/shared', {
      config: { auth: 'admin' },
      schema: { summary: 'The shared workflows (every user sees them beside their own)', tags, response: { 200: Type.Object({ workflows: Type.Array(Workflow) }) } },
    }, async () => ({ workflows: workflowsOf(store(), SHARED_HOST_USER) }))

    app.delete('/api/workflows/shared', {
      config: { auth: 'admin' },
      schema: { summary: 'Remove a workflow from the shared set (users\' own copies stay)', tags, body: FileName, response: { 200: Type.Object({ status: Type.Literal('ok'), filename: Type.String() }) } },
    }, async (request) => {
      const name = checkedName(request.body.filename)
      rootOf(store(), SHARED_HOST_USER)
      const path = store().file(SHARED_HOST_USER, `${WORKFLOWS_DIR}/${name}`)
      if (!store().isFile(path)) throw new AuthsvcError('NOT_FOUND', `No shared workflow named ${name}`)
      unlinkSync(path)
      services.events.emit('workflow_unshared', { ...eventContext(request), filename: name })
      return { status: 'ok' as const, filename: name }
    })

    app.get('/api/users/:username/workflows', {
      config: { auth: 'admin' },
      schema: { summary: 'A user\'s own workflows', tags, params: Username, response: { 200: Type.Object({ username: Type.String(), workflows: Type.Array(Workflow) }) } },
    }, async (request) => {
      const user = services.users.find(request.params.username)
      return { username: user.username, workflows: workflowsOf(store(), user.user_id) }
    })

    app.post('/api/users/:username/workflows/publish', {
      config: { auth: 'admin' },
      schema: { summary: 'Copy one of a user\'s own workflows into the shared set (a shared one of the same name is replaced)', tags, params: Username, body: FileName, response: { 200: Type.Object({ status: Type.Literal('ok'), filename: Type.String() }) } },
    }, async (request) => {
      const user = services.users.find(request.params.username)
      const name = checkedName(request.body.filename)
      rootOf(store(), user.user_id)
      const own = store().file(user.user_id, `${WORKFLOWS_DIR}/${name}`)
      if (!store().isFile(own)) throw new AuthsvcError('NOT_FOUND', `${user.username} has no workflow named ${name}`)
      const shared = store().file(SHARED_HOST_USER, `${WORKFLOWS_DIR}/${name}`)
      if (shared === null) throw new AuthsvcError('AUTHSVC_UNAVAILABLE', 'The host has not named its user folder yet')
      store().write(shared, readFileSync(own))
      services.events.emit('workflow_published', { ...eventContext(request), subject: user.username, filename: name })
      return { status: 'ok' as const, filename: name }
    })
  }
}
