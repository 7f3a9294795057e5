/**
 * `config.json` in the data dir as the admin routes read and change it: the file's own keys
 * (never the schema's defaults, never the environment's overrides, which stay where they are
 * set), changed one section at a time, validated whole against the schema and the loader's rules
 * before it is written, written atomically (temp file, fsync, rename; 0600). Writes are taken one
 * at a time. A file that does not parse is never overwritten: an operator's hand edit is theirs.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { ConfigError, validateConfig } from '../kernel/config/load.js'
import type { Config } from '../kernel/config/schema.js'
import { AuthsvcError } from '../kernel/errors.js'
import { writeFileAtomic } from '../store/atomic-file.js'

export type RawConfig = Record<string, unknown>

export class ConfigFile {
  private chain: Promise<unknown> = Promise.resolve()

  constructor(private readonly dataDir: string) {}

  get path(): string {
    return join(this.dataDir, 'config.json')
  }

  /** The file's object ({} when there is none); 409 CONFLICT when it cannot be read as one. */
  raw(): RawConfig {
    let text: string
    try {
      text = readFileSync(this.path, 'utf8')
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return {}
      throw new AuthsvcError('CONFLICT', `config.json cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'}); fix it by hand first`)
    }
    let parsed: unknown
    try {
      parsed = JSON.parse(text)
    } catch {
      throw new AuthsvcError('CONFLICT', 'config.json is not valid JSON; fix it by hand first')
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new AuthsvcError('CONFLICT', 'config.json must hold a JSON object; fix it by hand first')
    return parsed as RawConfig
  }

  /** The configuration the next start will read from the file (defaults filled in); 409 when it would not start. */
  saved(): Config {
    return this.checked(this.raw())
  }

  /**
   * Applies `change` to the file's object and writes it, once the whole result is valid; one
   * change at a time. Returns the configuration written (defaults filled in).
   */
  update(change: (raw: RawConfig) => void): Promise<Config> {
    const run = this.chain.then(() => {
      const raw = this.raw()
      change(raw)
      const config = this.checked(raw)
      writeFileAtomic(this.path, `${JSON.stringify(raw, null, 2)}\n`, 0o600)
      return config
    })
    this.chain = run.catch(() => undefined)
    return run
  }

  private checked(raw: RawConfig): Config {
    try {
      return validateConfig(structuredClone(raw))
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err
      // the loader's lines name keys and rules, never a URL's value (store-config/rules.ts)
      throw new AuthsvcError('CONFLICT', `config.json would not start the sidecar: ${err.problems.join('; ')}`)
    }
  }
}
