/**
 * Host events (plugin → sidecar, never answered) applied to what the sidecar
 * knows: runs (for file attribution and /interrupt), the files a run reported,
 * the host's prompts (queue and history: what ownership keeps, and whose prompts
 * `queue_remaining` counts), and WebSockets that closed.
 */
import type { FastifyBaseLogger } from 'fastify'
import type { EventMessage } from '../kernel/protocol.js'
import type { HostFileWatcher } from './file-watcher.js'
import type { LiveSockets } from './live-sockets.js'
import { fileKey, type FileType, type HostPromptsReport, type Ownership } from './ownership.js'
import { inUserFolder } from './user-folders.js'

const idList = (v: unknown): string[] | null => (Array.isArray(v) && v.every((x) => typeof x === 'string') ? (v as string[]) : null)

/**
 * A `host_prompts` event's data (or a hello's `prompts`): `{seq, running, pending, added, gone}`,
 * every list of prompt ids; null when it is of another shape.
 */
export function hostPromptsReport(data: unknown, full: boolean): HostPromptsReport | null {
  if (typeof data !== 'object' || data === null) return null
  const d = data as Record<string, unknown>
  const [running, pending, added, gone] = [idList(d.running), idList(d.pending), idList(d.added), idList(d.gone ?? [])]
  if (running === null || pending === null || added === null || gone === null || typeof d.seq !== 'number') return null
  return { seq: d.seq, running, pending, added, gone, full }
}

const TYPES: ReadonlySet<string> = new Set(['output', 'input', 'temp'])

/** `{filename, subfolder, type}` entries anywhere in a node's UI output (images, gifs, audio, 3d...). */
function reportedFiles(output: unknown): Array<{ filename: string; subfolder: string; type: FileType }> {
  const out: Array<{ filename: string; subfolder: string; type: FileType }> = []
  if (typeof output !== 'object' || output === null) return out
  for (const value of Object.values(output)) {
    if (!Array.isArray(value)) continue
    for (const item of value) {
      if (typeof item !== 'object' || item === null) continue
      const { filename, subfolder, type } = item as Record<string, unknown>
      if (typeof filename === 'string' && typeof type === 'string' && TYPES.has(type)) {
        out.push({ filename, subfolder: typeof subfolder === 'string' ? subfolder : '', type: type as FileType })
      }
    }
  }
  return out
}

export function applyHostEvent(
  msg: EventMessage,
  deps: {
    ownership: Ownership
    watcher: HostFileWatcher
    liveSockets: LiveSockets
    log: FastifyBaseLogger
    now: () => number
    /** the host's prompts changed: per-owner `queue_remaining` goes to the plugin, for the report `seq` */
    queueChanged: (seq: number) => void
  },
): void {
  const atMs = msg.t * 1000
  const promptId = typeof msg.data.prompt_id === 'string' ? msg.data.prompt_id : undefined
  switch (msg.name) {
    case 'execution_start':
      if (promptId) deps.ownership.runStarted(promptId, atMs)
      break
    case 'executed': {
      if (!promptId) break
      deps.ownership.seen(atMs)
      const owner = deps.ownership.ownerOfPrompt(promptId)
      if (owner === undefined) break
      for (const f of reportedFiles(msg.data.output)) {
        const key = fileKey(f.type, f.subfolder, f.filename)
        if (key === null || inUserFolder(key)) continue // per-user folders: owned by their path
        // claim, never add: a cached node reports the files of the run that made them, whoever's it was
        deps.ownership.claimFile(key, owner, promptId, new Date(deps.now())).catch((err: unknown) => {
          deps.log.error({ err, key }, 'could not store the owner of a host file')
        })
      }
      break
    }
    case 'execution_end':
      if (promptId) deps.ownership.runEnded(promptId, atMs)
      break
    case 'host_prompts': {
      const report = hostPromptsReport(msg.data, false)
      if (report === null) {
        deps.log.error('malformed host_prompts event; ignored')
        return
      }
      deps.ownership.hostPrompts(report)
      deps.queueChanged(report.seq)
      return
    }
    case 'ws_closed':
      if (typeof msg.data.tag === 'string') deps.liveSockets.closed(msg.data.tag)
      return
    default:
      deps.log.debug({ event: msg.name }, 'host event ignored')
      return
  }
  deps.watcher.retry()
}
