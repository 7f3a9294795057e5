/**
 * The policy table for host routes (SPEC §6), keyed on the route the host
 * matched: `METHOD pattern`, with HEAD folded into GET and the `/api` twin
 * folded into its plain route. Nothing here looks at the raw path.
 *
 * Deny by default: a matched route that is not listed needs `can_access_api`
 * (other custom nodes); an unmatched request (the host's 404/405) needs a
 * principal. No host route is public.
 */
import type { PermissionKey } from '../identity/principal.js'
import type { MatchedRoute } from '../kernel/protocol.js'

export type Requirement =
  | { kind: 'principal' }
  | { kind: 'permission'; key: PermissionKey }
  | { kind: 'admin' }

/** What the decision does beyond the requirement: a route behaviour a feature brings (its `behaviours/`, listed in its feature.ts). */
export type HostRouteBehaviour =
  | 'prompt'
  | 'queue-status'
  | 'queue-read'
  | 'queue-write'
  | 'history-list'
  | 'history-entry'
  | 'history-write'
  | 'interrupt'
  | 'view'
  | 'upload-image'
  | 'upload-mask'
  | 'object-info'
  | 'userdata-write'
  | 'userdata-list'
  | 'userdata-list-v2'
  | 'userdata-read'
  | 'users'
  | 'system-stats'
  | 'websocket'
  | 'model-list'
  | 'embeddings'
  | 'model-file'

export interface HostRoutePolicy {
  key: string
  require: Requirement
  /** browser navigations without a principal are redirected to /login */
  page: boolean
  /** the behaviour's name: one of this table's (HostRouteBehaviour) or a feature's own */
  behaviour?: string
  /** its answer may be a file a user put there: the pass asks for it to reach the browser inert (`INERT_HEADERS`) */
  inert?: true
}

export const principal: Requirement = { kind: 'principal' }
export const admin: Requirement = { kind: 'admin' }
export const perm = (key: PermissionKey): Requirement => ({ kind: 'permission', key })

/** A row of the table: what a host route requires, and its behaviour. A feature adds rows of its own (kernel/feature.ts). */
export interface HostRouteEntry {
  require: Requirement
  page?: boolean
  behaviour?: string
  /**
   * The route serves files users can put on the host (an upload, an output, a userdata file, a
   * model's preview): its answers reach the browser inert. ComfyUI serves such a file under the
   * type its name gives, inline, from the gate's own origin: an SVG or XML file with a script in it
   * would run there, with the viewer's session (docs/decisions.md, "Files users put on the host
   * reach the browser inert").
   */
  inert?: true
}

/**
 * Added by the plugin to the host's answer on an `inert` route: the file, opened as a page, is a
 * sandbox (no script runs, its origin is nobody's: no cookie, no same-origin request), and the
 * browser keeps to the type the host named. An <img>, <video> or download of it is unchanged.
 * `no-cache`: a browser asks again before each use (a 304 when unchanged), so a copy an <img> or a
 * fetch loaded is never run from its cache by a later <script src> the gate would refuse.
 */
export const INERT_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'Content-Security-Policy': 'sandbox',
  'X-Content-Type-Options': 'nosniff',
  'Cache-Control': 'no-cache',
})

/**
 * The headers cannot make a file inert when a page loads it as code: ComfyUI serves an uploaded
 * `.js` as `application/javascript`, which `nosniff` lets run, so a `<script src="/view?...">` or a
 * service worker registered from `/view` runs a user's file with the origin's authority (a worker
 * outlives logouts and can answer /login itself). A request for an inert route's file as code
 * (`Sec-Fetch-Dest` of a script, worker, style or worklet; the `Service-Worker` header every browser
 * sends to register one) is refused.
 */
const CODE_DESTINATIONS = new Set(['script', 'worker', 'sharedworker', 'serviceworker', 'style', 'audioworklet', 'paintworklet', 'xslt'])

export function loadedAsCode(headers: Readonly<Record<string, string | undefined>>): boolean {
  const dest = headers['sec-fetch-dest']
  return headers['service-worker'] !== undefined || (dest !== undefined && CODE_DESTINATIONS.has(dest.toLowerCase()))
}

/**
 * A page of the host shown in a frame of another origin's page is clickjacking ground: a sibling
 * origin (another port of this host, another subdomain) is same-site, so the session cookie goes
 * with the frame's request and ComfyUI opens signed in under the other page's control. The host's
 * answer to a request a browser makes for a document or a frame (or, where it sends no
 * Sec-Fetch-Dest, one that takes HTML) carries
 * `frame-ancestors 'self'` and the origins the operator lists (`frame_ancestors`; `*`: none).
 * Other requests (fetches, images, sockets) cannot be framed and carry nothing more.
 */
const FRAMED_DESTINATIONS = new Set(['document', 'iframe', 'frame', 'embed', 'object', 'fencedframe'])

export function framePolicy(headers: Readonly<Record<string, string | undefined>>, ancestors: readonly string[]): string | null {
  if (ancestors.includes('*')) return null
  const dest = headers['sec-fetch-dest']
  // a browser sends Sec-Fetch-* only to origins it trusts (HTTPS, localhost): over plain HTTP to a
  // LAN address a frame's request says only that it takes HTML
  const framable = dest === undefined ? /\btext\/html\b/i.test(headers.accept ?? '') : FRAMED_DESTINATIONS.has(dest.toLowerCase())
  return framable ? ["frame-ancestors 'self'", ...ancestors].join(' ') : null
}

type Entry = HostRouteEntry & { behaviour?: HostRouteBehaviour }

const TABLE: Record<string, Entry> = {
  'GET /': { require: principal, page: true },
  'GET /ws': { require: principal, behaviour: 'websocket' },
  'GET /embeddings': { require: perm('can_access_api'), behaviour: 'embeddings' },
  'GET /models': { require: perm('can_access_api') },
  'GET /models/{folder}': { require: perm('can_access_api'), behaviour: 'model-list' },
  'GET /extensions': { require: principal, page: true },
  'GET /i18n': { require: principal, page: true },
  'GET /features': { require: principal, page: true },
  'GET /workflow_templates': { require: principal, page: true },
  'POST /upload/image': { require: perm('can_upload'), behaviour: 'upload-image' },
  'POST /upload/mask': { require: perm('can_upload'), behaviour: 'upload-mask' },
  'GET /view': { require: principal, behaviour: 'view', inert: true },
  'GET /view_metadata/{folder_name}': { require: perm('can_access_api'), behaviour: 'model-file', inert: true },
  'GET /system_stats': { require: perm('can_access_api'), behaviour: 'system-stats' },
  'GET /prompt': { require: perm('can_access_api'), behaviour: 'queue-status' },
  'POST /prompt': { require: perm('can_run'), behaviour: 'prompt' },
  'PUT /prompt': { require: perm('can_run'), behaviour: 'prompt' },
  'GET /object_info': { require: perm('can_access_api'), behaviour: 'object-info' },
  'GET /object_info/{node_class}': { require: perm('can_access_api'), behaviour: 'object-info' },
  'GET /history': { require: perm('can_access_api'), behaviour: 'history-list' },
  'GET /history/{prompt_id}': { require: perm('can_access_api'), behaviour: 'history-entry' },
  'GET /queue': { require: perm('can_access_api'), behaviour: 'queue-read' },
  'POST /queue': { require: perm('can_run'), behaviour: 'queue-write' },
  'POST /history': { require: perm('can_run'), behaviour: 'history-write' },
  'POST /interrupt': { require: perm('can_run'), behaviour: 'interrupt' },
  'POST /free': { require: admin },
  'GET /settings': { require: principal },
  'GET /settings/{id}': { require: principal },
  'POST /settings': { require: principal },
  'POST /settings/{id}': { require: principal },
  'GET /users': { require: principal, behaviour: 'users' },
  'POST /users': { require: principal, behaviour: 'users' },
  'GET /userdata': { require: perm('can_access_api'), behaviour: 'userdata-list' },
  'GET /v2/userdata': { require: perm('can_access_api'), behaviour: 'userdata-list-v2' },
  'GET /userdata/{file}': { require: perm('can_access_api'), behaviour: 'userdata-read', inert: true },
  'POST /userdata/{file}': { require: principal, behaviour: 'userdata-write' },
  'DELETE /userdata/{file}': { require: principal, behaviour: 'userdata-write' },
  'POST /userdata/{file}/move/{dest}': { require: principal, behaviour: 'userdata-write' },
  'GET /experiment/models': { require: perm('can_access_api') },
  'GET /experiment/models/{folder}': { require: perm('can_access_api'), behaviour: 'model-list' },
  'GET /experiment/models/preview/{folder}/{path_index}/{filename}': { require: perm('can_access_api'), behaviour: 'model-file', inert: true },
  // SPEC §6.1, when a custom node serves the per-user workflow family (the sidecar does not own it yet)
  'GET /cpe/workflow/list': { require: perm('can_access_api') },
  'GET /cpe/workflow/get': { require: principal },
  'POST /cpe/workflow/save': { require: perm('can_modify_workflows') },
  'GET /cpe/health': { require: principal },
}

const UNMATCHED: HostRoutePolicy = { key: 'unmatched', require: principal, page: true }
const STATIC: HostRoutePolicy = { key: 'static', require: principal, page: true }
const STATIC_ADMIN: HostRoutePolicy = { key: 'static', require: admin, page: true }
const INTERNAL: HostRoutePolicy = { key: 'internal', require: admin, page: false }

/** `/api/x` → `/x`; `/api` → `/`. Only ever applied to a matched route pattern. */
export function foldApiTwin(pattern: string): string {
  if (pattern === '/api' || pattern === '/api/') return '/'
  return pattern.startsWith('/api/') ? pattern.slice(4) : pattern
}

/**
 * What the operator's config says of routes the table does not know (other custom nodes'), by
 * their canonical pattern (an `/api` twin folded): `admin` (`admin_route_patterns`) makes a route
 * admin-only; `inert` (`inert_route_patterns`) marks a route, or a static folder's prefix, whose
 * answers are files users can put on the host (a video viewer's), as the table's own `inert` rows.
 */
export interface OperatorPatterns {
  admin?: ReadonlySet<string>
  inert?: ReadonlySet<string>
}

/**
 * An operator's pattern as the policy compares it (the spellings of one route all mark it): its
 * `/api` twin folded, `{name:regex}` written `{name}` (aiohttp's canonical form, which the host
 * reports), one ending in `/` also without it (a static folder's canonical prefix has none), and
 * one written with characters aiohttp encodes also percent-encoded.
 */
export function operatorPatternForms(entry: string): string[] {
  let plain = ''
  for (let i = 0; i < entry.length; i++) {
    if (entry[i] !== '{') {
      plain += entry[i]
      continue
    }
    // a variable: its name, then its regex (which may hold braces of its own) dropped
    let depth = 1
    let j = i + 1
    let name = ''
    while (j < entry.length && entry[j] !== ':' && entry[j] !== '}') name += entry[j++]
    while (j < entry.length && depth > 0) {
      j++
      if (entry[j] === '{') depth++
      else if (entry[j] === '}') depth--
    }
    plain += `{${name}}`
    i = j
  }
  const folded = foldApiTwin(plain)
  const forms = folded.length > 1 && folded.endsWith('/') ? [folded, folded.slice(0, -1)] : [folded]
  // aiohttp keeps a route's canonical form percent-encoded (`/extensions/My%20Node`): a name written
  // as it reads is also compared in that form
  const encoded = (f: string) => encodeURI(f).replaceAll('%7B', '{').replaceAll('%7D', '}') // a variable stays a variable
  return folded.includes('%') ? forms : [...new Set([...forms, ...forms.map(encoded)])]
}

/** The config's lists as the policy reads them (`operatorPatternForms` of each entry). */
export function operatorPatterns(config: { admin_route_patterns: readonly string[]; inert_route_patterns: readonly string[] }): Required<OperatorPatterns> {
  const forms = (entries: readonly string[]) => new Set(entries.flatMap(operatorPatternForms))
  const inert = forms(config.inert_route_patterns)
  // never the frontend's page, whatever spelling came to it (config refuses the plain ones)
  inert.delete('/')
  return { admin: forms(config.admin_route_patterns), inert }
}

/** The table the decision reads: this file's rows and the ones features add. */
export interface HostRouteTable {
  policy(method: string, route: MatchedRoute | null, operator?: OperatorPatterns): HostRoutePolicy
  /** every `METHOD pattern` row */
  readonly keys: readonly string[]
  /** every behaviour a row names */
  readonly behaviours: ReadonlySet<string>
}

/** A row's key as the table keys it: `METHOD /pattern`, with an `/api` twin folded (features spell theirs plainly). */
const ROW_KEY = /^(GET|POST|PUT|PATCH|DELETE) \/\S*$/

/**
 * This table with a feature's rows added. A row for a key this table (or another feature) already
 * has is refused: a feature adds routes, it never changes what another route requires.
 */
export function hostRouteTable(added: ReadonlyArray<Record<string, HostRouteEntry>> = []): HostRouteTable {
  const rows = new Map<string, HostRouteEntry>(Object.entries(TABLE))
  const featureKeys = new Set<string>()
  for (const more of added) {
    for (const [key, entry] of Object.entries(more)) {
      if (!ROW_KEY.test(key) || key.split(' ')[1] !== foldApiTwin(key.split(' ')[1])) throw new Error(`host route row ${JSON.stringify(key)}: not a METHOD /pattern key`)
      if (rows.has(key)) throw new Error(`host route row ${key} is already in the table`)
      rows.set(key, entry)
      featureKeys.add(key)
    }
  }
  const behaviours = new Set<string>()
  for (const entry of rows.values()) if (entry.behaviour !== undefined) behaviours.add(entry.behaviour)
  return {
    keys: [...rows.keys()],
    behaviours,
    policy(method, route, operator = {}) {
      // the matched pattern, its /api twin folded, read once (a static match may come without its
      // prefix: the shared vectors' shape)
      const pattern = route === null || (route.kind === 'static' && typeof route.pattern !== 'string') ? undefined : foldApiTwin(route.pattern)
      const policy = tablePolicy(method, route, pattern, operator.admin ?? NONE)
      // an operator's inert mark only adds the headers: it never changes what a route requires (on
      // every method: a form's POST can open a page too, and the headers are harmless on any answer)
      if (operator.inert === undefined || policy.inert === true || pattern === undefined) return policy
      return operator.inert.has(pattern) ? { ...policy, inert: true } : policy
    },
  }

  /** The table's policy for `route`, whose folded pattern is `pattern` (undefined only for a static match without its prefix). */
  function tablePolicy(method: string, route: MatchedRoute | null, pattern: string | undefined, adminPatterns: ReadonlySet<string>): HostRoutePolicy {
    if (route === null) return UNMATCHED
    // a static folder an operator made admin-only (a custom node's own web folder, say)
    if (route.kind === 'static' && pattern !== undefined && adminPatterns.has(pattern)) return STATIC_ADMIN
    if (route.kind === 'static' || pattern === undefined) return STATIC
    if (pattern === '/internal' || pattern.startsWith('/internal/')) return INTERNAL
    const folded = method === 'HEAD' ? 'GET' : method
    const key = `${folded} ${pattern}`
    // an operator's admin-only pattern outranks a feature's row (never this table's own rows)
    if (featureKeys.has(key) && adminPatterns.has(pattern)) return { key, require: admin, page: false }
    const entry = rows.get(key)
    if (entry) return { key, ...entry, page: entry.page ?? false }
    if (adminPatterns.has(pattern)) return { key, require: admin, page: false }
    return { key, require: perm('can_access_api'), page: false }
  }
}

const NONE: ReadonlySet<string> = new Set()

/** The table without any feature's rows. */
export const HOST_ROUTES: HostRouteTable = hostRouteTable()

export function hostRoutePolicy(method: string, route: MatchedRoute | null, operator: OperatorPatterns = {}): HostRoutePolicy {
  return HOST_ROUTES.policy(method, route, operator)
}

export const HOST_ROUTE_KEYS: readonly string[] = HOST_ROUTES.keys
