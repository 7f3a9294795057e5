/**
 * `scan_all` (nsfw-management): a background job that tags every image of the host's output and
 * input folders, one at a time (it never fills the classifier's queue, so new outputs and views
 * keep their turn).
 *
 * Resumable: its state (running, force, started, counts) is stored and written every
 * SAVE_EVERY images; after a restart the job's start resumes a scan that was running. Work done
 * before the restart is not done again: without `force_rescan` a file whose tag matches its size
 * and mtime is skipped; with it, a file tagged since the scan started is.
 */
import { readdir, stat } from 'node:fs/promises'
import { join } from 'node:path'
import type { FastifyBaseLogger } from 'fastify'
import { Collection } from '../store/collection.js'
import type { KeyValueStore } from '../store/kv.js'
import { isImageName, type NsfwPolicy } from './policy.js'
import type { TagStore } from './tags.js'

export interface ScanState {
  running: boolean
  force: boolean
  started_at_iso: string | null
  finished_at_iso: string | null
  total: number
  done: number
  nsfw: number
  failed: number
}

const IDLE: ScanState = { running: false, force: false, started_at_iso: null, finished_at_iso: null, total: 0, done: 0, nsfw: 0, failed: 0 }
export const SAVE_EVERY = 10

/** The image files under `dir`, sorted (a resumed scan walks them in the same order). */
async function imagesUnder(dir: string): Promise<string[]> {
  const found: string[] = []
  const walk = async (at: string): Promise<void> => {
    let entries
    try {
      entries = await readdir(at, { withFileTypes: true })
    } catch {
      return
    }
    for (const e of entries) {
      const path = join(at, e.name)
      if (e.isDirectory()) await walk(path)
      else if (e.isFile() && isImageName(e.name)) found.push(path)
    }
  }
  await walk(dir)
  return found.sort()
}

export class Scanner {
  private state: ScanState = { ...IDLE }
  private records: Collection<ScanState> | undefined
  private run: Promise<void> | null = null
  private stopping = false

  constructor(
    private readonly kv: KeyValueStore,
    private readonly tags: TagStore,
    private readonly policy: NsfwPolicy,
    /** the host's real output and input folders (from its facts); none yet: nothing to scan */
    private readonly folders: () => string[],
    private readonly clock: () => number,
    private readonly log: Pick<FastifyBaseLogger, 'warn' | 'error' | 'info'>,
  ) {}

  private async store(): Promise<Collection<ScanState>> {
    this.records ??= await Collection.load<ScanState>(this.kv, 'nsfw_scan', { log: this.log })
    return this.records
  }

  private async save(): Promise<void> {
    await (await this.store()).put('state', { ...this.state })
  }

  status(): ScanState {
    return { ...this.state }
  }

  /** At start: the stored state; a scan that was running goes on. */
  async resume(): Promise<void> {
    const stored = (await this.store()).get('state')
    if (stored === undefined) return
    this.state = { ...IDLE, ...stored }
    if (this.state.running) this.go()
  }

  /** Starts a scan (a running one goes on; `force` then applies from the next start). */
  async start(force: boolean): Promise<ScanState> {
    if (this.state.running) return this.status()
    this.state = { ...IDLE, running: true, force, started_at_iso: new Date(this.clock()).toISOString() }
    await this.save()
    this.go()
    return this.status()
  }

  /** The host named its folders (a hello): a scan that waited for them goes on. */
  kick(): void {
    if (this.state.running && !this.stopping) this.go()
  }

  /** Settles when the current scan (if any) ended or stopped (tests). */
  settled(): Promise<void> {
    return this.run ?? Promise.resolve()
  }

  private go(): void {
    if (this.run !== null) return
    this.run = this.scan()
      .catch((err: unknown) => this.log.error({ err }, 'the NSFW scan failed'))
      .finally(() => {
        this.run = null
      })
  }

  private async scan(): Promise<void> {
    const folders = this.folders()
    if (folders.length === 0) {
      this.log.warn({}, 'the NSFW scan waits for the host to name its folders')
      return // stays `running`: resumed by the next start, or by the host's hello (feature.ts)
    }
    const files: string[] = []
    for (const folder of folders) files.push(...(await imagesUnder(folder)))
    this.state.total = files.length
    // counts start over on every pass; what an earlier pass tagged is skipped quickly
    this.state.done = 0
    this.state.nsfw = 0
    this.state.failed = 0
    const startedMs = Date.parse(this.state.started_at_iso ?? '') || 0
    let sinceSave = 0
    for (const path of files) {
      if (this.stopping) return
      try {
        const s = await stat(path, { bigint: true })
        const existing = this.tags.current(path, Number(s.size), Number(s.mtimeNs / 1_000_000n))
        // with force, only what this scan tagged itself (after it started, a resumed scan included) is skipped
        const fresh = existing !== undefined && (!this.state.force || Date.parse(existing.at_iso) > startedMs)
        const tag = fresh ? existing : await this.policy.classifyFile(path, false)
        if (this.policy.tagSaysNsfw(tag)) this.state.nsfw++
      } catch {
        this.state.failed++
      }
      this.state.done++
      if (++sinceSave >= SAVE_EVERY) {
        sinceSave = 0
        await this.save().catch((err: unknown) => this.log.warn({ err }, 'the NSFW scan\'s progress could not be stored'))
      }
    }
    this.state.running = false
    this.state.finished_at_iso = new Date(this.clock()).toISOString()
    await this.save()
    this.log.info({ total: this.state.total, nsfw: this.state.nsfw, failed: this.state.failed }, 'NSFW scan finished')
  }

  /** The sidecar stops: the scan ends where it is (its state says running; the next start resumes it). */
  async stop(): Promise<void> {
    this.stopping = true
    await this.settled()
  }
}
