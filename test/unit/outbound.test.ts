/**
 * The sidecar's own outbound requests (kernel/http/outbound.ts): which URLs may be fetched (a row
 * per shape: schemes, plain http off this machine, credentials in the URL, loopback spellings),
 * and what a fetch costs at most, against a loopback server on a real socket: a deadline for the
 * whole exchange, a size cap announced or not, redirects checked hop by hop and bounded, nothing
 * of ours sent along. The update check's config key is refused at load with the same reasons.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { once } from 'node:events'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { ConfigError, validateConfig } from '../../sidecar/src/kernel/config/load.js'
import { fetchCapped, loggableUrl, MAX_REDIRECTS, OutboundError, outboundUrlProblem, redirectProblem } from '../../sidecar/src/kernel/http/outbound.js'

describe('outbound URL rule', () => {
  const rows: Array<[string, boolean]> = [
    ['https://registry.npmjs.org/authsvc/latest', true],
    ['https://api.github.com/repos/o/r/releases/latest', true],
    ['https://example.com:8443/x.json', true],
    ['http://127.0.0.1:4873/authsvc', true],
    ['http://127.8.9.10/x', true],
    ['http://localhost:8080/x', true],
    ['http://[::1]:8080/x', true],
    ['http://2130706433/x', true], // 127.0.0.1 as one number: the URL parser makes it 127.0.0.1
    ['http://example.com/x', false],
    ['http://192.168.1.10/x', false],
    ['http://10.0.0.1/x', false],
    ['http://[::ffff:192.0.2.1]/x', false],
    ['http://localhost.example.com/x', false],
    ['http://127.0.0.1.nip.io/x', false],
    ['https://user:pass@example.com/x', false],
    ['https://token@example.com/x', false],
    ['http://user:pass@127.0.0.1/x', false],
    ['ftp://example.com/x', false],
    ['file:///etc/passwd', false],
    ['data:application/json,{"version":"9.9.9"}', false],
    ['javascript:alert(1)', false],
    ['//example.com/x', false],
    ['/relative', false],
    ['not a url', false],
    ['', false],
  ]
  for (const [url, allowed] of rows) {
    it(`${JSON.stringify(url)} is ${allowed ? 'allowed' : 'refused'}`, () => {
      assert.equal(outboundUrlProblem(url) === null, allowed, String(outboundUrlProblem(url)))
    })
  }

  it('the update check URL is checked at load, with the rest of the config', () => {
    assert.equal(validateConfig({}).update_check.url, '')
    assert.equal(validateConfig({ update_check: { url: 'https://registry.npmjs.org/authsvc/latest' } }).update_check.url, 'https://registry.npmjs.org/authsvc/latest')
    try {
      validateConfig({ update_check: { url: 'http://example.com/x', extra: 1 } })
      assert.fail('accepted')
    } catch (err) {
      assert.ok(err instanceof ConfigError)
      assert.equal(err.problems.length, 2)
      assert.match(err.problems.join('\n'), /\/update_check\/url: plain http is allowed only to this machine/)
      assert.match(err.problems.join('\n'), /additional/i)
    }
  })

  it('a logged URL never shows its query', () => {
    assert.equal(loggableUrl('https://example.com/a/b?key=secret#x'), 'https://example.com/a/b')
  })
})

describe('fetchCapped', () => {
  const seen: IncomingMessage[] = []
  let answer: (req: IncomingMessage, res: ServerResponse) => void = (_q, res) => res.end('{}')
  const server = createServer((req, res) => {
    seen.push(req)
    answer(req, res)
  })
  let base = ''
  before(async () => {
    server.listen(0, '127.0.0.1')
    await once(server, 'listening')
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  })
  after(() => {
    server.closeAllConnections()
    server.close()
  })

  const refused = async (promise: Promise<unknown>, message: RegExp) => {
    await assert.rejects(promise, (err: unknown) => err instanceof OutboundError && message.test(err.message))
  }

  it('returns the body of a 2xx, sending only the headers asked for', async () => {
    answer = (_q, res) => res.end('{"version":"1.0.0"}')
    const body = await fetchCapped(`${base}/ok`, { timeoutMs: 2000, maxBytes: 100, headers: { Accept: 'application/json' } })
    assert.equal(body.toString(), '{"version":"1.0.0"}')
    const headers = seen.at(-1)!.headers
    assert.equal(headers.accept, 'application/json')
    assert.equal(headers.cookie, undefined)
    assert.equal(headers.authorization, undefined)
    assert.equal(headers.referer, undefined)
  })

  it('an answer of exactly the cap is read; one byte more is refused, announced or not', async () => {
    answer = (_q, res) => res.end('x'.repeat(100))
    assert.equal((await fetchCapped(`${base}/cap`, { timeoutMs: 2000, maxBytes: 100 })).length, 100)
    answer = (_q, res) => res.end('x'.repeat(101))
    await refused(fetchCapped(`${base}/cap`, { timeoutMs: 2000, maxBytes: 100 }), /larger than 100 bytes/)
    answer = (_q, res) => {
      res.writeHead(200) // chunked: no length announced
      res.write('x'.repeat(60))
      res.end('x'.repeat(60))
    }
    await refused(fetchCapped(`${base}/cap`, { timeoutMs: 2000, maxBytes: 100 }), /larger than 100 bytes/)
  })

  it('a status other than 2xx is an error naming it', async () => {
    for (const status of [204, 299]) {
      answer = (_q, res) => res.writeHead(status).end()
      assert.equal((await fetchCapped(`${base}/s`, { timeoutMs: 2000, maxBytes: 100 })).length, 0)
    }
    for (const status of [304, 404, 500, 503]) {
      answer = (_q, res) => res.writeHead(status).end()
      await refused(fetchCapped(`${base}/s`, { timeoutMs: 2000, maxBytes: 100 }), new RegExp(`answered ${status}`))
    }
  })

  it('the deadline covers headers and body: a server that holds either is cut off', async () => {
    answer = () => {} // never answers
    await refused(fetchCapped(`${base}/hold`, { timeoutMs: 200, maxBytes: 100 }), /no complete answer within 200 ms/)
    answer = (_q, res) => {
      res.writeHead(200)
      res.write('{') // and never ends
    }
    await refused(fetchCapped(`${base}/trickle`, { timeoutMs: 200, maxBytes: 100 }), /no complete answer within 200 ms/)
  })

  it('the caller\'s stop ends a fetch in flight', async () => {
    answer = () => {}
    const stop = new AbortController()
    const fetching = fetchCapped(`${base}/hold`, { timeoutMs: 5000, maxBytes: 100, signal: stop.signal })
    stop.abort()
    await refused(fetching, /stopped/)
  })

  it('redirects: followed on loopback, each target checked, at most MAX_REDIRECTS', async () => {
    answer = (req, res) => {
      const n = Number(req.url!.slice(1))
      if (n > 0) res.writeHead(302, { location: `/${n - 1}` }).end()
      else res.end('done')
    }
    assert.equal((await fetchCapped(`${base}/${MAX_REDIRECTS}`, { timeoutMs: 2000, maxBytes: 100 })).toString(), 'done')
    await refused(fetchCapped(`${base}/${MAX_REDIRECTS + 1}`, { timeoutMs: 2000, maxBytes: 100 }), /more than 3 redirects/)
    const before = seen.length
    for (const target of ['http://192.0.2.1/x', 'file:///etc/passwd', 'https://u:p@example.com/']) {
      answer = (_q, res) => res.writeHead(301, { location: target }).end()
      await refused(fetchCapped(`${base}/r`, { timeoutMs: 2000, maxBytes: 100 }), /^a redirect: /)
    }
    assert.equal(seen.length - before, 3, 'one request each: the refused targets were never asked')
  })

  it('a refused URL is never asked; an unreachable one is an error naming why', async () => {
    await refused(fetchCapped('http://192.0.2.1/x', { timeoutMs: 2000, maxBytes: 100 }), /^the URL: plain http/)
    const closed = createServer()
    closed.listen(0, '127.0.0.1')
    await once(closed, 'listening')
    const port = (closed.address() as AddressInfo).port
    closed.close()
    await once(closed, 'close')
    await refused(fetchCapped(`http://127.0.0.1:${port}/`, { timeoutMs: 2000, maxBytes: 100 }), /could not be reached \(ECONNREFUSED\)/)
  })
})

describe('redirects from a source elsewhere (review M6)', () => {
  const from = 'https://updates.example/latest.json'
  const inward = [
    'http://127.0.0.1:8188/api/prompt', 'https://127.0.0.1/', 'https://127.9.9.9/', 'https://localhost:8188/', 'https://a.localhost/',
    'https://[::1]/', 'https://[::ffff:127.0.0.1]/', 'https://[::ffff:7f00:1]/', 'https://10.1.2.3/', 'https://172.16.0.1/', 'https://192.168.1.1/',
    'https://169.254.169.254/latest/meta-data/', 'https://100.64.0.1/', 'https://0.0.0.0/', 'https://[fe80::1]/', 'https://[fd00::1]/', 'https://[::]/',
  ]
  for (const to of inward) {
    it(`refuses ${to}`, () => {
      assert.match(redirectProblem(from, to) ?? '', /may not send us to this machine or a private address|plain http/)
    })
  }
  for (const to of ['https://cdn.example/file.json', 'https://8.8.8.8/x', 'https://[2001:db8::1]/']) {
    it(`follows ${to}`, () => assert.equal(redirectProblem(from, to), null))
  }
  it('a source on this machine may send us elsewhere on it (the tests\' stand-ins, a local mirror)', () => {
    assert.equal(redirectProblem('http://127.0.0.1:9000/a', 'http://127.0.0.1:9001/b'), null)
  })
})
