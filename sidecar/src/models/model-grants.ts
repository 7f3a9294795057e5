/**
 * Model grants (SPEC §5.4 shared items): which items of which model folder a
 * user may see and use when their role lacks `can_view_all_comfyui_items`.
 *
 * Invariants: a grant widens access, so it is in memory only once stored
 * (Collection.put); a revocation and a user's deletion narrow it, so they hold
 * in memory at once and are retried until stored (Collection.narrowRemove);
 * granting twice keeps the first record (idempotent). Reads are in-memory; a
 * user's grant set has a `signature` that changes exactly when the set does, so
 * answers filtered for one grant set are shared by every user with the same set.
 *
 * Grants by role (issue 26): a role may be granted items too. What a principal may
 * use is their own grants ∪ their role's (`forUser(userId, role)`), computed from
 * the role the principal acts as now, so a role change applies to the very next
 * decision; a role grant change applies to every user of the role at once. A
 * deleted role's grants go (`followRoles`, called on every role change and at
 * start), memory first as any narrowing. An anonymous principal acting as a role
 * gets that role's grants.
 *
 * Grants on this host only (`grantOnThisHost`): a file a user downloaded here is
 * granted to them by its name in this host's own store (services.ts `localKv`), never
 * in the shared one. A grant names an item, not bytes: on a store several ComfyUIs
 * share, a shared grant of a downloaded name would let its user load whatever file
 * another host has under that name (someone else's model, uploaded to a source under
 * the same name first). What a user may use here is their shared grants ∪ their grants
 * on this host ∪ their role's; an admin's revocation and a user's deletion take both.
 */
import { createHash } from 'node:crypto'
import type { Collection } from '../store/collection.js'

export interface ModelGrantRecord {
  user_id: string
  folder: string
  item_name: string
  granted_by: string
  created_at_iso: string
  /** a grant of this host only: the file it is of (host-grant-files.ts); absent on older ones */
  file?: FileIdentity
}

/**
 * Which file a path names, and in what state: inode, size and modification time (ns), as decimal
 * text. Not the device: its number may change with a remount or a container's restart.
 */
export interface FileIdentity {
  ino: string
  size: string
  mtime_ns: string
}

export const sameFile = (a: FileIdentity, b: FileIdentity): boolean => a.ino === b.ino && a.size === b.size && a.mtime_ns === b.mtime_ns

export interface RoleGrantRecord {
  role: string
  folder: string
  item_name: string
  granted_by: string
  created_at_iso: string
}

export interface UserGrants {
  /** changes exactly when the set of (folder, item) changes; equal sets, equal signatures */
  signature: string
  /** folder → items, as granted (exact names) */
  byFolder: ReadonlyMap<string, ReadonlySet<string>>
}

const EMPTY: UserGrants = { signature: 'none', byFolder: new Map() }

/** The store key of one grant: unambiguous whatever the names contain. */
const grantId = (userId: string, folder: string, item: string): string => JSON.stringify([userId, folder, item])
const roleGrantId = (role: string, folder: string, item: string): string => JSON.stringify([role, folder, item])

/** The grants of some records: folder → items and the signature of the set. */
function compute(records: Iterable<{ folder: string; item_name: string }>): UserGrants {
  const byFolder = new Map<string, Set<string>>()
  const lines = new Set<string>()
  for (const r of records) {
    let set = byFolder.get(r.folder)
    if (!set) byFolder.set(r.folder, (set = new Set()))
    set.add(r.item_name)
    lines.add(JSON.stringify([r.folder, r.item_name]))
  }
  if (lines.size === 0) return EMPTY
  return { signature: createHash('sha1').update([...lines].sort().join('\n')).digest('hex'), byFolder }
}

const UNIONS_KEPT = 256

export class ModelGrants {
  private readonly perUser = new Map<string, UserGrants>()
  private readonly perRole = new Map<string, UserGrants>()
  /** own ∪ role, by the two signatures */
  private readonly unions = new Map<string, UserGrants>()

  constructor(
    private readonly records: Collection<ModelGrantRecord>,
    private readonly roleRecords: Collection<RoleGrantRecord>,
    /** grants of this host only (its own store): what a user downloaded here */
    private readonly hostRecords: Collection<ModelGrantRecord>,
  ) {
    // another instance's grant or revocation: the user's computed grants are computed again
    records.observeRemote((_id, before, after) => {
      if (before !== undefined) this.perUser.delete(before.user_id)
      if (after !== undefined) this.perUser.delete(after.user_id)
    })
    roleRecords.observeRemote((_id, before, after) => {
      if (before !== undefined) this.perRole.delete(before.role)
      if (after !== undefined) this.perRole.delete(after.role)
    })
  }

  /** The user's own grants, newest last: those of the shared store, then those of this host only. */
  list(userId: string): Array<ModelGrantRecord & { host_only: boolean }> {
    const of = (records: Collection<ModelGrantRecord>, host_only: boolean) =>
      [...records.values()].filter((r) => r.user_id === userId).sort((a, b) => a.created_at_iso.localeCompare(b.created_at_iso)).map((r) => ({ ...r, host_only }))
    return [...of(this.records, false), ...of(this.hostRecords, true)]
  }

  /** The role's grants, newest last. */
  listRole(role: string): RoleGrantRecord[] {
    return [...this.roleRecords.values()].filter((r) => r.role === role).sort((a, b) => a.created_at_iso.localeCompare(b.created_at_iso))
  }

  /**
   * What a principal may use: the user's own grants ∪ the role's (`role` as the principal
   * acts now). In memory, computed once per change of either set.
   */
  forUser(userId: string | null, role: string | null = null): UserGrants {
    const own = userId === null ? EMPTY : this.ownOf(userId)
    const fromRole = role === null ? EMPTY : this.roleOf(role)
    if (fromRole === EMPTY) return own
    if (own === EMPTY) return fromRole
    const key = `${own.signature}:${fromRole.signature}`
    let union = this.unions.get(key)
    if (union === undefined) {
      const pairs: Array<{ folder: string; item_name: string }> = []
      for (const g of [own, fromRole]) for (const [folder, items] of g.byFolder) for (const item_name of items) pairs.push({ folder, item_name })
      union = compute(pairs)
      if (this.unions.size >= UNIONS_KEPT) this.unions.delete(this.unions.keys().next().value as string)
      this.unions.set(key, union)
    }
    return union
  }

  private ownOf(userId: string): UserGrants {
    let grants = this.perUser.get(userId)
    if (grants === undefined) {
      grants = compute([...this.records.values(), ...this.hostRecords.values()].filter((r) => r.user_id === userId))
      this.perUser.set(userId, grants)
    }
    return grants
  }

  private roleOf(role: string): UserGrants {
    let grants = this.perRole.get(role)
    if (grants === undefined) {
      grants = compute([...this.roleRecords.values()].filter((r) => r.role === role))
      this.perRole.set(role, grants)
    }
    return grants
  }

  /** Stores a grant under `id` (durable first, then memory forgets what it computed); an existing one is kept as it is. */
  private async storeOnce<T>(records: Collection<T>, id: string, record: T, computed: Map<string, UserGrants>, key: string): Promise<T> {
    const existing = records.get(id)
    if (existing) return existing
    await records.put(id, record)
    computed.delete(key)
    return record
  }

  /** Stores the role's grant (durable first); an existing one is kept as it is. */
  grantRole(record: RoleGrantRecord): Promise<RoleGrantRecord> {
    return this.storeOnce(this.roleRecords, roleGrantId(record.role, record.folder, record.item_name), record, this.perRole, record.role)
  }

  /** Takes a role's grant back at once (memory first); false when there was no such grant. */
  async revokeRole(role: string, folder: string, item: string): Promise<boolean> {
    const id = roleGrantId(role, folder, item)
    if (!this.roleRecords.get(id)) return false
    const write = this.roleRecords.narrowRemove(id)
    this.perRole.delete(role)
    await write
    return true
  }

  /**
   * The grants of roles that no longer exist go, memory at once (their writes retried in the
   * background; a failure is the collection's to log). Called on every role change and at start.
   */
  followRoles(exists: (role: string) => boolean): void {
    for (const r of [...this.roleRecords.values()]) {
      if (exists(r.role)) continue
      this.roleRecords.narrowRemove(roleGrantId(r.role, r.folder, r.item_name)).catch(() => {})
      this.perRole.delete(r.role)
    }
  }

  /** Stores the grant (durable first); an existing one is kept as it is. */
  grant(record: ModelGrantRecord): Promise<ModelGrantRecord> {
    return this.storeOnce(this.records, grantId(record.user_id, record.folder, record.item_name), record, this.perUser, record.user_id)
  }

  /**
   * Stores a grant of this host only (durable first; a download's). An existing one is kept as it is,
   * unless the new one is of another file (the user downloaded the name again: the grant is of the new file).
   */
  async grantOnThisHost(record: ModelGrantRecord): Promise<ModelGrantRecord> {
    const id = grantId(record.user_id, record.folder, record.item_name)
    const existing = this.hostRecords.get(id)
    if (existing !== undefined && record.file !== undefined && !(existing.file !== undefined && sameFile(existing.file, record.file))) {
      // the same grant (user, folder, name) of another file: memory first, so a check that read the
      // old record finds this one held and leaves it (its revocation acts on the record it read only)
      const write = this.hostRecords.narrow(id, record)
      this.perUser.delete(record.user_id)
      await write
      this.onHostGrant()
      return record
    }
    const stored = await this.storeOnce(this.hostRecords, id, record, this.perUser, record.user_id)
    this.onHostGrant()
    return stored
  }

  /** Puts back a grant of this host taken a moment ago (a download's `placing` undone): only where none is held now. */
  restoreOnThisHost(record: ModelGrantRecord): Promise<ModelGrantRecord> {
    return this.storeOnce(this.hostRecords, grantId(record.user_id, record.folder, record.item_name), record, this.perUser, record.user_id).finally(() => this.onHostGrant())
  }

  /**
   * Records the file a grant of this host is of, for one stored before files were recorded, while
   * `record` is the one held (durable first: the same grant, narrower from now on).
   */
  async pinFileOnThisHost(record: ModelGrantRecord, file: FileIdentity): Promise<void> {
    const id = grantId(record.user_id, record.folder, record.item_name)
    if (this.hostRecords.get(id) !== record || record.file !== undefined) return
    await this.hostRecords.put(id, { ...record, file })
  }

  /** Told after a grant of this host only was stored (host-grant-files.ts follows its file). */
  onHostGrant: () => void = () => {}

  /** Every grant of this host only. */
  hostGrants(): ModelGrantRecord[] {
    return [...this.hostRecords.values()]
  }

  /**
   * Takes back a grant of this host only at once (memory first), while `record` is the one held (a
   * grant stored again meanwhile, of a new file, stays); whether it did.
   */
  async revokeOnThisHost(record: ModelGrantRecord): Promise<boolean> {
    const id = grantId(record.user_id, record.folder, record.item_name)
    if (this.hostRecords.get(id) !== record) return false
    const write = this.hostRecords.narrowRemove(id)
    this.perUser.delete(record.user_id)
    await write
    return true
  }

  /**
   * Grants that downloads made before they were of this host only, found in the shared collection
   * (on the embedded store, or copied from it into a shared one), become this host's: each one a
   * completed download here made (same user, folder and name, granted by the user themselves).
   * Memory first for the shared record (a narrowing), durable first for this host's. How many.
   */
  async adoptDownloads(made: Iterable<{ user_id: string; username: string; folder: string; item: string }>): Promise<number> {
    let moved = 0
    for (const { user_id, username, folder, item } of made) {
      const id = grantId(user_id, folder, item)
      const shared = this.records.get(id)
      if (shared === undefined || shared.granted_by !== username) continue
      await this.storeOnce(this.hostRecords, id, shared, this.perUser, user_id)
      if (this.records.get(id) === undefined) {
        // revoked while this host's copy was being stored (that revocation could not see it yet)
        if (this.hostRecords.get(id) !== undefined) await this.hostRecords.narrowRemove(id)
        this.perUser.delete(user_id)
        continue
      }
      const write = this.records.narrowRemove(id)
      this.perUser.delete(user_id)
      await write
      moved++
    }
    if (moved > 0) this.onHostGrant()
    return moved
  }

  /**
   * A new file is about to take this name (a download never replaces a file): the grants of this
   * host that other users' downloads made of the name (`same`: as the host resolves names, so
   * `Model` is `model` where its file system ignores case) were of a file no longer there, and go
   * (memory first). What went (to be put back if the new file does not take the name after all).
   */
  async landedAgain(folder: string, item: string, userId: string, same: (a: string, b: string) => boolean = (a, b) => a === b): Promise<ModelGrantRecord[]> {
    const stale = [...this.hostRecords.values()].filter((r) => r.folder === folder && r.user_id !== userId && same(r.item_name, item))
    const writes = stale.map((r) => this.hostRecords.narrowRemove(grantId(r.user_id, r.folder, r.item_name)))
    for (const r of stale) this.perUser.delete(r.user_id)
    await Promise.all(writes)
    return stale
  }

  /** Revokes at once (memory first), shared and on this host; false when there was no such grant. */
  async revoke(userId: string, folder: string, item: string): Promise<boolean> {
    const id = grantId(userId, folder, item)
    const held = [this.records, this.hostRecords].filter((records) => records.get(id) !== undefined)
    if (held.length === 0) return false
    const writes = held.map((records) => records.narrowRemove(id))
    this.perUser.delete(userId)
    await Promise.all(writes)
    return true
  }

  /**
   * Every grant of the user goes (a deleted user), shared and on this host; memory at once.
   * `hostOnly`: only this host's (the account was deleted on another instance, which took the
   * shared ones).
   */
  async removeAllForUser(userId: string, hostOnly = false): Promise<void> {
    const writes = [...(hostOnly ? [] : [this.records]), this.hostRecords].flatMap((records) =>
      [...records.values()].filter((r) => r.user_id === userId).map((r) => records.narrowRemove(grantId(r.user_id, r.folder, r.item_name))))
    this.perUser.delete(userId)
    const results = await Promise.allSettled(writes)
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected')
    if (failed) throw failed.reason
  }
}
