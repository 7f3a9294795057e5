/**
 * The audit log: every event of the stream (kernel/events.ts), stored append-only and read back
 * by user, kind and time, through an AuditRepository (store/audit-repository.ts): a table of its
 * own beside keyv's in the data dir's sqlite file on the sqlite backend; on PostgreSQL or Redis the
 * shared store's (a table, a stream), so every instance's consoles read every instance's events.
 *
 * Guarantees:
 * - `append` never waits and never throws: records are buffered and written in batches (atomic
 *   pages) off the emitter's path; a read (`query`, `usernames`)
 *   first writes what is buffered, so an answer after an action shows it;
 * - bounded: the buffer holds at most `maxBuffered` records while the store refuses writes (the
 *   oldest are dropped first and counted in `dropped`); the table keeps events for
 *   `retention_days` and at most `max_events` of them (config `audit`), pruned at start, hourly
 *   and after every 1000 appends; on a shared store by one instance at a time (a claim);
 * - no secret: records carry none by construction (emitters pass hash prefixes); a field named
 *   like a credential is dropped here all the same, as the second line;
 * - `encryption_level: all` (every stored value encrypted, SPEC §10): the details, the names and
 *   the address are sealed together (field-crypto.ts); the actor and subject columns hold a keyed
 *   hash of the name (HMAC-SHA-256 under a key derived from the master secret), so a view by user
 *   still finds its rows without the name being readable; time, kind and outcome stay plain.
 */
import { createHmac } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import type { EventOutcome, EventRecord } from '../kernel/events.js'
import type { FieldCipher } from '../store/field-crypto.js'
import { sqliteAuditRepository, type AuditRepository, type AuditRow, type StoredAuditRow } from '../store/audit-repository.js'

/** One stored event, as the consoles and the audit view answer it. */
export interface AuditEntry {
  seq: number
  at: number
  kind: string
  actor: string | null
  subject: string | null
  ip: string | null
  outcome: EventOutcome
  /** the record's own fields (a setting's name, a token's hash prefix, a refusal's code) */
  details: Record<string, unknown>
}

export interface AuditFilter {
  /** events this user did or that concern them (actor or subject) */
  user?: string
  kinds?: readonly string[]
  /** inclusive bounds, ms since the epoch */
  since?: number
  until?: number
  /** paging: only events older than this sequence number */
  before?: number
  limit: number
}

/** The append-only log the consoles and the audit view read (issue 28 gives it other backends). */
export interface AuditLog {
  append(record: EventRecord): void
  /** newest first */
  query(filter: AuditFilter): Promise<AuditEntry[]>
  /** every name that is an actor or a subject of a stored event, sorted */
  usernames(): Promise<string[]>
  /** removes what the retention rules say is too old or too many; answers how many */
  prune(): Promise<number>
  /** records dropped because the buffer was full while the store refused writes */
  readonly dropped: number
  flush(): Promise<void>
  close(): Promise<void>
}

export interface AuditLimits {
  retentionDays: number
  maxEvents: number
  maxBuffered?: number
}

type Sql = (statement: string, ...params: unknown[]) => Promise<unknown[]>

/** `encryption_level: all`: what seals a row (its details) and hides its names (a keyed hash). */
export interface AuditSealing {
  cipher: FieldCipher
  nameKey: Buffer
}

/** Lets one instance at a time prune a log several instances share (the shared store's claim). */
export interface PruneLock {
  claim(key: string, ttlMs: number): Promise<boolean>
  resetCounter(key: string): Promise<void>
}

const COMMON = new Set(['kind', 'at', 'actor', 'subject', 'ip', 'outcome'])
/** never stored, whatever an emitter passes (the first line is the emitters') */
const SECRET_FIELDS = new Set(['password', 'new_password', 'current_password', 'token', 'jwt_token', 'api_token', 'secret', 'code_value', 'backup_code', 'mfa_temp_token', 'totp_secret'])
const DAY_MS = 24 * 60 * 60 * 1000
const SEALED_CONTEXT = 'audit:details'
/** where a sealed row keeps its names and address */
const NAMES = '_names'
/** the claim that lets one instance prune at a time; held at most this long by one that died mid-way */
export const PRUNE_CLAIM_KEY = 'audit_prune'
const PRUNE_CLAIM_MS = 5 * 60 * 1000

/**
 * The audit log over an AuditRepository (store/audit-repository.ts): the data dir's sqlite
 * table, or the shared store's (a PostgreSQL table, a Redis stream) when several instances share
 * one user base, so every instance's consoles read every instance's events.
 */
export class StoreAuditLog implements AuditLog {
  private buffer: EventRecord[] = []
  private writing: Promise<void> | null = null
  private scheduled = false
  private sinceprune = 0
  private failing = false
  dropped = 0

  protected constructor(
    private readonly repo: AuditRepository,
    private readonly limits: Required<AuditLimits>,
    private readonly clock: () => number,
    private readonly log: Pick<FastifyBaseLogger, 'warn' | 'error'>,
    private readonly sealing: AuditSealing | null,
    private readonly lock: PruneLock | null,
  ) {}

  /** The log over a repository; `lock`: several instances prune it, one at a time. Prunes once. */
  static async over(
    repo: AuditRepository, limits: AuditLimits, clock: () => number, log: Pick<FastifyBaseLogger, 'warn' | 'error'>, sealing: AuditSealing | null, lock: PruneLock | null,
  ): Promise<StoreAuditLog> {
    const audit = new StoreAuditLog(repo, { maxBuffered: 10_000, ...limits }, clock, log, sealing, lock)
    await audit.prune().catch((err: unknown) => log.warn({ err }, 'the audit log could not be pruned at start'))
    return audit
  }

  append(record: EventRecord): void {
    this.buffer.push(record)
    if (this.buffer.length > this.limits.maxBuffered) {
      this.buffer.shift()
      this.dropped++
    }
    if (!this.scheduled) {
      this.scheduled = true
      setImmediate(() => {
        this.scheduled = false
        void this.flush().catch(() => {})
      })
    }
  }

  /** Writes what is buffered; rejects (and keeps the records) while the store refuses. */
  async flush(): Promise<void> {
    while (this.writing) await this.writing.catch(() => {})
    if (this.buffer.length === 0) return
    const batch = this.buffer
    this.buffer = []
    this.writing = this.repo.append(batch.map((record) => this.rowOf(record))).then(
      () => {
        if (this.failing) this.log.warn({ records: batch.length }, 'the audit log is written again')
        this.failing = false
      },
      (err: unknown) => {
        // back in front, in order; the bound still holds
        this.buffer = [...batch, ...this.buffer]
        while (this.buffer.length > this.limits.maxBuffered) {
          this.buffer.shift()
          this.dropped++
        }
        if (!this.failing) this.log.error({ err, buffered: this.buffer.length }, 'the audit log cannot be written; events are kept in memory (bounded) until it can')
        this.failing = true
        throw err
      },
    )
    try {
      await this.writing
    } finally {
      this.writing = null
    }
    this.sinceprune += batch.length
    if (this.sinceprune >= 1000) {
      this.sinceprune = 0
      await this.prune()
    }
  }

  private rowOf(record: EventRecord): AuditRow {
    const details: Record<string, unknown> = {}
    for (const [key, value] of Object.entries(record)) {
      if (!COMMON.has(key) && !SECRET_FIELDS.has(key) && value !== undefined) details[key] = value
    }
    const actor = record.actor ?? null
    const subject = record.subject ?? null
    const ip = record.ip ?? null
    if (this.sealing === null) return { at: record.at, kind: record.kind, actor, subject, ip, outcome: record.outcome, details: JSON.stringify(details) }
    const sealed = this.sealing.cipher.encrypt(JSON.stringify({ ...details, [NAMES]: { actor, subject, ip } }), SEALED_CONTEXT)
    return { at: record.at, kind: record.kind, actor: this.nameColumn(actor), subject: this.nameColumn(subject), ip: null, outcome: record.outcome, details: sealed }
  }

  async query(filter: AuditFilter): Promise<AuditEntry[]> {
    await this.flush().catch(() => {}) // what cannot be written yet is not shown yet
    const { user, ...rest } = filter
    const rows = await this.repo.query(user === undefined ? rest : { ...rest, name: this.nameColumn(user) as string })
    return rows.map((row) => this.entry(row))
  }

  /** The actor or subject column of a name: itself, or under `all` its keyed hash. */
  private nameColumn(name: string | null): string | null {
    if (name === null || this.sealing === null) return name
    return `h:${createHmac('sha256', this.sealing.nameKey).update(name, 'utf8').digest('hex').slice(0, 40)}`
  }

  private entry(row: StoredAuditRow): AuditEntry {
    let details: Record<string, unknown>
    let names = { actor: row.actor, subject: row.subject, ip: row.ip }
    try {
      if (this.sealing === null) {
        details = JSON.parse(row.details) as Record<string, unknown>
      } else {
        const { [NAMES]: sealedNames, ...rest } = JSON.parse(this.sealing.cipher.decrypt(row.details, SEALED_CONTEXT)) as Record<string, unknown> & { [NAMES]: typeof names }
        details = rest
        names = sealedNames
      }
    } catch {
      // sealed under another key (a changed secret), or written before or after `all` was set
      details = { unreadable: true }
      names = { actor: null, subject: null, ip: null }
    }
    return { seq: row.seq, at: row.at, kind: row.kind, ...names, outcome: row.outcome as EventOutcome, details }
  }

  async usernames(): Promise<string[]> {
    await this.flush().catch(() => {})
    // one row per stored name tells the name (under `all`: its sealed copy)
    const names = new Set<string>()
    for (const row of await this.repo.firstOfEachName()) {
      const entry = this.entry(row)
      for (const name of [entry.actor, entry.subject]) if (name) names.add(name)
    }
    return [...names].sort()
  }

  async prune(): Promise<number> {
    if (this.lock !== null && !(await this.lock.claim(PRUNE_CLAIM_KEY, PRUNE_CLAIM_MS))) return 0 // another instance is at it
    try {
      return await this.repo.prune(this.clock() - this.limits.retentionDays * DAY_MS, this.limits.maxEvents)
    } finally {
      if (this.lock !== null) await this.lock.resetCounter(PRUNE_CLAIM_KEY).catch(() => {})
    }
  }

  async close(): Promise<void> {
    await this.flush().catch(() => {})
  }
}

/** The audit log in the data dir's sqlite file (the embedded backend), through its own statements. */
export class SqliteAuditLog extends StoreAuditLog {
  static async open(sql: Sql, limits: AuditLimits, clock: () => number, log: Pick<FastifyBaseLogger, 'warn' | 'error'>, sealing: AuditSealing | null): Promise<StoreAuditLog> {
    return StoreAuditLog.over(await sqliteAuditRepository(sql), limits, clock, log, sealing, null)
  }
}

/** One line of a console: time, kind, outcome when not a success, who, on whom, from where, the details. */
export function consoleLine(entry: AuditEntry): string {
  const parts = [new Date(entry.at).toISOString(), entry.kind]
  if (entry.outcome !== 'success') parts.push(`[${entry.outcome}]`)
  if (entry.actor) parts.push(`by ${entry.actor}`)
  if (entry.subject && entry.subject !== entry.actor) parts.push(`on ${entry.subject}`)
  if (entry.ip) parts.push(`from ${entry.ip}`)
  for (const [key, value] of Object.entries(entry.details)) parts.push(`${key}=${typeof value === 'string' ? value : JSON.stringify(value)}`)
  return parts.join(' ')
}
