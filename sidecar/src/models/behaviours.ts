/**
 * Model visibility for principals without `can_view_all_comfyui_items` (SPEC §6
 * model rows): they see and use only the items granted to their user.
 *
 * - Lists: `/models/{folder}`, `/experiment/models/{folder}` and `/embeddings`
 *   keep only granted items (filters of the host's answer); `/view_metadata/{folder}`
 *   and `/experiment/models/preview/...` of an item not granted answer what the
 *   host answers for a missing one (404, empty body), decided before the host runs.
 * - Names are compared as the host resolves them (`host path`): `a/../b` is `b`,
 *   `\` is a separator on Windows hosts, case is folded on case-insensitive ones
 *   (host facts `model_paths`), so no spelling reaches a file the grant does not name.
 * - The prompt check (`checkPrompt`): every input the host reports as a model
 *   list (host facts `model_inputs`: class → input → folders, read by the plugin
 *   from the host's own node definitions) must name a granted item or one of the
 *   list's non-file options; a link into such an input is refused (its value is
 *   only known when the graph runs). Any other text input whose whole value is
 *   an item of a model folder counts as a reference to it, and `embedding:name`
 *   in a text names an embedding: both must be granted too.
 *
 * Principals who see every model get no filter step at all (they pay nothing).
 * The check only ever refuses; it never changes what the host runs.
 */
import { hostQuery } from '../kernel/host-query.js'
import { posix } from 'node:path'
import { denyDecision } from '../kernel/answers.js'
import type { Decision, HostFacts, RespondDecision } from '../kernel/protocol.js'
import { can, type Principal } from '../identity/principal.js'
import { DOWNLOAD_STAGING_DIR, type ModelCache } from './model-cache.js'
import type { ModelGrants } from './model-grants.js'
import { arrayElements, keepElements, rootStart } from '../isolation/json-spans.js'
import type { RouteBehaviour } from '../kernel/behaviour.js'

/** One model-list input as the host reported it. */
export interface ModelInput {
  folders: string[]
  /** the list's options that are not files (e.g. VAELoader's `pixel_space`) */
  extras: string[]
}

interface PathRules {
  backslashIsSeparator: boolean
  caseInsensitive: boolean
}

/** What a principal may see: by folder, the granted items in host-path form. */
export interface ModelView {
  /** same for every user with the same grants and host path rules (cache keys) */
  key: string
  allows(folder: string, name: string): boolean
  /** granted embeddings by name without extension, in host-path form */
  embeddingStems: ReadonlySet<string>
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v)
/** Whose grants a model check reads: the user's own (none for an anonymous principal) and the role's. */
export interface Grantee {
  user: string | null
  role: string
}

export const granteeOf = (principal: Principal): Grantee => ({ user: principal.userId, role: principal.role })

/**
 * An input as the host validates and uses it: ComfyUI unwraps `{"__value__": x}` first, so a
 * wrapped name is the name (issue 21). Unwrapped to the end: a check of more than the host
 * reads can only refuse more, never let a name through.
 */
export function hostInputValue(value: unknown): unknown {
  let v = value
  while (isObject(v) && '__value__' in v) v = v.__value__
  return v
}

const isStringArray = (v: unknown): v is string[] => Array.isArray(v) && v.every((s) => typeof s === 'string')
// as the host's is_link: a two-item list of a node id and an output index (`true` is an int in Python)
const isLink = (v: unknown): boolean => Array.isArray(v) && v.length === 2 && typeof v[0] === 'string' && (typeof v[1] === 'number' || typeof v[1] === 'boolean')

// ComfyUI's tokenizer takes `embedding:<name>` words. Python's whitespace (`str.split()`): not JS's `\s`
const PY_SPACE = '\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000'
const EMBEDDING = new RegExp(`embedding:([^${PY_SPACE}]+)`, 'g')
const EMBEDDING_EXTENSIONS = ['.safetensors', '.pt', '.bin']

/** Where the first parenthesis not escaped (after an even run of backslashes) is, or the length: one pass. */
function bareParenthesis(text: string): number {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c !== 0x28 && c !== 0x29) continue
    let k = i - 1
    while (k >= 0 && text.charCodeAt(k) === 0x5c) k--
    if ((i - 1 - k) % 2 === 0) return i
  }
  return text.length
}

/**
 * The names the host may try for the rest of an `embedding:` word, read as its tokenizer reads it:
 * `\\(`, `\\)` and `\\\\` are literal characters; an unescaped parenthesis ends the weighted segment
 * the name is in, and a `:` in it may start the segment's weight (`(embedding:x:1.2)`), so the name
 * is the segment, or the segment before its last `:`; the first whitespace ends it (already cut by
 * EMBEDDING); each of those is also tried with its commas stripped. At most four names, in one pass.
 */
export function embeddingCandidates(rest: string): string[] {
  // the segment: to the first parenthesis that is not escaped (escapes do not touch `,` or `:`)
  const raw = rest.slice(0, bareParenthesis(rest))
  const colon = raw.lastIndexOf(':')
  const out = new Set<string>()
  for (const piece of colon > 0 ? [raw, raw.slice(0, colon)] : [raw]) {
    for (const name of [piece, trimCommas(piece)]) {
      // a name past the longest path the host can open is no file (and unescaping it would cost)
      if (name !== '' && name.length <= MAX_NAME) out.add(name.includes('\\') ? name.replace(/\\([()\\])/g, '$1') : name)
    }
  }
  return [...out]
}

/** `path` relative to the first of `roots` it lies inside, or null. */
function relativeToOne(path: string, roots: readonly string[]): string | null {
  for (const root of roots) if (path.startsWith(`${root}/`)) return path.slice(root.length + 1)
  return null
}

/** A host path is at most 4096 bytes; an escaped name at most twice that before unescaping. */
const MAX_NAME = 8192

/** `name` without its leading and trailing commas (Python's `strip(',')`), in one pass each way. */
function trimCommas(name: string): string {
  let a = 0
  let b = name.length
  while (a < b && name.charCodeAt(a) === 0x2c) a++
  while (b > a && name.charCodeAt(b - 1) === 0x2c) b--
  return name.slice(a, b)
}

export class ModelAccess {
  private rules: PathRules = { backslashIsSeparator: false, caseInsensitive: false }
  private inputs = new Map<string, Map<string, ModelInput>>()
  private legacy = new Map<string, string>()
  /** grows when the host facts change (cache keys) */
  factsVersion = 0
  private readonly views = new Map<string, ModelView>()
  /** runStamp's texts by view key */
  private readonly stamps = new Map<string, string>()
  /** every cached item by its host path → [folder, item]; rebuilt when the cache or the facts change */
  private index: { key: string; byPath: Map<string, Array<[string, string]>>; embeddingTails: Map<string, string[]> } = { key: '', byPath: new Map(), embeddingTails: new Map() }

  constructor(
    readonly cache: ModelCache,
    readonly grants: ModelGrants,
  ) {}

  /** Takes the model facts of a hello or a `host_facts` event; anything malformed is left out. */
  setFacts(facts: HostFacts | Record<string, unknown>): void {
    const f = facts as Record<string, unknown>
    const paths = isObject(f.model_paths) ? f.model_paths : {}
    this.rules = { backslashIsSeparator: paths.sep === '\\', caseInsensitive: paths.case_insensitive === true }
    const inputs = new Map<string, Map<string, ModelInput>>()
    if (isObject(f.model_inputs)) {
      for (const [cls, byInput] of Object.entries(f.model_inputs)) {
        if (!isObject(byInput)) continue
        const m = new Map<string, ModelInput>()
        for (const [input, spec] of Object.entries(byInput)) {
          if (!isObject(spec) || !isStringArray(spec.folders) || spec.folders.length === 0) continue
          m.set(input, { folders: spec.folders, extras: isStringArray(spec.extras) ? spec.extras : [] })
        }
        if (m.size > 0) inputs.set(cls, m)
      }
    }
    this.inputs = inputs
    this.legacy = new Map(isObject(f.legacy_folders) ? Object.entries(f.legacy_folders).filter((e): e is [string, string] => typeof e[1] === 'string') : [])
    this.views.clear()
    this.stamps.clear()
    this.factsVersion++
  }

  /**
   * Whether a name reaches into a download staging directory (models/model-cache.ts): the cache
   * never enters one, so what is in it is unknown to it, yet the host lists and loads it by this
   * name. It is never a model for a principal limited to grants (deny what cannot be checked).
   */
  inStaging(name: string): boolean {
    return this.hostPath(name).split('/').includes(DOWNLOAD_STAGING_DIR)
  }

  /** The model folder a request names (the host maps legacy names such as `unet`). */
  folderOf(name: string): string {
    return this.legacy.get(name) ?? name
  }

  /** The model-list inputs of a node class as the host reported them. */
  inputsOf(cls: string): ReadonlyMap<string, ModelInput> | undefined {
    return this.inputs.get(cls)
  }

  /** True when the principal's model access is limited to grants. */
  restricted(principal: Principal): boolean {
    return !can(principal, 'can_view_all_comfyui_items')
  }

  /** A name as the host resolves it inside a folder (os.path.relpath(os.path.join('/', name), '/')). */
  hostPath(name: string): string {
    let n = this.rules.backslashIsSeparator ? name.replaceAll('\\', '/') : name
    n = posix.normalize(`/${n}`).slice(1)
    if (n.endsWith('/')) n = n.slice(0, -1)
    return this.rules.caseInsensitive ? n.toLowerCase() : n
  }

  /** What `who` may use: their own grants ∪ their role's (models/model-grants.ts). */
  viewFor(who: Grantee): ModelView {
    const grants = this.grants.forUser(who.user, who.role)
    const key = `${grants.signature}:${this.factsVersion}`
    let view = this.views.get(key)
    if (view) return view
    const byFolder = new Map<string, Set<string>>()
    const stems = new Set<string>()
    for (const [folder, items] of grants.byFolder) {
      const set = new Set([...items].map((i) => this.hostPath(i)))
      byFolder.set(folder, set)
      if (folder === 'embeddings') for (const i of set) stems.add(i.slice(0, i.length - posix.extname(i).length))
    }
    view = {
      key,
      allows: (folder, name) => byFolder.get(this.folderOf(folder))?.has(this.hostPath(name)) === true,
      embeddingStems: stems,
    }
    if (this.views.size >= 256) this.views.delete(this.views.keys().next().value as string)
    this.views.set(key, view)
    return view
  }

  /**
   * What the plugin's run-time guard (host-plugin/run_guard.py) keeps a running prompt of `who`
   * to, as the JSON text of `extra_data.authsvc_models`: by host folder name, the granted items in
   * host-path form. A folder with no grant is absent; the guard refuses every model file of every
   * host folder that is not listed here (deny by default), so a name computed while the prompt
   * runs (a text node into a loader, an `embedding:` built by string nodes) is held to the grants
   * the literal names were checked against. One text per grant set and facts version.
   */
  runStamp(who: Grantee): string {
    const view = this.viewFor(who)
    let text = this.stamps.get(view.key)
    if (text !== undefined) return text
    const byFolder = new Map<string, Set<string>>()
    for (const [folder, items] of this.grants.forUser(who.user, who.role).byFolder) {
      const host = this.folderOf(folder)
      let set = byFolder.get(host)
      if (!set) byFolder.set(host, (set = new Set()))
      for (const item of items) set.add(this.hostPath(item))
    }
    text = JSON.stringify(Object.fromEntries([...byFolder].sort(([a], [b]) => a.localeCompare(b)).map(([f, s]) => [f, [...s].sort()])))
    if (this.stamps.size >= 256) this.stamps.delete(this.stamps.keys().next().value as string)
    this.stamps.set(view.key, text)
    return text
  }

  /** What identifies `who`'s grant set: equal sets, equal texts (the execution cache's scope of a limited principal). */
  grantSignature(who: Grantee): string {
    return this.grants.forUser(who.user, who.role).signature
  }

  /**
   * Whether a node of the graph only loads models: every input names a model of a folder its
   * class lists (no link, no other value). Its cached result depends on shared files alone, so
   * it may stay shared between users in the host's execution cache (prompt-files.ts).
   */
  onlyLoadsModels(classType: unknown, inputs: Record<string, unknown>): boolean {
    const modelInputs = typeof classType === 'string' ? this.inputs.get(classType) : undefined
    const names = Object.keys(inputs)
    if (modelInputs === undefined || names.length === 0) return false
    // a value of the list that is not a file (VAELoader's `taesd`) loads what the host finds itself
    // (`vae_approx/taesd_*`): not shared, so the run guard judges it for each owner
    return names.every((name) => {
      const value = hostInputValue(inputs[name])
      return typeof value === 'string' && modelInputs.get(name)?.extras.includes(value) === false
    })
  }

  /**
   * The refusal for a prompt graph, or null when every model it references is
   * granted. Graph shapes the host would refuse anyway are left to the host.
   */
  checkPrompt(who: Grantee, graph: unknown): Decision | null {
    if (!isObject(graph)) return null
    const view = this.viewFor(who)
    const refused = new Set<string>()
    for (const [nodeId, node] of Object.entries(graph)) {
      if (!isObject(node) || !isObject(node.inputs)) continue
      const modelInputs = typeof node.class_type === 'string' ? this.inputs.get(node.class_type) : undefined
      for (const [name, given] of Object.entries(node.inputs)) {
        const value = hostInputValue(given)
        const spec = modelInputs?.get(name)
        if (spec) {
          if (typeof value !== 'string') {
            // a link (the host takes any two-item list as one: `["4", true]` indexes output 1) or
            // any other value: its name is unknown until it runs
            const what = isLink(value) ? 'linked from' : 'not a name in'
            for (const folder of spec.folders) refused.add(`${folder}/<${what} node ${nodeId}.${name}>`)
            continue
          }
          if (spec.folders.some((f) => view.allows(f, value)) || spec.extras.includes(value)) continue
          refused.add(`${spec.folders[0]}/${value}`)
          continue
        }
        if (typeof value !== 'string') continue
        if (this.inStaging(value)) {
          refused.add(value)
          continue
        }
        // a text that is a model's name, wherever it is (covers loaders whose lists the host did not report)
        for (const folder of this.foldersNaming(value)) if (!view.allows(folder, value)) refused.add(`${folder}/${value}`)
        for (const item of this.embeddingsNamed(value)) if (!view.allows('embeddings', item)) refused.add(`embeddings/${item}`)
      }
    }
    if (refused.size === 0) return null
    return denyDecision('MODEL_NOT_ALLOWED', `Model not allowed: ${[...refused].sort().join(', ')}`)
  }

  /** The cached items by host path, built once per cache and facts version (a prompt costs lookups, not scans). */
  private itemsByPath(): Map<string, Array<[string, string]>> {
    return this.indexed().byPath
  }

  private indexed(): { byPath: Map<string, Array<[string, string]>>; embeddingTails: Map<string, string[]> } {
    const key = `${this.cache.version}:${this.factsVersion}`
    if (this.index.key !== key) {
      const byPath = new Map<string, Array<[string, string]>>()
      // an embedding's name is looked up in its folder and in every folder under it (the host's
      // load_embed walks them): `x` loads `sub/x.pt` too, so each item is found by every tail of its path
      const embeddingTails = new Map<string, string[]>()
      for (const folder of this.cache.folderNames()) {
        for (const item of this.cache.list(folder) ?? []) {
          const p = this.hostPath(item)
          const found = byPath.get(p)
          if (found) found.push([folder, item])
          else byPath.set(p, [[folder, item]])
          if (folder !== 'embeddings') continue
          for (let tail = p; ; tail = tail.slice(tail.indexOf('/') + 1)) {
            const items = embeddingTails.get(tail)
            if (items) items.push(item)
            else embeddingTails.set(tail, [item])
            if (!tail.includes('/')) break
          }
        }
      }
      this.index = { key, byPath, embeddingTails }
    }
    return this.index
  }

  /** Folders with an item the host would resolve `value` to. */
  private foldersNaming(value: string): string[] {
    if (value === '' || value.length > 4096) return []
    return [...new Set((this.itemsByPath().get(this.hostPath(value)) ?? []).map(([folder]) => folder))]
  }

  /** Embedding items that an `embedding:name` in this text may load (the name as given, or with an extension the host tries, in the folder or any under it; an absolute name inside it). */
  private embeddingsNamed(text: string): string[] {
    if (!text.includes('embedding:')) return []
    const tails = this.indexed().embeddingTails
    const roots = (this.cache.folder('embeddings')?.paths ?? []).map((p) => posix.normalize(p).replace(/\/+$/, ''))
    const out: string[] = []
    const names = new Set<string>()
    for (const m of text.matchAll(EMBEDDING)) for (const named of embeddingCandidates(m[1])) names.add(named)
    for (const named of names) {
      // the host joins the name to its embeddings folder: an absolute name inside it is that item
      const inside = named.startsWith('/') ? relativeToOne(posix.normalize(named), roots) : named
      if (inside === null) continue
      const want = this.hostPath(inside)
      for (const candidate of [want, ...EMBEDDING_EXTENSIONS.map((e) => want + e)]) out.push(...(tails.get(candidate) ?? []))
    }
    return out
  }
}

// ------------------------------------------------------------------ route behaviours

/** What a behaviour of this file needs. */
export interface ModelDeps {
  models: ModelAccess
}

// no Content-Type: the plugin builds it as the host's bare web.Response(status=404) is, whatever the aiohttp version
const HOST_MISSING: RespondDecision = { action: 'respond', status: 404, body_text: '' }

/** A model list's filter: whose grants, and the folder the list is of. */
interface ModelListState extends Grantee {
  folder: string
}

/** The host's JSON array, keeping the elements `keep` accepts (their raw text as the host wrote it). */
function keepInArray(payload: Buffer, keep: (element: unknown) => boolean): Buffer | 'keep' | 'not-a-list' {
  const text = payload.toString('utf8')
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch {
    return 'not-a-list'
  }
  if (!Array.isArray(parsed)) return 'not-a-list'
  const start = rootStart(text)
  const { elements } = arrayElements(text, start)
  const values = parsed as unknown[]
  let index = 0
  let dropped = 0
  const out = keepElements(text, elements, (e) => {
    if (keep(values[index++])) return text.slice(e.start, e.end)
    dropped++
    return null
  })
  return dropped === 0 ? 'keep' : Buffer.from(out, 'utf8')
}

/**
 * GET /models/{folder} (names), /experiment/models/{folder} (objects with
 * `name`) and /embeddings (names without extension): only granted items. A
 * host error (404 for an unknown folder) is kept; a 200 that is not a list
 * becomes `[]` (nothing of a shape we cannot read leaves).
 */
export function modelListBehaviour(deps: ModelDeps, kind: 'model-list' | 'embeddings'): RouteBehaviour<ModelListState> {
  return {
    decide({ desc, principal, pass, steps }) {
      if (!deps.models.restricted(principal)) return pass
      return { ...pass, filter: steps.filter(kind, { ...granteeOf(principal), folder: kind === 'embeddings' ? 'embeddings' : (desc.match_info.folder ?? '') }) }
    },
    filter(state, msg, payload) {
      if (msg.status !== 200) return { action: 'keep' }
      const view = deps.models.viewFor(state)
      const folder = state.folder
      const keep =
        kind === 'embeddings'
          ? (v: unknown) => typeof v === 'string' && view.embeddingStems.has(deps.models.hostPath(v))
          : (v: unknown) => {
              const name = typeof v === 'string' ? v : isObject(v) && typeof v.name === 'string' ? v.name : null
              return name !== null && view.allows(folder, name)
            }
      const out = keepInArray(payload, keep)
      // an answer of another shape carries no item names we know how to read: nothing of it leaves
      if (out === 'not-a-list') return { answer: { action: 'replace' }, payload: Buffer.from('[]', 'utf8') }
      return out === 'keep' ? { action: 'keep' } : { answer: { action: 'replace' }, payload: out }
    },
  }
}

/**
 * GET /view_metadata/{folder_name}?filename= and
 * /experiment/models/preview/{folder}/{path_index}/{filename}: an item not
 * granted answers as a missing one does on the host (404, empty body).
 *
 * Model files: a limited caller reaches only granted ones. A model's preview image
 * (`/experiment/models/preview/...`: `<model>.preview.png`, or the cover a `.safetensors` carries;
 * Civitai covers are often explicit) is refused to a user the content-safety policy looks at
 * (sfw_check, nsfw/): it is not a ComfyUI output the policy has classified, so it fails safe.
 */
export function modelFileBehaviour(deps: ModelDeps & { previewBlocked?: (principal: Principal) => Decision | null }): RouteBehaviour {
  return {
    decide({ desc, principal, pass }) {
      const preview = desc.match_info.path_index !== undefined
      // the host joins the preview's name to the folder as it is (no containment: an absolute name
      // or a `..` reaches any image on the disk, another user's outputs included), so for everyone,
      // whatever models they see, a name that leaves the folder is the missing answer
      if (preview && !previewInsideFolder(desc.match_info.filename)) return HOST_MISSING
      const blocked = preview ? (deps.previewBlocked?.(principal) ?? null) : null
      if (!deps.models.restricted(principal)) return blocked ?? pass
      const folder = desc.match_info.folder_name ?? desc.match_info.folder
      const filename = desc.match_info.filename ?? hostQuery(desc.query).get('filename')
      // without a name the host answers 404 itself; with one, it must be granted
      if (folder === undefined || filename === null || filename === undefined) return HOST_MISSING
      // the preview's folder path index: the host fails with a 500 on a bad one; a limited caller gets the missing answer
      const index = desc.match_info.path_index
      const paths = deps.models.cache.folder(deps.models.folderOf(folder))?.paths.length ?? 0
      if (index !== undefined && !(/^\d{1,4}$/.test(index) && Number(index) < paths)) return HOST_MISSING
      return deps.models.viewFor(granteeOf(principal)).allows(folder, filename) ? (blocked ?? pass) : HOST_MISSING
    },
  }
}

/**
 * A preview name the host's join keeps inside the model folder: relative (`os.path.join` drops the
 * folder for an absolute one) and with no `..` segment (refused outright rather than normalised: a
 * link in the folder makes `link/..` the link target's parent, not the folder).
 */
function previewInsideFolder(filename: string | undefined): boolean {
  return filename !== undefined && !filename.startsWith('/') && !filename.split('/').includes('..') && !filename.includes('\0')
}

/** The model check a later step makes: against whose grants, or none (the principal sees every model). */
export type ModelCheck = Grantee | null

/** The model check the prompt's body step makes for this principal. */
export function promptModelCheck(deps: ModelDeps, principal: Principal): ModelCheck {
  return deps.models.restricted(principal) ? granteeOf(principal) : null
}

/** The body step's model check: a refusal, or null. */
export function promptModelRefusal(deps: ModelDeps, check: ModelCheck, graph: unknown): Decision | null {
  if (check === null) return null
  return deps.models.checkPrompt(check, graph)
}

/** For /object_info: is this input's list a model list, and which entries stay. */
export function objectInfoModelKeep(
  deps: ModelDeps,
  view: ModelView,
  cls: string,
  input: string,
  options: string[],
): ((name: string) => boolean) | null {
  const spec = deps.models.inputsOf(cls)?.get(input)
  if (spec) return (name) => spec.extras.includes(name) || spec.folders.some((f) => view.allows(f, name))
  // not reported by the host (a node that read its list before the facts were taken): a list
  // holding every item of a non-empty folder is that folder's list
  const cache = deps.models.cache
  const seen = new Map<string, number>()
  for (const option of new Set(options)) for (const f of cache.foldersHolding(option)) seen.set(f, (seen.get(f) ?? 0) + 1)
  const folders = [...seen].filter(([f, n]) => n === cache.size(f)).map(([f]) => f)
  // not a folder's list as far as the cache can tell; a name in a staging directory still goes
  if (folders.length === 0) return options.some((o) => deps.models.inStaging(o)) ? (name) => !deps.models.inStaging(name) : null
  return (name) => !deps.models.inStaging(name) && (!folders.some((f) => cache.has(f, name)) || folders.some((f) => view.allows(f, name)))
}

/** The object_info filter's cache key part for models (empty when the principal sees every model). */
export function objectInfoModelKey(deps: ModelDeps, view: ModelView | null): string {
  return view === null ? '' : `${view.key}:${deps.models.cache.version}`
}
