/**
 * The download stand-ins (test/helpers/download-sources.ts) in a process of their own for the
 * downloads bench, so serving gigabytes never shares an event loop with the bench's own
 * measurements. Files: Civitai version 1 → `big.safetensors` (BENCH_DOWNLOAD_BYTES, default
 * 2 GB); versions 2 and 3 → `par-a` / `par-b` (half that each). Prints one line
 * `STANDINS {"civitai":...,"huggingface":...,"cdn":...}` once the published hashes are computed.
 */
import { startDownloadStandins } from '../test/helpers/download-sources.js'

const bytes = Number(process.env.BENCH_DOWNLOAD_BYTES ?? 2 * 1024 ** 3)
const src = await startDownloadStandins()
const big = { id: 1, name: 'big.safetensors', size: bytes, seed: 1 }
// the two files of the decision line come at a network link's speed, BENCH_PARALLEL_MBPS MB/s each
// (default 100: two downloads filling a 1.6 Gbit/s link; 0: as fast as loopback goes)
const parallelBps = Number(process.env.BENCH_PARALLEL_MBPS ?? 100) * 1e6
const paced = parallelBps > 0 ? { slowBps: parallelBps } : {}
const a = { id: 2, name: 'par-a.safetensors', size: Math.floor(bytes / 2), seed: 2, ...paced }
const b = { id: 3, name: 'par-b.safetensors', size: Math.floor(bytes / 2), seed: 3, ...paced }
src.civitai.set(1, [big])
src.civitai.set(2, [a])
src.civitai.set(3, [b])
// the published hashes, computed before any timing starts
for (const f of [big, a, b]) src.publishedSha256(f)
console.log(`STANDINS ${JSON.stringify({ civitai: src.civitaiUrl, huggingface: src.huggingfaceUrl, cdn: src.cdnUrl, bigUrl: `${src.cdnUrl}/files/1/big.safetensors?sig=secret-signature-1` })}`)
process.on('SIGTERM', () => void src.close().then(() => process.exit(0)))
