/**
 * The sidecar asking the plugin of one connection where names land on its host (protocol
 * `resolve` / `resolved`, host-plugin/host_paths.py). Decisions about files are made on the
 * real path the host will open, resolved inside the host with its own functions, never on a
 * re-reading of the name here (issue 21).
 *
 * Guarantees: an answer is matched to its question by `rid`; a question not answered within
 * `RESOLVE_TIMEOUT_MS`, or whose connection closes, or that the plugin could not answer,
 * rejects (the decision that asked fails, and a failed decision is a refusal).
 */
import type { Socket } from 'node:net'
import { encodeFrame } from './frames.js'
import type { ResolvedMessage } from './protocol.js'
import type { FileType } from '../isolation/ownership.js'
import type { ListedFile, V2Entry } from '../workflows/workflow-store.js'

export type ResolveItem =
  /** `head`: also the file's first bytes (a view the content-safety policy checks) */
  | { op: 'view'; query: string; head?: boolean }
  | { op: 'mask_ref'; filename: string; type?: unknown; subfolder?: unknown }
  | { op: 'upload'; type: string; subfolder: string; filename: string }
  | { op: 'name'; name: string }
  | { op: 'list'; folder: string; content_types: string[] }
  /**
   * One path of the host's user folder, looked at by the host so that no decision reads the disk
   * here (workflows/workflow-store.ts): what is there; its files (`list: 'files'`, as GET /userdata
   * lists them) or entries (`list: 'v2'`, relative to `base`); a file's text (`read`); `remove`
   * deletes the file (an administrator's delete of a shared workflow).
   */
  | { op: 'userdata'; path: string; list?: 'files' | 'v2'; recurse?: boolean; base?: string; read?: boolean; remove?: boolean }

/** Where a name lands: its real path and what is there; or the status the host answers by itself. */
export interface Place {
  path?: string
  file?: boolean
  dir?: boolean
  status?: number
  /** for a `name`: how it got there (`annotated`: the input folder or an annotation; `output`, `temp`: joined there; `cwd`: as given) */
  via?: 'annotated' | 'output' | 'temp' | 'cwd'
  /** for a `view` of a file: its size and mtime (whole ms), which the content-safety tags are keyed on */
  size?: number
  mtime_ms?: number
  /** for a `view` of a file: the path the handler opens and the file's stamp there (host_paths.py), when it is the file at `path` */
  opened?: string
  stamp?: string
  /** for a `view` asked with `head`: the file's first bytes (base64), read in the state of `stamp` */
  head?: string
}

/** What a `userdata` item answers besides `path`, `file` and `dir` (host-plugin/host_paths.py). */
export interface UserdataPlace {
  exists?: boolean
  listed?: ListedFile[]
  entries?: V2Entry[]
  text?: string
  removed?: boolean
}

export interface Resolved {
  /** per item, in order; a `name` item answers `places` (where a node may open it, `file`/`dir` saying what is there) */
  results: Array<Place & UserdataPlace & { places?: Place[]; files?: string[] }>
  /** the real paths of the host's input, output and temp folders */
  roots: Partial<Record<FileType, string>>
}

export interface HostLink {
  resolve(items: ResolveItem[]): Promise<Resolved>
}

const RESOLVE_TIMEOUT_MS = 5000

export class HostResolveError extends Error {}

export class ConnectionLink implements HostLink {
  private seq = 0
  private readonly pending = new Map<number, { resolve: (r: Resolved) => void; reject: (e: Error) => void; timer: NodeJS.Timeout }>()

  constructor(private readonly socket: Socket) {
    socket.on('close', () => this.failAll('the plugin connection closed'))
  }

  resolve(items: ResolveItem[]): Promise<Resolved> {
    if (items.length === 0) return Promise.resolve({ results: [], roots: {} })
    if (this.socket.destroyed) return Promise.reject(new HostResolveError('the plugin connection is closed'))
    const rid = ++this.seq
    return new Promise<Resolved>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(rid)
        reject(new HostResolveError('the plugin did not resolve in time'))
      }, RESOLVE_TIMEOUT_MS)
      this.pending.set(rid, { resolve, reject, timer })
      this.socket.write(encodeFrame({ type: 'resolve', rid, items }))
    })
  }

  /** A `resolved` message of the plugin. */
  settle(msg: ResolvedMessage): void {
    const rid = typeof msg.rid === 'number' ? msg.rid : -1
    const entry = this.pending.get(rid)
    if (entry === undefined) return
    this.pending.delete(rid)
    clearTimeout(entry.timer)
    const results = msg.results
    const roots = msg.roots
    if (typeof msg.error === 'string' || !Array.isArray(results) || typeof roots !== 'object' || roots === null) {
      entry.reject(new HostResolveError(`the plugin could not resolve: ${String(msg.error ?? 'malformed answer')}`))
      return
    }
    entry.resolve({ results: results as Resolved['results'], roots: roots as Resolved['roots'] })
  }

  private failAll(reason: string): void {
    for (const [rid, entry] of this.pending) {
      clearTimeout(entry.timer)
      entry.reject(new HostResolveError(reason))
      this.pending.delete(rid)
    }
  }
}

/** For decisions made without a plugin connection (tests of the decider alone): every question fails. */
export const NO_HOST: HostLink = {
  resolve: () => Promise.reject(new HostResolveError('no host to resolve on')),
}
