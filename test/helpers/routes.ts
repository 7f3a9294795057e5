/** The real ComfyUI route table (test/e2e/fixtures/routes.txt, captured from 0.3.64) as concrete requests. */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { ROOT } from './stack.js'

export interface HostRouteCase {
  method: string
  pattern: string
  path: string
}

const SAMPLES: Record<string, string> = {
  directory_type: 'output',
  folder: 'checkpoints',
  folder_name: 'checkpoints',
  node_class: 'KSampler',
  prompt_id: 'abc',
  id: 'Comfy.Setting',
  file: 'workflows%2Fa.json',
  dest: 'workflows%2Fb.json',
  path_index: '0',
  filename: 'x.png',
}

export function hostRoutes(): HostRouteCase[] {
  const text = readFileSync(join(ROOT, 'test/e2e/fixtures/routes.txt'), 'utf8')
  const out: HostRouteCase[] = []
  for (const line of text.split('\n')) {
    const m = /^(GET|HEAD|POST|PUT|PATCH|DELETE) (\/\S*)$/.exec(line.trim())
    if (!m) continue
    const [, method, pattern] = m
    const path = pattern.replace(/\{(\w+)\}/g, (_, name: string) => SAMPLES[name] ?? 'x')
    out.push({ method, pattern, path })
    if (!pattern.startsWith('/internal')) out.push({ method, pattern: `/api${pattern}`, path: `/api${path}` })
  }
  return out
}
