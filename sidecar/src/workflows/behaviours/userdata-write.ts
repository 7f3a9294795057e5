/**
 * POST/DELETE /userdata/{file} and its move: writes under `workflows/` need
 * can_modify_workflows, judged on the path the host will resolve (unquoted once,
 * normalised, case-insensitive: `Workflows/` is `workflows/` on macOS and
 * Windows), not on the text. Writes land in the caller's own space (comfy-user);
 * a shared workflow (in `user/default/`, not shadowed by one of the caller's own)
 * is deleted only by an administrator, here (the host would look in the admin's
 * own space), and moved by nobody: 403 WORKFLOW_DENIED.
 */
import { denyDecision } from '../../kernel/answers.js'
import { can } from '../../identity/principal.js'
import type { Decision } from '../../kernel/protocol.js'
import { decodedRelative, inWorkflows, leavesUserSpace, onHost, SHARED_HOST_USER, unquoteOnce, userRelative } from '../workflow-store.js'
import { outsideOwnSpace } from './userdata-read.js'
import type { RouteBehaviour } from '../../kernel/behaviour.js'
import type { WorkflowStore } from '../workflow-store.js'
import { hostUserOf } from '../../identity/host-user.js'
import { isAdministrator } from '../../identity/principal.js'

/**
 * Whether a userdata file name lands in `workflows/` the way ComfyUI resolves it,
 * erring towards yes: backslashes count as separators (Windows hosts) and a
 * leading separator is ignored (the host refuses that name itself).
 */
export function isWorkflowsPath(file: string): boolean {
  const decoded = file.includes('%') ? unquoteOnce(file) : file
  const rel = decodedRelative(decoded.replace(/\\/g, '/').replace(/^\/+/, ''))
  return rel !== null && inWorkflows(rel)
}

export function userdataWriteBehaviour(deps: { workflows: WorkflowStore }): RouteBehaviour {
  return {
    decide({ desc, pass, principal, host }) {
      const file = desc.match_info.file
      const touched = [file, desc.match_info.dest].filter((f): f is string => typeof f === 'string')
      if (touched.some(leavesUserSpace)) return outsideOwnSpace()
      if (touched.some(isWorkflowsPath) && !can(principal, 'can_modify_workflows')) {
        return denyDecision('PERMISSION_DENIED', 'Your role may not modify workflows')
      }
      if (typeof file !== 'string' || !isWorkflowsPath(file) || desc.method === 'POST' && desc.match_info.dest === undefined) return pass
      const rel = userRelative(file)
      if (rel === null) return pass
      const own = deps.workflows.file(hostUserOf(principal), rel)
      const shared = deps.workflows.file(SHARED_HOST_USER, rel)
      if (shared === null) return pass // the host has not named its user folder (nor is there an own path)
      const adminDelete = desc.method === 'DELETE' && isAdministrator(principal)
      // what is there is the host's to look at (and an admin's delete of a shared one the host's to
      // do), while the decision waits: a decision never touches the disk here (workflow-store.ts)
      return (async (): Promise<Decision> => {
        if (own !== null && (await onHost(host, own)).file) return pass
        const found = await onHost(host, shared, adminDelete ? { remove: true } : {})
        if (!found.file) return pass // the host answers its own 404
        if (adminDelete) return { action: 'respond', status: 204, headers: [], body_text: '' }
        return denyDecision('WORKFLOW_DENIED', desc.method === 'DELETE' ? 'Only an administrator deletes a shared workflow' : 'A shared workflow cannot be moved')
      })()
    },
  }
}

