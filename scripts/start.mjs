// `npm start`: the gate in front of the bundled ComfyUI stand-in, or in front
// of a real ComfyUI when COMFYUI_DIR is set (install.sh linked the package
// into its custom_nodes). Listens on 127.0.0.1:$PORT (default 8188).
import { spawn } from 'node:child_process'
import { mkdirSync, existsSync, symlinkSync } from 'node:fs'
import { join, dirname, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const port = process.env.PORT || '8188'
const dataDir = resolve(process.env.AUTHSVC_DATA_DIR || join(root, 'users'))
const env = { ...process.env, AUTHSVC_DATA_DIR: dataDir }

let command, args, cwd
if (process.env.COMFYUI_DIR) {
  cwd = resolve(process.env.COMFYUI_DIR)
  command = process.env.COMFYUI_PYTHON || 'python3'
  args = ['main.py', '--listen', '127.0.0.1', '--port', port]
} else {
  const base = join(root, '.standin')
  mkdirSync(join(base, 'custom_nodes'), { recursive: true })
  const link = join(base, 'custom_nodes', 'authsvc')
  if (!existsSync(link)) symlinkSync(root, link)
  cwd = root
  command = process.env.AUTHSVC_PYTHON || '/usr/bin/python3'
  args = [join(root, 'test/host-standin/main.py'), '--base-dir', base, '--listen', '127.0.0.1', '--port', port]
}
console.log(`authsvc: starting ${process.env.COMFYUI_DIR ? 'ComfyUI' : 'the ComfyUI stand-in'} on http://127.0.0.1:${port} (data dir ${dataDir})`)
console.log(`authsvc: first run? open http://127.0.0.1:${port}/register to create the administrator`)
const child = spawn(command, args, { cwd, env, stdio: 'inherit' })
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => child.kill(signal))
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 0 : 1)))
