/**
 * The decision protocol, sidecar side (shared/protocol.json is the source of
 * the version, the size limit and the header list; both sides read it).
 */
import { readFileSync } from 'node:fs'
import type { HostLink } from './host-link.js'

const spec = JSON.parse(readFileSync(new URL('../../../shared/protocol.json', import.meta.url), 'utf8')) as {
  version: number
  max_frame_bytes: number
  request_headers: string[]
}

export const PROTOCOL_VERSION: number = spec.version
export const MAX_FRAME_BYTES: number = spec.max_frame_bytes
export const REQUEST_HEADERS: readonly string[] = spec.request_headers

export interface MatchedRoute {
  pattern: string
  kind: 'route' | 'static'
}

export interface RequestDescription {
  type: 'decide'
  id: number
  method: string
  path: string
  query: string
  route: MatchedRoute | null
  route_status: number
  match_info: Record<string, string>
  headers: Record<string, string>
  peer: string
  scheme: string
  /** set by the decision server, never sent: the plugin that asked, to resolve names on its host */
  readonly host?: HostLink
}

/** After `need_body`: the raw request body travels as the frame's payload. */
export interface BodyMessage {
  type: 'body'
  id: number
  ctx: unknown
}

/** After `need_form`: the text fields and file names of a multipart form (never file contents). */
export interface FormMessage {
  type: 'form'
  id: number
  ctx: unknown
  fields: Record<string, string>
  files: Record<string, string>
}

/** After the host answered a `pass` with `filter`: its body is the frame's payload. */
export interface FilterMessage {
  type: 'filter'
  id: number
  name: string
  ctx: unknown
  status: number
  content_type: string
  /** the host's answer is too large for a frame: no payload; the answer is `narrow` or a refusal */
  too_large?: true
}

/**
 * A preview frame the host is about to send to a socket whose pass said `ws_preview_check`: its
 * image bytes are the payload. Answer `{allow}`: false withholds the frame (nsfw/, issue 23).
 */
export interface PreviewMessage {
  type: 'preview'
  id: number
}

export interface PreviewAnswer {
  allow: boolean
}

/** A host fact as it happened; never answered. */
export interface EventMessage {
  type: 'event'
  name: string
  /** unix seconds, taken by the host when it happened */
  t: number
  data: Record<string, unknown>
}

export interface HelloMessage {
  type: 'hello'
  id: number
  /** what the plugin named; the connection agrees only on exactly PROTOCOL_VERSION */
  protocol: unknown
  plugin_version: unknown
  host?: HostFacts
  /** the prompt running at (re)connect, with its start time */
  running?: Array<{ prompt_id: string; t: number }>
  /** the plugin's open WebSockets (the ws_entry of their decisions), handed back after a restart */
  sockets?: unknown[]
  /** the host's prompts now: `host_prompts` with every id it knows in `added` */
  prompts?: unknown
}

/** The plugin's answer to a `resolve` (host-link.ts checks the rest where it is awaited). */
export interface ResolvedMessage {
  type: 'resolved'
  rid: number
  /** one answer per item asked, in order */
  results?: unknown
  /** the host's folders the answers are relative to */
  roots?: unknown
  /** why the plugin could not resolve */
  error?: unknown
}

export interface HostFacts {
  model_folders?: Record<string, string[]>
  output_dir?: string
  input_dir?: string
  temp_dir?: string
  user_dir?: string
  comfyui_version?: string
  /** class → text inputs by which an output node names where it writes (`filename_prefix`, SaveLoRANode's `prefix`) */
  writer_inputs?: Record<string, string[]>
  /** set in the startup facts (every custom node loaded); absent from the import-time hello's */
  all_nodes_loaded?: boolean
  /** set when the startup facts could not be read and are the import-time ones: they may lack folders and paths custom nodes add */
  facts_incomplete?: boolean
}

export interface PassDecision {
  action: 'pass'
  set_headers?: Record<string, string>
  strip_headers?: string[]
  drop_query?: string[]
  /** headers the plugin adds to the host's answer (before it is sent; the host's own of the same name stay) */
  response_headers?: Record<string, string>
  need_body?: { max_bytes: number; ctx: unknown }
  need_form?: { ctx: unknown }
  /** the form step's edit of text fields (the handler reads the edited values) */
  set_fields?: Record<string, string>
  /** the body step's edit: the new body is the answer's payload */
  body_replaced?: true
  /** `memo`: the filter's result depends on nothing but the host's answer and this text (the plugin may reuse it) */
  /** `errors`: the host's error answers (status >= 300) are filtered too, not only its 2xx */
  filter?: { name: string; ctx: unknown; memo?: string; errors?: true }
  /** a WebSocket the sidecar may close later (close_ws) */
  ws_tag?: string
  /** what the sidecar needs to re-check that socket; the plugin hands it back in its next hello */
  ws_entry?: object
  /**
   * this WebSocket's `status` frames count only this owner's prompts in `queue_remaining` (the
   * plugin edits them with the newest `queue_counts`); absent: the host's own number
   */
  ws_queue_owner?: string
  /** this WebSocket's preview frames are sent only once the sidecar allowed them (a `preview` message each; nsfw/) */
  ws_preview_check?: true
  /** after the handler ran, the plugin reports the host's prompts again (`host_prompts`): a delete changes them without a queue event */
  report_prompts?: true
  /** the user named in comfy-user, for hosts that must know their users (ComfyUI --multi-user) */
  host_user?: { id: string; name: string }
  /**
   * the plugin may answer the same description with this decision for `ms`, while no `forget` newer than `epoch` came;
   * with `file`, only while `stat(file.path)` still gives `file.stamp` (the very file the decision was made on, unchanged)
   */
  cache?: { ms: number; epoch: number; file?: KeptFile }
  /**
   * Never sent (decide.ts takes it out): a behaviour's word that this GET pass read nothing but the
   * principal, what moves the access epoch, and this file, so it may be kept while the file stays
   * as it was (decide.ts turns it into `cache.file` when the pass is kept at all).
   */
  keep_while?: KeptFile
  /**
   * Never sent (decide.ts takes it out): a behaviour's word that this GET pass read nothing but the
   * principal and what moves the access epoch, so it may be kept as a plain route's pass is.
   */
  keep_plain?: true
}

/** A file as the host's stat saw it when a decision was made on it (host-plugin/kept_decisions.py file_stamp). */
export interface KeptFile {
  /** the path the host's handler opens (not the real path: a link in it that moves must end the reuse) */
  path: string
  /** device, inode, size, mtime and ctime */
  stamp: string
}

export interface RespondDecision {
  action: 'respond'
  status: number
  headers?: Array<[string, string]>
  body_text?: string
}

export type Decision = PassDecision | RespondDecision | { action: 'proxy' }
/** `replace` carries the new body as the frame's payload */
export type FilterAnswer =
  | { action: 'keep'; memo?: string }
  | { action: 'replace'; memo?: string }
  | RespondDecision
  /** to a `too_large` filter: send again with only these prompts of the host's /queue or /history answer */
  | { action: 'narrow'; keep_prompt_ids: string[]; final?: true }

/** An answer and the raw bytes that travel after its JSON (a replacement body). */
export interface WithPayload<T> {
  answer: T
  payload: Buffer
}

/** Unasked, sidecar → plugin: what a decision reads changed; drop every kept decision older than `epoch`. */
export interface ForgetMessage {
  type: 'forget'
  epoch: number
}

/**
 * Unasked, sidecar → plugin, after each host_prompts report (`seq`, the report's): how many
 * prompts each owner has queued or running (owners without any are absent, 0). The plugin
 * writes these into the `status` frames of WebSockets that carry a ws_queue_owner.
 */
export interface QueueCountsMessage {
  type: 'queue_counts'
  seq: number
  counts: Record<string, number>
}

/** Anything the sidecar sends unasked. */
export type PushMessage = CloseSocketsMessage | ForgetMessage | QueueCountsMessage

/** Unasked, sidecar → plugin: close these WebSockets. */
export interface CloseSocketsMessage {
  type: 'close_ws'
  tags: string[]
  code: number
  reason: string
}
