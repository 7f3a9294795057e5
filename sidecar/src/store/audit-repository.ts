/**
 * The audit log's storage (issue 28, item 1): an append-only, ordered list of
 * rows that every backend of the shared store keeps with its own operations
 * (sqlite and PostgreSQL: a table numbered by the database; Redis: a stream).
 * audit/audit-log.ts buffers, seals and reads through it; the rows it hands
 * over are already what is stored (names plain or keyed hashes, details as
 * JSON or sealed text), so a backend never seals, opens or interprets them.
 *
 * Contract (test/helpers/store-conformance.ts):
 * - `append` writes its rows in order (in atomic pages of a few hundred), each
 *   with a number larger than every number written before it by any instance;
 * - `query` answers newest first (by number), filtered by a name (the actor or
 *   the subject column), kinds, an inclusive time range and `before` (paging);
 * - `prune` removes rows older than a time, then all but the newest N;
 *   several instances may call it, the audit log lets one at a time (a claim);
 * - `page` reads oldest first after a number (copying a store, `authsvc store copy`).
 */

/** One row as stored. */
export interface AuditRow {
  at: number
  kind: string
  actor: string | null
  subject: string | null
  ip: string | null
  outcome: string
  /** JSON of the details, or the sealed text under `encryption_level: all` */
  details: string
}

export interface StoredAuditRow extends AuditRow {
  seq: number
}

export interface AuditRowFilter {
  /** rows whose actor or subject column is this (the stored form: a name or its keyed hash) */
  name?: string
  kinds?: readonly string[]
  /** inclusive, ms since the epoch */
  since?: number
  until?: number
  /** only rows numbered below this */
  before?: number
  limit: number
}

export interface AuditRepository {
  /** In order, in atomic pages (a failure leaves a prefix of whole pages written); never reorders or renumbers what is stored. */
  append(rows: readonly AuditRow[]): Promise<void>
  /** newest first */
  query(filter: AuditRowFilter): Promise<StoredAuditRow[]>
  /** for every distinct actor or subject column value, its oldest row (the names an audit view lists) */
  firstOfEachName(): Promise<StoredAuditRow[]>
  /** oldest first, only rows numbered above `afterSeq` */
  page(afterSeq: number, limit: number): Promise<StoredAuditRow[]>
  /** removes rows with `at` below `olderThan`, then all but the newest `keep`; answers how many went */
  prune(olderThan: number, keep: number): Promise<number>
  count(): Promise<number>
}

type Sql = (statement: string, ...params: unknown[]) => Promise<unknown[]>

const ROWS_PER_INSERT = 100

const rowOf = (raw: Record<string, unknown>): StoredAuditRow => ({
  seq: Number(raw.seq),
  at: Number(raw.at),
  kind: String(raw.kind),
  actor: raw.actor === null || raw.actor === undefined ? null : String(raw.actor),
  subject: raw.subject === null || raw.subject === undefined ? null : String(raw.subject),
  ip: raw.ip === null || raw.ip === undefined ? null : String(raw.ip),
  outcome: String(raw.outcome),
  details: String(raw.details),
})

/**
 * The sqlite table `authsvc_audit` (the data dir's file), through a function
 * that runs one statement. `append` is one multi-row INSERT per 100 rows; a
 * batch of more is several statements (each atomic by itself).
 */
export async function sqliteAuditRepository(sql: Sql): Promise<AuditRepository> {
  await sql(`CREATE TABLE IF NOT EXISTS authsvc_audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL, kind TEXT NOT NULL,
    actor TEXT, subject TEXT, ip TEXT, outcome TEXT NOT NULL, details TEXT NOT NULL)`)
  await sql('CREATE INDEX IF NOT EXISTS authsvc_audit_at ON authsvc_audit (at)')
  await sql('CREATE INDEX IF NOT EXISTS authsvc_audit_actor ON authsvc_audit (actor, seq)')
  await sql('CREATE INDEX IF NOT EXISTS authsvc_audit_subject ON authsvc_audit (subject, seq)')
  await sql('CREATE INDEX IF NOT EXISTS authsvc_audit_kind ON authsvc_audit (kind, seq)')
  const count = async () => Number(((await sql('SELECT COUNT(*) AS n FROM authsvc_audit')) as Array<{ n: number }>)[0].n)
  return {
    async append(rows) {
      for (let i = 0; i < rows.length; i += ROWS_PER_INSERT) {
        const slice = rows.slice(i, i + ROWS_PER_INSERT)
        const params = slice.flatMap((r) => [r.at, r.kind, r.actor, r.subject, r.ip, r.outcome, r.details])
        await sql(`INSERT INTO authsvc_audit (at, kind, actor, subject, ip, outcome, details) VALUES ${slice.map(() => '(?, ?, ?, ?, ?, ?, ?)').join(', ')}`, ...params)
      }
    },
    async query(filter) {
      const where: string[] = []
      const params: unknown[] = []
      if (filter.name !== undefined) {
        where.push('(actor = ? OR subject = ?)')
        params.push(filter.name, filter.name)
      }
      if (filter.kinds !== undefined && filter.kinds.length > 0) {
        where.push(`kind IN (${filter.kinds.map(() => '?').join(', ')})`)
        params.push(...filter.kinds)
      }
      if (filter.since !== undefined) {
        where.push('at >= ?')
        params.push(filter.since)
      }
      if (filter.until !== undefined) {
        where.push('at <= ?')
        params.push(filter.until)
      }
      if (filter.before !== undefined) {
        where.push('seq < ?')
        params.push(filter.before)
      }
      const clause = where.length > 0 ? `WHERE ${where.join(' AND ')}` : ''
      const rows = (await sql(`SELECT * FROM authsvc_audit ${clause} ORDER BY seq DESC LIMIT ?`, ...params, filter.limit)) as Array<Record<string, unknown>>
      return rows.map(rowOf)
    },
    async firstOfEachName() {
      const rows = (await sql(
        `SELECT * FROM authsvc_audit WHERE seq IN (
          SELECT MIN(seq) FROM authsvc_audit WHERE actor IS NOT NULL GROUP BY actor
          UNION SELECT MIN(seq) FROM authsvc_audit WHERE subject IS NOT NULL GROUP BY subject) ORDER BY seq`,
      )) as Array<Record<string, unknown>>
      return rows.map(rowOf)
    },
    async page(afterSeq, limit) {
      return ((await sql('SELECT * FROM authsvc_audit WHERE seq > ? ORDER BY seq LIMIT ?', afterSeq, limit)) as Array<Record<string, unknown>>).map(rowOf)
    },
    async prune(olderThan, keep) {
      const before = await count()
      await sql('DELETE FROM authsvc_audit WHERE at < ?', olderThan)
      await sql('DELETE FROM authsvc_audit WHERE seq <= (SELECT seq FROM authsvc_audit ORDER BY seq DESC LIMIT 1 OFFSET ?)', keep)
      return before - (await count())
    },
    count,
  }
}

export { rowOf as auditRowOf }
