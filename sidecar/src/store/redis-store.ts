/**
 * The Redis backend of the shared store (issue 28, SPEC §10): several
 * instances, one Redis, the `redis` client. What lives where, under a prefix
 * (`authsvc:` unless the URL's `?prefix=` or the `prefix` option says otherwise):
 *
 * - records: one hash per kind, `<prefix>r:<kind>`, field = the whole key,
 *   value = `{"s":<seq>,"v":<value as JSON>}`; a get is one HGET, a kind is
 *   listed by HSCAN in pages (never one HGETALL of a million sessions);
 * - the sequence: `<prefix>seq` (INCR);
 * - counters and claims: plain keys `<prefix>c:<key>`, with their expiry in
 *   Redis (PEXPIRE; SET NX PX), so the server's clock decides when they lapse;
 * - the feed: channel `<prefix>changes`, JSON `{key, origin, seq, exists, value?}`;
 * - the audit log: stream `<prefix>audit` (entry ids `0-<n>`, `n` from `<prefix>audit:seq`), a
 *   copy of each row in its actor's and its subject's stream `<prefix>audit:n:<name>`, and the set
 *   `<prefix>audit:names` of those names (store/audit-repository.ts).
 *
 * Every write (set, delete, commit) is one Lua script run (EVALSHA, EVAL once
 * when the server does not know it yet): it checks every key's sequence,
 * writes, takes one number per write and PUBLISHes each change, all at once,
 * so changes reach every subscriber in the order of the writes. A counter is
 * one small script (INCR, then PEXPIRE when it starts or refreshes); a claim
 * is one `SET NX PX`. One command connection and one subscriber connection
 * per instance, opened once.
 *
 * When the server goes away, commands fail at once (no offline queue) or after
 * `commandTimeoutMs`, as `STORE_UNAVAILABLE` (503); `connected` turns false and
 * the connection listeners hear it once; both connections reconnect by
 * themselves, at most `MAX_RETRY_MS` apart. Once both are back, the feed
 * carries one `{key: '*'}` change (whatever was published meanwhile is lost)
 * and the listeners hear `true`. Log lines name host, port and database only.
 */
import { createHash, randomUUID } from 'node:crypto'
import { createClient, ErrorReply } from 'redis'
import { AuthsvcError } from '../kernel/errors.js'
import { beforeDeadline } from '../kernel/deadline.js'
import type { AuditRepository, AuditRow, StoredAuditRow } from './audit-repository.js'
import { FEED_VALUE_LIMIT, Listeners, kindOf, type Change, type Check, type SharedStore, type Versioned, type Write } from './shared-store.js'

export interface StoreLog {
  info(obj: object, msg?: string): void
  warn(obj: object, msg?: string): void
  error(obj: object, msg?: string): void
}

export interface RedisStoreOptions {
  /** unused by Redis (expiry is the server's clock); accepted so every backend opens alike */
  clock?: () => number
  log?: StoreLog
  /** key prefix; else the URL's `?prefix=`; else `authsvc:` */
  prefix?: string
  /** a command without an answer this long rejects (503) */
  commandTimeoutMs?: number
  /** how long open() waits for the server before it refuses */
  openTimeoutMs?: number
  /** how often a connected store checks that the server still answers */
  probeIntervalMs?: number
}

/** Longest wait between two reconnection attempts. */
export const MAX_RETRY_MS = 500
const HSCAN_PAGE = 2000

/**
 * KEYS[1] the sequence, then one hash per check, then one per write.
 * ARGV: channel, #checks, #writes, then per check (field, expected: '' absent,
 * '*' present, else its sequence), then per write (field, JSON or '' to delete,
 * feed head `{"key":…,"origin":…`, '1' when the value travels).
 * Returns 0 when a check fails (nothing written), else the list of numbers.
 */
const WRITE_SCRIPT = `
local channel = ARGV[1]
local nchecks = tonumber(ARGV[2])
local nwrites = tonumber(ARGV[3])
for i = 1, nchecks do
  local field, expected = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  local current = redis.call('HGET', KEYS[1 + i], field)
  if expected == '' then
    if current then return 0 end
  elseif not current then
    return 0
  elseif expected ~= '*' and string.match(current, '^{"s":(%d+),') ~= expected then
    return 0
  end
end
local base = 3 + 2 * nchecks
local seqs = {}
for i = 1, nwrites do
  local at = base + 4 * (i - 1)
  local field, json, head, carry = ARGV[at + 1], ARGV[at + 2], ARGV[at + 3], ARGV[at + 4]
  local hash = KEYS[1 + nchecks + i]
  local seq = string.format('%d', redis.call('INCR', KEYS[1]))
  local message
  if json == '' then
    redis.call('HDEL', hash, field)
    message = head .. ',"seq":' .. seq .. ',"exists":false}'
  else
    redis.call('HSET', hash, field, '{"s":' .. seq .. ',"v":' .. json .. '}')
    if carry == '1' then
      message = head .. ',"seq":' .. seq .. ',"exists":true,"value":' .. json .. '}'
    else
      message = head .. ',"seq":' .. seq .. ',"exists":true}'
    end
  end
  redis.call('PUBLISH', channel, message)
  seqs[i] = seq
end
return seqs
`

/**
 * The audit log's append. KEYS[1] its sequence, KEYS[2] the log's stream,
 * KEYS[3] the set of names with a stream of their own, then per row two keys:
 * the actor's and the subject's stream (KEYS[2] again where there is none).
 * ARGV per row: the row as JSON, the actor, the subject ('' for none, and the
 * subject '' when it is the actor). Every row takes the next number and is
 * added under the entry id `0-<number>` to the log and to each name's stream,
 * so each stream's order is the log's, across instances, and
 * XRANGE/XREVRANGE/XTRIM MINID address rows by number; a console reads its
 * name's stream only.
 */
const AUDIT_APPEND_SCRIPT = `
local rows = #ARGV / 3
for i = 0, rows - 1 do
  local json, actor, subject = ARGV[1 + 3 * i], ARGV[2 + 3 * i], ARGV[3 + 3 * i]
  local id = '0-' .. string.format('%d', redis.call('INCR', KEYS[1]))
  redis.call('XADD', KEYS[2], id, 'r', json)
  if actor ~= '' then
    redis.call('XADD', KEYS[4 + 2 * i], id, 'r', json)
    redis.call('SADD', KEYS[3], actor)
  end
  if subject ~= '' then
    redis.call('XADD', KEYS[5 + 2 * i], id, 'r', json)
    redis.call('SADD', KEYS[3], subject)
  end
end
return rows
`

/**
 * After the log was pruned: KEYS[1] the set of names, then one name's stream
 * per name; ARGV[1] the log's oldest id kept, then the names. Each name's
 * stream loses what the log lost; a name whose stream is empty leaves the set.
 */
const AUDIT_TRIM_NAMES_SCRIPT = `
for i = 2, #KEYS do
  redis.call('XTRIM', KEYS[i], 'MINID', ARGV[1])
  if redis.call('XLEN', KEYS[i]) == 0 then
    redis.call('DEL', KEYS[i])
    redis.call('SREM', KEYS[1], ARGV[i])
  end
end
return #KEYS - 1
`

/** KEYS: streams; answers each one's oldest entry (or an empty list). */
const AUDIT_FIRSTS_SCRIPT = `
local out = {}
for i = 1, #KEYS do
  out[i] = redis.call('XRANGE', KEYS[i], '-', '+', 'COUNT', 1)
end
return out
`
/** entries read per XRANGE/XREVRANGE while filtering or pruning the audit stream, and rows per append script */
const AUDIT_PAGE = 250
/**
 * An audit command's bound: longer than a decision's verbs (a page of the log is bigger), so a
 * loaded machine's slow read of the consoles never counts as the server's loss, which would answer
 * 503 for everything until the store is back.
 */
const AUDIT_TIMEOUT_MS = 10_000

/** KEYS[1] the counter; ARGV: ttl in ms, '1' to refresh the expiry on every increment. */
const INCREMENT_SCRIPT = `
local count = redis.call('INCR', KEYS[1])
if count == 1 or ARGV[2] == '1' then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return count
`

interface Script {
  source: string
  sha: string
}
const script = (source: string): Script => ({ source, sha: createHash('sha1').update(source).digest('hex') })
const WRITE = script(WRITE_SCRIPT)
const INCREMENT = script(INCREMENT_SCRIPT)
const AUDIT_APPEND = script(AUDIT_APPEND_SCRIPT)
const AUDIT_TRIM_NAMES = script(AUDIT_TRIM_NAMES_SCRIPT)
const AUDIT_FIRSTS = script(AUDIT_FIRSTS_SCRIPT)

/** `0-<seq>` entries of the audit stream, as the rows they hold */
function auditEntries(reply: unknown): StoredAuditRow[] {
  if (!Array.isArray(reply)) throw new Error('redis: unexpected XRANGE reply')
  return reply.map((entry) => {
    const [id, fields] = entry as [string, string[]]
    const row = JSON.parse(fields[1]) as AuditRow
    return { ...row, seq: Number(String(id).slice(2)) }
  })
}
const globEscape = (text: string) => text.replace(/[*?[\]\\]/g, (c) => `\\${c}`)

interface Target {
  /** the URL without `?prefix=`, credentials kept for the client only */
  url: string
  /** host:port/db, for log lines and errors */
  where: string
  prefix: string
}

/** Splits the configured URL into what the client needs, what may be logged, and the prefix. */
export function redisTarget(raw: string, prefixOption?: string): Target {
  let parsed: URL
  try {
    parsed = new URL(raw)
  } catch {
    throw new Error('store.redis_url is not a URL (redis://[user:password@]host[:port][/db][?prefix=…])')
  }
  if (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:') throw new Error(`store.redis_url must start with redis:// or rediss://, not ${parsed.protocol}//`)
  const prefix = prefixOption ?? parsed.searchParams.get('prefix') ?? 'authsvc:'
  parsed.search = ''
  parsed.hash = ''
  const db = parsed.pathname.length > 1 ? parsed.pathname.slice(1) : '0'
  if (!/^\d+$/.test(db)) throw new Error('store.redis_url: the path must be a database number')
  return { url: parsed.toString(), where: `${parsed.hostname}:${parsed.port || '6379'}/${db}`, prefix }
}

type Reply = unknown

function unavailable(where: string, cause: unknown): AuthsvcError {
  return new AuthsvcError('STORE_UNAVAILABLE', undefined, { 'Retry-After': '1' }, cause instanceof Error ? new Error(`redis ${where}: ${cause.message}`) : cause)
}

export async function openRedisSharedStore(url: string, options: RedisStoreOptions = {}): Promise<SharedStore> {
  const target = redisTarget(url, options.prefix)
  const { where, prefix } = target
  const log = options.log
  const commandTimeoutMs = options.commandTimeoutMs ?? 1000
  const seqKey = `${prefix}seq`
  const channel = `${prefix}changes`
  const hashOf = (kind: string) => `${prefix}r:${kind}`
  const counterKey = (key: string) => `${prefix}c:${key}`

  const client = createClient({
    url: target.url,
    RESP: 2,
    disableOfflineQueue: true,
    disableClientInfo: true,
    // send() bounds every command itself; the client's own timeout (an AbortSignal timer per command) is off
    commandOptions: { timeout: 0 },
    socket: {
      connectTimeout: Math.max(commandTimeoutMs, 500),
      reconnectStrategy: (retries: number) => Math.min(50 * 2 ** retries, MAX_RETRY_MS),
    },
  })
  const subscriber = client.duplicate()

  const origin = randomUUID()
  const feed = new Listeners<Change>()
  const connection = new Listeners<boolean>()
  /** open() has finished: only then are losses and returns reported */
  let opened = false
  let up = false
  let closed = false
  let settling = false
  /** the highest sequence number this instance's feed has delivered, and the writes waiting for theirs */
  let heardUpTo = 0
  let awaiting: Array<{ seq: number; done: () => void }> = []

  /**
   * One command, bounded: the client's own timeout covers a command only until
   * it is written, so a server that stops answering (a partition, a paused
   * process) would hold it forever; this one rejects after `commandTimeoutMs`
   * whatever happened (a write that timed out may still have been applied).
   */
  const send = async (args: string[], timeoutMs = commandTimeoutMs): Promise<Reply> => {
    try {
      return await beforeDeadline(client.sendCommand(args), timeoutMs, () => new Error(`no answer within ${timeoutMs} ms`))
    } catch (err) {
      if (err instanceof ErrorReply) throw err
      goDown(err)
      throw unavailable(where, err)
    }
  }
  const run = async (s: Script, keys: string[], args: string[], timeoutMs = commandTimeoutMs): Promise<Reply> => {
    try {
      return await send(['EVALSHA', s.sha, String(keys.length), ...keys, ...args], timeoutMs)
    } catch (err) {
      if (!(err instanceof ErrorReply) || !err.message.startsWith('NOSCRIPT')) throw err
      return send(['EVAL', s.source, String(keys.length), ...keys, ...args], timeoutMs)
    }
  }

  /** the last thing a connection complained of, for the line open() refuses with */
  let lastError = ''
  const goDown = (cause: unknown) => {
    if (!up || closed) return
    up = false
    // writes waiting for the feed are stored; the reload after the return covers what it missed
    const waiting = awaiting
    awaiting = []
    for (const w of waiting) w.done()
    log?.warn({ store: 'redis', server: where, reason: cause instanceof Error ? cause.message : String(cause) }, 'shared store unreachable')
    connection.emit(false)
  }
  /** Both connections are back: note the sequence, tell the feed to reload, then the listeners. */
  const comeUp = async () => {
    if (!opened || up || closed || settling || !client.isReady || !subscriber.isReady) return
    settling = true
    try {
      const seq = Number((await send(['GET', seqKey])) ?? 0)
      if (closed || !client.isReady || !subscriber.isReady) return
      up = true
      heardUpTo = seq
      log?.info({ store: 'redis', server: where }, 'shared store reachable again')
      feed.emit({ key: '*', seq, exists: true, origin: '' })
      connection.emit(true)
    } catch {
      // still unreachable: the next ready event or probe tries again
    } finally {
      settling = false
    }
  }
  for (const c of [client, subscriber]) {
    c.on('error', (err: unknown) => {
      lastError = err instanceof Error ? err.message : String(err)
      goDown(err)
    })
    c.on('end', () => goDown(new Error('connection ended')))
    c.on('reconnecting', () => goDown(new Error('reconnecting')))
    c.on('ready', () => void comeUp())
  }

  /**
   * A write resolves once this instance's own feed has delivered it (its
   * listeners ran), as on sqlite: a replica fed by the feed reads its own
   * writes. The channel carries every change in sequence order, so hearing
   * number N means every change up to N has been heard.
   */
  const heard = (seq: number) => {
    if (seq <= heardUpTo) return
    heardUpTo = seq
    if (awaiting.length === 0) return
    const due = awaiting.filter((w) => w.seq <= seq)
    awaiting = awaiting.filter((w) => w.seq > seq)
    for (const w of due) w.done()
  }
  const delivered = (seq: number): Promise<void> => {
    if (seq <= heardUpTo || closed || !up) return Promise.resolve()
    return new Promise((resolve) => {
      const entry = {
        seq,
        done: () => {
          clearTimeout(timer)
          resolve()
        },
      }
      // the write is in the store either way; a feed that lost it is a feed to reload
      const timer = setTimeout(() => {
        awaiting = awaiting.filter((w) => w !== entry)
        goDown(new Error(`the feed did not deliver change ${seq} within ${commandTimeoutMs} ms`))
        resolve()
      }, commandTimeoutMs)
      awaiting.push(entry)
    })
  }

  const onMessage = (message: string) => {
    let parsed: { key?: unknown; origin?: unknown; seq?: unknown; exists?: unknown; value?: unknown }
    try {
      parsed = JSON.parse(message) as typeof parsed
    } catch {
      log?.error({ store: 'redis', server: where, channel }, 'unreadable change on the feed')
      return
    }
    if (typeof parsed.key !== 'string' || typeof parsed.seq !== 'number' || typeof parsed.exists !== 'boolean' || typeof parsed.origin !== 'string') return
    const change: Change = { key: parsed.key, seq: parsed.seq, exists: parsed.exists, origin: parsed.origin }
    if (parsed.exists && 'value' in parsed) change.value = parsed.value
    feed.emit(change)
    heard(change.seq)
  }

  // open: both connections and the subscription, within a bound
  const openTimeoutMs = options.openTimeoutMs ?? 5000
  let timer: NodeJS.Timeout | undefined
  try {
    await Promise.race([
      (async () => {
        await Promise.all([client.connect(), subscriber.connect()])
        await subscriber.subscribe(channel, onMessage)
      })(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`the Redis store at ${where} did not answer within ${openTimeoutMs} ms${lastError ? ` (${lastError})` : ''}`)), openTimeoutMs)
      }),
    ])
  } catch (err) {
    client.destroy()
    subscriber.destroy()
    throw err instanceof Error && err.message.includes(where) ? err : new Error(`the Redis store at ${where} cannot be opened: ${err instanceof Error ? err.message : String(err)}`)
  } finally {
    clearTimeout(timer)
  }
  up = true
  opened = true

  // a server that stops answering without closing the socket (a partition) is noticed by a probe
  const probeIntervalMs = options.probeIntervalMs ?? 1000
  let probing = false
  const probe = setInterval(() => {
    if (closed || probing) return
    if (!up) {
      void comeUp()
      return
    }
    probing = true
    send(['PING'])
      .catch(() => {}) // send has reported the loss
      .finally(() => {
        probing = false
      })
  }, probeIntervalMs)

  const head = (key: string) => {
    const json = JSON.stringify({ key, origin })
    return json.slice(0, -1)
  }
  const fieldOf = (key: string) => [hashOf(kindOf(key)), key] as const
  const parseRecord = <T>(raw: string): Versioned<T> => {
    const { s, v } = JSON.parse(raw) as { s: number; v: T }
    return { seq: s, value: v }
  }
  /** one script run: resolves the numbers taken, or null when a check failed */
  const write = async (checks: Array<{ key: string; expected: string }>, writes: Write[]): Promise<boolean> => {
    const keys = [seqKey]
    const args = [channel, String(checks.length), String(writes.length)]
    for (const check of checks) {
      const [hash, field] = fieldOf(check.key)
      keys.push(hash)
      args.push(field, check.expected)
    }
    for (const w of writes) {
      const [hash, field] = fieldOf(w.key)
      keys.push(hash)
      const json = w.value === undefined ? '' : JSON.stringify(w.value)
      args.push(field, json, head(w.key), json !== '' && json.length <= FEED_VALUE_LIMIT ? '1' : '0')
    }
    const reply = await run(WRITE, keys, args)
    if (!Array.isArray(reply)) return false
    if (reply.length > 0) await delivered(Number(reply[reply.length - 1]))
    return true
  }

  const auditStream = `${prefix}audit`
  const auditSeq = `${prefix}audit:seq`
  const auditNames = `${prefix}audit:names`
  const nameStream = (name: string) => `${prefix}audit:n:${name}`
  const auditRange = async (stream: string, command: 'XRANGE' | 'XREVRANGE', from: string, to: string, count: number) =>
    auditEntries(await send([command, stream, from, to, 'COUNT', String(count)], AUDIT_TIMEOUT_MS))
  /** every name with a stream, page by page */
  const eachNamePage = async (work: (names: string[]) => Promise<void>) => {
    let cursor = '0'
    do {
      const reply = await send(['SSCAN', auditNames, cursor, 'COUNT', String(AUDIT_PAGE)], AUDIT_TIMEOUT_MS)
      if (!Array.isArray(reply) || reply.length !== 2 || !Array.isArray(reply[1])) throw new Error('redis: unexpected SSCAN reply')
      cursor = String(reply[0])
      const names = (reply[1] as unknown[]).map(String)
      if (names.length > 0) await work(names)
    } while (cursor !== '0')
  }
  const audit: AuditRepository = {
    // one script per page of rows: each atomic, in order; a long backlog never holds the server long
    async append(rows) {
      for (let i = 0; i < rows.length; i += AUDIT_PAGE) {
        const keys = [auditSeq, auditStream, auditNames]
        const args: string[] = []
        for (const r of rows.slice(i, i + AUDIT_PAGE)) {
          const actor = r.actor ?? ''
          const subject = r.subject === null || r.subject === r.actor ? '' : r.subject
          keys.push(actor === '' ? auditStream : nameStream(actor), subject === '' ? auditStream : nameStream(subject))
          args.push(JSON.stringify({ at: r.at, kind: r.kind, actor: r.actor, subject: r.subject, ip: r.ip, outcome: r.outcome, details: r.details }), actor, subject)
        }
        await run(AUDIT_APPEND, keys, args, AUDIT_TIMEOUT_MS)
      }
    },
    // a stream has no index but its ids: a name's own stream, or the log, newest first, page by page,
    // kinds and times filtered here (a query by kind alone reads the log up to `limit` matches)
    async query(filter) {
      const stream = filter.name === undefined ? auditStream : nameStream(filter.name)
      const found: StoredAuditRow[] = []
      let end = filter.before !== undefined ? `(0-${filter.before}` : '+'
      for (;;) {
        const rows = await auditRange(stream, 'XREVRANGE', end, '-', AUDIT_PAGE)
        for (const row of rows) {
          if (filter.kinds !== undefined && filter.kinds.length > 0 && !filter.kinds.includes(row.kind)) continue
          if (filter.since !== undefined && row.at < filter.since) continue
          if (filter.until !== undefined && row.at > filter.until) continue
          found.push(row)
          if (found.length >= filter.limit) return found
        }
        if (rows.length < AUDIT_PAGE) return found
        end = `(0-${rows[rows.length - 1].seq}`
      }
    },
    async firstOfEachName() {
      const first = new Map<number, StoredAuditRow>()
      await eachNamePage(async (names) => {
        const reply = await run(AUDIT_FIRSTS, names.map(nameStream), [], AUDIT_TIMEOUT_MS)
        if (!Array.isArray(reply)) throw new Error('redis: unexpected reply')
        for (const entries of reply) for (const row of auditEntries(entries)) first.set(row.seq, row)
      })
      return [...first.values()].sort((x, y) => x.seq - y.seq)
    },
    page: (afterSeq, limit) => auditRange(auditStream, 'XRANGE', `(0-${afterSeq}`, '+', limit),
    /**
     * By age: the oldest rows go up to the first one young enough (XTRIM MINID); rows are in the
     * order they were appended, which is their time's give or take a flush. By count: XTRIM MAXLEN.
     * Then every name's stream loses what the log lost.
     */
    async prune(olderThan, keep) {
      let removed = 0
      let lastOld = 0
      for (let after = 0; ; ) {
        const rows = await auditRange(auditStream, 'XRANGE', `(0-${after}`, '+', AUDIT_PAGE)
        const young = rows.findIndex((row) => row.at >= olderThan)
        if (young !== -1) {
          if (young > 0) lastOld = rows[young - 1].seq
          break
        }
        if (rows.length === 0) break
        lastOld = rows[rows.length - 1].seq
        if (rows.length < AUDIT_PAGE) break
        after = lastOld
      }
      if (lastOld > 0) removed += Number(await send(['XTRIM', auditStream, 'MINID', `0-${lastOld + 1}`], AUDIT_TIMEOUT_MS))
      removed += Number(await send(['XTRIM', auditStream, 'MAXLEN', String(keep)], AUDIT_TIMEOUT_MS))
      if (removed > 0) {
        const [oldest] = await auditRange(auditStream, 'XRANGE', '-', '+', 1)
        // an emptied log: everything numbered so far went
        const minId = oldest !== undefined ? `0-${oldest.seq}` : `0-${Number((await send(['GET', auditSeq])) ?? 0) + 1}`
        await eachNamePage(async (names) => {
          await run(AUDIT_TRIM_NAMES, [auditNames, ...names.map(nameStream)], [minId, ...names], AUDIT_TIMEOUT_MS)
        })
      }
      return removed
    },
    async count() {
      return Number(await send(['XLEN', auditStream]))
    },
  }

  const store: SharedStore = {
    backend: 'redis',
    audit,
    async kinds() {
      const pattern = `${globEscape(prefix)}r:*`
      const kinds = new Set<string>()
      let cursor = '0'
      do {
        const reply = await send(['SCAN', cursor, 'MATCH', pattern, 'COUNT', '1000', 'TYPE', 'hash'])
        if (!Array.isArray(reply) || reply.length !== 2 || !Array.isArray(reply[1])) throw new Error('redis: unexpected SCAN reply')
        cursor = String(reply[0])
        for (const key of reply[1] as unknown[]) kinds.add(String(key).slice(prefix.length + 2))
      } while (cursor !== '0')
      return [...kinds].sort()
    },
    origin,
    get connected() {
      return up
    },
    onConnection: (listener) => connection.add(listener),
    subscribe: (listener) => feed.add(listener),

    async get<T>(key: string) {
      return (await store.getVersioned<T>(key))?.value
    },
    async getVersioned<T>(key: string) {
      const [hash, field] = fieldOf(key)
      const raw = await send(['HGET', hash, field])
      return typeof raw === 'string' ? parseRecord<T>(raw) : undefined
    },
    async entries<T>(kind: string) {
      return (await store.entriesVersioned<T>(kind)).map(([key, v]): [string, T] => [key, v.value])
    },
    async entriesVersioned<T>(kind: string) {
      // a kind holding ':' lives in the hash of its first part; keep only its own keys
      const hash = hashOf(kindOf(kind))
      const start = `${kind}:`
      const found = new Map<string, Versioned<T>>()
      let cursor = '0'
      do {
        const reply = await send(['HSCAN', hash, cursor, 'COUNT', String(HSCAN_PAGE)])
        if (!Array.isArray(reply) || reply.length !== 2 || !Array.isArray(reply[1])) throw new Error('redis: unexpected HSCAN reply')
        cursor = String(reply[0])
        const pairs = reply[1] as unknown[]
        for (let i = 0; i + 1 < pairs.length; i += 2) {
          const key = String(pairs[i])
          // HSCAN may return a field twice while the hash grows; the map keeps one
          if (key.startsWith(start)) found.set(key, parseRecord<T>(String(pairs[i + 1])))
        }
      } while (cursor !== '0')
      return [...found]
    },
    async entriesPage<T>(kind: string, cursor: string | null, limit: number) {
      const hash = hashOf(kindOf(kind))
      const start = `${kind}:`
      const reply = await send(['HSCAN', hash, cursor ?? '0', 'COUNT', String(limit)])
      if (!Array.isArray(reply) || reply.length !== 2 || !Array.isArray(reply[1])) throw new Error('redis: unexpected HSCAN reply')
      const pairs = reply[1] as unknown[]
      const rows: Array<[string, Versioned<T>]> = []
      for (let i = 0; i + 1 < pairs.length; i += 2) {
        const key = String(pairs[i])
        if (key.startsWith(start)) rows.push([key, parseRecord<T>(String(pairs[i + 1]))])
      }
      const next = String(reply[0])
      return { rows, next: next === '0' ? null : next }
    },
    async set(key, value) {
      await write([], [{ key, value }])
    },
    async delete(key) {
      return write([{ key, expected: '*' }], [{ key, value: undefined }])
    },
    async commit(checks: Check[], writes: Write[]) {
      return write(
        checks.map((c) => ({ key: c.key, expected: c.seq === null ? '' : String(c.seq) })),
        writes,
      )
    },
    async increment(key, ttlMs, refresh = false) {
      return Number(await run(INCREMENT, [counterKey(key)], [String(Math.max(1, Math.ceil(ttlMs))), refresh ? '1' : '0']))
    },
    async readCounter(key) {
      const raw = await send(['GET', counterKey(key)])
      return raw === null || raw === undefined ? 0 : Number(raw)
    },
    async resetCounter(key) {
      await send(['DEL', counterKey(key)])
    },
    async claim(key, ttlMs) {
      return (await send(['SET', counterKey(key), '1', 'NX', 'PX', String(Math.max(1, Math.ceil(ttlMs)))])) === 'OK'
    },
    async close() {
      if (closed) return
      closed = true
      clearInterval(probe)
      for (const w of awaiting) w.done()
      awaiting = []
      for (const c of [subscriber, client]) {
        if (c.isReady) await c.close().catch(() => c.destroy())
        else if (c.isOpen) c.destroy()
      }
    },
  }
  return store
}
