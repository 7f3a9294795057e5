/**
 * Loads the configuration: schema defaults, then `config.json` from the data
 * dir, then environment overrides. Throws ConfigError listing every problem
 * at once; never starts with a partially valid configuration.
 */
import { existsSync, readFileSync } from 'node:fs'
import { basename, dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv'
import { ConfigSchema, type Config } from './schema.js'
import { parseCidr } from '../../access/ip.js'
import { checkNtfySettings } from '../../notify/settings-rules.js'
import { outboundUrlProblem } from '../http/outbound.js'
import { urlProblem } from '../../store-config/rules.js'

const PACKAGE_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', '..')

/**
 * The data dir: `AUTHSVC_DATA_DIR` when set and not empty, else `<package>/users` (SPEC §10).
 * Inside ComfyUI the plugin always sets it (host-plugin/data_dir.py: `<user_dir>/authsvc`).
 */
export function dataDirFromEnv(env: NodeJS.ProcessEnv): string {
  return resolve(env.AUTHSVC_DATA_DIR || join(PACKAGE_ROOT, 'users'))
}

/**
 * Where an operator's command (`npx authsvc ...`) looks when neither `--data-dir` nor
 * `AUTHSVC_DATA_DIR` says: the plugin's default inside ComfyUI, `<ComfyUI>/user/authsvc`, when
 * the package sits in `<ComfyUI>/custom_nodes/` and that folder exists (a ComfyUI started with
 * `--user-directory` elsewhere needs `--data-dir`); else `<package>/users`.
 */
export function operatorDataDir(env: NodeJS.ProcessEnv, packageRoot: string = PACKAGE_ROOT): string {
  if (env.AUTHSVC_DATA_DIR) return resolve(env.AUTHSVC_DATA_DIR)
  const parent = dirname(resolve(packageRoot))
  const inComfy = join(dirname(parent), 'user', 'authsvc')
  if (basename(parent) === 'custom_nodes' && existsSync(inComfy)) return inComfy
  return join(resolve(packageRoot), 'users')
}

export class ConfigError extends Error {
  readonly problems: string[]
  constructor(problems: string[]) {
    super(`invalid configuration:\n  - ${problems.join('\n  - ')}`)
    this.problems = problems
  }
}

const ENV_BOOLEANS: Record<string, keyof Config> = {
  REQUIRE_AUTH_FOR_REMOTE_API: 'require_auth_for_remote_api',
  SEPERATE_USERS: 'seperate_users',
  FORCE_HTTPS: 'force_https',
}

export function parseBoolean(raw: string): boolean | undefined {
  const v = raw.trim().toLowerCase()
  if (['1', 'true', 'yes', 'on'].includes(v)) return true
  if (['0', 'false', 'no', 'off'].includes(v)) return false
  return undefined
}

/**
 * Keys of the schema (SPEC §10) whose feature this build does not have yet.
 * Setting one is refused at start, never accepted and silently ignored (a
 * test fails when any other schema key is read by nothing).
 */
export const UNBUILT_KEYS: Readonly<Record<string, string>> = Object.freeze({
})

function unbuiltProblems(raw: Record<string, unknown>): string[] {
  const problems: string[] = []
  for (const [path, why] of Object.entries(UNBUILT_KEYS)) {
    const [section, key] = path.split('.')
    const holder = key === undefined ? raw : raw[section]
    if (typeof holder !== 'object' || holder === null) continue
    if (Object.hasOwn(holder, key ?? section)) problems.push(`/${path.replace('.', '/')}: ${why}; remove it from the configuration`)
  }
  return problems
}

/** Validates a raw config object (already merged with env); returns the config with defaults. */
export function validateConfig(raw: unknown, problems: string[] = []): Config {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new ConfigError([...problems, 'config must be a JSON object'])
  }
  problems.push(...unbuiltProblems(raw as Record<string, unknown>))
  const withDefaults = structuredClone(raw) as Config
  const shapeProblems = schemaProblems(withDefaults)
  problems.push(...shapeProblems)
  for (const key of ['local_network_cidrs', 'trusted_proxies'] as const) {
    const list: unknown = withDefaults[key]
    if (!Array.isArray(list)) continue
    list.forEach((cidr, i) => {
      if (typeof cidr === 'string' && !parseCidr(cidr)) problems.push(`/${key}/${i}: not an IP address or CIDR: ${JSON.stringify(cidr)}`)
    })
  }
  // the ntfy rules the admin's PUT follows too (notify/settings-rules.ts), once its shape is right
  if (!shapeProblems.some((p) => p.startsWith('/ntfy'))) {
    const ntfy = checkNtfySettings(withDefaults.ntfy)
    if ('problems' in ntfy) problems.push(...ntfy.problems.map((p) => `/ntfy/${p.field}: ${p.message}`))
  }
  const updateUrl: unknown = withDefaults.update_check?.url
  if (typeof updateUrl === 'string' && updateUrl !== '') {
    const problem = outboundUrlProblem(updateUrl)
    if (problem !== null) problems.push(`/update_check/url: ${problem}`)
  }
  problems.push(...storeProblems(withDefaults))
  // the deterministic classifier decides by markers a test writes: never by accident in production
  if (withDefaults.nsfw?.classifier === 'test' && process.env.AUTHSVC_NSFW_TEST_CLASSIFIER !== '1') {
    problems.push('/nsfw/classifier: "test" is the test suites\' classifier; it needs AUTHSVC_NSFW_TEST_CLASSIFIER=1 in the environment')
  }
  // where a download's first request goes (the user's key goes there): https, or http to this machine
  for (const key of ['civitai_base_url', 'huggingface_base_url'] as const) {
    const url: unknown = withDefaults.model_download?.[key]
    if (typeof url !== 'string') continue
    const problem = outboundUrlProblem(url)
    if (problem !== null) problems.push(`/model_download/${key}: ${problem}`)
  }
  if (problems.length > 0) throw new ConfigError(problems)
  return withDefaults
}

/** The store's URLs parse and a backend has the URL it needs (the lines never quote a URL: it may hold a password). */
function storeProblems(config: Config): string[] {
  const problems: string[] = []
  const sections: Array<[string, unknown]> = [['/store', config.store], ['/store/tokens', config.store?.tokens]]
  for (const [where, section] of sections) {
    if (typeof section !== 'object' || section === null) continue
    const s = section as Record<string, unknown>
    for (const kind of ['postgres', 'redis'] as const) {
      const url = s[`${kind}_url`]
      if (typeof url === 'string' && url !== '') {
        const problem = urlProblem(kind, url)
        if (problem !== null) problems.push(`${where}/${kind}_url: ${problem}`)
      }
      if (s.backend === kind && url === '') problems.push(`${where}/backend is ${kind}: set ${where.slice(1).replace('/', '.')}.${kind}_url too`)
    }
  }
  return problems
}

/**
 * The schema's check, compiled once per process, which also fills in its defaults: ajv, which
 * fastify loads for the routes anyway. typebox's own `Value` module was 0.4 s of CPU at every
 * sidecar start (about 300 more module files to load) and more under the test loader.
 */
let configCheck: ValidateFunction | undefined
function checkConfig(): ValidateFunction {
  configCheck ??= new Ajv({ allErrors: true, useDefaults: true, strict: false }).compile(ConfigSchema)
  return configCheck
}

type SchemaError = ErrorObject & { message: string }

/**
 * Fills in the schema's defaults in `value` and returns one line per problem. A value that
 * matches no branch of a union is one line naming the key, the value given and what is allowed
 * (an enum: its values), never one "must be equal to constant" per branch.
 */
function schemaProblems(value: unknown): string[] {
  const check = checkConfig()
  const errors = (check(value) ? [] : [...(check.errors ?? [])]).map((e) => ({ ...e, message: e.message ?? 'is not valid' })) as SchemaError[]
  const unions = errors.filter((e) => e.keyword === 'anyOf')
  const branchOf = (e: SchemaError) => unions.find((u) => u.instancePath === e.instancePath && e.schemaPath.startsWith(`${u.schemaPath}/`))
  const problems: string[] = []
  const extraKeysSaid = new Set<string>()
  for (const error of errors) {
    if (branchOf(error) !== undefined) continue // folded into its union's line
    const where = error.instancePath || '(root)'
    if (error.keyword === 'additionalProperties') {
      // one line per object naming every key it should not have (ajv says one key an error)
      if (extraKeysSaid.has(where)) continue
      extraKeysSaid.add(where)
      const keys = errors.filter((e) => e.keyword === 'additionalProperties' && e.instancePath === error.instancePath).map((e) => e.params.additionalProperty)
      problems.push(`${where}: must not have additional properties (${JSON.stringify({ additionalProperties: keys })})`)
      continue
    }
    if (error.keyword === 'anyOf') {
      const branches = errors.filter((e) => branchOf(e) === error)
      const given = JSON.stringify(valueAt(value, error.instancePath))
      const allowed = branches.filter((b) => b.keyword === 'const').map((b) => JSON.stringify(b.params.allowedValue))
      if (allowed.length > 0) {
        // an enum of literals: its values are what is allowed, whatever the type given
        problems.push(`${where}: got ${given}, must be one of ${[...new Set(allowed)].join(', ')}`)
      } else {
        const kinds = [...new Set(branches.map((b) => b.message.replace(/^must be /, '')))]
        problems.push(`${where}: got ${given}, must be ${kinds.join(' or ') || 'something else'}`)
      }
      continue
    }
    problems.push(`${where}: ${error.message}`)
  }
  return problems
}

/** The value at a JSON pointer (`/store/backend`). */
function valueAt(root: unknown, pointer: string): unknown {
  let node = root
  for (const raw of pointer.split('/').slice(1)) {
    const key = raw.replace(/~1/g, '/').replace(/~0/g, '~')
    node = typeof node === 'object' && node !== null ? (node as Record<string, unknown>)[key] : undefined
  }
  return node
}

export function loadConfig(dataDir: string, env: NodeJS.ProcessEnv): Config {
  const problems: string[] = []
  let raw: Record<string, unknown> = {}
  const path = join(dataDir, 'config.json')
  let text: string | undefined
  try {
    text = readFileSync(path, 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') problems.push(`${path}: ${(err as Error).message}`)
  }
  if (text !== undefined) {
    try {
      const parsed: unknown = JSON.parse(text)
      if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)) raw = parsed as Record<string, unknown>
      else problems.push(`${path}: must hold a JSON object`)
    } catch (err) {
      problems.push(`${path}: not valid JSON (${(err as Error).message})`)
    }
  }
  for (const [name, key] of Object.entries(ENV_BOOLEANS)) {
    const value = env[name]
    if (value === undefined || value === '') continue
    const parsed = parseBoolean(value)
    if (parsed === undefined) problems.push(`env ${name}: expected true or false, got ${JSON.stringify(value)}`)
    else raw[key] = parsed
  }
  return validateConfig(raw, problems)
}
