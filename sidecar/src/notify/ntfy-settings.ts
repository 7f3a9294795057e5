/**
 * The ntfy settings in force: `config.json`'s `ntfy` section until an admin saves them, then the
 * saved ones (docs/decisions.md, "ntfy notifications"). The token is sealed at rest
 * (store/field-crypto.ts) and opened once per saved version; it is held in memory for the
 * publisher and leaves only in the `Authorization` header to ntfy: never in an answer, a log
 * line or an event.
 *
 * Guarantees: `enables(kind)` reads memory only (the event listener calls it for every event);
 * saves run one at a time, so an admin who leaves the token out keeps the token stored when
 * their turn comes, not the one they read; a token that no longer opens (another master secret)
 * is logged once and treated as absent.
 */
import type { FastifyBaseLogger } from 'fastify'
import type { Clock } from '../kernel/clock.js'
import type { Config } from '../kernel/config/schema.js'
import { AuthsvcError } from '../kernel/errors.js'
import type { FieldCipher } from '../store/field-crypto.js'
import type { NtfyStoredSetting, SettingsRepository } from '../store/settings.js'
import { DEFAULT_NTFY_BASE_URL, checkNtfySettings, type CheckedNtfySettings, type NtfySettingsInput } from './settings-rules.js'

/** the sealed token's context: a sealed value copied into another field does not open */
const TOKEN_CONTEXT = 'setting:ntfy:api_token'

export interface EffectiveNtfySettings extends CheckedNtfySettings {
  api_token: string
  /** where they come from: config.json, or an admin's save */
  source: 'config' | 'saved'
}

/** Where a notification goes, read at each attempt (a change applies to what is still queued). */
export interface NtfyDestination {
  topic: string
  base_url: string
  api_token: string
}

export interface NtfySettingsDeps {
  settings: SettingsRepository
  config: Config['ntfy']
  cipher: FieldCipher
  log: FastifyBaseLogger
  clock: Clock
}

const OFF: CheckedNtfySettings = { topic: '', base_url: DEFAULT_NTFY_BASE_URL, enabled_events: [] }

export class NtfySettings {
  private memo: { stored: NtfyStoredSetting | null; effective: EffectiveNtfySettings; enabled: ReadonlySet<string> } | undefined
  private writes: Promise<unknown> = Promise.resolve()

  constructor(private readonly deps: NtfySettingsDeps) {
    const stored = deps.settings.get('ntfy')
    const fromConfig = deps.config.topic !== '' || deps.config.api_token !== '' || deps.config.enabled_events.length > 0
    if (stored !== null && fromConfig) {
      deps.log.info({ saved_at: stored.saved_at_iso }, 'ntfy: the settings an admin saved apply; config.json\'s ntfy section is ignored')
    }
  }

  current(): EffectiveNtfySettings {
    return this.settled().effective
  }

  /** Whether an event of `kind` is sent now: a topic is set and the kind is enabled. */
  enables(kind: string): boolean {
    const { effective, enabled } = this.settled()
    return effective.topic !== '' && enabled.has(kind)
  }

  destination(): NtfyDestination | null {
    const { topic, base_url, api_token } = this.current()
    return topic === '' ? null : { topic, base_url, api_token }
  }

  /**
   * Validates and stores the admin's settings (whole, except the token: absent keeps the one in
   * force, `''` removes it). Throws 400 VALIDATION_FAILED naming every problem, 503 when the
   * store refuses the write (nothing changes then).
   */
  save(input: NtfySettingsInput): Promise<EffectiveNtfySettings> {
    const checked = checkNtfySettings(input)
    if ('problems' in checked) {
      return Promise.reject(new AuthsvcError('VALIDATION_FAILED', checked.problems.map((p) => `${p.field}: ${p.message}`).join('; ')))
    }
    const write = async (): Promise<EffectiveNtfySettings> => {
      const now = this.current()
      // the kept token goes only to the server it was given for: a new server needs it again
      if (input.api_token === undefined && now.api_token !== '' && new URL(checked.settings.base_url).origin !== new URL(now.base_url).origin) {
        throw new AuthsvcError('VALIDATION_FAILED', 'api_token: the server changed; enter its access token again, or send an empty one to save without a token')
      }
      const token = input.api_token ?? now.api_token
      await this.deps.settings.set('ntfy', {
        ...checked.settings,
        api_token_sealed: token === '' ? '' : this.deps.cipher.encrypt(token, TOKEN_CONTEXT),
        saved_at_iso: new Date(this.deps.clock()).toISOString(),
      })
      return this.current()
    }
    const run = this.writes.then(write, write)
    this.writes = run.catch(() => {})
    return run
  }

  private settled(): NonNullable<NtfySettings['memo']> {
    const stored = this.deps.settings.get('ntfy')
    if (this.memo === undefined || this.memo.stored !== stored) {
      const effective = stored === null ? this.fromConfig() : this.fromStore(stored)
      this.memo = { stored, effective, enabled: new Set(effective.enabled_events) }
    }
    return this.memo
  }

  private fromConfig(): EffectiveNtfySettings {
    const checked = checkNtfySettings(this.deps.config)
    if ('problems' in checked) {
      // load.ts refuses such a config at start; a config built some other way (tests, tools) turns notifications off
      this.deps.log.error({ problems: checked.problems }, 'ntfy: config.json\'s ntfy section is invalid; notifications are off')
      return { ...OFF, api_token: '', source: 'config' }
    }
    return { ...checked.settings, api_token: this.deps.config.api_token, source: 'config' }
  }

  private fromStore(stored: NtfyStoredSetting): EffectiveNtfySettings {
    const checked = checkNtfySettings(stored)
    const settings = 'problems' in checked ? OFF : checked.settings
    if ('problems' in checked) this.deps.log.error({ problems: checked.problems }, 'ntfy: the saved settings are invalid; notifications are off until an admin saves them again')
    let api_token = ''
    if (stored.api_token_sealed !== '') {
      try {
        api_token = this.deps.cipher.decrypt(stored.api_token_sealed, TOKEN_CONTEXT)
      } catch (err) {
        this.deps.log.error({ reason: (err as Error).message }, 'ntfy: the saved token does not open (was the master secret changed?); notifications go without it until an admin sets it again')
      }
    }
    return { ...settings, api_token, source: 'saved' }
  }
}
