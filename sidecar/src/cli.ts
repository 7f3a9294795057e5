/**
 * The operator command for the machine itself (`npx authsvc ...`): works
 * while the service is stopped, against the same data dir and store.
 *
 * It refuses to run while a sidecar is alive on that data dir: the running
 * sidecar holds every record in memory and would neither see nor keep the change.
 */
import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { loadConfig, operatorDataDir } from './kernel/config/load.js'
import { passwordProblem } from './identity/passwords.js'
import { ADMIN_ROLE } from './identity/principal.js'
import { usernameProblem } from './identity/users.js'
import { createLogger } from './kernel/log.js'
import { openServices, type Services } from './services.js'

const USAGE = `usage: authsvc user <command>
  list                          list users
  create-admin NAME             create an administrator
  reset-password NAME           set a new password (revokes the user's sessions and API tokens)
  reset-mfa NAME                turn the user's MFA off (they can enrol again)
options:
  --password-stdin              read the new password from standard input (else one is generated and printed)
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
  const dataDirOption = option('--data-dir')
  const dataDir = dataDirOption !== undefined ? resolve(dataDirOption) : operatorDataDir(process.env)
  const [group, command, name] = args
  if (group !== 'user' || !command) throw new UsageError(USAGE)
  const pid = sidecarAlive(dataDir)
  if (pid !== null) {
    out(`authsvc: the service is running on this data dir (sidecar pid ${pid}); stop ComfyUI first, or use the admin API`)
    return 3
  }
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

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  runCli(process.argv.slice(2), (line) => console.log(line))
    .then((code) => process.exit(code))
    .catch((err: unknown) => {
      console.error(err instanceof UsageError ? err.message : `authsvc: ${(err as Error).message}`)
      process.exit(err instanceof UsageError ? 2 : 1)
    })
}
