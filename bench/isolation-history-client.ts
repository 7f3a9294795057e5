/**
 * One user polling a long /history (or /object_info) through the sidecar's decision socket,
 * in its own process (bench/isolation-bench.ts starts it):
 * node --import tsx this.ts SOCKET TOKEN FILE POLL_MS [ROUTE] [VARY].
 * VARY=1 makes every answer a new one (a node definition named by a counter added in front),
 * so the sidecar computes the filter each time instead of taking it from its cache.
 * Prints `FILTERED <n> <p50 ms>` on SIGTERM.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { FrameClient } from '../test/helpers/decision-socket.js'
import { ROOT } from '../test/helpers/stack.js'

const [socket, token, file, pollMs, route = '/history', vary = '0'] = process.argv.slice(2)
const answer = readFileSync(file)
let count = 0
const body = (): Buffer =>
  vary === '1' ? Buffer.concat([Buffer.from(`{"AuthsvcBenchNode${++count}": {"input": {}}, `), answer.subarray(answer.indexOf('{') + 1)]) : answer
const protocol = (JSON.parse(readFileSync(join(ROOT, 'shared/protocol.json'), 'utf8')) as { version: number }).version
const client = await FrameClient.open(socket)
await client.send({ type: 'hello', protocol, plugin_version: 'bench' })
const times: number[] = []
let running = true
process.on('SIGTERM', () => {
  running = false
})
process.stdout.write('READY\n')
while (running) {
  const started = performance.now()
  const d = await client.send({
    type: 'decide', method: 'GET', path: route, query: '', route: { pattern: route, kind: 'route' }, route_status: 200,
    match_info: {}, headers: { authorization: `Bearer ${token}` }, peer: '127.0.0.1', scheme: 'http',
  })
  const f = d.filter as { name: string; ctx: unknown }
  const { message } = await client.exchange({ type: 'filter', name: f.name, ctx: f.ctx, status: 200, content_type: 'application/json' }, body())
  if (message.action !== 'replace') throw new Error(`filter answered ${JSON.stringify(message)}`)
  times.push(performance.now() - started)
  await new Promise((r) => setTimeout(r, Math.max(0, Number(pollMs) - (performance.now() - started))))
}
times.sort((a, b) => a - b)
process.stdout.write(`FILTERED ${times.length} ${(times[Math.floor(times.length / 2)] ?? 0).toFixed(1)}\n`)
client.close()
