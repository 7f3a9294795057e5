/**
 * Worker threads of the sidecar's own modules. Built, a thread runs `<name>.js` beside the module
 * that asks; from the TypeScript sources (the tests) it registers tsx first, then loads
 * `<name>.ts`, since a worker does not inherit the loader of the thread that starts it.
 */
import { fileURLToPath, pathToFileURL } from 'node:url'
import { Worker, type WorkerOptions } from 'node:worker_threads'

/** The thread running module `name` (no extension) found beside `besideUrl` (the asker's import.meta.url). */
export function startThread(besideUrl: string, name: string, options?: WorkerOptions): Worker {
  const fromSources = besideUrl.endsWith('.ts')
  const file = fileURLToPath(new URL(`./${name}${fromSources ? '.ts' : '.js'}`, besideUrl))
  if (!fromSources) return new Worker(file, options)
  const code = `const { register } = await import(${JSON.stringify(import.meta.resolve('tsx/esm/api'))}); register(); await import(${JSON.stringify(pathToFileURL(file).href)})`
  return new Worker(new URL(`data:text/javascript,${encodeURIComponent(code)}`), options)
}
