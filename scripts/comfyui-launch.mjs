// How `npm start` runs a real ComfyUI (COMFYUI_DIR): which Python, and which command line.
// Guarantees: ComfyUI runs in its own Python (the one its packages were installed into), found in
// one documented order; the caller's ComfyUI flags reach main.py unchanged; the gate's defaults
// (`--listen 127.0.0.1`, `--port $PORT`) are added only where the caller did not name them.
import { existsSync, statSync } from 'node:fs'
import { delimiter, join, resolve } from 'node:path'

/** Executable file? (a directory or a non-executable file named python does not count) */
function isExecutable(path) {
  try {
    const s = statSync(path)
    return s.isFile() && (process.platform === 'win32' || (s.mode & 0o111) !== 0)
  } catch {
    return false
  }
}

/** The interpreters of a virtual environment at `dir`, POSIX then Windows layout. */
function venvPythons(dir) {
  return [join(dir, 'bin', 'python3'), join(dir, 'bin', 'python'), join(dir, 'Scripts', 'python.exe')]
}

/** The first of `names` found on PATH. */
function onPath(names, envPath) {
  for (const dir of (envPath ?? '').split(delimiter)) {
    if (!dir) continue
    for (const name of names) {
      const candidate = join(dir, name)
      if (isExecutable(candidate)) return candidate
    }
  }
  return null
}

/**
 * ComfyUI's Python, in this order (the first that exists wins):
 *  1. `COMFYUI_PYTHON` (must exist: a typo is an error, not a silent fallback);
 *  2. a virtual environment inside the ComfyUI folder: `venv/`, then `.venv/`;
 *  3. the Windows portable build's `python_embeded/` beside the ComfyUI folder, then inside it;
 *  4. the environment that is active (`VIRTUAL_ENV`, `CONDA_PREFIX`);
 *  5. `python3`, then `python`, on PATH.
 * Returns `{ python, source }` (source says which rule chose it) or `{ error }`.
 */
export function findComfyPython(comfyDir, env = process.env) {
  const dir = resolve(comfyDir)
  if (env.COMFYUI_PYTHON) {
    return isExecutable(env.COMFYUI_PYTHON)
      ? { python: env.COMFYUI_PYTHON, source: 'COMFYUI_PYTHON' }
      : { error: `COMFYUI_PYTHON=${env.COMFYUI_PYTHON} is not an executable file` }
  }
  const rules = [
    ['venv', venvPythons(join(dir, 'venv'))],
    ['.venv', venvPythons(join(dir, '.venv'))],
    ['python_embeded', [join(dir, '..', 'python_embeded', 'python.exe'), join(dir, '..', 'python_embeded', 'python')]],
    ['python_embeded', [join(dir, 'python_embeded', 'python.exe'), join(dir, 'python_embeded', 'python')]],
    ['VIRTUAL_ENV', env.VIRTUAL_ENV ? venvPythons(env.VIRTUAL_ENV) : []],
    ['CONDA_PREFIX', env.CONDA_PREFIX ? [join(env.CONDA_PREFIX, 'bin', 'python3'), join(env.CONDA_PREFIX, 'python.exe')] : []],
  ]
  for (const [source, candidates] of rules) {
    const found = candidates.find(isExecutable)
    if (found) return { python: found, source }
  }
  const fromPath = onPath(['python3', 'python'], env.PATH)
  if (fromPath) return { python: fromPath, source: 'PATH' }
  return { error: 'no Python found: set COMFYUI_PYTHON to the Python that runs ComfyUI' }
}

/** Whether `args` name `flag`, as `--flag`, `--flag v` or `--flag=v`. */
function names(args, flag) {
  return args.some((a) => a === flag || a.startsWith(`${flag}=`))
}

/** The value of `--flag v` or `--flag=v` in `args`, or undefined. */
function flagValue(args, flag) {
  for (let i = 0; i < args.length; i++) {
    if (args[i] === flag) return args[i + 1]
    if (args[i].startsWith(`${flag}=`)) return args[i].slice(flag.length + 1)
  }
  return undefined
}

/**
 * main.py's arguments: the gate's defaults for what the caller left out, then the caller's flags
 * as given. `--listen` bare (ComfyUI's "every interface") counts as named.
 */
export function comfyArgs(userArgs, defaultPort) {
  const args = ['main.py']
  if (!names(userArgs, '--listen')) args.push('--listen', '127.0.0.1')
  if (!names(userArgs, '--port')) args.push('--port', String(defaultPort))
  return [...args, ...userArgs]
}

/** The port ComfyUI will listen on: the caller's `--port`, else the default. */
export function comfyPort(userArgs, defaultPort) {
  return flagValue(userArgs, '--port') ?? String(defaultPort)
}

/** True when `dir` looks like a ComfyUI checkout. */
export function isComfyDir(dir) {
  return existsSync(join(dir, 'main.py'))
}
