/** Runtime settings changed through the admin API (guest login, IP lists...), held in the store. */
import type { Collection } from './collection.js'

export interface IpBlacklistEntry {
  ip: string
  permanent?: boolean
  expires_at_iso?: string
}

export interface IpListsSetting {
  whitelist: string[]
  blacklist: IpBlacklistEntry[]
}

export interface SettingsShape {
  allow_guest_jwt: boolean
  ip_lists: IpListsSetting
}

export class SettingsRepository {
  constructor(
    private readonly settings: Collection<unknown>,
    private readonly defaults: SettingsShape,
  ) {}

  get<K extends keyof SettingsShape>(key: K): SettingsShape[K] {
    const value = this.settings.get(key)
    return value === undefined ? this.defaults[key] : (value as SettingsShape[K])
  }

  async set<K extends keyof SettingsShape>(key: K, value: SettingsShape[K]): Promise<void> {
    await this.settings.put(key, value)
  }
}
