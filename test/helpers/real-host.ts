/**
 * The REAL ComfyUI 0.3.64 as the e2e host: ComfyUI loads this package from its
 * custom_nodes/ (the plugin then spawns the sidecar), on a free port, with a
 * temp base dir and data dir. The returned object has the `Stack` fields the
 * e2e tests use (url, dir, dataDir, baseDir, output(), sidecarPid(),
 * waitReady(), stop()) plus restart() and the host's folders.
 *
 * Source: `COMFYUI_DIR` (a ComfyUI checkout, used in place), else one pristine
 * extraction of ../shared/real-comfyui/ComfyUI-0.3.64.tar.gz cached under
 * .cache/ (byte-compiled once). The source is never written by a test: every
 * run gets its own `--base-directory` (models/, input/, output/, temp/, user/,
 * custom_nodes/) and `--database-url` inside its temp dir. Command line as
 * run.sh's: `main.py --cpu --listen 127.0.0.1 --port P --front-end-root
 * <real-comfyui>/frontend`, `PYTHONPATH=<real-comfyui>/stubs` first.
 *
 * Skip where neither exists: `describe(name, { skip: REAL_HOST_SKIP }, ...)`.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process'
import {
  existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync,
} from 'node:fs'
import { basename, dirname, join, resolve } from 'node:path'
import { once } from 'node:events'
import { ROOT, PYTHON, aiohttp311Dir, freePort, type AiohttpVersion } from './stack.js'
import { scratchDir } from './temp-dir.js'

export { freePort }

export const REAL_COMFYUI = resolve(ROOT, '..', 'shared', 'real-comfyui')
const TARBALL = join(REAL_COMFYUI, 'ComfyUI-0.3.64.tar.gz')
const CACHE = join(ROOT, '.cache', 'real-comfyui')

/** True when a real ComfyUI can be started: `COMFYUI_DIR`, or the shared archive. */
export function realHostAvailable(): boolean {
  const dir = process.env.COMFYUI_DIR
  if (dir) return existsSync(join(dir, 'main.py'))
  return existsSync(TARBALL)
}

/** `false`, or the one-line reason for `describe(..., { skip: REAL_HOST_SKIP })`. */
export const REAL_HOST_SKIP: string | false = realHostAvailable()
  ? false
  : process.env.COMFYUI_DIR
    ? `real ComfyUI: COMFYUI_DIR=${process.env.COMFYUI_DIR} has no main.py`
    : `real ComfyUI not available: neither ${REAL_COMFYUI} nor COMFYUI_DIR exists`

export interface RealHostOptions {
  /** '3.8' (Debian's) or '3.11' (scripts/aiohttp311.sh); default '3.8' */
  aiohttp?: AiohttpVersion
  /** adds --multi-user */
  multiUser?: boolean
  /** more main.py arguments, after run.sh's (not --dont-print-server: start-up waits for its "To see the GUI" line) */
  args?: string[]
  /** more environment for ComfyUI (and so the plugin and sidecar) */
  env?: NodeJS.ProcessEnv
  /** written to <dataDir>/config.json */
  config?: Record<string, unknown>
  /**
   * Files under <baseDir>/models/: a list of paths (`checkpoints/tiny.safetensors`; a
   * `.safetensors` name gets a tiny valid safetensors file, others a few bytes), or
   * path → content.
   */
  models?: string[] | Record<string, string | Uint8Array>
  /** any other files, path relative to baseDir (`input/sub/a.png`) → content */
  files?: Record<string, string | Uint8Array>
  /** text of an extra_model_paths.yaml, written to <dir>/extra_model_paths.yaml and passed with --extra-model-paths-config */
  extraModelPaths?: string
  /** more custom-node folders to link into custom_nodes/ (by their folder name) */
  customNodes?: string[]
  /** link this package into custom_nodes/authsvc (default true); false gives a bare ComfyUI */
  gate?: boolean
  /** do not wait for the sidecar's /authsvc/health (fail-closed tests) */
  noWait?: boolean
  /** an existing dir from an earlier run to reuse (keeps baseDir and dataDir) */
  dir?: string
}

export interface RealHost {
  /** temp dir holding base/, data/ and comfyui.log-free state */
  dir: string
  /** AUTHSVC_DATA_DIR */
  dataDir: string
  /** ComfyUI's --base-directory */
  baseDir: string
  outputDir: string
  inputDir: string
  tempDir: string
  userDir: string
  modelsDir: string
  /** the ComfyUI source used (COMFYUI_DIR or the cached extraction) */
  comfyDir: string
  /** http://127.0.0.1:<port>; changes only if restart() had to take another port */
  url: string
  port: number
  aiohttp: AiohttpVersion
  /** the running ComfyUI process (leader of its own process group) */
  host: ChildProcess
  /** ComfyUI's stdout+stderr (and the sidecar's, which inherits them) since the last (re)start */
  output(): string
  sidecarPid(): number
  /** until /authsvc/health answers 200 (with the gate), or ComfyUI answers HTTP (without) */
  waitReady(timeoutMs?: number): Promise<void>
  /**
   * SIGTERM to ComfyUI (as run.sh stop), then waits for every process of its group (the
   * sidecar leaves when its stdin closes). Returns the pids that were still alive 5 s after
   * ComfyUI exited and had to be killed (an empty list when the tree ended by itself).
   */
  stop(): Promise<{ leftovers: number[] }>
  /** stop() and start ComfyUI again on the same dirs (same port unless it is taken) */
  restart(): Promise<void>
}

// ---------------------------------------------------------------------------------------
// source

function tarballStamp(): string {
  const s = statSync(TARBALL)
  return `${s.size}:${s.mtimeMs}`
}

/** One pristine, byte-compiled extraction per archive, built once (atomic rename; concurrent builders race harmlessly). */
function cachedSource(): string {
  const target = join(CACHE, 'ComfyUI-0.3.64')
  const stampFile = join(target, '.authsvc-complete')
  const stamp = tarballStamp()
  if (existsSync(stampFile) && readFileSync(stampFile, 'utf8') === stamp) return target
  mkdirSync(CACHE, { recursive: true })
  const building = mkdtempSync(join(CACHE, 'building-'))
  execFileSync('tar', ['-xzf', TARBALL, '-C', building, '--strip-components=1'])
  // Compile once so that each start does not (about 0.6 s of a 3.5 s start).
  execFileSync(comfyPython(), ['-m', 'compileall', '-q', '-j', '0', '-x', '/tests(-unit)?/', building], { stdio: 'ignore' })
  writeFileSync(join(building, '.authsvc-complete'), stamp)
  if (existsSync(target)) {
    if (existsSync(stampFile) && readFileSync(stampFile, 'utf8') === stamp) {
      rmSync(building, { recursive: true, force: true })
      return target
    }
    rmSync(target, { recursive: true, force: true })
  }
  try {
    renameSync(building, target)
  } catch {
    // another process renamed its copy first
    rmSync(building, { recursive: true, force: true })
  }
  return target
}

function comfyPython(): string {
  return process.env.COMFYUI_PYTHON ?? PYTHON
}

export function comfySource(): string {
  if (process.env.COMFYUI_DIR) return resolve(process.env.COMFYUI_DIR)
  return cachedSource()
}

// ---------------------------------------------------------------------------------------
// files

/** A tiny valid safetensors file: u64 LE header length, JSON header, one F32 tensor of 1 element. */
export function tinySafetensors(metadata: Record<string, string> = { 'modelspec.title': 'authsvc test model' }): Buffer {
  const header = Buffer.from(JSON.stringify({ __metadata__: metadata, weight: { dtype: 'F32', shape: [1], data_offsets: [0, 4] } }))
  const length = Buffer.alloc(8)
  length.writeBigUInt64LE(BigInt(header.length))
  const data = Buffer.alloc(4)
  data.writeFloatLE(1)
  return Buffer.concat([length, header, data])
}

function writeFile(path: string, content: string | Uint8Array): void {
  mkdirSync(dirname(path), { recursive: true })
  writeFileSync(path, content)
}


// ---------------------------------------------------------------------------------------
// processes

/** State and process group of `pid` from /proc/<pid>/stat (fields 3 and 5), or null once it is gone. */
function procStat(pid: number): { state: string; pgid: number } | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return { state: fields[0], pgid: Number(fields[2]) }
  } catch {
    return null
  }
}

/** True while `pid` runs: a zombie (exited, not yet reaped by its new parent) does not count. */
export function running(pid: number): boolean {
  const stat = procStat(pid)
  return stat !== null && stat.state !== 'Z'
}

/** The process group of `pid` (ComfyUI leads its own: the sidecar and its workers are in it). */
export function processGroup(pid: number): number | null {
  return procStat(pid)?.pgid ?? null
}

/** Running pids whose process group is `pgid`. */
function groupMembers(pgid: number): number[] {
  return readdirSync('/proc').filter((e) => /^\d+$/.test(e)).map(Number)
    .filter((pid) => {
      const stat = procStat(pid)
      return stat !== null && stat.pgid === pgid && stat.state !== 'Z'
    })
}

const liveGroups = new Set<number>()
process.on('exit', () => {
  // the test process is ending with hosts still up (a failed before/after): no orphans
  for (const pgid of liveGroups) {
    try {
      process.kill(-pgid, 'SIGKILL')
    } catch {
      // gone
    }
  }
})

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

// ---------------------------------------------------------------------------------------

export async function startRealHost(options: RealHostOptions = {}): Promise<RealHost> {
  if (REAL_HOST_SKIP) throw new Error(REAL_HOST_SKIP)
  const comfyDir = comfySource()
  const aiohttp = options.aiohttp ?? '3.8'
  const dir = options.dir ?? scratchDir('as-real-')
  const baseDir = join(dir, 'base')
  const dataDir = join(dir, 'data')
  const paths = {
    outputDir: join(baseDir, 'output'),
    inputDir: join(baseDir, 'input'),
    tempDir: join(baseDir, 'temp'),
    userDir: join(baseDir, 'user'),
    modelsDir: join(baseDir, 'models'),
  }
  for (const d of [paths.outputDir, paths.inputDir, paths.userDir, join(baseDir, 'custom_nodes')]) mkdirSync(d, { recursive: true })
  // the model folders a fresh ComfyUI checkout has
  const sourceModels = join(comfyDir, 'models')
  if (existsSync(sourceModels)) {
    for (const entry of readdirSync(sourceModels, { withFileTypes: true })) {
      if (entry.isDirectory()) mkdirSync(join(paths.modelsDir, entry.name), { recursive: true })
    }
  }
  mkdirSync(dataDir, { recursive: true, mode: 0o700 })
  if (options.gate !== false) {
    const link = join(baseDir, 'custom_nodes', 'authsvc')
    if (!existsSync(link)) symlinkSync(ROOT, link)
  }
  for (const folder of options.customNodes ?? []) {
    const link = join(baseDir, 'custom_nodes', basename(folder))
    if (!existsSync(link)) symlinkSync(resolve(folder), link)
  }
  if (options.config) writeFileSync(join(dataDir, 'config.json'), JSON.stringify(options.config))
  const models = Array.isArray(options.models)
    ? Object.fromEntries(options.models.map((p) => [p, p.endsWith('.safetensors') ? tinySafetensors() : 'authsvc test model\n']))
    : options.models ?? {}
  for (const [path, content] of Object.entries(models)) writeFile(join(paths.modelsDir, path), content)
  for (const [path, content] of Object.entries(options.files ?? {})) writeFile(join(baseDir, path), content)

  const haveShared = existsSync(REAL_COMFYUI)
  const fixedArgs = ['--base-directory', baseDir, '--database-url', `sqlite:///${join(baseDir, 'user', 'comfyui.db')}`]
  if (haveShared) fixedArgs.push('--front-end-root', join(REAL_COMFYUI, 'frontend'))
  if (options.multiUser) fixedArgs.push('--multi-user')
  if (options.extraModelPaths !== undefined) {
    const yaml = join(dir, 'extra_model_paths.yaml')
    writeFileSync(yaml, options.extraModelPaths)
    fixedArgs.push('--extra-model-paths-config', yaml)
  }
  fixedArgs.push(...(options.args ?? []))

  const pythonPath = [
    ...(haveShared ? [join(REAL_COMFYUI, 'stubs')] : []),
    ...(aiohttp === '3.11' ? [aiohttp311Dir()] : []),
    ...(options.env?.PYTHONPATH ? [options.env.PYTHONPATH] : []),
    ...(process.env.PYTHONPATH ? [process.env.PYTHONPATH] : []),
  ].join(':')
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    ...(aiohttp === '3.11'
      ? { AIOHTTP_NO_EXTENSIONS: '1', YARL_NO_EXTENSIONS: '1', MULTIDICT_NO_EXTENSIONS: '1', PROPCACHE_NO_EXTENSIONS: '1', FROZENLIST_NO_EXTENSIONS: '1' }
      : {}),
    AUTHSVC_DATA_DIR: dataDir,
    PYTHONUNBUFFERED: '1',
    ...options.env,
    PYTHONPATH: pythonPath,
  }

  let out = ''
  let port = 0
  let child: ChildProcess | undefined

  /** Spawns ComfyUI on `wantPort` (or a free one); resolves once it answers HTTP. Retries another port on EADDRINUSE. */
  async function launch(wantPort?: number): Promise<void> {
    for (let attempt = 0; attempt < 5; attempt++) {
      port = attempt === 0 && wantPort ? wantPort : await freePort()
      out = ''
      const proc = spawn(comfyPython(), ['main.py', '--cpu', '--listen', '127.0.0.1', '--port', String(port), ...fixedArgs], {
        cwd: comfyDir, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true,
      })
      if (proc.pid === undefined) {
        const [err] = await once(proc, 'error')
        throw new Error(`cannot start ${comfyPython()}: ${(err as Error).message}`)
      }
      child = proc
      liveGroups.add(proc.pid)
      proc.stdout!.on('data', (d: Buffer) => (out += d.toString()))
      proc.stderr!.on('data', (d: Buffer) => (out += d.toString()))
      let up: boolean
      try {
        up = await answering(proc, 90_000)
      } catch (err) {
        await reap(proc)
        throw err
      }
      if (up) return
      await reap(proc)
      if (!/address already in use|Errno 98/i.test(out)) throw new Error(`ComfyUI exited during start (exit ${proc.exitCode}):\n${out}`)
    }
    throw new Error(`ComfyUI: no free port after 5 attempts:\n${out}`)
  }

  /**
   * True once ComfyUI logged that its site listens (printed after the bind succeeded, so an
   * answer from another process that took the port cannot fool it), false if it exited first.
   */
  function answering(proc: ChildProcess, timeoutMs: number): Promise<boolean> {
    return new Promise((resolveUp, reject) => {
      const done = (value: boolean | Error) => {
        clearTimeout(timer)
        proc.stdout!.off('data', check)
        proc.stderr!.off('data', check)
        proc.off('exit', onExit)
        if (value instanceof Error) reject(value)
        else resolveUp(value)
      }
      const check = () => {
        if (out.includes('To see the GUI go to:')) done(true)
      }
      const onExit = () => done(false)
      const timer = setTimeout(() => done(new Error(`ComfyUI did not listen in ${timeoutMs} ms:\n${out}`)), timeoutMs)
      proc.stdout!.on('data', check)
      proc.stderr!.on('data', check)
      proc.once('exit', onExit)
      if (proc.exitCode !== null || proc.signalCode !== null) done(false)
      else check()
    })
  }

  /** Waits for the group of `proc` to end; kills what is left after ComfyUI. */
  async function reap(proc: ChildProcess): Promise<number[]> {
    const pgid = proc.pid!
    if (proc.exitCode === null && proc.signalCode === null) {
      const exited = once(proc, 'exit')
      proc.kill('SIGTERM')
      const timer = setTimeout(() => proc.kill('SIGKILL'), 10_000)
      await exited
      clearTimeout(timer)
    }
    const until = Date.now() + 5000
    while (groupMembers(pgid).length > 0 && Date.now() < until) await sleep(25)
    const leftovers = groupMembers(pgid)
    if (leftovers.length > 0) {
      try {
        process.kill(-pgid, 'SIGKILL')
      } catch {
        // gone meanwhile
      }
      const killUntil = Date.now() + 5000
      while (groupMembers(pgid).length > 0 && Date.now() < killUntil) await sleep(25)
    }
    liveGroups.delete(pgid)
    return leftovers
  }

  await launch()

  const host: RealHost = {
    dir, dataDir, baseDir, comfyDir, aiohttp, ...paths,
    get url() {
      return `http://127.0.0.1:${port}`
    },
    get port() {
      return port
    },
    get host() {
      return child!
    },
    output: () => out,
    sidecarPid() {
      return Number(readFileSync(join(dataDir, 'sidecar.pid'), 'utf8').trim())
    },
    async waitReady(timeoutMs = 30_000) {
      const until = Date.now() + timeoutMs
      const probe = options.gate === false ? '/' : '/authsvc/health'
      while (Date.now() < until) {
        if (child!.exitCode !== null || child!.signalCode !== null) throw new Error(`ComfyUI exited:\n${out}`)
        try {
          const res = await fetch(`http://127.0.0.1:${port}${probe}`)
          await res.arrayBuffer()
          if (res.status === 200) return
        } catch {
          // not listening yet
        }
        await sleep(25)
      }
      throw new Error(`${options.gate === false ? 'ComfyUI' : 'sidecar'} not ready in ${timeoutMs} ms:\n${out}`)
    },
    async stop() {
      return { leftovers: child ? await reap(child) : [] }
    },
    async restart() {
      await reap(child!)
      await launch(port)
      if (!options.noWait) await host.waitReady()
    },
  }
  try {
    if (!options.noWait) await host.waitReady()
  } catch (err) {
    await reap(child!)
    throw err
  }
  return host
}

/** stop() and remove the temp dir. */
export async function destroyRealHost(host: RealHost): Promise<{ leftovers: number[] }> {
  const result = await host.stop()
  rmSync(host.dir, { recursive: true, force: true })
  return result
}
