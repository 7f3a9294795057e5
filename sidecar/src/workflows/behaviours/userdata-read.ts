/**
 * Reading workflows: the caller's own plus the shared set (`user/default/`),
 * in the host's exact shapes, own winning on a name clash.
 *
 * - GET /userdata?dir=workflows[/...] (`recurse`, `full_info`, `split`): the host
 *   lists the caller's own folder; the shared files not shadowed by an own one
 *   are appended in the same shape (the host's text is kept, never re-serialised);
 *   when the caller has no such folder yet (the host would answer 404, and only 2xx
 *   answers are filtered), the gate answers the shared list alone.
 * - GET /v2/userdata?path=workflows[/...]: the same for the v2 shape, sorted as
 *   the host sorts (folders first, then names without case).
 * - GET /userdata/{file} under workflows/: own first, then the shared file.
 * - GET /users: the single-user answer; who else has an account is not the
 *   caller's business (the gate, not ComfyUI's user picker, says who you are).
 *   POST /users: users are made in authsvc (403).
 *
 * What is on the disk (own folder or file there? the shared files, a shared file's text) is
 * asked of the host while the decision or filter waits (`onHost`): nothing here reads the disk
 * (DESIGN §2; docs/decisions.md, "Workflows: the host looks, the gate decides").
 */
import { hostQuery } from '../../kernel/host-query.js'
import { resolve } from 'node:path'
import { denyDecision, jsonDecision } from '../../kernel/answers.js'
import { inWorkflows, leavesUserSpace, onHost, SHARED_HOST_USER, unquoteOnce, userRelative, type ListedFile, type V2Entry } from '../workflow-store.js'
import { arrayElements, rootStart } from '../../isolation/json-spans.js'
import type { Decision } from '../../kernel/protocol.js'
import type { RouteBehaviour } from '../../kernel/behaviour.js'
import type { WorkflowStore } from '../workflow-store.js'
import { replaced } from '../../kernel/behaviour.js'
import { hostUserOf } from '../../identity/host-user.js'

const JSON_TYPE: [string, string] = ['Content-Type', 'application/json; charset=utf-8']
const isTrue = (v: string | null): boolean => (v ?? '').toLowerCase() === 'true'

/** A name that leaves the caller's own userdata space is refused here, never left to the host's own check. */
export const outsideOwnSpace = (): Decision => denyDecision('PERMISSION_DENIED', 'This path is outside your own userdata')

/** One entry in the shape the host's flags ask for. */
function shaped(f: ListedFile, fullInfo: boolean, split: boolean): unknown {
  if (fullInfo) return { path: f.rel, size: f.size, modified: f.modified, created: f.created }
  if (split) return [f.rel, ...f.rel.split('/')]
  return f.rel
}

/** The name an entry of the host's list stands for, whatever its shape. */
function entryName(value: unknown): string | undefined {
  if (typeof value === 'string') return value
  if (Array.isArray(value) && typeof value[0] === 'string') return value[0]
  if (typeof value === 'object' && value !== null && typeof (value as { path?: unknown }).path === 'string') return (value as { path: string }).path
  return undefined
}

/** The list filter's state: the folder, and the shape the host's flags ask for. */
interface UserdataListState {
  rel: string
  recurse: boolean
  fullInfo: boolean
  split: boolean
}

export function userdataListBehaviour(deps: { workflows: WorkflowStore }): RouteBehaviour<UserdataListState> {
  return {
    decide({ desc, pass, principal, host, steps }) {
      const query = hostQuery(desc.query)
      const dir = query.get('dir') ?? ''
      if (leavesUserSpace(dir)) return outsideOwnSpace()
      const rel = dir === '' ? null : userRelative(dir)
      if (rel === null || !inWorkflows(rel)) return pass
      const state: UserdataListState = { rel, recurse: isTrue(query.get('recurse')), fullInfo: isTrue(query.get('full_info')), split: isTrue(query.get('split')) }
      const filtered = (): Decision => ({ ...pass, filter: steps.filter('userdata', state) })
      // The caller has no such folder of their own (a new user): the host would answer 404, and
      // the plugin filters only 2xx answers, so the shared list is answered here.
      const ownDir = deps.workflows.file(hostUserOf(principal), rel)
      if (ownDir === null) return filtered()
      return onHost(host, ownDir).then(async (own) => {
        if (own.exists) return filtered()
        const sharedDir = deps.workflows.file(SHARED_HOST_USER, rel)
        const shared = sharedDir === null ? [] : (await onHost(host, sharedDir, { list: 'files', recurse: state.recurse })).listed ?? []
        if (shared.length === 0) return pass // the host answers its own 404
        return jsonDecision(200, shared.map((f) => shaped(f, state.fullInfo, state.split)))
      })
    },
    async filter(state, msg, payload, host) {
      if (msg.status !== 200) return { action: 'keep' }
      const text = payload.toString('utf8')
      const start = rootStart(text)
      if (text[start] !== '[') return { action: 'keep' }
      const sharedDir = deps.workflows.file(SHARED_HOST_USER, state.rel)
      const shared = sharedDir === null ? [] : (await onHost(host, sharedDir, { list: 'files', recurse: state.recurse })).listed ?? []
      const { elements, close } = arrayElements(text, start)
      const own = new Set(elements.map((e) => entryName(JSON.parse(text.slice(e.start, e.end)) as unknown)))
      const added = shared.filter((f) => !own.has(f.rel)).map((f) => JSON.stringify(shaped(f, state.fullInfo, state.split)))
      if (added.length === 0) return { action: 'keep' }
      return replaced(text.slice(0, close) + (elements.length > 0 ? ', ' : '') + added.join(', ') + text.slice(close))
    },
  }
}

const sortV2 = (a: V2Entry, b: V2Entry): number =>
  Number(a.type !== 'directory') - Number(b.type !== 'directory') || (a.name.toLowerCase() < b.name.toLowerCase() ? -1 : a.name.toLowerCase() > b.name.toLowerCase() ? 1 : 0)

export function userdataListV2Behaviour(deps: { workflows: WorkflowStore }): RouteBehaviour<{ rel: string }> {
  return {
    decide({ desc, pass, principal, host, steps }) {
      const raw = hostQuery(desc.query).get('path') ?? ''
      if (leavesUserSpace(unquoteOnce(raw))) return outsideOwnSpace()
      const rel = raw === '' ? null : userRelative(unquoteOnce(raw)) // the v2 route unquotes once more itself
      if (rel === null || !inWorkflows(rel)) return pass
      // no such folder of the caller's own: the host's 404 is never filtered (2xx only), so the
      // shared entries are answered here
      const ownDir = deps.workflows.file(hostUserOf(principal), rel)
      const sharedRoot = deps.workflows.root(SHARED_HOST_USER)
      const sharedDir = deps.workflows.file(SHARED_HOST_USER, rel)
      const filtered = (): Decision => ({ ...pass, filter: steps.filter('userdata-v2', { rel }) })
      if (ownDir === null) return filtered()
      return onHost(host, ownDir).then(async (own) => {
        if (own.exists) return filtered()
        if (sharedRoot === null || sharedDir === null) return pass // the host's own 404
        const shared = await onHost(host, sharedDir, { list: 'v2', base: resolve(sharedRoot) })
        if (!shared.exists) return pass // the host's own 404
        return jsonDecision(200, (shared.entries ?? []).sort(sortV2))
      })
    },
    async filter(state, msg, payload, host) {
      if (msg.status !== 200) return { action: 'keep' }
      const sharedRoot = deps.workflows.root(SHARED_HOST_USER)
      const sharedDir = deps.workflows.file(SHARED_HOST_USER, state.rel)
      if (sharedRoot === null || sharedDir === null) return { action: 'keep' }
      const found = await onHost(host, sharedDir, { list: 'v2', base: resolve(sharedRoot) })
      if (!found.exists) return { action: 'keep' }
      const shared = found.entries ?? []
      const parsed = JSON.parse(payload.toString('utf8')) as unknown
      if (!Array.isArray(parsed)) return { action: 'keep' }
      const own = parsed as V2Entry[]
      const ownPaths = new Set(own.map((e) => e.path))
      return replaced(JSON.stringify([...own, ...shared.filter((e) => !ownPaths.has(e.path))].sort(sortV2)))
    },
  }
}

export function userdataReadBehaviour(deps: { workflows: WorkflowStore }): RouteBehaviour {
  return {
    decide({ desc, pass, principal, host }) {
      if (leavesUserSpace(desc.match_info.file ?? '')) return outsideOwnSpace()
      const rel = userRelative(desc.match_info.file ?? '')
      if (rel === null || !inWorkflows(rel)) return pass
      const own = deps.workflows.file(hostUserOf(principal), rel)
      const shared = deps.workflows.file(SHARED_HOST_USER, rel)
      if (shared === null) return pass // the host has not named its user folder (nor is there an own path)
      return (async (): Promise<Decision> => {
        if (own !== null && (await onHost(host, own)).file) return pass
        const found = await onHost(host, shared, { read: true })
        if (!found.file || found.text === undefined) return pass // the host answers its own 404
        const type: [string, string] = shared.toLowerCase().endsWith('.json') ? JSON_TYPE : ['Content-Type', 'application/octet-stream']
        return { action: 'respond', status: 200, headers: [type], body_text: found.text }
      })()
    },
  }
}

export function usersBehaviour(): RouteBehaviour {
  return {
    decide({ desc }) {
      if (desc.method === 'POST') return denyDecision('PERMISSION_DENIED', 'Users are managed by authsvc')
      return { action: 'respond', status: 200, headers: [JSON_TYPE], body_text: JSON.stringify({ storage: 'server', migrated: true }) }
    },
  }
}
