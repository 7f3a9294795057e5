/**
 * Files a prompt reads by name. LoadImage and its kin take a file name (`x.png`,
 * `sub/x.png`, `x.png [output]`) and the host skips their list check
 * (VALIDATE_INPUTS), so a prompt could read another user's upload or output and
 * write it back out as the caller's own. For a caller who does not see
 * everything, every string input of the graph that names an existing file the
 * way ComfyUI resolves it (get_annotated_filepath: an annotation picks the
 * folder, input by default; `..` and absolute names are joined as Python joins
 * them) must be a file the caller may view (host-files.ts); a name that reaches
 * a file outside the host's three folders is refused outright. This holds for
 * every node, not a table of loaders.
 */
import { statSync } from 'node:fs'
import { relative, resolve, sep } from 'node:path'
import { denyDecision } from '../decide/answers.js'
import type { HostFacts, RespondDecision } from '../decide/protocol.js'
import { fileKey, type FileType, type Ownership } from '../isolation/ownership.js'
import { annotatedName, mayView } from './host-files.js'
import { hostInputValue } from './models.js'

/** Strings longer than this are prompt text, not file names (no file check for them). */
const MAX_NAME = 1024

const isFile = (path: string): boolean => {
  try {
    return statSync(path).isFile()
  } catch {
    return false
  }
}

function* stringInputs(prompt: unknown): Iterable<string> {
  if (typeof prompt !== 'object' || prompt === null) return
  for (const node of Object.values(prompt)) {
    const inputs = (node as { inputs?: unknown } | null)?.inputs
    if (typeof inputs !== 'object' || inputs === null) continue
    for (const given of Object.values(inputs)) {
      const value = hostInputValue(given)
      if (typeof value === 'string' && value.length <= MAX_NAME && !value.includes('\n')) yield value
    }
  }
}

/** A refusal naming the first file the caller may not read, or null. */
export function promptFileRefusal(prompt: unknown, facts: HostFacts, ownership: Ownership, owner: string): RespondDecision | null {
  const dirs: Array<[FileType, string]> = []
  for (const type of ['output', 'input', 'temp'] as const) {
    const dir = facts[`${type}_dir`]
    if (typeof dir === 'string' && dir !== '') dirs.push([type, resolve(dir)])
  }
  if (dirs.length === 0) return null
  const dirOf = new Map(dirs)
  for (const value of stringInputs(prompt)) {
    const { name, type } = annotatedName(value)
    const base = dirOf.get(type ?? 'input')
    if (name === '' || base === undefined) continue
    const path = resolve(base, name)
    if (!isFile(path)) continue
    const inside = dirs.find(([, dir]) => path.startsWith(dir + sep))
    if (inside === undefined) return denyDecision('NOT_OWNER', `The prompt names a file outside the host's folders: ${value}`)
    const key = fileKey(inside[0], '', relative(inside[1], path).split(sep).join('/'))
    if (key === null || !mayView(ownership, key, owner)) return denyDecision('NOT_OWNER', `The prompt reads a file that is not yours: ${value}`)
  }
  return null
}
