/**
 * Per-user isolation: who owns which prompt and host file, and the host routes that would
 * otherwise show or touch another user's things (prompts, queue, history, view, upload,
 * /object_info, the WebSocket). Background work: the watcher of the host's output, input and
 * temp folders (started by the plugin's hello, which names them), the check of open WebSockets
 * whose access ended, and the filter workers.
 */
import type { FastifyBaseLogger } from 'fastify'
import { behaviourEntry } from '../kernel/behaviours.js'
import type { Feature } from '../kernel/feature.js'
import type { EventMessage, HelloMessage } from '../kernel/protocol.js'
import type { ModelAccess, ModelDeps } from '../models/behaviours.js'
import type { Services } from '../services.js'
import { historyEntryBehaviour, historyListBehaviour, historyWriteBehaviour } from './behaviours/history.js'
import { interruptBehaviour } from './behaviours/interrupt.js'
import { objectInfoBehaviour } from './behaviours/object-info.js'
import { promptBehaviour } from './behaviours/prompt.js'
import { queueReadBehaviour, queueStatusBehaviour, queueWriteBehaviour } from './behaviours/queue.js'
import { systemStatsBehaviour } from './behaviours/system-stats.js'
import { uploadBehaviour } from './behaviours/upload.js'
import { viewBehaviour } from './behaviours/view.js'
import { websocketBehaviour } from './behaviours/websocket.js'
import { credentialState } from './credential-state.js'
import { HostFileWatcher } from './file-watcher.js'
import { FilterPool } from './filter-pool.js'
import type { BehaviourDeps, ContentGate } from './behaviours/deps.js'
import { applyHostEvent, hostPromptsReport } from './host-events.js'
import { LiveSockets } from './live-sockets.js'
import './events.js'

export type IsolationServices = Pick<Services, 'config' | 'clock' | 'events' | 'ownership' | 'clientIds' | 'host' | 'sessions' | 'tokens' | 'users' | 'storeHealth' | 'settings' | 'ipGate'>

export interface IsolationFeature extends Feature {
  /** the WebSockets let through, by tag; from bind on */
  liveSockets(): LiveSockets
  /** the watcher of the host's output, input and temp folders; from bind on */
  hostFiles(): HostFileWatcher
}

/** `contentGate`: the content-safety policy's say on /view and previews (nsfw/feature.ts), when composed. */
export function isolationFeature(services: IsolationServices, log: FastifyBaseLogger, models: () => ModelAccess, contentGate?: () => ContentGate | null): IsolationFeature {
  let bound: { liveSockets: LiveSockets; hostFiles: HostFileWatcher } | undefined
  const live = () => {
    if (bound === undefined) throw new Error('isolation is used before the store was opened')
    return bound
  }
  return {
    name: 'isolation',
    liveSockets: () => live().liveSockets,
    hostFiles: () => live().hostFiles,
    bind(kernel) {
      const { ownership } = services
      const liveSockets = new LiveSockets(
        credentialState({ sessions: services.sessions, tokens: services.tokens, users: services.users, clock: services.clock, storeHealth: services.storeHealth, settings: services.settings, ipGate: services.ipGate }),
        (tags, code, reason) => {
          log.info({ sockets: tags.length, code, reason }, 'closing WebSockets whose access ended')
          kernel.push({ type: 'close_ws', tags, code, reason })
        },
      )
      const watcher = new HostFileWatcher(ownership, log)
      const filters = new FilterPool()
      bound = { liveSockets, hostFiles: watcher }
      services.clientIds.heldOpen = (clientId) => liveSockets.usesClientId(clientId)
      /** Every owner's prompts queued or running, for the plugin's edit of WebSocket `status` frames (absent: 0). */
      const queueChanged = (seq: number): void => kernel.push({ type: 'queue_counts', seq, counts: ownership.remainingByOwner() })
      const deps: BehaviourDeps & ModelDeps = {
        config: services.config, clock: services.clock, events: services.events, ownership, clientIds: services.clientIds, liveSockets, host: services.host, filters, models: models(),
        ...(contentGate !== undefined ? { contentGate } : {}),
      }
      return {
        behaviours: [
          behaviourEntry('prompt', promptBehaviour(deps)),
          behaviourEntry('queue-status', queueStatusBehaviour(deps)),
          behaviourEntry('queue-read', queueReadBehaviour(deps)),
          behaviourEntry('queue-write', queueWriteBehaviour(deps)),
          behaviourEntry('history-list', historyListBehaviour(deps)),
          behaviourEntry('history-entry', historyEntryBehaviour(deps)),
          behaviourEntry('history-write', historyWriteBehaviour(deps)),
          behaviourEntry('interrupt', interruptBehaviour(deps)),
          behaviourEntry('view', viewBehaviour(deps)),
          behaviourEntry('upload-image', uploadBehaviour(deps, false)),
          behaviourEntry('upload-mask', uploadBehaviour(deps, true)),
          behaviourEntry('object-info', objectInfoBehaviour(deps)),
          behaviourEntry('system-stats', systemStatsBehaviour()),
          behaviourEntry('websocket', websocketBehaviour(deps)),
        ],
        hello(msg: HelloMessage) {
          if (msg.host) {
            const { output_dir: output, input_dir: input, temp_dir: temp } = msg.host
            watcher.watch({ output, input, temp }).catch((err: unknown) => log.error({ err }, 'cannot watch the host folders'))
          }
          if (Array.isArray(msg.sockets)) liveSockets.adopt(msg.sockets)
          const prompts = msg.prompts === undefined ? null : hostPromptsReport(msg.prompts, true)
          if (prompts !== null) {
            ownership.hostPrompts(prompts)
            // after the hello's own answer has gone: the plugin reads pushes only once it agreed
            setImmediate(() => queueChanged(prompts.seq))
          }
          for (const run of Array.isArray(msg.running) ? msg.running : []) {
            if (typeof run?.prompt_id === 'string' && typeof run.t === 'number') ownership.runStarted(run.prompt_id, run.t * 1000)
          }
        },
        hostEvent(msg: EventMessage) {
          applyHostEvent(msg, { ownership, watcher, liveSockets, log, now: services.clock, queueChanged })
        },
        jobs: [
          { name: 'live-sockets', stop: () => liveSockets.stop() },
          { name: 'host-folders', stop: () => watcher.close() },
          { name: 'filter-workers', stop: () => filters.close() },
        ],
      }
    },
  }
}
