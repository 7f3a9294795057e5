/** Runtime settings changed through the admin API (guest login, IP lists...), held in the store. */
import { storeUnavailable, type Collection } from './collection.js'
import type { SharedStore } from './shared-store.js'

export interface IpBlacklistEntry {
  ip: string
  permanent?: boolean
  expires_at_iso?: string
}

export interface IpListsSetting {
  whitelist: string[]
  blacklist: IpBlacklistEntry[]
}

/** The ntfy settings an admin saved (notify/ntfy-settings.ts); `null` until then (config.json's apply). */
export interface NtfyStoredSetting {
  topic: string
  base_url: string
  enabled_events: string[]
  /** sealed (store/field-crypto.ts); '' when there is no token */
  api_token_sealed: string
  saved_at_iso: string
}

export interface SettingsShape {
  allow_guest_jwt: boolean
  ip_lists: IpListsSetting
  ntfy: NtfyStoredSetting | null
  /** the roles (access/roles.ts), held here only when instances share the store; null until seeded */
  groups: Record<string, Record<string, boolean>> | null
}

export class SettingsRepository {
  /** the tail of the queue of compare-and-set changes */
  private changes: Promise<unknown> = Promise.resolve()

  constructor(
    private readonly settings: Collection<unknown>,
    private readonly defaults: SettingsShape,
  ) {}

  get<K extends keyof SettingsShape>(key: K): SettingsShape[K] {
    const value = this.settings.get(key)
    return value === undefined ? this.defaults[key] : (value as SettingsShape[K])
  }

  /** `narrows`: applies in memory at once, retried until stored; `widens`: applies once stored. */
  async set<K extends keyof SettingsShape>(key: K, value: SettingsShape[K], effect: 'narrows' | 'widens' = 'widens'): Promise<void> {
    await (effect === 'narrows' ? this.settings.narrow(key, value) : this.settings.put(key, value))
  }

  /**
   * Stores `value` only if `isCurrent` accepts the value held when this change's
   * turn comes (changes run one at a time, writes included), so two admins who
   * read the same version cannot both replace it. Resolves false when refused.
   */
  compareAndSet<K extends keyof SettingsShape>(key: K, isCurrent: (current: SettingsShape[K]) => boolean, value: SettingsShape[K]): Promise<boolean> {
    const shared = this.settings.shared
    if (shared !== null) return this.compareAndSetShared(key, isCurrent, value)
    const change = async (): Promise<boolean> => {
      if (!isCurrent(this.get(key))) return false
      await this.set(key, value)
      return true
    }
    const run = this.changes.then(change, change)
    this.changes = run.catch(() => {})
    return run
  }

  /**
   * On a shared store the current value is read from the store and the new one
   * written in one transaction that holds only if nobody (on any instance)
   * wrote the key meanwhile; a lost race reads again and asks `isCurrent` again.
   */
  private async compareAndSetShared<K extends keyof SettingsShape>(key: K, isCurrent: (current: SettingsShape[K]) => boolean, value: SettingsShape[K]): Promise<boolean> {
    const shared = this.settings.shared as SharedStore
    for (let attempt = 0; attempt < 8; attempt++) {
      let found
      try {
        found = await shared.getVersioned<SettingsShape[K]>(`setting:${key}`)
      } catch (err) {
        throw storeUnavailable('setting', err)
      }
      if (!isCurrent(found === undefined ? this.defaults[key] : found.value)) return false
      if (await this.settings.commit(key, value, [{ key: `setting:${key}`, seq: found?.seq ?? null }], [])) return true
    }
    return false
  }
}
