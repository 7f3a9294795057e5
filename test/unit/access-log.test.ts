/**
 * The sidecar's output is ComfyUI's console: by default it writes no line per request (issue 27:
 * Fastify wrote two per page or API call); AUTHSVC_ACCESS_LOG=1 writes exactly one, with any
 * query credential redacted; errors are still logged. Real HTTP over the app's Unix socket.
 */
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { request } from 'node:http'
import { Writable } from 'node:stream'
import { join } from 'node:path'
import { rmSync } from 'node:fs'
import { buildApp, prepareApp } from '../../sidecar/src/app.js'
import { createLogger, redactUrl } from '../../sidecar/src/kernel/log.js'
import { openServices } from '../../sidecar/src/services.js'
import { SECRET, tempDir, testConfig } from './fixtures.js'

function get(socketPath: string, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, path, headers: { Accept: 'application/json' } }, (res) => {
      res.resume()
      res.on('end', () => resolve(res.statusCode ?? 0))
    })
    req.on('error', reject)
    req.end()
  })
}

/** A log destination that keeps every JSON line written to it. */
function capture(): { lines: Array<Record<string, unknown>>; sink: Writable } {
  const lines: Array<Record<string, unknown>> = []
  const sink = new Writable({
    write(chunk, _enc, done) {
      for (const line of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(line))
      done()
    },
  })
  return { lines, sink }
}

async function sidecarLines(env: Record<string, string | undefined>, level: string, paths: string[]): Promise<Array<Record<string, unknown>>> {
  const { lines, sink } = capture()
  const saved = { AUTHSVC_ACCESS_LOG: process.env.AUTHSVC_ACCESS_LOG }
  Object.assign(process.env, env)
  for (const [k, v] of Object.entries(env)) if (v === undefined) delete process.env[k]
  const dir = tempDir()
  const log = createLogger({ level, destination: sink })
  const services = await openServices({ config: testConfig(), dataDir: dir, env: { AUTHSVC_SECRET: SECRET }, log, watchGroups: false })
  const built = buildApp(services, log)
  try {
    const socketPath = join(dir, 'http.sock')
    await built.app.listen({ path: socketPath })
    const before = lines.length
    for (const path of paths) await get(socketPath, path)
    return lines.slice(before)
  } finally {
    await built.stop()
    await built.app.close()
    await services.close()
    rmSync(dir, { recursive: true, force: true })
    if (saved.AUTHSVC_ACCESS_LOG === undefined) delete process.env.AUTHSVC_ACCESS_LOG
    else process.env.AUTHSVC_ACCESS_LOG = saved.AUTHSVC_ACCESS_LOG
  }
}

describe('access log', () => {
  after(() => {
    delete process.env.AUTHSVC_ACCESS_LOG
  })

  it('by default: no line for answered requests, found or not', async () => {
    const lines = await sidecarLines({ AUTHSVC_ACCESS_LOG: undefined }, 'info', ['/authsvc/health', '/login', '/authsvc/nope'])
    assert.deepEqual(lines.map((l) => l.msg), [])
  })

  it('AUTHSVC_ACCESS_LOG=1: one line per request, with its status, and a query token redacted', async () => {
    const lines = await sidecarLines({ AUTHSVC_ACCESS_LOG: '1' }, 'info', ['/authsvc/health', '/authsvc/health?token=ast_secretvalue'])
    assert.equal(lines.length, 2, JSON.stringify(lines))
    for (const line of lines) {
      assert.equal(line.msg, 'request')
      assert.equal(line.level, 30)
      assert.equal((line.res as { statusCode: number }).statusCode, 200)
    }
    assert.equal((lines[1].req as { url: string }).url, '/authsvc/health?token=[REDACTED]')
    assert.ok(!JSON.stringify(lines).includes('ast_secretvalue'))
  })

  // every spelling of a query credential the resolver accepts (URLSearchParams decodes the key) is redacted
  const SPELLINGS = ['token=SECRET1', '%74oken=SECRET1', 't%6Fken=SECRET1', 'access_token=SECRET1', 'access%5Ftoken=SECRET1', 'TOKEN=SECRET1', 'a=1&token=SECRET1&b=2', 'token=SECRET1&token=SECRET1']
  for (const query of SPELLINGS) {
    it(`AUTHSVC_ACCESS_LOG=1: ${query} never reaches the log`, async () => {
      const lines = await sidecarLines({ AUTHSVC_ACCESS_LOG: '1' }, 'info', [`/authsvc/health?${query}`])
      assert.equal(lines.length, 1, JSON.stringify(lines))
      const url = (lines[0].req as { url: string }).url
      assert.ok(!JSON.stringify(lines).includes('SECRET1'), url)
      assert.match(url, /\[REDACTED\]/)
    })
  }
  it('redactUrl leaves other keys, fragments and paths as they are', () => {
    assert.equal(redactUrl('/view?filename=token%3Dx&tokens=1#token=frag'), '/view?filename=token%3Dx&tokens=1#token=frag')
    assert.equal(redactUrl('/a?%74oken=s&b=2'), '/a?%74oken=[REDACTED]&b=2')
  })

  it('at AUTHSVC_LOG_LEVEL=debug the same single line comes at debug', async () => {
    const lines = await sidecarLines({ AUTHSVC_ACCESS_LOG: undefined }, 'debug', ['/authsvc/health'])
    const requestLines = lines.filter((l) => l.msg === 'request')
    assert.equal(requestLines.length, 1, JSON.stringify(lines))
    assert.equal(requestLines[0].level, 20)
    assert.equal(lines.filter((l) => /incoming request|request completed/.test(String(l.msg))).length, 0)
  })
})

describe('start-up line of Fastify', () => {
  it('"Server listening at" is debug, not info', async () => {
    const { lines, sink } = capture()
    const log = createLogger({ level: 'debug', destination: sink })
    log.info('Server listening at /tmp/x.sock')
    log.info('something else')
    assert.deepEqual(lines.map((l) => [l.level, l.msg]), [[20, 'Server listening at /tmp/x.sock'], [30, 'something else']])
  })
})

describe('errors are still logged with the access log off', () => {
  it('a 500 writes its error lines', async () => {
    const { lines, sink } = capture()
    delete process.env.AUTHSVC_ACCESS_LOG
    const log = createLogger({ level: 'info', destination: sink })
    // services never bound: every route that uses them fails (a 500 that must be in the log)
    const prepared = prepareApp(log, () => 0)
    await prepared.app.ready()
    assert.equal((await prepared.app.inject({ method: 'GET', url: '/authsvc/health' })).statusCode, 500)
    const errors = lines.filter((l) => (l.level as number) >= 50)
    assert.ok(errors.length >= 1, JSON.stringify(lines))
    assert.match(JSON.stringify(errors), /before the store was opened/)
    assert.equal(lines.filter((l) => l.msg === 'request').length, 0, 'no access line')
    await prepared.app.close()
  })
})
