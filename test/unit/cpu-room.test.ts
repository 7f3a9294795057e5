/**
 * Shared vectors of the CPU-room rule (shared/vectors/cpu-room.json), sidecar side: the rule and
 * the readings of /proc and the cgroup files in sidecar/src/kernel/cpu-room.ts give what each row
 * says. The plugin's copy (host-plugin/cpu_room.py) is checked against the same rows by
 * test/plugin/test_cpu_room.py, so the two cannot drift apart.
 */
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { ROOT } from '../helpers/stack.js'
import { allowedCpus, cgroupQuota, cpuPressure, idleTicks, roomIsFree, type CpuSample, type Read } from '../../sidecar/src/kernel/cpu-room.js'

interface Vectors {
  clock_ticks_per_second: number
  rule: Array<{ name: string; before: CpuSample | null; after: CpuSample; elapsed_s: number; spun_s: number; free: boolean }>
  cgroup_quota: Array<{ name: string; files: Record<string, string>; quota: number | null }>
  idle_ticks: Array<{ name: string; proc_stat: string | null; cpus: number[]; idle: number | null }>
  cpu_pressure: Array<{ name: string; text: string | null; total: number | null }>
}

const vectors = JSON.parse(readFileSync(join(ROOT, 'shared/vectors/cpu-room.json'), 'utf8')) as Vectors

/** A reader of these files only; any other path is not there. */
const files = (contents: Record<string, string | null>): Read => (path) => {
  const text = contents[path]
  if (text === undefined || text === null) throw Object.assign(new Error(`ENOENT: ${path}`), { code: 'ENOENT' })
  return text
}

describe('CPU room: the shared vectors', () => {
  it('has rows to check', () => assert.ok(vectors.rule.length > 10))
  for (const row of vectors.rule) {
    it(`rule: ${row.name}`, () => {
      assert.equal(roomIsFree(row.before, row.after, row.elapsed_s, row.spun_s, vectors.clock_ticks_per_second), row.free)
    })
  }
  for (const row of vectors.cgroup_quota) {
    it(`cgroup quota: ${row.name}`, () => assert.equal(cgroupQuota(files(row.files)), row.quota))
  }
  for (const row of vectors.idle_ticks) {
    it(`idle ticks: ${row.name}`, () => assert.equal(idleTicks(row.cpus, files({ '/proc/stat': row.proc_stat })), row.idle))
  }
  for (const row of vectors.cpu_pressure) {
    it(`cpu pressure: ${row.name}`, () => assert.equal(cpuPressure(files({ '/proc/pressure/cpu': row.text })), row.total))
  }
})

describe('CPU room: the sidecar\'s own reading of its CPUs (the plugin asks the kernel: sched_getaffinity)', () => {
  const rows: Array<[string, string | null, number[] | null]> = [
    ['a range', 'Name:\tnode\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\n', [0, 1]],
    ['ranges and single CPUs', 'Cpus_allowed_list:\t0,2-3,7\n', [0, 2, 3, 7]],
    ['no such line', 'Name:\tnode\n', null],
    ['no /proc/self/status', null, null],
  ]
  for (const [name, status, cpus] of rows) {
    it(name, () => assert.deepEqual(allowedCpus(files({ '/proc/self/status': status })), cpus))
  }
})
