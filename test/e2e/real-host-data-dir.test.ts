/**
 * Issue 28, item 9, on the REAL ComfyUI 0.3.64: the data dir lives in ComfyUI's user directory
 * and survives the package.
 *
 * The package is installed as a user installs it (a git clone of this repository's committed
 * HEAD into custom_nodes/, install.py; node_modules hardlinked from this checkout's, npm is not
 * the subject here). Before the first start the clone holds a `users/` folder the way an older
 * authsvc left it (an administrator created by `npx authsvc user create-admin` into it).
 * ComfyUI runs with `--user-directory` in a deep folder (so the data dir's socket paths would
 * not fit in sun_path) and without AUTHSVC_DATA_DIR. In order:
 *
 * 1. The first start moves `users/` to `<user_dir>/authsvc` (one log line); the administrator
 *    signs in with the old password; the data dir holds the store, the secret and the pid
 *    file, its sockets are in the short /tmp folder (docs/decisions.md).
 * 2. Rows: every host route that serves files (userdata read, list, v2 list, write, delete,
 *    move; /view with each type; the static routes of the frontend and of the package) asked,
 *    as the administrator and as a user, for the store, the secret and the config by every
 *    path shape: none answers 2xx or any of their bytes, and nothing in the data dir changes.
 * 3. Reinstall: ComfyUI stopped, the package folder removed, cloned again, install.py, start:
 *    both users sign in as before, nothing is moved again, the store is the same file.
 *
 * One aiohttp (3.11, ComfyUI's own, unless AUTHSVC_TEST_AIOHTTP names another). Requests that
 * carry `..` go out through node:http so that they reach the host as written.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { request } from 'node:http'
import { createHash } from 'node:crypto'
import { execFileSync, spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import { HOST_AIOHTTP, ROOT } from '../helpers/stack.js'
import { REAL_COMFYUI, REAL_HOST_SKIP, startRealHost, type RealHost } from '../helpers/real-host.js'
import { PASSWORD, login, register, apiToken } from '../helpers/client.js'
import { clone, lines, runInstallPy, until } from './install-kit.js'

const AIOHTTP = HOST_AIOHTTP
const ADMIN_PASSWORD = 'an-old-administrator-password'
const CONFIG_MARK = 'authsvc-config-marker-0b5e'

interface Answer { status: number; text: string; bytes: Buffer }

/** One request, the path sent byte for byte as written. */
function send(base: string, method: string, path: string, token: string, body?: string): Promise<Answer> {
  const url = new URL(base)
  const headers: Record<string, string> = { Accept: 'application/json', Authorization: `Bearer ${token}` }
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json'
    headers['Content-Length'] = String(Buffer.byteLength(body))
  }
  return new Promise((resolve, reject) => {
    const req = request({ host: url.hostname, port: url.port, method, path, headers }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (d: Buffer) => chunks.push(d))
      res.on('end', () => {
        const bytes = Buffer.concat(chunks)
        resolve({ status: res.statusCode ?? 0, text: bytes.toString('utf8'), bytes })
      })
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(body)
  })
}

const enc = encodeURIComponent
/** `/`-separated, every segment percent-encoded the way a client might (dots too). */
const dots = (rel: string) => rel.replace(/\.\./g, '%2e%2e')

function mode(path: string): number {
  return statSync(path).mode & 0o777
}

/** name → size:mtime of every entry in the data dir (sockets are elsewhere; the WAL moves with writes: only the files the rows aim at) */
function fingerprint(dir: string, names: string[]): Record<string, string> {
  return Object.fromEntries(names.map((n) => {
    const s = statSync(join(dir, n))
    return [n, `${s.size}:${s.mtimeMs}:${s.ino}`]
  }))
}

describe(`the data dir in ComfyUI's user directory, on the real ComfyUI (aiohttp ${AIOHTTP})`, { skip: REAL_HOST_SKIP, concurrency: false }, () => {
  let dir = ''
  let pkg = ''
  let userDir = ''
  let dataDir = ''
  let savedModules = ''
  let host: RealHost | undefined
  const env: NodeJS.ProcessEnv = { AUTHSVC_DATA_DIR: '', AUTHSVC_SECRET: '' }

  async function start(): Promise<RealHost> {
    host = await startRealHost({ aiohttp: AIOHTTP, gate: false, customNodes: [pkg], noWait: true, env, args: ['--user-directory', userDir] })
    const h = host
    await until(async () => {
      try {
        const res = await fetch(`${h.url}/authsvc/health`)
        await res.arrayBuffer()
        return res.status === 200 ? true : undefined
      } catch {
        return undefined
      }
    }, 120_000, 'the sidecar behind the real ComfyUI', h.output)
    return h
  }

  /** A clone with this checkout's node_modules (hardlinked), built by install.py. */
  async function install(): Promise<void> {
    clone(pkg)
    execFileSync('cp', ['-al', savedModules, join(pkg, 'node_modules')])
    const run = await runInstallPy(pkg)
    assert.equal(run.status, 0, run.stdout + run.stderr)
  }

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'as-datadir-'))
    pkg = join(dir, 'pkg', 'authsvc')
    // deep enough that <data dir>/authsvc-http.sock does not fit in sun_path (108 bytes)
    userDir = join(dir, 'a-comfyui-user-directory-given-by-flag', 'deep-enough-for-the-socket-path', 'user')
    dataDir = join(userDir, 'authsvc')
    assert.ok(Buffer.byteLength(join(dataDir, 'authsvc.sock')) > 100, 'the user directory is deep enough for this test')
    mkdirSync(userDir, { recursive: true }) // ComfyUI refuses a --user-directory that does not exist
    savedModules = join(dir, 'node_modules')
    execFileSync('cp', ['-al', realpathSync(join(ROOT, 'node_modules')), savedModules])
    mkdirSync(join(dir, 'pkg'))
    await install()
    // the data dir an older authsvc kept in the package folder, with an administrator in it
    mkdirSync(join(pkg, 'users'), { mode: 0o700 })
    const cli = spawnSync(process.execPath, [join(pkg, 'bin', 'authsvc.mjs'), 'user', 'create-admin', 'admin', '--password-stdin', '--data-dir', join(pkg, 'users')], {
      input: `${ADMIN_PASSWORD}\n`, encoding: 'utf8', env: { ...process.env, ...env },
    })
    assert.equal(cli.status, 0, cli.stdout + cli.stderr)
    assert.match(cli.stdout, /created administrator admin/)
    // a config with a marker a leak would show (a harmless key: a route pattern nothing matches)
    writeFileSync(join(pkg, 'users', 'config.json'), JSON.stringify({ admin_route_patterns: [`/${CONFIG_MARK}`] }), { mode: 0o600 })
  })

  after(async () => {
    await host?.stop()
    rmSync(dir, { recursive: true, force: true })
    if (dataDir) rmSync(shortSocketDir(), { recursive: true, force: true })
  })

  const shortSocketDir = () => join('/tmp', `authsvc-${process.getuid!()}-${createHash('sha256').update(dataDir).digest('hex').slice(0, 12)}`)

  let adminToken = ''
  let aliceToken = ''
  let storeIno = 0

  it('the first start moves the package\'s users/ into <user_dir>/authsvc once, with one log line; the old administrator signs in', { timeout: 240_000 }, async () => {
    const legacyStore = statSync(join(pkg, 'users', 'authsvc.sqlite')).ino
    const h = await start()
    assert.equal(existsSync(join(pkg, 'users')), false, 'the old folder is gone')
    assert.equal(mode(dataDir), 0o700)
    for (const name of ['authsvc.sqlite', 'authsvc_secret.key', 'sidecar.pid']) assert.equal(mode(join(dataDir, name)), 0o600, name)
    storeIno = statSync(join(dataDir, 'authsvc.sqlite')).ino
    assert.equal(storeIno, legacyStore, 'one filesystem: a rename, the same file')
    const moved = lines(h.output(), /moved the data dir/)
    assert.equal(moved.length, 1, h.output())
    // from the package as ComfyUI loads it (custom_nodes/authsvc, a link to the clone here) to the data dir
    assert.ok(moved[0].includes(join('custom_nodes', 'authsvc', 'users')) && moved[0].endsWith(`to ${dataDir} (it now survives reinstalling the package)`), moved[0])
    // the sockets: too long a path for sun_path in the data dir, so in this user's short /tmp folder
    const short = shortSocketDir()
    assert.equal(mode(short), 0o700)
    for (const name of ['authsvc.sock', 'authsvc-http.sock']) {
      assert.ok(statSync(join(short, name)).isSocket(), name)
      assert.equal(mode(join(short, name)), 0o600, name)
      assert.equal(existsSync(join(dataDir, name)), false, `${name} is not in the data dir`)
    }
    adminToken = (await login(h, 'admin', ADMIN_PASSWORD)).jwt
    assert.equal((await register(h, 'alice', { bearer: adminToken })).status, 201)
    aliceToken = await apiToken(h, 'alice')
  })

  it('no host route reaches the data dir: userdata, /view, static files, by every path shape', { timeout: 120_000 }, async () => {
    const h = host!
    // the files the rows aim at, with contents a leak would show
    assert.ok(existsSync(join(dataDir, 'config.json')), `config.json moved with the rest: ${readdirSync(dataDir).join(', ')}`)
    assert.ok(readFileSync(join(dataDir, 'config.json'), 'utf8').includes(CONFIG_MARK))
    const secret = readFileSync(join(dataDir, 'authsvc_secret.key'))
    const targets = ['authsvc.sqlite', 'authsvc_secret.key', 'config.json']
    const before = fingerprint(dataDir, targets)
    // alice's own file, for the move rows
    assert.equal((await send(h.url, 'POST', `/userdata/${enc('workflows/mine.json')}`, aliceToken, '{"mine":1}')).status, 200)
    const fromUser = (file: string) => `..%2Fauthsvc%2F${file}` // from <user_dir>/<comfy-user> up to <user_dir>/authsvc
    const abs = (file: string) => enc(join(dataDir, file))
    const rel = (from: string, file: string) => relative(from, join(dataDir, file))
    const frontend = join(REAL_COMFYUI, 'frontend')
    const extensionDir = join(pkg, 'web')
    // [method, path, status]
    const rows: Array<[string, string, number]> = []
    for (const file of targets) {
      for (const prefix of ['', '/api']) {
        rows.push(
          ['GET', `${prefix}/userdata/${fromUser(file)}`, 403],
          ['GET', `${prefix}/userdata/${fromUser(file).replace(/%2F/g, '%252F')}`, 403],
          ['GET', `${prefix}/userdata/%2e%2e%2Fauthsvc%2F${file}`, 403],
          ['GET', `${prefix}/userdata/workflows%2F..%2F..%2Fauthsvc%2F${file}`, 403],
          ['GET', `${prefix}/userdata/${abs(file)}`, 403],
          ['POST', `${prefix}/userdata/${fromUser(file)}?overwrite=true`, 403],
          ['DELETE', `${prefix}/userdata/${fromUser(file)}`, 403],
          ['POST', `${prefix}/userdata/${fromUser(file)}/move/workflows%2Fgot-it.json`, 403],
          ['POST', `${prefix}/userdata/workflows%2Fmine.json/move/${fromUser(file)}`, 403],
        )
      }
      for (const type of ['output', 'input', 'temp']) {
        const typeDir = join(h.baseDir, type)
        rows.push(
          ['GET', `/view?filename=${file}&type=${type}&subfolder=${enc(relative(typeDir, dataDir))}`, 403],
          ['GET', `/api/view?filename=${file}&type=${type}&subfolder=${dots(relative(typeDir, dataDir)).split('/').join('%2F')}`, 403],
          ['GET', `/view?filename=${enc(rel(typeDir, file))}&type=${type}`, 400],
          ['GET', `/view?filename=${file}&type=${type}&subfolder=${enc(dataDir)}`, 403],
        )
      }
      rows.push(
        ['GET', `/view?filename=${file}&type=${enc('../user')}&subfolder=authsvc`, 400],
        ['GET', `/${rel(frontend, file)}`, 404],
        ['GET', `/${dots(rel(frontend, file))}`, 404],
        ['GET', `/${rel(frontend, file).replace(/\//g, '%2F')}`, 404],
        ['GET', `/extensions/authsvc/${rel(extensionDir, file)}`, 404],
        ['GET', `/extensions/authsvc/${dots(rel(extensionDir, file))}`, 404],
        ['GET', `/extensions/authsvc/${rel(extensionDir, file).replace(/\//g, '%2F')}`, 404],
      )
    }
    for (const prefix of ['', '/api']) {
      rows.push(
        ['GET', `${prefix}/userdata?dir=..`, 403],
        ['GET', `${prefix}/userdata?dir=..%2Fauthsvc&recurse=true&full_info=true`, 403],
        ['GET', `${prefix}/userdata?dir=${enc('../authsvc')}&recurse=true&split=true`, 403],
        ['GET', `${prefix}/userdata?dir=%2e%2e&recurse=true`, 403],
        ['GET', `${prefix}/userdata?dir=${enc(userDir)}&recurse=true`, 403],
        ['GET', `${prefix}/userdata?dir=${enc(dataDir)}`, 403],
        ['GET', `${prefix}/v2/userdata?path=..`, 403],
        ['GET', `${prefix}/v2/userdata?path=..%2Fauthsvc`, 403],
        ['GET', `${prefix}/v2/userdata?path=${enc(dataDir)}`, 403],
      )
    }
    const leaks = [Buffer.from('SQLite format 3'), secret, Buffer.from(CONFIG_MARK), Buffer.from('authsvc_secret.key'), Buffer.from('authsvc.sqlite')]
    const wrong: string[] = []
    for (const [who, token] of [['admin', adminToken], ['alice', aliceToken]] as const) {
      for (const [method, path, want] of rows) {
        const body = method === 'POST' && !path.includes('/move/') ? '{"overwritten":true}' : undefined
        const res = await send(h.url, method, path, token, body)
        if (res.status !== want) wrong.push(`${who} ${method} ${path}: want ${want}, got ${res.status} ${res.text.slice(0, 160)}`)
        for (const leak of leaks) if (res.bytes.includes(leak)) wrong.push(`${who} ${method} ${path}: answered bytes of ${leak.toString('utf8').slice(0, 20)}`)
      }
    }
    assert.deepEqual(wrong, [])
    assert.deepEqual(fingerprint(dataDir, targets), before, 'nothing in the data dir changed')
    assert.deepEqual(readdirSync(dataDir).filter((n) => n.includes('got-it') || n.endsWith('.json') && n !== 'config.json' && n !== 'authsvc_groups.json'), [])
    assert.equal(readFileSync(join(userDir, aliceUserFolder(), 'workflows', 'mine.json'), 'utf8'), '{"mine":1}', 'the refused moves moved nothing')
  })

  /** alice's folder in the user dir: the one holding workflows/mine.json */
  function aliceUserFolder(): string {
    const found = readdirSync(userDir).filter((n) => existsSync(join(userDir, n, 'workflows', 'mine.json')))
    assert.equal(found.length, 1, JSON.stringify(readdirSync(userDir)))
    return found[0]
  }

  it('reinstall: the package folder removed, cloned again, install.py, start: every user signs in as before, nothing is moved again', { timeout: 300_000 }, async () => {
    await host!.stop()
    host = undefined
    rmSync(pkg, { recursive: true, force: true })
    await install()
    assert.equal(existsSync(join(pkg, 'users')), false)
    const h = await start()
    assert.deepEqual(lines(h.output(), /moved the data dir|was not moved/), [])
    assert.equal(existsSync(join(pkg, 'users')), false, 'no new data dir in the package folder')
    assert.equal(statSync(join(dataDir, 'authsvc.sqlite')).ino, storeIno, 'the same store')
    await login(h, 'admin', ADMIN_PASSWORD)
    await login(h, 'alice', PASSWORD)
    // an API token made before the reinstall still works (the secret and the store survived)
    const res = await send(h.url, 'GET', '/userdata?dir=workflows', aliceToken)
    assert.equal(res.status, 200, res.text)
    assert.deepEqual(JSON.parse(res.text), ['mine.json'])
  })
})
