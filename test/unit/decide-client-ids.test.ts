/**
 * WebSocket clientId binding: the first principal to use a clientId (on the
 * socket or in a prompt) owns it, and nobody else can reuse, flood out or
 * take over the binding.
 *
 * Part of the decision path's attack table (DESIGN §6 "Attack tables", STYLE 7):
 * one row per bypass shape, through the real decider and real services; the
 * shared world is decide-world.ts.
 */
import { describe, it, before, after } from 'node:test'
import { apiToken, assertDenied, assertPass, bearer, decide, type DescOptions } from './fixtures.js'
import { at, bodyStep, world, type World } from './decide-world.js'

// --------------------------------------------------------------- WebSocket

describe('WebSocket clientId binding', () => {
  let w: World
  before(async () => {
    w = await world()
  })
  after(() => w.sc.close())

  const ws = (query: string, headers: Record<string, string>, path = '/ws'): DescOptions => ({ path, pattern: path, query, headers: { upgrade: 'websocket', ...headers } })

  it('the first principal binds a clientId; another principal reusing it → 403 CLIENT_ID_TAKEN', async () => {
    assertPass(await decide(w.sc, ws('clientId=tab-1', bearer(w.aliceJwt))))
    assertPass(await decide(w.sc, ws('clientId=tab-1', bearer(w.aliceToken))), 'the same user with another credential')
    assertDenied(await decide(w.sc, ws('clientId=tab-1', bearer(w.bobJwt))), 'CLIENT_ID_TAKEN')
    assertDenied(await decide(w.sc, ws('clientId=tab-1', bearer(w.bobJwt), '/api/ws')), 'CLIENT_ID_TAKEN', '/api twin')
    assertDenied(await decide(w.sc, { method: 'HEAD', ...ws('clientId=tab-1', bearer(w.bobJwt)) }), 'CLIENT_ID_TAKEN', 'HEAD')
    assertDenied(await decide(w.sc, ws('x=1&clientId=tab-1', { ...bearer(w.adminJwt) })), 'CLIENT_ID_TAKEN', 'even an admin')
  })

  it('a repeated clientId parameter is judged on the first one (the one the host reads)', async () => {
    assertPass(await decide(w.sc, ws('clientId=tab-2', bearer(w.aliceJwt))))
    assertDenied(await decide(w.sc, ws('clientId=tab-2&clientId=bob-tab', bearer(w.bobJwt))), 'CLIENT_ID_TAKEN')
  })

  it('a query that starts with ? is read as the host reads it: the first key is `?clientId`, so the host\'s clientId is the next one', async () => {
    assertPass(await decide(w.sc, ws('clientId=tab-q', bearer(w.aliceJwt))))
    // the plugin sends yarl's raw query string: for `/ws??clientId=x&clientId=tab-q` it starts with `?`
    assertDenied(await decide(w.sc, ws('?clientId=bob-fresh&clientId=tab-q', bearer(w.bobJwt))), 'CLIENT_ID_TAKEN')
    assertDenied(await decide(w.sc, ws('??clientId=bob-fresh-2&clientId=tab-q', bearer(w.bobJwt))), 'CLIENT_ID_TAKEN', 'two of them')
    // and a `?clientId` key alone names no clientId at all: the host's socket gets an id of its own
    assertPass(await decide(w.sc, ws('?clientId=tab-q', bearer(w.bobJwt))))
  })

  it('a query with escapes that are not UTF-8 is refused: the host\'s yarl versions read them differently (1.8 as U+FFFD, 1.19 as written)', async () => {
    for (const query of ['clientId=%E9tab', 'clientId=tab&x=%C3', 'filename=a%ED%A0%80.png']) {
      assertDenied(await decide(w.sc, ws(query, bearer(w.aliceJwt))), 'VALIDATION_FAILED', query)
    }
    // escapes that are not escapes, and valid UTF-8, read alike everywhere
    assertPass(await decide(w.sc, ws('clientId=%zz-%C3%A9-%', bearer(w.aliceJwt))))
  })

  it('another principal cannot evict a binding by flooding new clientIds, then take it over', async () => {
    assertPass(await decide(w.sc, ws('clientId=victim-tab', bearer(w.aliceJwt))))
    const bobToken = await apiToken(w.sc, w.bob)
    for (let i = 0; i < 10_000; i++) await decide(w.sc, ws(`clientId=flood-${i}`, bearer(bobToken)))
    assertDenied(await decide(w.sc, ws('clientId=victim-tab', bearer(bobToken))), 'CLIENT_ID_TAKEN')
  })

  it('a prompt naming another principal\'s clientId is refused at the body step', async () => {
    assertPass(await decide(w.sc, ws('clientId=tab-3', bearer(w.aliceJwt))))
    const d = assertPass(await decide(w.sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: bearer(w.bobJwt) }))
    const ctx = JSON.parse(JSON.stringify(d.need_body!.ctx)) as unknown
    assertDenied(await bodyStep(w.sc, ctx, JSON.stringify({ prompt: {}, client_id: 'tab-3' })), 'CLIENT_ID_TAKEN')
  })

  it('a clientId first used by a prompt binds it for the WebSocket too', async () => {
    const d = assertPass(await decide(w.sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: bearer(w.bobJwt) }))
    assertPass(await bodyStep(w.sc, d.need_body!.ctx, JSON.stringify({ prompt: {}, client_id: 'bob-tab-9' })))
    assertDenied(await decide(w.sc, ws('clientId=bob-tab-9', bearer(w.aliceJwt))), 'CLIENT_ID_TAKEN')
  })
})
