/**
 * The decision protocol, sidecar side (shared/protocol.json is the source of
 * the version, the size limit and the header list; both sides read it).
 */
import { readFileSync } from 'node:fs'

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
}

export interface BodyMessage {
  type: 'body'
  id: number
  ctx: unknown
  body_text: string
}

export interface FilterMessage {
  type: 'filter'
  id: number
  name: string
  ctx: unknown
  status: number
  content_type: string
  body_text: string
}

export interface HelloMessage {
  type: 'hello'
  id: number
  protocol: number
  plugin_version: string
  host?: HostFacts
}

export interface HostFacts {
  model_folders?: Record<string, string[]>
  output_dir?: string
  input_dir?: string
  temp_dir?: string
  user_dir?: string
  comfyui_version?: string
}

export interface PassDecision {
  action: 'pass'
  set_headers?: Record<string, string>
  strip_headers?: string[]
  drop_query?: string[]
  need_body?: { max_bytes: number; ctx: unknown }
  body_text?: string
  filter?: { name: string; ctx: unknown }
  /** the user named in comfy-user, for hosts that must know their users (ComfyUI --multi-user) */
  host_user?: { id: string; name: string }
}

export interface RespondDecision {
  action: 'respond'
  status: number
  headers?: Array<[string, string]>
  body_text?: string
}

export type Decision = PassDecision | RespondDecision | { action: 'proxy' }
export type FilterAnswer = { action: 'keep' } | { action: 'replace'; body_text: string } | RespondDecision
