/**
 * Roles and their permissions: `authsvc_groups.json` in the data dir
 * (SPEC §4), a flat `{role: {key: bool}}` object.
 *
 * Guarantees: the file is seeded with the default roles when missing; an edit
 * on disk applies within 2 s; an invalid edit is refused with one logged error
 * and the last valid version stays in force (never fail open); writes through
 * the admin API are atomic (temp + rename). The role named `admin` passes
 * every permission whatever the file says.
 *
 * With several instances on one store (`share`), the store's `groups` setting is the
 * truth: the first instance seeds it from its file, every instance applies what the
 * feed brings and mirrors it into its own file, a replace is a compare-and-set in the
 * store, and an edit of the file on disk is written to the store (so it reaches every
 * instance) before it applies.
 */
import { readFileSync } from 'node:fs'
import chokidar, { type FSWatcher } from 'chokidar'
import type { FastifyBaseLogger } from 'fastify'
import { writeFileAtomic } from '../store/atomic-file.js'
import { storeUnavailable } from '../store/collection.js'
import { ADMIN_ROLE, PERMISSION_KEYS, type Permissions } from '../identity/principal.js'

export type GroupMap = Record<string, Record<string, boolean>>

/** Where the groups live when instances share a store (store/settings.ts's `groups` setting). */
export interface SharedGroups {
  get(): GroupMap | null
  compareAndSet(isCurrent: (current: GroupMap | null) => boolean, groups: GroupMap): Promise<boolean>
}

const GROUP_KEYS = new Set<string>([...PERMISSION_KEYS, 'mfa_required'])
const ROLE_NAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$/

const allPermissions = (value: boolean): Permissions =>
  Object.fromEntries(PERMISSION_KEYS.map((k) => [k, value])) as Permissions

export const DEFAULT_GROUPS: GroupMap = {
  admin: { ...allPermissions(true), mfa_required: false },
  user: { ...allPermissions(true), can_download_models: false, mfa_required: false },
  guest: { ...allPermissions(false), can_access_api: true, mfa_required: false },
}

export function validateGroups(raw: unknown): { groups: GroupMap } | { problems: string[] } {
  const problems: string[] = []
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return { problems: ['groups must be an object of roles'] }
  const groups: GroupMap = {}
  for (const [role, keys] of Object.entries(raw as Record<string, unknown>)) {
    if (!ROLE_NAME.test(role)) problems.push(`role ${JSON.stringify(role)}: invalid name`)
    if (typeof keys !== 'object' || keys === null || Array.isArray(keys)) {
      problems.push(`role ${JSON.stringify(role)}: must be an object of permission keys`)
      continue
    }
    const entry: Record<string, boolean> = {}
    for (const [key, value] of Object.entries(keys as Record<string, unknown>)) {
      if (!GROUP_KEYS.has(key)) problems.push(`role ${JSON.stringify(role)}: unknown key ${JSON.stringify(key)}`)
      else if (typeof value !== 'boolean') problems.push(`role ${JSON.stringify(role)}: ${key} must be true or false`)
      else entry[key] = value
    }
    groups[role] = entry
  }
  if (!(ADMIN_ROLE in groups)) problems.push('the admin role cannot be removed')
  return problems.length > 0 ? { problems } : { groups }
}

export class RoleStore {
  private groups: GroupMap
  private compiled = new Map<string, Permissions>()
  private watcher: FSWatcher | undefined
  private sharedGroups: SharedGroups | null = null

  private constructor(
    private readonly path: string,
    private readonly log: FastifyBaseLogger,
    groups: GroupMap,
  ) {
    this.groups = groups
    this.compile()
  }

  static open(path: string, log: FastifyBaseLogger): RoleStore {
    let text: string | undefined
    try {
      text = readFileSync(path, 'utf8')
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
    }
    if (text === undefined) {
      writeFileAtomic(path, `${JSON.stringify(DEFAULT_GROUPS, null, 2)}\n`, 0o600)
      return new RoleStore(path, log, structuredClone(DEFAULT_GROUPS))
    }
    const result = parseGroups(text)
    if ('problems' in result) throw new Error(`${path}: ${result.problems.join('; ')}`)
    return new RoleStore(path, log, result.groups)
  }

  watch(): void {
    this.watcher = chokidar.watch(this.path, {
      ignoreInitial: true,
      awaitWriteFinish: { stabilityThreshold: 150, pollInterval: 50 },
    })
    this.watcher.on('add', () => this.reload())
    this.watcher.on('change', () => this.reload())
  }

  /** Re-reads the file; keeps the previous policy when the new one is invalid. */
  reload(): boolean {
    let text: string
    try {
      text = readFileSync(this.path, 'utf8')
    } catch (err) {
      this.log.error({ err }, 'groups file unreadable; keeping the previous roles')
      return false
    }
    const result = parseGroups(text)
    if ('problems' in result) {
      this.log.error({ problems: result.problems }, 'groups file edit refused; keeping the previous roles')
      return false
    }
    // our own write (replace) comes back through the watcher, and an editor may save an unchanged
    // file: neither changes a role, so neither may move the epoch and drop the plugin's kept decisions
    if (JSON.stringify(result.groups) === JSON.stringify(this.groups)) return true
    if (this.sharedGroups !== null) {
      const groups = result.groups
      this.sharedGroups.compareAndSet(() => true, groups).then(
        () => {
          this.followShared()
          this.log.info({ roles: Object.keys(groups) }, 'groups file applied to the shared store')
        },
        (err: unknown) => this.log.error({ err }, 'groups file edit not stored: the shared store is unreachable; keeping the previous roles'),
      )
      return true
    }
    this.groups = result.groups
    this.compile()
    this.log.info({ roles: Object.keys(this.groups) }, 'groups file applied')
    return true
  }

  /**
   * Makes the shared store's groups the truth (several instances on one store): seeds
   * them from this instance's roles when the store has none yet, then applies them.
   */
  async share(shared: SharedGroups): Promise<void> {
    this.sharedGroups = shared
    if (shared.get() === null) await shared.compareAndSet((current) => current === null, this.snapshot())
    this.followShared()
  }

  /** Applies the shared store's groups (at start and whenever the feed brings a change). */
  followShared(): void {
    const stored = this.sharedGroups?.get()
    if (stored === null || stored === undefined) return
    const result = validateGroups(stored)
    if ('problems' in result) {
      this.log.error({ problems: result.problems }, 'groups in the shared store refused; keeping the previous roles')
      return
    }
    if (JSON.stringify(result.groups) === JSON.stringify(this.groups)) return
    this.groups = result.groups
    this.compile()
    this.mirror()
  }

  /** Keeps this instance's file equal to the shared groups; the watcher then sees no change. */
  private mirror(): void {
    try {
      writeFileAtomic(this.path, `${JSON.stringify(this.groups, null, 2)}\n`, 0o600)
    } catch (err) {
      this.log.warn({ err }, 'groups file not updated from the shared store')
    }
  }

  /**
   * Replaces the groups when `isCurrent` accepts the ones in force (an If-Match check);
   * false when it does not. On a shared store the check and the write are one
   * compare-and-set in the store.
   */
  async replaceIf(isCurrent: (current: GroupMap) => boolean, groups: GroupMap): Promise<boolean> {
    const shared = this.sharedGroups
    if (shared === null) {
      if (!isCurrent(this.snapshot())) return false
      this.replace(groups)
      return true
    }
    let stored: boolean
    try {
      stored = await shared.compareAndSet((current) => isCurrent(current ?? this.snapshot()), groups)
    } catch (err) {
      throw storeUnavailable('groups', err)
    }
    if (stored) this.followShared()
    return stored
  }

  /** Writes the file, then applies it: a write that fails (503) changes nothing. */
  replace(groups: GroupMap): void {
    try {
      writeFileAtomic(this.path, `${JSON.stringify(groups, null, 2)}\n`, 0o600)
    } catch (err) {
      throw storeUnavailable('groups', err)
    }
    this.groups = groups
    this.compile()
  }

  snapshot(): GroupMap {
    return structuredClone(this.groups)
  }

  has(role: string): boolean {
    return Object.hasOwn(this.groups, role)
  }

  permissions(role: string): Permissions {
    return this.compiled.get(role) ?? allPermissions(false)
  }

  /** Whether moving a user from role `from` to role `to` grants anything `from` did not (a role up). */
  widens(from: string, to: string): boolean {
    if (to === ADMIN_ROLE) return from !== ADMIN_ROLE
    const before = this.permissions(from)
    const after = this.permissions(to)
    if (PERMISSION_KEYS.some((k) => after[k] && !before[k])) return true
    return this.mfaRequired(from) && !this.mfaRequired(to)
  }

  mfaRequired(role: string): boolean {
    return this.groups[role]?.mfa_required === true
  }

  async close(): Promise<void> {
    await this.watcher?.close()
  }

  /** called after every change of the roles decisions read (kernel/access-epoch.ts) */
  onChange: () => void = () => {}

  private compile(): void {
    const compiled = new Map<string, Permissions>()
    for (const [role, keys] of Object.entries(this.groups)) {
      const perms = allPermissions(role === ADMIN_ROLE)
      if (role !== ADMIN_ROLE) for (const key of PERMISSION_KEYS) perms[key] = keys[key] === true
      compiled.set(role, perms)
    }
    this.compiled = compiled
    this.onChange()
  }
}

function parseGroups(text: string): { groups: GroupMap } | { problems: string[] } {
  let raw: unknown
  try {
    raw = JSON.parse(text)
  } catch (err) {
    return { problems: [`not valid JSON: ${(err as Error).message}`] }
  }
  return validateGroups(raw)
}
