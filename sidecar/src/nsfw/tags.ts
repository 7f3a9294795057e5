/**
 * NSFW tags, one per image file (SPEC §11), keyed by the file's real path and valid for the size
 * and mtime it had when tagged: a file rewritten under the same name is a new, unclassified image.
 * A manual tag (mark-nsfw) wins over the detector and the image's metadata, and is kept when the
 * detector looks at the file again.
 *
 * Persistence is behind `TagRepository`, a narrow interface (load everything at start, write one,
 * remove one, remove all), so another store backend implements four functions. The one here is a
 * `Collection` on the current store. Reads are from memory only: the decision path reads a tag
 * without I/O.
 */
import type { FastifyBaseLogger } from 'fastify'
import { Collection } from '../store/collection.js'
import type { KeyValueStore } from '../store/kv.js'
import type { Scores } from './classifier.js'

export type TagSource = 'manual' | 'detector' | 'metadata'

export interface NsfwTag {
  /** the real path the host opens */
  path: string
  size: number
  mtime_ms: number
  /** where it is on the host, as clients name it (list_tags) */
  type: 'output' | 'input' | 'temp'
  subfolder: string
  filename: string
  is_nsfw: boolean
  source: TagSource
  /** the detector's scores, when it ran (also kept under a manual tag) */
  scores?: Scores
  at_iso: string
  /** who set a manual tag (the username then) */
  by?: string
  /** the account that set it (tags set before this field was kept have only `by`) */
  by_id?: string
}

export interface TagRepository {
  load(): Promise<NsfwTag[]>
  save(tag: NsfwTag): Promise<void>
  remove(path: string): Promise<void>
  removeAll(paths: readonly string[]): Promise<void>
}

/** A key that never collides with the store's own separators (a path may hold any character). */
const keyOf = (path: string): string => Buffer.from(path, 'utf8').toString('base64url')

export class CollectionTagRepository implements TagRepository {
  private records: Collection<NsfwTag> | undefined

  constructor(private readonly kv: KeyValueStore, private readonly log?: Pick<FastifyBaseLogger, 'warn' | 'error'>) {}

  private async collection(): Promise<Collection<NsfwTag>> {
    this.records ??= await Collection.load<NsfwTag>(this.kv, 'nsfw_tag', this.log ? { log: this.log } : {})
    return this.records
  }

  async load(): Promise<NsfwTag[]> {
    return [...(await this.collection()).values()]
  }

  async save(tag: NsfwTag): Promise<void> {
    await (await this.collection()).put(keyOf(tag.path), tag)
  }

  async remove(path: string): Promise<void> {
    await (await this.collection()).remove(keyOf(path))
  }

  async removeAll(paths: readonly string[]): Promise<void> {
    const c = await this.collection()
    for (const path of paths) await c.remove(keyOf(path))
  }
}

/** The tags in memory, written through to a repository. */
export class TagStore {
  private readonly byPath = new Map<string, NsfwTag>()
  /**
   * Called when memory changes (a tag set, changed or removed), before the write is stored:
   * decisions the plugin keeps read tags (a /view pass), so the feature bumps the access epoch here.
   */
  onChange: () => void = () => {}

  constructor(private readonly repo: TagRepository) {}

  async load(): Promise<void> {
    for (const tag of await this.repo.load()) this.byPath.set(tag.path, tag)
    this.onChange()
  }

  /** The tag of the file as it is now (size and mtime as given); undefined when none, or the file changed since. */
  current(path: string, size: number | undefined, mtimeMs: number | undefined): NsfwTag | undefined {
    const tag = this.byPath.get(path)
    if (tag === undefined) return undefined
    if (size !== undefined && tag.size !== size) return undefined
    if (mtimeMs !== undefined && tag.mtime_ms !== mtimeMs) return undefined
    return tag
  }

  get(path: string): NsfwTag | undefined {
    return this.byPath.get(path)
  }

  all(): NsfwTag[] {
    return [...this.byPath.values()]
  }

  get size(): number {
    return this.byPath.size
  }

  /** Memory at once (decisions see it), then stored. */
  async put(tag: NsfwTag): Promise<void> {
    this.byPath.set(tag.path, tag)
    this.onChange()
    await this.repo.save(tag)
  }

  async remove(path: string): Promise<void> {
    if (this.byPath.delete(path)) this.onChange()
    await this.repo.remove(path)
  }

  /** Every tag goes (manual ones too when `manual`); how many went. */
  async clear(manual = true): Promise<number> {
    const going = this.all().filter((t) => manual || t.source !== 'manual').map((t) => t.path)
    for (const path of going) this.byPath.delete(path)
    if (going.length > 0) this.onChange()
    await this.repo.removeAll(going)
    return going.length
  }
}
