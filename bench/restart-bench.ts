/**
 * A sidecar killed under load, inside the REAL ComfyUI (skipped with one line when none is
 * available): how long the gate stops answering (issue 27: answering again within 0.5 s).
 *
 * BENCH_RESTART_CLIENTS (default 300) keep-alive clients send GET /prompt with an API token back
 * to back; once the standby sidecar waits, the running one gets SIGKILL. Two figures per kill:
 * `silent`, the longest span after the kill in which no request got any answer (requests that
 * arrive during the restart wait for the replacement), and `refused`, from the kill to the end
 * of the last 503 (requests in flight when it died). Each kill comes once the sidecar has run
 * for 10 s (a sidecar that dies sooner is a crash loop, which the plugin replaces after a pause). BENCH_RESTART_KILLS kills (default 5) in
 * two layouts, as the other benches: `one core` (ComfyUI and its sidecar on CPU 0, the clients
 * on CPU 1) and `nothing pinned`. The verdicts are on the median kill of each layout, the worst
 * printed beside it. Any answer other than 200 or 503 fails the run.
 */
import { REAL_HOST_SKIP, destroyRealHost, startRealHost } from '../test/helpers/real-host.js'
import { PASSWORD } from '../test/helpers/client.js'
import { killUnderLoad, sidecarStable, standbyWaiting } from '../test/helpers/kill-under-load.js'
import { join } from 'node:path'
import { group, median, pin, printVerdicts, type Verdict } from './lib.js'

const CLIENTS = Number(process.env.BENCH_RESTART_CLIENTS ?? 300)
const KILLS = Number(process.env.BENCH_RESTART_KILLS ?? 5)
const TARGET_MS = 500
const LAYOUTS = (process.env.BENCH_RESTART_LAYOUTS ?? 'pinned,free').split(',') as Array<'pinned' | 'free'>

async function post(url: string, path: string, body: object, headers: Record<string, string> = {}): Promise<any> {
  const res = await fetch(`${url}${path}`, {
    method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json', ...headers }, body: JSON.stringify(body),
  })
  const text = await res.text()
  if (res.status >= 300) throw new Error(`POST ${path}: ${res.status} ${text.slice(0, 200)}`)
  return JSON.parse(text)
}

async function main(): Promise<void> {
  if (REAL_HOST_SKIP) {
    console.log(`\nsidecar restart under load: skipped (${REAL_HOST_SKIP})`)
    return
  }
  const host = await startRealHost({})
  const verdicts: Verdict[] = []
  let failed = false
  try {
    await post(host.url, '/register', { username: 'root', password: PASSWORD })
    const token = (await post(host.url, '/authsvc/generate_token', { username: 'root', password: PASSWORD, label: 'bench' })).token as string
    console.log(`\nsidecar killed under load (real ComfyUI 0.3.64, ${CLIENTS} keep-alive clients on GET /prompt, ${KILLS} kills per layout)`)
    for (const layout of LAYOUTS) {
      const windows: number[] = []
      const silences: number[] = []
      for (let k = 0; k < KILLS; k++) {
        // the sidecar is a new process after every kill: pin the whole group each time
        pin(group(host.host.pid!), layout === 'pinned' ? '0' : '0-1')
        pin([process.pid], layout === 'pinned' ? '1' : '0-1')
        if (!(await standbyWaiting(host.host.pid!))) console.log(`  ${layout}: no standby sidecar was waiting before kill ${k + 1}`)
        await sidecarStable(join(host.dataDir, 'sidecar.pid'))
        const result = await killUnderLoad({ url: host.url, token, clients: CLIENTS, sidecarPid: () => host.sidecarPid() })
        if (result.unexpected.length > 0) {
          failed = true
          console.log(`  ${layout}: answers other than 200/503 after the kill: ${JSON.stringify(result.unexpected.slice(0, 5))}`)
        }
        windows.push(result.windowMs)
        silences.push(result.silentMs)
        console.log(`  ${layout} kill ${k + 1}: silent ${result.silentMs.toFixed(0)} ms, 503s until ${result.windowMs.toFixed(0)} ms (${result.refused} of ${result.answered} answers), slowest request ${result.slowestMs.toFixed(0)} ms, new sidecar ready after ${result.respawnMs?.toFixed(0) ?? '?'} ms`)
      }
      pin([process.pid], '0-1')
      const where = layout === 'pinned' ? 'one core' : 'nothing pinned'
      for (const [what, values] of [['no answer at all', silences], ['last 503', windows]] as const) {
        const med = median([...values])
        verdicts.push({
          name: `after a sidecar kill, ${what}, ${where} (median; worst ${Math.max(...values).toFixed(0)} ms)`,
          value: `${med.toFixed(0)} ms`,
          target: `<= ${TARGET_MS} ms`,
          ok: med <= TARGET_MS,
        })
      }
    }
  } finally {
    await destroyRealHost(host)
  }
  verdicts.push({ name: 'answers after a kill are 200 or 503 only', value: failed ? 'other' : 'yes', target: 'yes', ok: !failed })
  printVerdicts('sidecar restart under load', verdicts)
  if (verdicts.some((v) => !v.ok)) process.exitCode = 1
}

main().catch((err: unknown) => {
  console.error(err)
  process.exit(1)
})
