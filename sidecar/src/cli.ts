/**
 * The operator command for the machine itself (`npx authsvc ...`): works
 * while the service is stopped, against the same data dir and store.
 *
 * It refuses to run while a sidecar is alive on that data dir: the running
 * sidecar holds every record in memory and would neither see nor keep the change.
 */
import { randomBytes } from 'node:crypto'
import { existsSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { loadConfig, operatorDataDir } from './kernel/config/load.js'
import { passwordProblem } from './identity/passwords.js'
import { ADMIN_ROLE } from './identity/principal.js'
import { nameKeyWith, usernameProblem } from './identity/users.js'
import { deriveKeys, loadMasterSecret } from './identity/secrets.js'
import { FieldCipher } from './store/field-crypto.js'
import { CopyRefused, copyStore, redactUrl } from './store/copy.js'
import { sqlitePath } from './store/kv.js'
import { openSharedStore, SecretMismatchError } from './store/open.js'
import type { SharedStore } from './store/shared-store.js'
import { openSqliteSharedStore } from './store/sqlite-store.js'
import { createLogger } from './kernel/log.js'
import { openServices, type Services } from './services.js'

const USAGE = `usage: authsvc user <command> | authsvc store copy --to TARGET
  user list                     list users
  user create-admin NAME        create an administrator
  user reset-password NAME      set a new password (revokes the user's sessions and API tokens)
  user reset-mfa NAME           turn the user's MFA off (they can enrol again)
  store copy --to TARGET        copy every user, session, token, MFA enrolment, grant, setting and audit event
                                of the configured store to TARGET: postgres://…, redis://… or a sqlite file path
options:
  --password-stdin              read the new password from standard input (else one is generated and printed)
  --force                       store copy: write over a target that already holds records
  --data-dir DIR                the data dir (default: $AUTHSVC_DATA_DIR, else <ComfyUI>/user/authsvc
                                when the package is in <ComfyUI>/custom_nodes, else <package>/users)`

class UsageError extends Error {}

function sidecarAlive(dataDir: string): number | null {
  let pid: number
  try {
    pid = Number(readFileSync(join(dataDir, 'sidecar.pid'), 'utf8').trim())
  } catch {
    return null
  }
  if (!Number.isInteger(pid) || pid <= 0) return null
  try {
    process.kill(pid, 0)
    return pid
  } catch (err) {
    // EPERM: it exists but belongs to another user (a service account): still alive
    return (err as NodeJS.ErrnoException).code === 'EPERM' ? pid : null
  }
}

async function readPassword(fromStdin: boolean): Promise<{ password: string; generated: boolean }> {
  if (!fromStdin) return { password: randomBytes(15).toString('base64url'), generated: true }
  const chunks: Buffer[] = []
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer)
  const password = Buffer.concat(chunks).toString('utf8').replace(/\r?\n$/, '')
  const problem = passwordProblem(password)
  if (problem) throw new UsageError(problem)
  return { password, generated: false }
}

export async function runCli(argv: string[], out: (line: string) => void): Promise<number> {
  const args = [...argv]
  const flag = (name: string) => {
    const i = args.indexOf(name)
    if (i < 0) return false
    args.splice(i, 1)
    return true
  }
  const option = (name: string) => {
    const i = args.indexOf(name)
    if (i < 0) return undefined
    const value = args[i + 1]
    if (value === undefined) throw new UsageError(`${name} needs a value`)
    args.splice(i, 2)
    return value
  }
  const passwordStdin = flag('--password-stdin')
  const force = flag('--force')
  const to = option('--to')
  const dataDirOption = option('--data-dir')
  const dataDir = dataDirOption !== undefined ? resolve(dataDirOption) : operatorDataDir(process.env)
  const [group, command, name] = args
  const copying = group === 'store' && command === 'copy' && name === undefined
  if (!copying && (group !== 'user' || !command)) throw new UsageError(USAGE)
  if (copying && to === undefined) throw new UsageError('store copy needs --to TARGET (postgres://…, redis://… or a sqlite file path)')
  const pid = sidecarAlive(dataDir)
  if (pid !== null) {
    out(`authsvc: the service is running on this data dir (sidecar pid ${pid}); stop ComfyUI first, or use the admin API`)
    return 3
  }
  if (copying) return storeCopy(dataDir, to as string, force, out)
  const log = createLogger({ level: 'warn' })
  const services = await openServices({ config: loadConfig(dataDir, process.env), dataDir, env: process.env, log, watchGroups: false })
  try {
    return await runCommand(services, command, name, passwordStdin, out)
  } finally {
    await services.close()
  }
}

async function runCommand(services: Services, command: string, name: string | undefined, passwordStdin: boolean, out: (line: string) => void): Promise<number> {
  const now = new Date(services.clock())
  if (command === 'list') {
    for (const u of services.users.list()) {
      out(`${u.username}\trole=${u.role}\tmfa=${u.mfa_enabled}\tdisabled=${u.disabled}\tcreated=${u.created_at_iso}`)
    }
    return 0
  }
  if (!name) throw new UsageError(USAGE)
  if (command === 'create-admin') {
    const problem = usernameProblem(name)
    if (problem) throw new UsageError(problem)
    if (services.users.byUsername(name)) throw new UsageError(`user ${name} already exists`)
    const { password, generated } = await readPassword(passwordStdin)
    await services.users.create({ username: name, role: ADMIN_ROLE, password_hash: await services.passwords.hash(password) }, now)
    out(`created administrator ${name}${generated ? `; password: ${password}` : ''}`)
    return 0
  }
  const user = services.users.byUsername(name)
  if (!user) throw new UsageError(`no user ${name}`)
  if (command === 'reset-password') {
    const { password, generated } = await readPassword(passwordStdin)
    await services.users.update(user.user_id, { password_hash: await services.passwords.hash(password) })
    await services.sessions.revokeAllForUser(user.user_id)
    await services.tokens.revokeAllForUser(user.user_id)
    out(`password of ${user.username} reset; sessions and API tokens revoked${generated ? `; new password: ${password}` : ''}`)
    return 0
  }
  if (command === 'reset-mfa') {
    await services.resetMfa(user.user_id)
    out(`MFA of ${user.username} turned off`)
    return 0
  }
  throw new UsageError(USAGE)
}

/** Where `--to` points: what to print about it (never a password) and how to open it. */
function copyTarget(to: string, sourcePath: string | null): { backend: 'sqlite' | 'postgres' | 'redis'; where: string; secret: string; open(): Promise<SharedStore> } {
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(to)?.[1]?.toLowerCase()
  if (scheme === undefined) {
    const path = resolve(to)
    if (path === sourcePath) throw new UsageError('--to names the source store itself')
    if (existsSync(path) && statSync(path).isDirectory()) throw new UsageError(`--to ${path} is a directory: name the sqlite file (for example ${join(path, 'authsvc.sqlite')})`)
    if (!existsSync(dirname(path))) throw new UsageError(`--to ${path}: its directory does not exist`)
    return { backend: 'sqlite', where: `sqlite file ${path}`, secret: '', open: () => openSqliteSharedStore(path) }
  }
  let url: URL
  try {
    url = new URL(to)
  } catch {
    throw new UsageError(`--to is not a valid ${scheme}:// URL`)
  }
  const secret = decodeURIComponent(url.password)
  if (scheme === 'postgres' || scheme === 'postgresql') {
    return { backend: 'postgres', where: redactUrl(to), secret, open: async () => (await import('./store/postgres-store.js')).openPostgresSharedStore(to) }
  }
  if (scheme === 'redis' || scheme === 'rediss') {
    return { backend: 'redis', where: redactUrl(to), secret, open: async () => (await import('./store/redis-store.js')).openRedisSharedStore(to, { openTimeoutMs: 3000 }) }
  }
  throw new UsageError(`--to ${scheme}:// is not a store authsvc knows: postgres://…, redis://… or a sqlite file path`)
}

/** An error's message without a password it may quote. */
function scrub(err: unknown, ...secrets: string[]): string {
  let message = err instanceof Error ? err.message : String(err)
  for (const secret of secrets) if (secret !== '') message = message.split(secret).join('***')
  return message
}

async function storeCopy(dataDir: string, to: string, force: boolean, out: (line: string) => void): Promise<number> {
  const env = process.env
  if (!existsSync(dataDir)) throw new Error(`no data dir at ${dataDir} (--data-dir, or AUTHSVC_DATA_DIR)`)
  if (!env.AUTHSVC_SECRET && !existsSync(join(dataDir, 'authsvc_secret.key'))) {
    throw new Error(`neither AUTHSVC_SECRET nor ${join(dataDir, 'authsvc_secret.key')} is there: run the copy with the AUTHSVC_SECRET the sidecar uses`)
  }
  const config = loadConfig(dataDir, env)
  const keys = deriveKeys(loadMasterSecret(dataDir, env))
  const cipher = new FieldCipher(keys.encryption)
  const backend = config.store.backend
  const sourcePath = backend === 'sqlite' ? resolve(sqlitePath(config, dataDir)) : null
  if (sourcePath !== null && !existsSync(sourcePath)) throw new Error(`there is no sqlite store at ${sourcePath} (--data-dir, or AUTHSVC_DATA_DIR)`)
  const sourceUrl = backend === 'postgres' ? config.store.postgres_url : backend === 'redis' ? config.store.redis_url : ''
  const sourceWhere = sourcePath !== null ? `sqlite file ${sourcePath}` : redactUrl(sourceUrl)
  const sourceSecret = sourceUrl === '' ? '' : (() => {
    try {
      return decodeURIComponent(new URL(sourceUrl).password)
    } catch {
      return ''
    }
  })()
  const target = copyTarget(to, sourcePath)
  if (target.backend !== 'sqlite' && target.where === sourceWhere) throw new UsageError('--to names the source store itself')

  const log = createLogger({ level: 'silent' })
  let source: SharedStore
  try {
    source = await openSharedStore(config, dataDir, log, Date.now)
  } catch (err) {
    throw new Error(`cannot open the source ${backend} store (${sourceWhere}): ${scrub(err, sourceSecret)}`)
  }
  try {
    let destination: SharedStore
    try {
      destination = await target.open()
    } catch (err) {
      throw new Error(`cannot reach the target ${target.backend} store (${target.where}): ${scrub(err, target.secret, to)}`)
    }
    try {
      out(`copying the ${backend} store (${sourceWhere}) to the ${target.backend} store (${target.where})`)
      const summary = await copyStore(source, destination, {
        force, storeCheck: keys.storeCheck, cipher, nameKey: nameKeyWith(keys.nameIndex), encryptionAll: config.store.encryption_level === 'all',
      })
      const records = [...summary.copied.values()].reduce((n, c) => n + c, 0)
      out(`records copied: ${records}${summary.copied.size > 0 ? ` (${[...summary.copied].map(([kind, n]) => `${kind}: ${n}`).join(', ')})` : ''}`)
      out(`audit events copied: ${summary.audit}`)
      if (summary.derived > 0) out(`written for the ${target.backend} store: ${summary.derived} (the username index and the admin list, which the sqlite store does not keep)`)
      const local = [...summary.local].map(([kind, n]) => `${kind}: ${n}`).join(', ')
      out(`not copied: this host's own bookkeeping (prompt and file owners, client ids, download jobs, content tags, the update check${local ? `; here ${local}` : ''}), which stays in the data dir's sqlite file on every backend; failed-login counters and used TOTP steps, which start empty`)
      out(
        target.backend === 'sqlite'
          ? `done. To use it: set store.backend to "sqlite" and store.sqlite_path to the file in ${join(dataDir, 'config.json')}, then restart`
          : `done. To use it: set store.backend to "${target.backend}" and store.${target.backend}_url in ${join(dataDir, 'config.json')}, then restart every instance with the same AUTHSVC_SECRET and encryption_level`,
      )
      return 0
    } catch (err) {
      if (err instanceof SecretMismatchError || err instanceof CopyRefused) throw err
      throw new Error(`the copy stopped: ${scrub(err, target.secret, sourceSecret, to)}`)
    } finally {
      await destination.close().catch(() => {})
    }
  } finally {
    await source.close().catch(() => {})
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  runCli(process.argv.slice(2), (line) => console.log(line))
    .then((code) => process.exit(code))
    .catch((err: unknown) => {
      console.error(err instanceof UsageError ? err.message : `authsvc: ${(err as Error).message}`)
      process.exit(err instanceof UsageError ? 2 : 1)
    })
}
