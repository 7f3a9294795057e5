/**
 * The ntfy stand-in (test/helpers/ntfy-standin.ts) answers as ntfy's publishing API does
 * (docs.ntfy.sh/publish: JSON publishing, publishing to /<topic> with headers, its error answers),
 * so the suites that use it test against ntfy's behaviour, not against an echo of our client.
 */
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { request } from 'node:http'
import { startNtfyStandin } from '../helpers/ntfy-standin.js'

const post = async (url: string, body: string, headers: Record<string, string> = {}, method = 'POST') => {
  const res = await fetch(url, { method, body, headers })
  return { status: res.status, body: (await res.json()) as Record<string, unknown> }
}

describe('the ntfy stand-in speaks ntfy', async () => {
  const ntfy = await startNtfyStandin()
  after(() => ntfy.close())

  it('JSON publishing to /: the message as ntfy answers it', async () => {
    const res = await post(`${ntfy.url}/`, JSON.stringify({ topic: 'ops', title: 'Hi', message: 'there', tags: ['warning'], priority: 4 }))
    assert.equal(res.status, 200)
    assert.deepEqual(Object.keys(res.body).sort(), ['event', 'expires', 'id', 'message', 'priority', 'tags', 'time', 'title', 'topic'])
    assert.deepEqual([res.body.event, res.body.topic, res.body.title, res.body.message, res.body.tags, res.body.priority], ['message', 'ops', 'Hi', 'there', ['warning'], 4])
    assert.equal((res.body.expires as number) - (res.body.time as number), 43200, 'kept 12 h, as ntfy.sh does')
  })

  it('an empty message is "triggered"; PUT works as POST', async () => {
    const res = await post(`${ntfy.url}/`, JSON.stringify({ topic: 'ops' }), {}, 'PUT')
    assert.deepEqual([res.status, res.body.message], [200, 'triggered'])
  })

  it('publishing to /<topic> with the headers (and their other spellings)', async () => {
    const a = await post(`${ntfy.url}/ops`, 'Backup done', { Title: 'Backup', Tags: 'tada, floppy_disk', Priority: 'high' })
    assert.deepEqual([a.body.topic, a.body.title, a.body.message, a.body.tags, a.body.priority], ['ops', 'Backup', 'Backup done', ['tada', 'floppy_disk'], 4])
    const b = await post(`${ntfy.url}/ops`, 'x', { 'X-Title': 'T', 'X-Priority': '1', ta: 'a' })
    assert.deepEqual([b.body.title, b.body.priority, b.body.tags], ['T', 1, ['a']])
    assert.deepEqual(ntfy.messages.slice(-2).map((m) => m.via), ['path', 'path'])
  })

  const errors: Array<[string, () => Promise<{ status: number; body: Record<string, unknown> }>, number, number]> = [
    ['not JSON', () => post(`${ntfy.url}/`, '{nope'), 400, 40017],
    ['a JSON list', () => post(`${ntfy.url}/`, '[]'), 400, 40017],
    ['an invalid topic', () => post(`${ntfy.url}/`, JSON.stringify({ topic: 'a b' })), 400, 40009],
    ['a reserved topic', () => post(`${ntfy.url}/`, JSON.stringify({ topic: 'docs' })), 400, 40009],
    ['a priority of 7', () => post(`${ntfy.url}/`, JSON.stringify({ topic: 'ops', priority: 7 })), 400, 40007],
    ['a priority word ntfy does not know', () => post(`${ntfy.url}/ops`, 'x', { Priority: 'extreme' }), 400, 40007],
    ['a JSON body over the limit', () => post(`${ntfy.url}/`, JSON.stringify({ topic: 'ops', message: 'x'.repeat(40_000) })), 413, 41303],
    ['GET /', async () => {
      const res = await fetch(`${ntfy.url}/`)
      return { status: res.status, body: (await res.json()) as Record<string, unknown> }
    }, 404, 40401],
  ]
  for (const [name, send, http, code] of errors) {
    it(`${name}: ${http} in ntfy's error shape (${code})`, async () => {
      const res = await send()
      assert.equal(res.status, http)
      assert.deepEqual(Object.keys(res.body).sort(), ['code', 'error', 'http', 'link'])
      assert.deepEqual([res.body.code, res.body.http, typeof res.body.error], [code, http, 'string'])
    })
  }

  it('modes: 429 and 500 in ntfy\'s words, then back to normal', async () => {
    ntfy.answerNext({ kind: 'too_many' }, { kind: 'fail' })
    const body = JSON.stringify({ topic: 'ops' })
    assert.deepEqual((await post(`${ntfy.url}/`, body)).body, { code: 42901, http: 429, error: 'limit reached: too many requests', link: 'https://ntfy.sh/docs/publish/#limitations' })
    assert.deepEqual((await post(`${ntfy.url}/`, body)).body, { code: 50001, http: 500, error: 'internal server error', link: '' })
    assert.equal((await post(`${ntfy.url}/`, body)).status, 200)
  })

  it('slow: a client that gives up before the answer leaves no message', async () => {
    const before = ntfy.messages.length
    ntfy.answerNext({ kind: 'slow', ms: 60_000 })
    await assert.rejects(fetch(`${ntfy.url}/`, { method: 'POST', body: JSON.stringify({ topic: 'ops' }), signal: AbortSignal.timeout(200) }))
    const requests = await ntfy.waitForRequests(ntfy.requests.length + 1)
    assert.equal(requests.at(-1)?.answer, 'aborted')
    assert.equal(ntfy.messages.length, before)
  })

  it('gone refuses connections; back listens on the same port', async () => {
    const port = ntfy.port
    await ntfy.gone()
    // a fresh connection (an agent of its own): the shared pool's first try may be a socket the cut closed
    const refused = await new Promise<string>((resolve) => {
      request(`${ntfy.url}/`, { method: 'POST', agent: false }).on('error', (err: NodeJS.ErrnoException) => resolve(String(err.code))).end('{}')
    })
    assert.equal(refused, 'ECONNREFUSED')
    await ntfy.back()
    assert.equal(ntfy.port, port)
    assert.equal((await post(`${ntfy.url}/`, JSON.stringify({ topic: 'ops' }))).status, 200)
  })
})

describe('a protected topic', async () => {
  const ntfy = await startNtfyStandin({ token: 'tk_right' })
  after(() => ntfy.close())
  const body = JSON.stringify({ topic: 'ops' })

  it('no token: 403 forbidden (40301); a wrong one: 401 unauthorized (40101); the right one: 200', async () => {
    assert.deepEqual((await post(`${ntfy.url}/`, body)).body, { code: 40301, http: 403, error: 'forbidden', link: 'https://ntfy.sh/docs/publish/#authentication' })
    assert.deepEqual((await post(`${ntfy.url}/`, body, { Authorization: 'Bearer tk_wrong' })).body.code, 40101)
    const ok = await post(`${ntfy.url}/`, body, { Authorization: 'Bearer tk_right' })
    assert.equal(ok.status, 200)
    assert.equal(ntfy.messages.at(-1)?.authorization, 'Bearer tk_right')
  })
})
