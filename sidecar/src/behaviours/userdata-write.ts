/**
 * POST/DELETE /userdata/{file} and its move: writes under `workflows/` need
 * can_modify_workflows, judged on the path the host will resolve, not on the text.
 */
import { posix } from 'node:path'
import { denyDecision } from '../decide/answers.js'
import { can } from '../identity/principal.js'
import type { RouteBehaviour } from './context.js'

/** Decodes %XX once, leniently, as Python's urllib.parse.unquote does (invalid escapes stay). */
function unquoteOnce(text: string): string {
  return text.replace(/(%[0-9A-Fa-f]{2})+/g, (run) => {
    try {
      return decodeURIComponent(run)
    } catch {
      return run
    }
  })
}

/**
 * Whether a userdata file name lands in `workflows/` the way ComfyUI resolves
 * it (get_request_user_filepath: unquote once when it holds `%`, join,
 * normalise); backslashes count as separators (Windows hosts), and case does
 * not count (`Workflows/` is `workflows/` on a case-insensitive filesystem, the
 * default on macOS and Windows): when in doubt, it is a workflow.
 */
export function isWorkflowsPath(file: string): boolean {
  const decoded = file.includes('%') ? unquoteOnce(file) : file
  const normalized = posix.normalize(`/${decoded.replace(/\\/g, '/')}`).toLowerCase()
  return normalized === '/workflows' || normalized.startsWith('/workflows/')
}


export function userdataWriteBehaviour(): RouteBehaviour {
  return {
    decide({ desc, pass, principal }) {
      const touched = [desc.match_info.file, desc.match_info.dest].filter((f): f is string => typeof f === 'string')
      if (touched.some(isWorkflowsPath) && !can(principal, 'can_modify_workflows')) {
        return denyDecision('PERMISSION_DENIED', 'Your role may not modify workflows')
      }
      return pass
    },
  }
}
