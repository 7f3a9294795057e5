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
 */
import { createHash } from 'node:crypto'
import type { Collection } from '../store/collection.js'

export interface ModelGrantRecord {
  user_id: string
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

export class ModelGrants {
  private readonly perUser = new Map<string, UserGrants>()

  constructor(private readonly records: Collection<ModelGrantRecord>) {
    // another instance's grant or revocation: the user's computed grants are computed again
    records.observeRemote((_id, before, after) => {
      if (before !== undefined) this.perUser.delete(before.user_id)
      if (after !== undefined) this.perUser.delete(after.user_id)
    })
  }

  /** The user's grants, newest last. */
  list(userId: string): ModelGrantRecord[] {
    return [...this.records.values()].filter((r) => r.user_id === userId).sort((a, b) => a.created_at_iso.localeCompare(b.created_at_iso))
  }

  /** In memory, computed once per change of the user's grants. */
  forUser(userId: string | null): UserGrants {
    if (userId === null) return EMPTY
    let grants = this.perUser.get(userId)
    if (grants === undefined) {
      const byFolder = new Map<string, Set<string>>()
      const lines: string[] = []
      for (const r of this.records.values()) {
        if (r.user_id !== userId) continue
        let set = byFolder.get(r.folder)
        if (!set) byFolder.set(r.folder, (set = new Set()))
        set.add(r.item_name)
        lines.push(JSON.stringify([r.folder, r.item_name]))
      }
      const signature = lines.length === 0 ? 'none' : createHash('sha1').update(lines.sort().join('\n')).digest('hex')
      grants = { signature, byFolder }
      this.perUser.set(userId, grants)
    }
    return grants
  }

  /** Stores the grant (durable first); an existing one is kept as it is. */
  async grant(record: ModelGrantRecord): Promise<ModelGrantRecord> {
    const id = grantId(record.user_id, record.folder, record.item_name)
    const existing = this.records.get(id)
    if (existing) return existing
    await this.records.put(id, record)
    this.perUser.delete(record.user_id)
    return record
  }

  /** Revokes at once (memory first); false when there was no such grant. */
  async revoke(userId: string, folder: string, item: string): Promise<boolean> {
    const id = grantId(userId, folder, item)
    if (!this.records.get(id)) return false
    const write = this.records.narrowRemove(id)
    this.perUser.delete(userId)
    await write
    return true
  }

  /** Every grant of the user goes (a deleted user); memory at once. */
  async removeAllForUser(userId: string): Promise<void> {
    const writes = this.list(userId).map((r) => this.records.narrowRemove(grantId(r.user_id, r.folder, r.item_name)))
    this.perUser.delete(userId)
    const results = await Promise.allSettled(writes)
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected')
    if (failed) throw failed.reason
  }
}
