/**
 * The embedded backend (SPEC §10): one sqlite file in WAL mode, for one
 * instance. Its feed is in process; its atomic verbs are transactions
 * (`BEGIN IMMEDIATE`), run one at a time on one connection, so no other
 * statement of this process ever lands inside another's transaction.
 *
 * Tables beside keyv's (which the audit log's statements still use):
 * `authsvc_records` (key, seq, value as JSON), `authsvc_counters`
 * (counters and claims, with their expiry) and `authsvc_meta` (the sequence).
 * A file written before this backend (records in keyv's table) is copied
 * into `authsvc_records` once, in one transaction, at open.
 */
import { randomUUID } from 'node:crypto'
import { chmodSync, existsSync } from 'node:fs'
import sqlite3 from 'sqlite3'
import { sqliteAuditRepository } from './audit-repository.js'
import { FEED_VALUE_LIMIT, Listeners, type Change, type Check, type SharedStore, type Versioned, type Write } from './shared-store.js'

type Row = Record<string, unknown>

class Connection {
  private tail: Promise<unknown> = Promise.resolve()
  constructor(private readonly db: sqlite3.Database) {}

  static open(path: string): Promise<Connection> {
    return new Promise((resolve, reject) => {
      const db = new sqlite3.Database(path, (err) => (err ? reject(err) : resolve(new Connection(db))))
    })
  }

  all(sql: string, params: unknown[] = []): Promise<Row[]> {
    return new Promise((resolve, reject) => this.db.all(sql, params, (err, rows) => (err ? reject(err) : resolve(rows as Row[]))))
  }

  run(sql: string, params: unknown[] = []): Promise<number> {
    return new Promise((resolve, reject) =>
      this.db.run(sql, params, function (err) {
        if (err) reject(err)
        else resolve(this.changes)
      }),
    )
  }

  /** Runs `work` after every earlier one has settled: nothing interleaves with it on this connection. */
  serial<T>(work: () => Promise<T>): Promise<T> {
    const run = this.tail.then(work, work)
    this.tail = run.catch(() => {})
    return run
  }

  /** `work` inside BEGIN IMMEDIATE … COMMIT (ROLLBACK when it throws). */
  transaction<T>(work: () => Promise<T>): Promise<T> {
    return this.serial(async () => {
      await this.run('BEGIN IMMEDIATE')
      try {
        const result = await work()
        await this.run('COMMIT')
        return result
      } catch (err) {
        await this.run('ROLLBACK').catch(() => {})
        throw err
      }
    })
  }

  close(): Promise<void> {
    return new Promise((resolve, reject) => this.db.close((err) => (err ? reject(err) : resolve())))
  }
}

const ENTRIES_PAGE = 2000

export async function openSqliteSharedStore(path: string, clock: () => number = Date.now): Promise<SharedStore> {
  const existed = existsSync(path)
  const db = await Connection.open(path)
  await db.run('PRAGMA busy_timeout=5000')
  await db.run('PRAGMA journal_mode=WAL')
  await db.run('PRAGMA synchronous=NORMAL')
  if (!existed) chmodSync(path, 0o600)
  await db.run('CREATE TABLE IF NOT EXISTS authsvc_records (key TEXT PRIMARY KEY, seq INTEGER NOT NULL, value TEXT NOT NULL)')
  await db.run('CREATE TABLE IF NOT EXISTS authsvc_counters (key TEXT PRIMARY KEY, count INTEGER NOT NULL, expires_ms INTEGER NOT NULL)')
  await db.run('CREATE TABLE IF NOT EXISTS authsvc_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)')
  await migrateKeyv(db)
  // the audit table of the same file (the sidecar's own log on this backend is audit-log.ts's, on keyv's connection)
  const audit = await sqliteAuditRepository((statement, ...params) => db.serial(() => db.all(statement, params)))

  const origin = randomUUID()
  const feed = new Listeners<Change>()
  const connection = new Listeners<boolean>()

  const nextSeq = async (): Promise<number> => {
    const rows = await db.all(
      `INSERT INTO authsvc_meta (name, value) VALUES ('seq', 1) ON CONFLICT(name) DO UPDATE SET value = value + 1 RETURNING value`,
    )
    return Number(rows[0].value)
  }
  const announce = (key: string, seq: number, value: unknown) => {
    const change: Change = { key, seq, exists: value !== undefined, origin }
    if (value !== undefined) {
      const json = JSON.stringify(value)
      if (json.length <= FEED_VALUE_LIMIT) change.value = JSON.parse(json) as unknown
    }
    feed.emit(change)
  }
  /** inside a transaction: writes one record (or deletes it), returns its sequence number */
  const write = async (key: string, value: unknown): Promise<number> => {
    const seq = await nextSeq()
    if (value === undefined) await db.run('DELETE FROM authsvc_records WHERE key = ?', [key])
    else
      await db.run('INSERT INTO authsvc_records (key, seq, value) VALUES (?, ?, ?) ON CONFLICT(key) DO UPDATE SET seq = excluded.seq, value = excluded.value', [
        key,
        seq,
        JSON.stringify(value),
      ])
    return seq
  }

  const store: SharedStore = {
    backend: 'sqlite',
    origin,
    connected: true,
    onConnection: (listener) => connection.add(listener),
    subscribe: (listener) => feed.add(listener),
    audit,
    async kinds() {
      const rows = await db.serial(() => db.all(`SELECT DISTINCT CASE WHEN instr(key, ':') = 0 THEN key ELSE substr(key, 1, instr(key, ':') - 1) END AS kind FROM authsvc_records ORDER BY kind`))
      return rows.map((row) => String(row.kind))
    },

    async get<T>(key: string) {
      return (await store.getVersioned<T>(key))?.value
    },
    async getVersioned<T>(key: string): Promise<Versioned<T> | undefined> {
      const rows = await db.serial(() => db.all('SELECT seq, value FROM authsvc_records WHERE key = ?', [key]))
      return rows.length === 0 ? undefined : { seq: Number(rows[0].seq), value: JSON.parse(String(rows[0].value)) as T }
    },
    async entries<T>(kind: string) {
      return (await store.entriesVersioned<T>(kind)).map(([key, v]): [string, T] => [key, v.value])
    },
    async entriesVersioned<T>(kind: string) {
      // a range of the primary key (every key of the kind sorts between `kind:` and `kind;`): a LIKE
      // would read the whole table, a million sessions included, for every kind loaded at start
      // Read in pages, all inside one turn of the connection (nothing interleaves): a kind of 100,000
      // users read whole would hold every row twice, natively and as JS, at the peak of the start.
      return db.serial(async () => {
        const out: Array<[string, Versioned<T>]> = []
        let after = `${kind}:`
        let inclusive = true
        for (;;) {
          const rows = await db.all(`SELECT key, seq, value FROM authsvc_records WHERE key ${inclusive ? '>=' : '>'} ? AND key < ? ORDER BY key LIMIT ${ENTRIES_PAGE}`, [after, `${kind};`])
          for (const row of rows) out.push([String(row.key), { seq: Number(row.seq), value: JSON.parse(String(row.value)) as T }])
          if (rows.length < ENTRIES_PAGE) return out
          after = String(rows[rows.length - 1].key)
          inclusive = false
        }
      })
    },
    async entriesPage<T>(kind: string, cursor: string | null, limit: number) {
      const rows = await db.serial(() =>
        db.all(`SELECT key, seq, value FROM authsvc_records WHERE key ${cursor === null ? '>=' : '>'} ? AND key < ? ORDER BY key LIMIT ?`, [cursor ?? `${kind}:`, `${kind};`, limit]),
      )
      return {
        rows: rows.map((row): [string, Versioned<T>] => [String(row.key), { seq: Number(row.seq), value: JSON.parse(String(row.value)) as T }]),
        next: rows.length < limit ? null : String(rows[rows.length - 1].key),
      }
    },
    async set(key, value) {
      const seq = await db.transaction(() => write(key, value))
      announce(key, seq, value)
    },
    async delete(key) {
      const result = await db.transaction(async () => {
        const rows = await db.all('SELECT 1 FROM authsvc_records WHERE key = ?', [key])
        return rows.length === 0 ? null : await write(key, undefined)
      })
      if (result === null) return false
      announce(key, result, undefined)
      return true
    },
    async commit(checks: Check[], writes: Write[]) {
      const done = await db.transaction(async () => {
        for (const check of checks) {
          const rows = await db.all('SELECT seq FROM authsvc_records WHERE key = ?', [check.key])
          const seq = rows.length === 0 ? null : Number(rows[0].seq)
          if (seq !== check.seq) return null
        }
        const seqs: number[] = []
        for (const w of writes) seqs.push(await write(w.key, w.value))
        return seqs
      })
      if (done === null) return false
      writes.forEach((w, i) => announce(w.key, done[i], w.value))
      return true
    },
    async increment(key, ttlMs, refresh = false) {
      const now = clock()
      return db.transaction(async () => {
        const rows = await db.all(
          `INSERT INTO authsvc_counters (key, count, expires_ms) VALUES (?, 1, ?)
           ON CONFLICT(key) DO UPDATE SET
             count = CASE WHEN expires_ms <= ? THEN 1 ELSE count + 1 END,
             expires_ms = CASE WHEN expires_ms <= ? OR ? THEN excluded.expires_ms ELSE expires_ms END
           RETURNING count`,
          [key, now + ttlMs, now, now, refresh ? 1 : 0],
        )
        return Number(rows[0].count)
      })
    },
    async readCounter(key) {
      const rows = await db.serial(() => db.all('SELECT count FROM authsvc_counters WHERE key = ? AND expires_ms > ?', [key, clock()]))
      return rows.length === 0 ? 0 : Number(rows[0].count)
    },
    async resetCounter(key) {
      await db.serial(() => db.run('DELETE FROM authsvc_counters WHERE key = ?', [key]))
    },
    async claim(key, ttlMs) {
      const now = clock()
      return db.transaction(async () => {
        await db.run('DELETE FROM authsvc_counters WHERE key = ? AND expires_ms <= ?', [key, now])
        return (await db.run('INSERT INTO authsvc_counters (key, count, expires_ms) VALUES (?, 1, ?) ON CONFLICT(key) DO NOTHING', [key, now + ttlMs])) === 1
      })
    },
    async close() {
      await db.serial(() => db.close())
    },
  }
  return store
}

/**
 * Records written by an earlier version live in keyv's table (`keyv`: key,
 * value as keyv's JSON `{"value":…,"expires":…}`); they are copied once, in one
 * transaction, then keyv's rows are removed (its table stays for the audit log's file).
 */
async function migrateKeyv(db: Connection): Promise<void> {
  const tables = await db.all(`SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'keyv'`)
  if (tables.length === 0) return
  await db.transaction(async () => {
    const rows = await db.all('SELECT key, value FROM keyv')
    if (rows.length === 0) return
    let seq = Number((await db.all(`SELECT value FROM authsvc_meta WHERE name = 'seq'`))[0]?.value ?? 0)
    for (const row of rows) {
      const parsed = JSON.parse(String(row.value)) as { value?: unknown; expires?: number | null }
      if (parsed.value === undefined) continue
      seq += 1
      await db.run('INSERT INTO authsvc_records (key, seq, value) VALUES (?, ?, ?) ON CONFLICT(key) DO NOTHING', [String(row.key), seq, JSON.stringify(parsed.value)])
    }
    await db.run(`INSERT INTO authsvc_meta (name, value) VALUES ('seq', ?) ON CONFLICT(name) DO UPDATE SET value = excluded.value`, [seq])
    await db.run('DELETE FROM keyv')
  })
}
