/**
 * Which host file a request names, resolved the way ComfyUI resolves it, and
 * whether the caller may see it.
 *
 * Visibility for a caller who does not see everything: a file they own (their
 * prompt wrote it, or they uploaded it); an input file nobody owns (it was in
 * `input/` before authsvc, or an operator put it there: the shared inputs). An
 * output or temp file nobody owns is the administrators' only.
 */
import { fileKey, type FileType, type Ownership } from '../isolation/ownership.js'

const TYPES: ReadonlySet<string> = new Set(['output', 'input', 'temp'])

/** ComfyUI's annotated names: `name.png [output]` picks the folder. */
function annotated(name: string): { name: string; type: FileType | null } {
  for (const type of ['output', 'input', 'temp'] as const) {
    const suffix = ` [${type}]`
    if (name.endsWith(suffix)) return { name: name.slice(0, -suffix.length), type }
    if (name.endsWith(`[${type}]`)) return { name: name.slice(0, -(type.length + 2)), type }
  }
  return { name, type: null }
}

/**
 * The key of the file `/view` would serve, or null when the host will refuse
 * the request itself (400/403) or the name is not a file we can reason about.
 */
export function viewedFileKey(query: URLSearchParams): string | null {
  const raw = query.get('filename')
  if (raw === null) return null
  const { name, type: annotatedType } = annotated(raw)
  if (name === '' || name.startsWith('/') || name.includes('..')) return null
  const type = annotatedType ?? query.get('type') ?? 'output'
  if (!TYPES.has(type)) return null
  const subfolder = query.get('subfolder') ?? ''
  const base = name.slice(name.lastIndexOf('/') + 1) // os.path.basename on the host
  return fileKey(type as FileType, subfolder, base)
}

export function mayView(ownership: Ownership, key: string, owner: string): boolean {
  const record = ownership.file(key)
  if (record) return record.owners.includes(owner)
  return key.startsWith('input/')
}
