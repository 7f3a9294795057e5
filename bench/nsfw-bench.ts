/**
 * The content-safety policy's cost (issue 23), `BENCH_ONLY=nsfw npm run bench`:
 *
 * - images classified per second by the real classifier (nsfwjs MobileNetV2 on wasm, in its
 *   worker thread, one at a time as the pool runs them), on 512×512 PNGs made here;
 * - inside the REAL ComfyUI (skipped with one line when it is not available): three hosts side by
 *   side, `bare` (no package), `gated` (this package, policy off) and `policy` (nsfw.enabled, the
 *   real classifier), measured in alternating rounds:
 *   - GET /view of an image already classified, for an sfw_check user (after its first decision the
 *     plugin repeats the pass while the file stays as it was: kept decisions, `cache.file`), wrk at 8 connections: req/s of
 *     `policy` against `bare` (the issue's target) and against `gated` (printed); the hosts run back
 *     to back in each round, in an order that alternates, each after one request of its own (the
 *     steady rate: a kept decision runs out while the other hosts run); the verdict is the median
 *     of each round's policy/bare ratio (the ratio of the medians is printed beside it);
 *   - a CPU-bound prompt with 20 outputs (EmptyImage 1024×1024 → ImageBlur radius 7 → 20
 *     SaveImage, about 5 s here: long enough that a round's noise is a few per cent, not the
 *     20 % of a half-second prompt), every output classified as it appears: its execution time
 *     (the host's own timestamps) on `policy` against `gated`, the verdict on the median of each
 *     round's pair (run back to back); printed beside it: the ratio of the medians, and each
 *     sidecar's own CPU time while its host ran the prompt (what the policy could take from it);
 *   - the `policy` sidecar's resident memory (VmRSS of its process, the classifier loaded and
 *     warm, after the prompts).
 *
 * Two layouts, as the other benches on the real host (BENCH_NSFW_LAYOUTS, default `pinned,free`):
 * `one core` (the three hosts with their sidecars and classifier threads on CPU 0, this process
 * and its wrk on CPU 1) and `nothing pinned`; each has its own verdicts.
 *
 * The prompts alternate which host goes first; after each the host collects its garbage at once
 * (POST /free, as bench/real-host-bench.ts does) and the policy host's classifier catches up, so
 * nothing of one prompt lands in the next one's time.
 *
 * Environment: BENCH_NSFW_IMAGES (default 40), BENCH_NSFW_ROUNDS (default 7), BENCH_NSFW_SECONDS
 * (wrk per round, default 3), BENCH_NSFW_AIOHTTP (the hosts' aiohttp: 3.8, Debian's, by default;
 * 3.11, what ComfyUI 0.3.64 asks for). Ends with PASS/FAIL lines; exits 1 when a target is missed.
 */
import { readFileSync, writeFileSync, mkdtempSync } from 'node:fs'
import { availableParallelism, tmpdir } from 'node:os'
import { join } from 'node:path'
import { ClassifierPool } from '../sidecar/src/nsfw/pool.js'
import { testPng } from '../test/helpers/nsfw-images.js'
import { REAL_HOST_SKIP, destroyRealHost, startRealHost, type RealHost } from '../test/helpers/real-host.js'
import type { AiohttpVersion } from '../test/helpers/stack.js'
import { ensureWrk, group, median, pin, printVerdicts, wrk, type Verdict } from './lib.js'

const IMAGES = Number(process.env.BENCH_NSFW_IMAGES ?? 40)
const ROUNDS = Number(process.env.BENCH_NSFW_ROUNDS ?? 7)
const SECONDS = Number(process.env.BENCH_NSFW_SECONDS ?? 3)
// `pinned`: the hosts on CPU 0, the bench and its wrk on CPU 1 (needs two CPUs); `free`: nothing pinned
const LAYOUTS = (process.env.BENCH_NSFW_LAYOUTS ?? 'pinned,free').split(',').filter((l) => l === 'free' || (l === 'pinned' && availableParallelism() >= 2))
const PASSWORD = 'bench-password-1'
/** the hosts' aiohttp (BENCH_NSFW_AIOHTTP): '3.8' (Debian's) or '3.11' */
const AIOHTTP = (process.env.BENCH_NSFW_AIOHTTP ?? '3.8') as AiohttpVersion

async function imagesPerSecond(): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'nsfw-bench-'))
  const paths = Array.from({ length: IMAGES }, (_, i) => {
    const path = join(dir, `img${i}.png`)
    writeFileSync(path, testPng(i, { size: 512 }))
    return path
  })
  const pool = new ClassifierPool('nsfwjs', IMAGES + 1)
  try {
    await pool.warm()
    await pool.classify({ path: paths[0] }) // the first inference compiles the graph
    const started = performance.now()
    await Promise.all(paths.map((path) => pool.classify({ path })))
    return (IMAGES / (performance.now() - started)) * 1000
  } finally {
    await pool.close()
  }
}

interface Host {
  name: string
  host: RealHost
  /** an sfw_check user's token (every new user has sfw_check) */
  user: string
  admin: string
}

async function json(res: Response, what: string): Promise<any> {
  const text = await res.text()
  if (!res.ok) throw new Error(`${what}: ${res.status} ${text.slice(0, 300)}`)
  return JSON.parse(text)
}

async function users(url: string): Promise<{ user: string; admin: string }> {
  const post = (path: string, body: unknown, token?: string) => fetch(`${url}${path}`, { method: 'POST', headers: { 'Content-Type': 'application/json', ...(token ? { Authorization: `Bearer ${token}` } : {}) }, body: JSON.stringify(body) })
  await json(await post('/register', { username: 'root', password: PASSWORD }), 'register root')
  const admin = (await json(await post('/authsvc/generate_token', { username: 'root', password: PASSWORD, label: 'bench' }), 'token root')).token
  await json(await post('/register', { username: 'viewer', password: PASSWORD }, admin), 'register viewer')
  const user = (await json(await post('/authsvc/generate_token', { username: 'viewer', password: PASSWORD, label: 'bench' }), 'token viewer')).token
  return { user, admin }
}

let colour = 1
function twentyOutputs(prefix: string): Record<string, unknown> {
  const graph: Record<string, unknown> = {
    '1': { class_type: 'EmptyImage', inputs: { width: 1024, height: 1024, batch_size: 1, color: colour++ * 997 } },
    '2': { class_type: 'ImageBlur', inputs: { image: ['1', 0], blur_radius: 7, sigma: 3 } },
  }
  for (let i = 0; i < 20; i++) graph[`s${i}`] = { class_type: 'SaveImage', inputs: { images: ['2', 0], filename_prefix: `${prefix}-${i}` } }
  return graph
}

async function promptMs(h: Host): Promise<number> {
  const headers = { 'Content-Type': 'application/json', Authorization: `Bearer ${h.admin}` }
  const { prompt_id: id } = await json(await fetch(`${h.host.url}/prompt`, { method: 'POST', headers, body: JSON.stringify({ prompt: twentyOutputs(`bench-${h.name}`) }) }), `${h.name} prompt`)
  const until = Date.now() + 120_000
  for (;;) {
    const history = await json(await fetch(`${h.host.url}/history/${id}`, { headers }), `${h.name} history`)
    const messages: Array<[string, { timestamp: number }]> = history[id]?.status?.messages ?? []
    const at = (name: string) => messages.find(([m]) => m === name)?.[1].timestamp
    if (at('execution_success') !== undefined && at('execution_start') !== undefined) {
      // ComfyUI collects garbage 10 s after a prompt: now, not in the next host's prompt
      const freed = await fetch(`${h.host.url}/free`, { method: 'POST', headers, body: JSON.stringify({ unload_models: true }) })
      if (!freed.ok) throw new Error(`${h.name} POST /free: ${freed.status}`)
      await freed.arrayBuffer()
      return at('execution_success')! - at('execution_start')!
    }
    if (history[id]?.status?.status_str === 'error') throw new Error(`${h.name}: the prompt failed`)
    if (Date.now() > until) throw new Error(`${h.name}: the prompt did not finish in 120 s`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

/** Until the policy host's classifier has nothing queued (its outputs are tagged): the next round starts quiet. */
async function classified(h: Host): Promise<void> {
  const until = Date.now() + 120_000
  for (;;) {
    const res = await fetch(`${h.host.url}/authsvc/api/nsfw-management`, { method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${h.admin}` }, body: JSON.stringify({ action: 'list_tags' }) })
    const stats = (await json(res, 'list_tags')).stats
    if (stats.classifier.pending === 0) return
    if (Date.now() > until) throw new Error('the classifier did not catch up in 120 s')
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
}

/** CPU time (user + system, ms) of a process and all its threads so far. */
function cpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100 // clock ticks (USER_HZ 100)
}

function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
  return m ? Number(m[1]) / 1024 : NaN
}

async function main(): Promise<void> {
  const verdicts: Verdict[] = []
  const perSecond = await imagesPerSecond()
  console.log(`classifier: ${perSecond.toFixed(1)} images/s (${(1000 / perSecond).toFixed(0)} ms an image, 512×512 PNG, ${IMAGES} images)`)
  verdicts.push({ name: 'images classified per second (512×512, worker thread)', value: perSecond.toFixed(1), target: '>= 4', ok: perSecond >= 4 })

  if (REAL_HOST_SKIP) {
    console.log(`nsfw bench on the real ComfyUI skipped: ${REAL_HOST_SKIP}`)
  } else {
    ensureWrk()
    const image = testPng(42, { size: 512 })
    const files = { 'input/bench.png': image }
    const [bare, gated, policy] = await Promise.all([
      startRealHost({ aiohttp: AIOHTTP, gate: false, files }),
      startRealHost({ aiohttp: AIOHTTP, files }),
      startRealHost({ aiohttp: AIOHTTP, files, config: { nsfw: { enabled: true } } }),
    ])
    try {
      const hosts: Host[] = []
      for (const [name, host] of [['bare', bare], ['gated', gated], ['policy', policy]] as const) {
        if (name === 'bare') hosts.push({ name, host, user: '', admin: '' })
        else hosts.push({ name, host, ...(await users(host.url)) })
      }
      const [hb, hg, hp] = hosts
      const viewPath = '/view?filename=bench.png&type=input'
      // classified once (the first view waits for it), then every view reads the tag
      // (while the model still loads at start the view is blocked: fail safe; asked again until classified)
      const until = Date.now() + 60_000
      for (;;) {
        const first = await fetch(`${policy.url}${viewPath}`, { headers: { Authorization: `Bearer ${hp.user}` } })
        if (first.status === 200) break
        if (Date.now() > until) throw new Error(`the policy host's first view: ${first.status} ${await first.text()}`)
        await new Promise((resolve) => setTimeout(resolve, 500))
      }
      const allCpus = `0-${availableParallelism() - 1}`
      for (const layout of LAYOUTS) {
        // the hosts (ComfyUI, its sidecar, the classifier thread) on CPU 0 and this process with its
        // wrk on CPU 1; or nothing pinned
        for (const h of hosts) pin(group(h.host.host.pid!), layout === 'pinned' ? '0' : allCpus)
        pin([process.pid], layout === 'pinned' ? '1' : allCpus)
        const tag = layout === 'pinned' ? 'one core' : 'nothing pinned'
        const rps: Record<string, number[]> = { bare: [], gated: [], policy: [] }
        const ms: Record<string, number[]> = { gated: [], policy: [] }
        // the sidecar's own CPU while its host runs the prompt: what the policy could take from it
        const sidecarCpu: Record<string, number[]> = { gated: [], policy: [] }
        for (let round = 0; round < ROUNDS; round++) {
          // the hosts' order alternates (bare first, then policy first), so none always runs after a prompt
          for (const h of round % 2 === 0 ? hosts : [...hosts].reverse()) {
            const headers = h.user ? [`Authorization: Bearer ${h.user}`] : []
            // one request first, every host alike: the measure is the steady rate; a gated host's kept
            // decision ran out while the others ran, and its first request of a round asks the sidecar
            const warm = await fetch(`${h.host.url}${viewPath}`, { headers: h.user ? { Authorization: `Bearer ${h.user}` } : {} })
            await warm.arrayBuffer()
            if (warm.status !== 200) throw new Error(`${h.name} /view before round ${round}: ${warm.status}`)
            rps[h.name].push((await wrk(`${h.host.url}${viewPath}`, 8, headers, SECONDS)).rps)
          }
          for (const h of round % 2 === 0 ? [hg, hp] : [hp, hg]) {
            const cpuBefore = cpuMs(h.host.sidecarPid())
            ms[h.name].push(await promptMs(h))
            sidecarCpu[h.name].push(cpuMs(h.host.sidecarPid()) - cpuBefore)
            if (h === hp) await classified(hp)
          }
        }
        // each round's hosts ran back to back: the ratio of each round's pair, then their median
        const viewPairs = rps.policy.map((p, i) => p / rps.bare[i])
        const viewRatio = median(viewPairs)
        const promptPairs = ms.policy.map((p, i) => p / ms.gated[i])
        const promptRatio = median(promptPairs)
        console.log(`\n${tag}:`)
        console.log(`GET /view req/s (median of ${ROUNDS}): bare ${median(rps.bare).toFixed(0)}, gated ${median(rps.gated).toFixed(0)}, policy ${median(rps.policy).toFixed(0)}; ratio of the medians policy/bare ${(median(rps.policy) / median(rps.bare)).toFixed(3)}`)
        console.log(`the same, each round's pair: policy/bare ${JSON.stringify(viewPairs.map((r) => Number(r.toFixed(3))))}, median ${viewRatio.toFixed(3)}; policy/gated median ${median(rps.policy.map((p, i) => p / rps.gated[i])).toFixed(3)}; gated/bare median ${median(rps.gated.map((g, i) => g / rps.bare[i])).toFixed(3)}`)
        console.log(`prompt with 20 outputs, ms (median of ${ROUNDS}): gated ${median(ms.gated).toFixed(0)} ${JSON.stringify(ms.gated.map(Math.round))}, policy ${median(ms.policy).toFixed(0)} ${JSON.stringify(ms.policy.map(Math.round))}; ratio of the medians ${(median(ms.policy) / median(ms.gated)).toFixed(3)}`)
        console.log(`the same, policy/gated per round (each pair run back to back): ${JSON.stringify(promptPairs.map((r) => Number(r.toFixed(3))))}, median ${promptRatio.toFixed(3)}`)
        console.log(`sidecar CPU during its prompt, ms (median of ${ROUNDS}): gated ${median(sidecarCpu.gated).toFixed(0)}, policy ${median(sidecarCpu.policy).toFixed(0)}`)
        verdicts.push({ name: `${tag}: /view of a classified image, sfw_check user: policy / bare req/s (median of rounds)`, value: viewRatio.toFixed(3), target: '>= 0.95', ok: viewRatio >= 0.95 })
        verdicts.push({ name: `${tag}: CPU-bound prompt, 20 outputs classified: policy / no policy (median of rounds)`, value: promptRatio.toFixed(3), target: '<= 1.05', ok: promptRatio <= 1.05 })
      }
      const memory = rssMb(policy.sidecarPid())
      verdicts.push({ name: 'sidecar memory with the classifier loaded (MB)', value: memory.toFixed(0), target: '<= 400', ok: memory <= 400 })
    } finally {
      await Promise.all([bare, gated, policy].map((h) => destroyRealHost(h)))
    }
  }
  printVerdicts('NSFW policy', verdicts)
  process.exitCode = verdicts.every((v) => v.ok) ? 0 : 1
}

await main()
