/**
 * `authsvc store copy --to <url>` (issue 28, item 10): every record of the
 * configured store, and its audit log, into another store, so an operator moves
 * from sqlite to PostgreSQL or Redis (or back) without losing anyone.
 *
 * - Values are copied as stored: sealed fields (MFA secrets, the ntfy token, a
 *   download key) and, under `encryption_level: all`, whole sealed records keep
 *   their ciphertext, bound to the same key; nothing is opened and sealed again.
 *   The target must be used with the same AUTHSVC_SECRET and encryption_level.
 * - Before anything is written, the secret is checked on both sides: a shared
 *   source's check value, one sealed value of the source (an MFA secret, or any
 *   record under `all`), and a target's check value; then the target's check
 *   value is written (shared targets), as the first instance would.
 * - A target that holds records or audit events is refused unless `force`;
 *   the refusal says what it found.
 * - This host's own bookkeeping (services.ts `localKv`: prompt and file owners,
 *   client ids, download jobs and the grants of what they downloaded, content
 *   tags and scans, the update check) stays
 *   in the data dir's sqlite file on every backend and is not copied; nor are
 *   counters and claims (failed-login counts, used TOTP steps), which are not records.
 * - A shared target gets what the sqlite backend never writes: the username
 *   index and the admin list (identity/users.ts), derived from the users copied.
 */
import type { FieldCipher } from './field-crypto.js'
import { openRecord, sealRecord } from './field-crypto.js'
import { SECRET_CHECK_KEY, SecretMismatchError } from './open.js'
import { kindOf, type SharedStore, type Write } from './shared-store.js'

/** kinds of this host's own bookkeeping (services.ts `localKv`): never copied */
export const LOCAL_KINDS: readonly string[] = ['prompt', 'file', 'client_id', 'download_job', 'model_host_grant', 'nsfw_tag', 'nsfw_scan', 'update_check']
const ADMINS_KEY = 'meta:admins'
const RECORDS_PER_COMMIT = 200
/** records read from the source per page: a kind of a million sessions is never held whole */
const COPY_PAGE = 2000
const AUDIT_PAGE = 1000

export class CopyRefused extends Error {}

export interface CopyOptions {
  /** the target may hold records already; they are written over (key by key), audit events appended */
  force: boolean
  /** keys.storeCheck of the secret in use */
  storeCheck: string
  cipher: FieldCipher
  /** identity/users.ts's name index key of a username (keys.nameIndex) */
  nameKey: (username: string) => string
  encryptionAll: boolean
}

export interface CopySummary {
  /** records copied, per kind */
  copied: Map<string, number>
  /** records left behind (this host's own), per kind */
  local: Map<string, number>
  /** records written for a shared target from the users copied: username index, admin list */
  derived: number
  audit: number
}

interface UserLike {
  user_id: string
  username: string
  role: string
  disabled: boolean
}

/** until the store says it is connected again, at most `ms` */
function reconnected(store: SharedStore, ms: number): Promise<void> {
  if (store.connected) return Promise.resolve()
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      off()
      resolve()
    }, ms)
    const off = store.onConnection((connected) => {
      if (!connected) return
      clearTimeout(timer)
      off()
      resolve()
    })
  })
}

/**
 * Writes records as they are, again after a refusal of a loaded or briefly lost server (a write
 * of the same values is the same write): a long copy should not stop at one slow answer.
 */
async function writeBatch(target: SharedStore, writes: Write[]): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await target.commit([], writes)
      return
    } catch (err) {
      if (attempt >= 3 || (err as { code?: unknown }).code !== 'STORE_UNAVAILABLE') throw err
      await reconnected(target, 5000)
    }
  }
}

function describeCounts(counts: Map<string, number>): string {
  return [...counts].map(([kind, n]) => `${kind}: ${n}`).join(', ')
}

/** Refuses (SecretMismatchError) when AUTHSVC_SECRET is not the one the source's sealed values were made with. */
async function checkSourceSecret(source: SharedStore, options: CopyOptions): Promise<void> {
  const found = await source.get<{ value: string }>(SECRET_CHECK_KEY)
  if (found !== undefined && found.value !== options.storeCheck) {
    throw new SecretMismatchError(`AUTHSVC_SECRET differs from the one the source ${source.backend} store was set up with: run the copy with the AUTHSVC_SECRET its instances use`)
  }
  const refuse = () => {
    throw new SecretMismatchError(`AUTHSVC_SECRET does not open the sealed values of the source ${source.backend} store: run the copy with the AUTHSVC_SECRET its instances use`)
  }
  if (options.encryptionAll) {
    for (const kind of await source.kinds()) {
      let first: [string, string] | undefined
      for await (const rows of pagesOf<string>(source, kind)) { // the check value is never sealed (pagesOf leaves it out)
        first = rows[0]
        break
      }
      if (first === undefined) continue
      try {
        openRecord(options.cipher, first[1], first[0])
      } catch {
        refuse()
      }
      return
    }
    return
  }
  for await (const rows of pagesOf<{ user_id: string; secret?: string }>(source, 'mfa')) {
    for (const [, mfa] of rows) {
      if (mfa.secret === undefined) continue
      try {
        options.cipher.decrypt(mfa.secret, `mfa:${mfa.user_id}:secret`)
      } catch {
        refuse()
      }
      return
    }
  }
}

/** Every record of a kind, a page at a time (never the whole kind in memory). */
async function* pagesOf<T>(store: SharedStore, kind: string): AsyncGenerator<Array<[string, T]>> {
  let cursor: string | null = null
  do {
    const page: { rows: Array<[string, { value: T; seq: number }]>; next: string | null } = await store.entriesPage<T>(kind, cursor, COPY_PAGE)
    const rows = page.rows.filter(([key]) => key !== SECRET_CHECK_KEY).map(([key, v]): [string, T] => [key, v.value])
    if (rows.length > 0) yield rows
    cursor = page.next
  } while (cursor !== null)
}

export async function copyStore(source: SharedStore, target: SharedStore, options: CopyOptions): Promise<CopySummary> {
  await checkSourceSecret(source, options)
  const targetCheck = await target.get<{ value: string }>(SECRET_CHECK_KEY)
  if (targetCheck !== undefined && targetCheck.value !== options.storeCheck) {
    throw new SecretMismatchError(`AUTHSVC_SECRET differs from the one the target ${target.backend} store was set up with: a store holds one secret's records only`)
  }
  if (!options.force) {
    const held = new Map<string, number>()
    for (const kind of await target.kinds()) {
      let n = 0
      for await (const rows of pagesOf(target, kind)) n += rows.length
      if (n > 0) held.set(kind, n)
    }
    const events = await target.audit.count()
    if (held.size > 0 || events > 0) {
      const what = [held.size > 0 ? `records (${describeCounts(held)})` : '', events > 0 ? `${events} audit events` : ''].filter(Boolean).join(' and ')
      throw new CopyRefused(`the target ${target.backend} store is not empty: it holds ${what}; copy into an empty store, or pass --force to write over it`)
    }
  }
  // as the first instance on a shared store would: the check value before any record
  if (target.backend !== 'sqlite' && targetCheck === undefined) {
    await target.commit([{ key: SECRET_CHECK_KEY, seq: null }], [{ key: SECRET_CHECK_KEY, value: { value: options.storeCheck } }])
  }

  const summary: CopySummary = { copied: new Map(), local: new Map(), derived: 0, audit: 0 }
  // the keys a shared store derives (the username index, the admin list) are remembered only for
  // their own kinds: a Set of every key copied would hold a million sessions' keys
  const derivedKinds = new Set([kindOf(options.nameKey('x')), kindOf(ADMINS_KEY)])
  const copiedKeys = new Set<string>()
  const users: UserLike[] = []
  for (const kind of await source.kinds()) {
    let n = 0
    for await (const records of pagesOf<unknown>(source, kind)) {
      n += records.length
      if (LOCAL_KINDS.includes(kind)) continue
      for (let i = 0; i < records.length; i += RECORDS_PER_COMMIT) {
        await writeBatch(target, records.slice(i, i + RECORDS_PER_COMMIT).map(([key, value]) => ({ key, value })))
      }
      for (const [key, value] of records) {
        if (derivedKinds.has(kind)) copiedKeys.add(key)
        if (kind === 'user') users.push(options.encryptionAll ? openRecord<UserLike>(options.cipher, value as string, key) : (value as UserLike))
      }
    }
    if (n === 0) continue
    if (LOCAL_KINDS.includes(kind)) summary.local.set(kind, n)
    else summary.copied.set(kind, n)
  }

  if (target.backend !== 'sqlite') {
    // what a shared store's user repository checks and the sqlite backend never writes
    const seal = (key: string, value: unknown) => (options.encryptionAll ? sealRecord(options.cipher, value, key) : value)
    const derived: Write[] = []
    for (const user of users) {
      const key = options.nameKey(user.username)
      if (!copiedKeys.has(key)) derived.push({ key, value: seal(key, { user_id: user.user_id }) })
    }
    if (!copiedKeys.has(ADMINS_KEY)) {
      const ids = users.filter((u) => u.role === 'admin' && !u.disabled).map((u) => u.user_id)
      derived.push({ key: ADMINS_KEY, value: seal(ADMINS_KEY, { ids }) })
    }
    for (let i = 0; i < derived.length; i += RECORDS_PER_COMMIT) await writeBatch(target, derived.slice(i, i + RECORDS_PER_COMMIT))
    summary.derived = derived.length
  }

  for (let after = 0; ; ) {
    const rows = await source.audit.page(after, AUDIT_PAGE)
    if (rows.length === 0) break
    await target.audit.append(rows.map(({ seq: _seq, ...row }) => row))
    summary.audit += rows.length
    after = rows[rows.length - 1].seq
  }
  return summary
}

/** A URL as it may be printed: scheme, host, port and path; never the user, the password or a query but Redis's `prefix`. */
export function redactUrl(raw: string): string {
  try {
    const url = new URL(raw)
    const prefix = url.searchParams.get('prefix')
    url.username = ''
    url.password = ''
    url.search = ''
    url.hash = ''
    if (prefix !== null) url.searchParams.set('prefix', prefix)
    return url.toString()
  } catch {
    return '(unparseable URL)'
  }
}
