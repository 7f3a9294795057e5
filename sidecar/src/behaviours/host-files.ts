/**
 * Which host file a request names, resolved the way ComfyUI resolves it, and
 * whether the caller may see it.
 *
 * Visibility for a caller who does not see everything: a file they own (their
 * prompt wrote it, or they uploaded it); an input file nobody owns (it was in
 * `input/` before authsvc, or an operator put it there: the shared inputs). An
 * output or temp file nobody owns is the administrators' only.
 *
 * Resolution follows ComfyUI 0.3.64 to the character: an annotation (`[output]`,
 * `[input]`, `[temp]`) removes one more character than its own length (the space
 * it expects before it, whatever that character is); `/view` keeps only the base
 * name, a mask's `original_ref` keeps the whole relative name; an absolute
 * subfolder replaces the folder in Python's `os.path.join`, so it is refused here
 * rather than guessed (it can only name what a relative one names).
 */
import { fileKey, type FileType, type Ownership } from '../isolation/ownership.js'

const TYPES: ReadonlySet<string> = new Set(['output', 'input', 'temp'])

/** folder_paths.annotated_filepath: `[output]` → name[:-9], `[input]` → name[:-8], `[temp]` → name[:-7]. */
export function annotatedName(name: string): { name: string; type: FileType | null } {
  for (const type of ['output', 'input', 'temp'] as const) {
    if (name.endsWith(`[${type}]`)) return { name: name.slice(0, -(type.length + 3)), type }
  }
  return { name, type: null }
}

/** A file a request names: its key, or `refuse` (a shape authsvc will not reason about), or null (the host refuses it itself). */
export type NamedFile = { key: string } | 'refuse' | null

export interface FileRef {
  filename: string | null
  type: string | null
  subfolder: string | null
}

/**
 * The file `/view` (base name only) or a mask's `original_ref` (the whole name) reads.
 * Null where the host answers 400/403 itself: no name, a leading `/`, `..`, an unknown type,
 * a subfolder that leaves its folder.
 */
export function namedFile(ref: FileRef, keep: 'basename' | 'whole'): NamedFile {
  if (ref.filename === null) return null
  const { name, type: annotatedType } = annotatedName(ref.filename)
  if (name === '' || name.startsWith('/') || name.includes('..')) return null
  const type = annotatedType ?? ref.type ?? 'output'
  if (!TYPES.has(type)) return null
  const subfolder = ref.subfolder ?? ''
  if (subfolder.startsWith('/')) return 'refuse'
  const base = keep === 'basename' ? name.slice(name.lastIndexOf('/') + 1) : name
  const key = fileKey(type as FileType, subfolder, base)
  return key === null ? null : { key }
}

/** The file `/view?filename=&type=&subfolder=` serves. */
export function viewedFile(query: URLSearchParams): NamedFile {
  return namedFile({ filename: query.get('filename'), type: query.get('type'), subfolder: query.get('subfolder') }, 'basename')
}

export function mayView(ownership: Ownership, key: string, owner: string): boolean {
  const record = ownership.file(key)
  if (record) return record.owners.includes(owner)
  return key.startsWith('input/')
}
