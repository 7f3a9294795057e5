/**
 * The policy's verdict for a file whose classification was already under way (sidecar/src/nsfw/
 * policy.ts): the pool merges classifications by path, so a /view may join one that read the file
 * before it was rewritten. The classifier here does what the pool's worker does (reads the bytes
 * and their size and mtime first, answers later, one job per path) with the deterministic test
 * engine, and the test says when it answers; files, tags and the policy are the real ones.
 */
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { NsfwPolicy, type SeenFile } from '../../sidecar/src/nsfw/policy.js'
import { TagStore, type NsfwTag, type TagRepository } from '../../sidecar/src/nsfw/tags.js'
import { testEngine } from '../../sidecar/src/nsfw/engines.js'
import type { Classified, Classifier, ClassifyTarget } from '../../sidecar/src/nsfw/classifier.js'
import { cleanPng, nsfwPng } from '../helpers/nsfw-images.js'
import { tempDir } from './fixtures.js'

const memory = (): TagRepository => ({ load: async () => [], save: async () => {}, remove: async () => {}, removeAll: async () => {} })

/** One job per path at a time, as the pool's; each reads the file when it starts and answers when released. */
class HeldClassifier implements Classifier {
  readonly read: Array<{ path: string; size: number }> = []
  private readonly jobs = new Map<string, Promise<Classified>>()
  private readonly releases: Array<() => void> = []
  private onRead: (() => void) | undefined

  classify(target: ClassifyTarget): Promise<Classified> {
    if (!('path' in target)) throw new Error('paths only here')
    const path = target.path
    let job = this.jobs.get(path)
    if (job === undefined) {
      const bytes = readFileSync(path)
      const s = statSync(path, { bigint: true })
      this.read.push({ path, size: bytes.length })
      this.onRead?.()
      job = new Promise<void>((resolve) => this.releases.push(resolve))
        .then(async () => ({ source: 'detector' as const, scores: await testEngine().scores(bytes), size: Number(s.size), mtime_ms: Number(s.mtimeNs / 1_000_000n) }))
        .finally(() => this.jobs.delete(path))
      this.jobs.set(path, job)
    }
    return job
  }

  /** Resolves once `n` files have been read in all. */
  reads(n: number): Promise<void> {
    return new Promise((resolve) => {
      const check = () => (this.read.length >= n ? resolve() : undefined)
      this.onRead = check
      check()
    })
  }

  releaseAll(): void {
    for (const release of this.releases.splice(0)) release()
  }

  async close(): Promise<void> {}
}

const seen = (path: string): SeenFile => {
  const s = statSync(path, { bigint: true })
  return { path, size: Number(s.size), mtime_ms: Number(s.mtimeNs / 1_000_000n) }
}

describe('a verdict on a classification already under way', () => {
  const root = tempDir('nsfw-verdict-')
  after(() => rmSync(root, { recursive: true, force: true }))
  const output = join(root, 'output')
  mkdirSync(output, { recursive: true })

  it('a file rewritten after the classification under way read it: that classification does not answer for the new bytes', async () => {
    const classifier = new HeldClassifier()
    const policy = new NsfwPolicy(new TagStore(memory()), classifier, { thresholds: { Porn: 0.7 }, viewDeadlineMs: 5000, previewDeadlineMs: 500 }, () => ({ output }), { emit: () => {} }, Date.now)
    const path = join(output, 'p.png')
    writeFileSync(path, cleanPng(1))
    const first = policy.verdict(seen(path)) // the clean bytes are read, the answer held
    await classifier.reads(1)
    writeFileSync(path, nsfwPng(2)) // rewritten in place (an upload with overwrite)
    const second = policy.verdict(seen(path)) // joins the classification of the old bytes
    classifier.releaseAll()
    assert.deepEqual(await first, { blocked: false }, 'the first view saw the clean file')
    await classifier.reads(2) // classified again: the new bytes
    classifier.releaseAll()
    assert.deepEqual(await second, { blocked: true, reason: 'detected' })
    assert.deepEqual(classifier.read.map((r) => r.size), [cleanPng(1).length, nsfwPng(2).length])
  })

  it('a file no longer in the state the view saw: blocked as unclassifiable, never judged on other bytes', async () => {
    const classifier = new HeldClassifier()
    const policy = new NsfwPolicy(new TagStore(memory()), classifier, { thresholds: { Porn: 0.7 }, viewDeadlineMs: 5000, previewDeadlineMs: 500 }, () => ({ output }), { emit: () => {} }, Date.now)
    const path = join(output, 'q.png')
    writeFileSync(path, nsfwPng(3))
    const asked = seen(path)
    writeFileSync(path, cleanPng(11)) // between the view's look at the file and its classification
    const verdict = policy.verdict(asked)
    await classifier.reads(1)
    classifier.releaseAll()
    await classifier.reads(2)
    classifier.releaseAll()
    assert.deepEqual(await verdict, { blocked: true, reason: 'unclassifiable' })
  })
})
