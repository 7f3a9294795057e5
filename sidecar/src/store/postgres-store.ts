/**
 * The PostgreSQL backend of the shared store (issue 28, SPEC §10): several
 * instances on one database, with the semantics of the sqlite reference
 * (sqlite-store.ts) verb for verb.
 *
 * Tables, created at open when missing (in one transaction, under an advisory
 * lock, so two instances starting together do not race each other's DDL):
 * - `authsvc_records(key, kind, seq, value)`: `value` is the JSON text the
 *   caller's value serialises to (text, not jsonb: jsonb reorders keys and
 *   refuses `\u0000`, and a record must read back as it was written); `kind`
 *   (the key up to its first colon) is indexed for listing;
 * - `authsvc_seq`: the one sequence every write takes its number from;
 * - `authsvc_counters(key, count, expires_at)`: counters and claims, expiry
 *   in epoch milliseconds.
 *
 * Each verb is one statement, so one network round trip on a pooled
 * connection (no per-call connection setup): the record writes are plpgsql
 * functions (`authsvc_v1_*`, replaced at open) that take a transaction-scoped
 * advisory lock per key (`pg_advisory_xact_lock(class, hashtext(key))`, in
 * hash order, so two commits never deadlock), check, write with
 * `INSERT … ON CONFLICT … DO UPDATE` and `nextval`, and `pg_notify` the change
 * inside the same transaction. Every writer of a key holds its lock, so a key
 * that is absent when a commit checks it stays absent until that commit ends
 * (two creates of one name cannot both see it free), and NOTIFY, delivered at
 * commit in commit order, announces one key's writes in sequence order.
 * Counters and claims are single `INSERT … ON CONFLICT` statements (the row
 * lock makes them atomic).
 *
 * Time: counters and claims expire by the database server's clock
 * (`statement_timestamp()`), one clock for every instance whatever their
 * own clocks say; a `clock` given at open (tests) replaces it for that client.
 *
 * The feed is one dedicated connection that LISTENs; a change this client
 * writes comes back to it through the server, with its own origin. When the
 * feed or a command connection is lost, `connected` turns false (listeners
 * hear it once), commands fail fast (refused connections at once; a server
 * that does not answer: within the connect and query timeouts below) with
 * 503 `STORE_UNAVAILABLE`, and the feed reconnects by itself, at most
 * RECONNECT_MAX_MS between attempts; once it listens again, `connected` is
 * true, listeners hear it, and the change `{ key: '*' }` tells replicas that
 * what was announced meanwhile is lost and they must reload. A heartbeat on the
 * feed connection notices a server that went silent without closing it.
 *
 * The URL's credentials are never logged: log lines name host, port and
 * database only.
 */
import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { AuthsvcError } from '../kernel/errors.js'
import { auditRowOf, type AuditRepository } from './audit-repository.js'
import { FEED_VALUE_LIMIT, Listeners, type Change, type Check, type SharedStore, type Versioned, type Write } from './shared-store.js'

export interface PostgresStoreOptions {
  /** epoch milliseconds for counter and claim expiry; default: the database server's clock */
  clock?: () => number
  log?: Pick<Logger, 'warn' | 'error' | 'info'>
}

interface Logger {
  warn(obj: object, msg: string): void
  error(obj: object, msg: string): void
  info(obj: object, msg: string): void
}

/** the NOTIFY channel every instance listens on */
export const CHANNEL = 'authsvc_changes'
/** a refused or silent server fails a command within about this long */
export const CONNECT_TIMEOUT_MS = 1000
export const COMMAND_TIMEOUT_MS = 1000
/** listing a kind may read many rows (100,000 users at start) */
export const LIST_TIMEOUT_MS = 30_000
/** the longest wait between two reconnection attempts */
export const RECONNECT_MAX_MS = 250
export const HEARTBEAT_MS = 2000
/** expired counters and claims are removed at open and this often after */
export const SWEEP_MS = 10 * 60_000
/** a connection the server does not let end (a silent server) is cut after this long */
export const END_TIMEOUT_MS = 1000
const POOL_MAX = 10
/** the advisory lock class of record keys ('as28') */
const LOCK_CLASS = 0x61733238
/** NOTIFY's payload must stay under 8000 bytes */
const NOTIFY_PAYLOAD_MAX = 7900

const SCHEMA = [
  `CREATE SEQUENCE IF NOT EXISTS authsvc_seq AS bigint`,
  `CREATE TABLE IF NOT EXISTS authsvc_records (key text PRIMARY KEY, kind text NOT NULL, seq bigint NOT NULL, value text NOT NULL)`,
  `CREATE INDEX IF NOT EXISTS authsvc_records_kind ON authsvc_records (kind)`,
  `CREATE TABLE IF NOT EXISTS authsvc_counters (key text PRIMARY KEY, count bigint NOT NULL, expires_at bigint NOT NULL)`,
  // the audit log every instance appends to (audit-repository.ts), numbered by its own bigserial
  `CREATE TABLE IF NOT EXISTS authsvc_audit (seq bigserial PRIMARY KEY, at bigint NOT NULL, kind text NOT NULL,
   actor text, subject text, ip text, outcome text NOT NULL, details text NOT NULL)`,
  `CREATE INDEX IF NOT EXISTS authsvc_audit_at ON authsvc_audit (at)`,
  `CREATE INDEX IF NOT EXISTS authsvc_audit_actor ON authsvc_audit (actor, seq)`,
  `CREATE INDEX IF NOT EXISTS authsvc_audit_subject ON authsvc_audit (subject, seq)`,
  `CREATE INDEX IF NOT EXISTS authsvc_audit_kind ON authsvc_audit (kind, seq)`,
  // one write (p_value NULL: a deletion) with its number and its announcement; the caller holds the key's lock
  `CREATE OR REPLACE FUNCTION authsvc_v1_write(p_key text, p_value text, p_feed boolean, p_origin text) RETURNS bigint
   LANGUAGE plpgsql AS $$
   DECLARE
     s bigint := nextval('authsvc_seq');
     head text;
   BEGIN
     IF p_value IS NULL THEN
       DELETE FROM authsvc_records WHERE key = p_key;
     ELSE
       INSERT INTO authsvc_records (key, kind, seq, value) VALUES (p_key, split_part(p_key, ':', 1), s, p_value)
       ON CONFLICT (key) DO UPDATE SET seq = excluded.seq, value = excluded.value;
     END IF;
     head := '{"k":' || to_json(p_key)::text || ',"s":' || s || ',"o":' || to_json(p_origin)::text || ',"e":' || (p_value IS NOT NULL)::text;
     IF p_value IS NOT NULL AND p_feed AND octet_length(head) + octet_length(p_value) < ${NOTIFY_PAYLOAD_MAX} THEN
       PERFORM pg_notify('${CHANNEL}', head || ',"v":' || p_value || '}');
     ELSE
       PERFORM pg_notify('${CHANNEL}', head || '}');
     END IF;
     RETURN s;
   END $$`,
  `CREATE OR REPLACE FUNCTION authsvc_v1_lock(p_keys text[]) RETURNS void
   LANGUAGE plpgsql AS $$
   DECLARE h integer;
   BEGIN
     FOR h IN SELECT DISTINCT hashtext(k) FROM unnest(p_keys) AS k ORDER BY 1 LOOP
       PERFORM pg_advisory_xact_lock(${LOCK_CLASS}, h);
     END LOOP;
   END $$`,
  `CREATE OR REPLACE FUNCTION authsvc_v1_set(p_key text, p_value text, p_feed boolean, p_origin text) RETURNS bigint
   LANGUAGE plpgsql AS $$
   BEGIN
     PERFORM pg_advisory_xact_lock(${LOCK_CLASS}, hashtext(p_key));
     RETURN authsvc_v1_write(p_key, p_value, p_feed, p_origin);
   END $$`,
  `CREATE OR REPLACE FUNCTION authsvc_v1_delete(p_key text, p_origin text) RETURNS boolean
   LANGUAGE plpgsql AS $$
   BEGIN
     PERFORM pg_advisory_xact_lock(${LOCK_CLASS}, hashtext(p_key));
     IF NOT EXISTS (SELECT 1 FROM authsvc_records WHERE key = p_key) THEN
       RETURN false;
     END IF;
     PERFORM authsvc_v1_write(p_key, NULL, false, p_origin);
     RETURN true;
   END $$`,
  // every checked and written key locked first; a check that fails returns before any write
  `CREATE OR REPLACE FUNCTION authsvc_v1_commit(p_check_keys text[], p_check_seqs bigint[], p_keys text[], p_values text[], p_feed boolean[], p_origin text) RETURNS boolean
   LANGUAGE plpgsql AS $$
   DECLARE
     i integer;
     s bigint;
   BEGIN
     PERFORM authsvc_v1_lock(p_check_keys || p_keys);
     FOR i IN 1 .. coalesce(array_length(p_check_keys, 1), 0) LOOP
       SELECT seq INTO s FROM authsvc_records WHERE key = p_check_keys[i];
       IF s IS DISTINCT FROM p_check_seqs[i] THEN
         RETURN false;
       END IF;
     END LOOP;
     FOR i IN 1 .. coalesce(array_length(p_keys, 1), 0) LOOP
       PERFORM authsvc_v1_write(p_keys[i], p_values[i], p_feed[i], p_origin);
     END LOOP;
     RETURN true;
   END $$`,
]

/** the clock counters use, in SQL: the given one ($n) or the server's */
const now = (param: number) => `coalesce($${param}::bigint, (extract(epoch from statement_timestamp()) * 1000)::bigint)`

const Q = {
  get: `SELECT seq, value FROM authsvc_records WHERE key = $1`,
  list: `SELECT key, seq, value FROM authsvc_records WHERE kind = split_part($1, ':', 1) AND starts_with(key, $1 || ':')`,
  page: `SELECT key, seq, value FROM authsvc_records WHERE kind = split_part($1, ':', 1) AND starts_with(key, $1 || ':') AND key > $2 ORDER BY key LIMIT $3`,
  barrier: `SELECT pg_notify('authsvc_changes', $1)`,
  set: `SELECT authsvc_v1_set($1, $2, $3, $4) AS seq`,
  delete: `SELECT authsvc_v1_delete($1, $2) AS done`,
  commit: `SELECT authsvc_v1_commit($1::text[], $2::bigint[], $3::text[], $4::text[], $5::boolean[], $6) AS done`,
  increment: `INSERT INTO authsvc_counters AS c (key, count, expires_at) VALUES ($1, 1, ${now(4)} + $2)
    ON CONFLICT (key) DO UPDATE SET
      count = CASE WHEN c.expires_at <= ${now(4)} THEN 1 ELSE c.count + 1 END,
      expires_at = CASE WHEN c.expires_at <= ${now(4)} OR $3 THEN excluded.expires_at ELSE c.expires_at END
    RETURNING count`,
  readCounter: `SELECT count FROM authsvc_counters WHERE key = $1 AND expires_at > ${now(2)}`,
  resetCounter: `DELETE FROM authsvc_counters WHERE key = $1`,
  claim: `INSERT INTO authsvc_counters AS c (key, count, expires_at) VALUES ($1, 1, ${now(3)} + $2)
    ON CONFLICT (key) DO UPDATE SET count = 1, expires_at = excluded.expires_at WHERE c.expires_at <= ${now(3)}
    RETURNING 1`,
  sweep: `DELETE FROM authsvc_counters WHERE expires_at <= ${now(1)}`,
  currentSeq: `SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS seq FROM authsvc_seq`,
  kinds: `SELECT DISTINCT kind FROM authsvc_records ORDER BY kind`,
  // one statement: the rows in their order (WITH ORDINALITY), each numbered by the bigserial as inserted
  auditAppend: `INSERT INTO authsvc_audit (at, kind, actor, subject, ip, outcome, details)
    SELECT at, kind, actor, subject, ip, outcome, details
    FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
      WITH ORDINALITY AS r(at, kind, actor, subject, ip, outcome, details, n)
    ORDER BY n`,
  auditNames: `SELECT * FROM authsvc_audit WHERE seq IN (
    SELECT MIN(seq) FROM authsvc_audit WHERE actor IS NOT NULL GROUP BY actor
    UNION SELECT MIN(seq) FROM authsvc_audit WHERE subject IS NOT NULL GROUP BY subject) ORDER BY seq`,
  auditPage: `SELECT * FROM authsvc_audit WHERE seq > $1 ORDER BY seq LIMIT $2`,
  auditPruneAge: `DELETE FROM authsvc_audit WHERE at < $1`,
  auditPruneCount: `DELETE FROM authsvc_audit WHERE seq <= (SELECT seq FROM authsvc_audit ORDER BY seq DESC OFFSET $1 LIMIT 1)`,
  auditCount: `SELECT COUNT(*) AS n FROM authsvc_audit`,
} as const

/** a timeout: the server is slow or silent (the feed's heartbeat decides which), not known to be gone */
function isTimeout(err: Error): boolean {
  return /timeout exceeded when trying to connect|Query read timeout/i.test(err.message)
}

/** SQLSTATE classes and socket errors that mean the server cannot be reached now, not that a statement is wrong */
function isConnectionError(err: unknown): err is Error {
  if (!(err instanceof Error)) return false
  if (isTimeout(err)) return true
  const code = (err as { code?: unknown }).code
  if (typeof code === 'string') {
    if (code.startsWith('08') || code === '57P01' || code === '57P02' || code === '57P03') return true
    if (/^E[A-Z]+$/.test(code)) return true // ECONNREFUSED, ECONNRESET, EPIPE, ETIMEDOUT, EHOSTUNREACH…
  }
  return /Connection terminated|Client has encountered a connection error|Connection ended|not queryable/i.test(err.message)
}

/**
 * Ends a connection, or cuts it when the server does not answer the goodbye
 * within END_TIMEOUT_MS (a silent server would keep the socket, and the
 * process, alive). Never rejects.
 */
function endClient(client: pg.Client): Promise<void> {
  client.removeAllListeners('end')
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      client.connection.stream.destroy()
      resolve()
    }, END_TIMEOUT_MS)
    client
      .end()
      .catch(() => {})
      .finally(() => {
        clearTimeout(timer)
        resolve()
      })
  })
}

const feedable = (json: string) => json.length <= FEED_VALUE_LIMIT

interface Payload {
  k: string
  s: number
  o: string
  e: boolean
  v?: unknown
}

/**
 * Only a `postgres://` or `postgresql://` URL: `pg` would read anything else as
 * a database name (a keyword string with its password included), which log
 * lines would then repeat. The error never quotes the URL.
 */
function checkUrl(url: string): void {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    throw new Error('store.postgres_url is not a URL (postgres://user:password@host:port/database)')
  }
  if (parsed.protocol !== 'postgres:' && parsed.protocol !== 'postgresql:') {
    throw new Error('store.postgres_url must start with postgres:// or postgresql://')
  }
}

export async function openPostgresSharedStore(url: string, options: PostgresStoreOptions = {}): Promise<SharedStore> {
  checkUrl(url)
  const log = options.log
  const clock = options.clock
  const nowParam = () => (clock === undefined ? null : Math.floor(clock()))
  const connection: pg.ClientConfig = {
    connectionString: url,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    keepAlive: true,
    application_name: 'authsvc',
  }
  // what log lines may say about the server: never the user or password of the URL
  const probe = new pg.Client(connection)
  const where = { store: 'postgres', host: probe.host, port: probe.port, database: probe.database }
  const describe = (err: unknown) => {
    const message = err instanceof Error ? err.message : String(err)
    return { ...where, err: message.split(url).join('<url>'), code: (err as { code?: unknown } | null)?.code }
  }

  const pool = new pg.Pool({ ...connection, max: POOL_MAX, idleTimeoutMillis: 30_000, query_timeout: COMMAND_TIMEOUT_MS, statement_timeout: LIST_TIMEOUT_MS })
  // an idle pooled connection that closes is dropped by the pool (the next command opens another): one
  // connection the server timed out is no loss of the server, which the feed and its heartbeat report
  pool.on('error', () => {})
  // the pool's connections not ended yet (pg-pool says 'remove' once a connection has ended)
  const pooled = new Set<pg.Client>()
  pool.on('connect', (c) => pooled.add(c))
  pool.on('remove', (c) => pooled.delete(c))

  const origin = randomUUID()
  const feed = new Listeners<Change>()
  const connectionListeners = new Listeners<boolean>()
  let connected = false
  let closed = false
  let listener: pg.Client | null = null
  let reconnectTimer: NodeJS.Timeout | null = null
  let heartbeat: NodeJS.Timeout | null = null
  let attempt = 0

  const unavailable = (err: unknown) =>
    new AuthsvcError('STORE_UNAVAILABLE', 'The shared store (PostgreSQL) is unreachable; try again shortly', { 'Retry-After': '1' }, err)

  /** one statement on a pooled connection; a lost server is a 503 and a lost connection */
  const query = async (name: keyof typeof Q, values: unknown[], timeout = COMMAND_TIMEOUT_MS): Promise<pg.QueryResult> => {
    if (closed) throw unavailable(new Error('the store is closed'))
    try {
      return await pool.query({ name: `authsvc_${name}`, text: Q[name], values, query_timeout: timeout } as pg.QueryConfig)
    } catch (err) {
      if (!isConnectionError(err)) throw err
      // a connection that closed is a loss now; a command that timed out (a slow server, a full pool)
      // is only refused: the feed's heartbeat notices a server that went silent
      if (!isTimeout(err)) lost('command', err)
      throw unavailable(err)
    }
  }

  /** one statement built at the call (the audit view's filters); errors as `query`'s */
  const statement = async (text: string, values: unknown[], timeout = COMMAND_TIMEOUT_MS): Promise<pg.QueryResult> => {
    if (closed) throw unavailable(new Error('the store is closed'))
    try {
      return await pool.query({ text, values, query_timeout: timeout } as pg.QueryConfig)
    } catch (err) {
      if (!isConnectionError(err)) throw err
      if (!isTimeout(err)) lost('command', err)
      throw unavailable(err)
    }
  }

  /**
   * A write resolves once this instance's own feed has delivered it, as on
   * sqlite and Redis: a replica fed by the feed then reads its own writes, and
   * an older change of the same key from another instance can never arrive
   * after the write has settled. NOTIFYs arrive in commit order, so a marker
   * sent after the write arrives after the write's own change.
   */
  let barriers = 0
  const awaiting = new Map<string, () => void>()
  const passedBarrier = (payload: string) => {
    const done = awaiting.get(payload)
    if (done !== undefined) done()
  }
  const delivered = async (): Promise<void> => {
    if (closed || listener === null) return
    const payload = JSON.stringify({ barrier: `${origin}:${++barriers}` })
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        awaiting.delete(payload)
        resolve() // stored either way; a feed this slow is noticed by its heartbeat
      }, COMMAND_TIMEOUT_MS)
      awaiting.set(payload, () => {
        clearTimeout(timer)
        awaiting.delete(payload)
        resolve()
      })
      query('barrier', [payload]).catch(() => {
        clearTimeout(timer)
        awaiting.delete(payload)
        resolve()
      })
    })
  }

  const parse = (payload: string | undefined): Change | null => {
    if (payload === undefined) return null
    try {
      const p = JSON.parse(payload) as Payload
      const change: Change = { key: p.k, seq: Number(p.s), exists: p.e, origin: p.o }
      if ('v' in p) change.value = p.v
      return change
    } catch {
      return null
    }
  }

  /** connects the feed: LISTEN on a connection of its own */
  const connectFeed = async (): Promise<pg.Client> => {
    const client = new pg.Client({ ...connection, application_name: 'authsvc-feed', query_timeout: COMMAND_TIMEOUT_MS })
    client.on('error', (err) => lostFeed(client, err))
    client.on('end', () => lostFeed(client, new Error('Connection ended')))
    client.on('notification', (message) => {
      if (client !== listener || message.channel !== CHANNEL) return
      if (message.payload?.startsWith('{"barrier":') === true) return passedBarrier(message.payload)
      const change = parse(message.payload)
      if (change !== null) feed.emit(change)
    })
    try {
      await client.connect()
      await client.query(`LISTEN ${CHANNEL}`)
    } catch (err) {
      await endClient(client)
      throw err
    }
    return client
  }

  const lostFeed = (client: pg.Client, err: unknown) => {
    if (client === listener) lost('feed', err)
  }

  /** the feed or a command connection is gone: say so once, drop the feed, reconnect */
  function lost(which: 'feed' | 'command', err: unknown): void {
    if (closed || !connected) return
    connected = false
    log?.warn({ ...describe(err), connection: which }, 'shared store connection lost; commands answer 503 until it is back')
    const old = listener
    listener = null
    stopHeartbeat()
    if (old !== null) {
      void endClient(old)
    }
    connectionListeners.emit(false)
    scheduleReconnect()
  }

  function scheduleReconnect(): void {
    if (closed || reconnectTimer !== null) return
    const delay = Math.min(RECONNECT_MAX_MS, 50 * 2 ** attempt)
    attempt += 1
    reconnectTimer = setTimeout(() => {
      reconnectTimer = null
      void reconnect()
    }, delay)
  }

  async function reconnect(): Promise<void> {
    let client: pg.Client
    let seq: number
    try {
      client = await connectFeed()
      try {
        seq = Number((await client.query(Q.currentSeq)).rows[0].seq)
      } catch (err) {
        await endClient(client)
        throw err
      }
    } catch (err) {
      if (attempt === 1) log?.warn(describe(err), 'shared store still unreachable; retrying')
      scheduleReconnect()
      return
    }
    if (closed) {
      await endClient(client)
      return
    }
    listener = client
    connected = true
    attempt = 0
    startHeartbeat()
    log?.info(where, 'shared store connection back')
    connectionListeners.emit(true)
    // what was announced while the feed was down is lost: replicas reload everything
    feed.emit({ key: '*', seq, exists: true, origin: '' })
  }

  function startHeartbeat(): void {
    heartbeat = setInterval(() => {
      const client = listener
      if (client === null) return
      client.query('SELECT 1').catch((err: unknown) => lostFeed(client, err))
    }, HEARTBEAT_MS)
    heartbeat.unref()
  }
  function stopHeartbeat(): void {
    if (heartbeat !== null) clearInterval(heartbeat)
    heartbeat = null
  }

  // open: the schema, then the feed; a server that cannot be reached now is an error to the caller
  try {
    const setup = await pool.connect()
    try {
      await setup.query('BEGIN')
      await setup.query(`SELECT pg_advisory_xact_lock(${LOCK_CLASS}, 0)`)
      for (const statement of SCHEMA) await setup.query(statement)
      await setup.query('COMMIT')
      setup.release()
    } catch (err) {
      await setup.query('ROLLBACK').catch(() => {})
      setup.release(true)
      throw err
    }
    listener = await connectFeed()
  } catch (err) {
    closed = true
    await pool.end().catch(() => {})
    log?.error(describe(err), 'shared store (PostgreSQL) cannot be opened')
    throw isConnectionError(err) ? unavailable(err) : err
  }
  connected = true
  startHeartbeat()
  // counters and claims of keys never used again (an address that tried once, a TOTP step) would stay forever
  const sweep = () =>
    query('sweep', [nowParam()], LIST_TIMEOUT_MS).catch((err: unknown) => {
      if (!(err instanceof AuthsvcError)) log?.warn(describe(err), 'shared store: expired counters not removed')
    })
  await sweep()
  const sweeper = setInterval(() => void sweep(), SWEEP_MS)
  sweeper.unref()

  const writeArgs = (value: unknown): [string | null, boolean] => {
    if (value === undefined) return [null, false]
    const json = JSON.stringify(value)
    return [json, feedable(json)]
  }
  const versioned = <T>(row: Record<string, unknown>): Versioned<T> => ({ seq: Number(row.seq), value: JSON.parse(String(row.value)) as T })

  const audit: AuditRepository = {
    async append(rows) {
      if (rows.length === 0) return
      await query('auditAppend', [
        rows.map((r) => r.at), rows.map((r) => r.kind), rows.map((r) => r.actor), rows.map((r) => r.subject),
        rows.map((r) => r.ip), rows.map((r) => r.outcome), rows.map((r) => r.details),
      ], LIST_TIMEOUT_MS)
    },
    async query(filter) {
      const where: string[] = []
      const values: unknown[] = []
      const param = (value: unknown) => {
        values.push(value)
        return `$${values.length}`
      }
      if (filter.name !== undefined) {
        const p = param(filter.name)
        where.push(`(actor = ${p} OR subject = ${p})`)
      }
      if (filter.kinds !== undefined && filter.kinds.length > 0) where.push(`kind = ANY(${param([...filter.kinds])}::text[])`)
      if (filter.since !== undefined) where.push(`at >= ${param(filter.since)}`)
      if (filter.until !== undefined) where.push(`at <= ${param(filter.until)}`)
      if (filter.before !== undefined) where.push(`seq < ${param(filter.before)}`)
      const clause = where.length > 0 ? `WHERE ${where.join(' AND ')}` : ''
      const { rows } = await statement(`SELECT * FROM authsvc_audit ${clause} ORDER BY seq DESC LIMIT ${param(filter.limit)}`, values, LIST_TIMEOUT_MS)
      return rows.map(auditRowOf)
    },
    async firstOfEachName() {
      return (await query('auditNames', [], LIST_TIMEOUT_MS)).rows.map(auditRowOf)
    },
    async page(afterSeq, limit) {
      return (await query('auditPage', [afterSeq, limit], LIST_TIMEOUT_MS)).rows.map(auditRowOf)
    },
    async prune(olderThan, keep) {
      const byAge = await query('auditPruneAge', [olderThan], LIST_TIMEOUT_MS)
      const byCount = await query('auditPruneCount', [keep], LIST_TIMEOUT_MS)
      return (byAge.rowCount ?? 0) + (byCount.rowCount ?? 0)
    },
    async count() {
      return Number((await query('auditCount', [])).rows[0].n)
    },
  }

  const store: SharedStore = {
    backend: 'postgres',
    audit,
    async kinds() {
      return (await query('kinds', [], LIST_TIMEOUT_MS)).rows.map((row) => String(row.kind))
    },
    origin,
    get connected() {
      return connected
    },
    onConnection: (l) => connectionListeners.add(l),
    subscribe: (l) => feed.add(l),

    async get<T>(key: string) {
      return (await store.getVersioned<T>(key))?.value
    },
    async getVersioned<T>(key: string) {
      const { rows } = await query('get', [key])
      return rows.length === 0 ? undefined : versioned<T>(rows[0])
    },
    async entries<T>(kind: string) {
      return (await store.entriesVersioned<T>(kind)).map(([key, v]): [string, T] => [key, v.value])
    },
    async entriesVersioned<T>(kind: string) {
      const { rows } = await query('list', [kind], LIST_TIMEOUT_MS)
      return rows.map((row): [string, Versioned<T>] => [String(row.key), versioned<T>(row)])
    },
    async entriesPage<T>(kind: string, cursor: string | null, limit: number) {
      // every key of the kind sorts after `kind:` itself (which is never a record's key)
      const { rows } = await query('page', [kind, cursor ?? `${kind}:`, limit], LIST_TIMEOUT_MS)
      return {
        rows: rows.map((row): [string, Versioned<T>] => [String(row.key), versioned<T>(row)]),
        next: rows.length < limit ? null : String(rows[rows.length - 1].key),
      }
    },
    async set(key, value) {
      const [json, feedValue] = writeArgs(value)
      await query('set', [key, json, feedValue, origin])
      await delivered()
    },
    async delete(key) {
      const { rows } = await query('delete', [key, origin])
      if (rows[0].done === true) await delivered()
      return rows[0].done === true
    },
    async commit(checks: Check[], writes: Write[]) {
      const args = writes.map((w) => writeArgs(w.value))
      const { rows } = await query('commit', [
        checks.map((c) => c.key),
        checks.map((c) => c.seq),
        writes.map((w) => w.key),
        args.map(([json]) => json),
        args.map(([, f]) => f),
        origin,
      ])
      if (rows[0].done === true) await delivered()
      return rows[0].done === true
    },
    async increment(key, ttlMs, refresh = false) {
      const { rows } = await query('increment', [key, Math.ceil(ttlMs), refresh, nowParam()])
      return Number(rows[0].count)
    },
    async readCounter(key) {
      const { rows } = await query('readCounter', [key, nowParam()])
      return rows.length === 0 ? 0 : Number(rows[0].count)
    },
    async resetCounter(key) {
      await query('resetCounter', [key])
    },
    async claim(key, ttlMs) {
      const { rowCount } = await query('claim', [key, Math.ceil(ttlMs), nowParam()])
      return rowCount === 1
    },
    async close() {
      if (closed) return
      closed = true
      connected = false
      stopHeartbeat()
      clearInterval(sweeper)
      if (reconnectTimer !== null) clearTimeout(reconnectTimer)
      reconnectTimer = null
      const client = listener
      listener = null
      void pool.end().catch(() => {})
      // every pooled connection ended within the bound, or cut (a silent server does not answer the goodbye)
      let timer: NodeJS.Timeout | undefined
      const drained = new Promise<void>((resolve) => {
        const check = () => pooled.size === 0 && resolve()
        pool.on('remove', check)
        check()
        timer = setTimeout(resolve, END_TIMEOUT_MS)
      })
      await Promise.all([client === null ? undefined : endClient(client), drained])
      clearTimeout(timer)
      for (const c of pooled) c.connection.stream.destroy()
    },
  }
  return store
}
