// `npm start`: the gate in front of the bundled ComfyUI stand-in, or in front
// of a real ComfyUI when COMFYUI_DIR is set (install.sh linked the package
// into its custom_nodes). Listens on 127.0.0.1:$PORT (default 8188).
// Guarantee: whatever stops `npm start` (TERM, INT, HUP, or npm's own death) stops the host and
// the sidecar too; nothing is left holding the port.
import { spawn } from 'node:child_process'
import { mkdirSync, existsSync, symlinkSync } from 'node:fs'
import { join, dirname, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { comfyArgs, comfyPort, findComfyPython, isComfyDir } from './comfyui-launch.mjs'

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..')
// `npm start -- --cpu --port 8190`: everything after `--` is the host's own flags
const userArgs = process.argv.slice(2)
// the stand-in demo keeps its data in <package>/users (SPEC §10); a real ComfyUI's plugin puts it
// in ComfyUI's user directory (<user_dir>/authsvc) unless AUTHSVC_DATA_DIR says otherwise
const dataDir = resolve(process.env.AUTHSVC_DATA_DIR || join(root, 'users'))
const env = { ...process.env }
if (!process.env.COMFYUI_DIR || process.env.AUTHSVC_DATA_DIR) env.AUTHSVC_DATA_DIR = dataDir

let command, args, cwd, port
if (process.env.COMFYUI_DIR) {
  cwd = resolve(process.env.COMFYUI_DIR)
  if (!isComfyDir(cwd)) {
    console.error(`authsvc: COMFYUI_DIR=${cwd} has no main.py; point it at your ComfyUI folder`)
    process.exit(2)
  }
  const found = findComfyPython(cwd)
  if (found.error) {
    console.error(`authsvc: ${found.error}`)
    process.exit(2)
  }
  port = comfyPort(userArgs, process.env.PORT || '8188')
  command = found.python
  args = comfyArgs(userArgs, port)
  console.log(`authsvc: running ComfyUI in ${cwd} with ${command} (from ${found.source}): ${args.join(' ')}`)
} else {
  port = comfyPort(userArgs, process.env.PORT || '8188')
  const base = join(root, '.standin')
  mkdirSync(join(base, 'custom_nodes'), { recursive: true })
  const link = join(base, 'custom_nodes', 'authsvc')
  if (!existsSync(link)) symlinkSync(root, link)
  cwd = root
  command = process.env.AUTHSVC_PYTHON || '/usr/bin/python3'
  args = [join(root, 'test/host-standin/main.py'), '--base-dir', base, ...comfyArgs(userArgs, port).slice(1)]
  console.log(`authsvc: starting the ComfyUI stand-in on http://127.0.0.1:${port} (data dir ${dataDir})`)
}
console.log(`authsvc: first run? open http://127.0.0.1:${port}/register to create the administrator`)
const child = spawn(command, args, { cwd, env, stdio: 'inherit' })

// Every way `npm start` can be stopped must stop the host, and with it the sidecar (the host's
// cleanup stops it; it also exits when the host's pipe closes):
// - INT and TERM reach this process (npm forwards them; package.json `exec`s so no shell sits
//   in between to die first); HUP (a closed terminal, which npm does not forward) likewise;
// - when npm itself dies (HUP, KILL, or a shell that died first), this process is re-parented:
//   the parent watch below notices and stops the host instead of running on, orphaned, on the port.
// A host that has not exited STOP_GRACE_MS after the stop is killed.
const STOP_GRACE_MS = 10_000
const parent = process.ppid
let stopping = false
function stop(signal, reason) {
  if (stopping) return
  stopping = true
  console.log(`authsvc: stopping (${reason})`)
  child.kill(signal)
  setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS).unref()
}
process.on('SIGINT', () => stop('SIGINT', 'SIGINT'))
process.on('SIGTERM', () => stop('SIGTERM', 'SIGTERM'))
process.on('SIGHUP', () => stop('SIGTERM', 'SIGHUP'))
const parentWatch = setInterval(() => {
  if (process.ppid !== parent) stop('SIGTERM', `parent ${parent} exited`)
}, 200)
child.on('exit', (code, signal) => {
  clearInterval(parentWatch)
  process.exit(stopping ? 0 : (code ?? (signal ? 0 : 1)))
})
