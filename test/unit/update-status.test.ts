/**
 * `GET /authsvc/api/update-status` (SPEC §5.4, issue 24 item 4) on a real sidecar, its source a
 * loopback stand-in on a real socket: offline without a source; online with a newer, older or
 * equal version in each source format (GitHub release, npm package document, npm `latest`);
 * every failure of the source (500, garbage, no version, a huge answer, an answer that never
 * ends, a redirect to plain http elsewhere) is offline with latest = current; the route answers
 * while the source holds its answer; at most one ask per day of the injected clock, across a
 * restart, and at once after the URL changed. Admin only. The checks are driven by hand (the
 * job's first-check timer is off here); test/e2e/user-env-updates.test.ts runs the real job.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { once } from 'node:events'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { rmSync } from 'node:fs'
import { features, type Composition } from '../../sidecar/src/app.js'
import { SERVICE_VERSION } from '../../sidecar/src/services.js'
import { updatesFeature, type UpdatesFeature } from '../../sidecar/src/updates/feature.js'
import { CHECK_INTERVAL_MS, RETRY_AFTER_FAILURE_MS, latestVersionOf, MAX_ANSWER_BYTES } from '../../sidecar/src/updates/update-check.js'
import { addUser, apiToken, assertError, bootstrapAdmin, call, fakeClock, openSidecar, tempDir, type FakeClock, type Sidecar } from './fixtures.js'

type Answer = (req: IncomingMessage, res: ServerResponse) => void

/** The source stand-in: answers each request with the current `answer`, and records what came. */
class Source {
  readonly requests: IncomingMessage[] = []
  answer: Answer = json({ tag_name: 'v0.0.0' })
  private server: Server = createServer((req, res) => {
    this.requests.push(req)
    this.server.emit('asked', req)
    this.answer(req, res)
  })
  url = ''

  async start(): Promise<void> {
    this.server.listen(0, '127.0.0.1')
    await once(this.server, 'listening')
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`
  }

  /** settles when the next request arrives */
  asked(): Promise<unknown> {
    return once(this.server, 'asked')
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections()
    this.server.close()
  }
}

const json = (doc: unknown, status = 200): Answer => (_req, res) => {
  res.writeHead(status, { 'content-type': 'application/json' })
  res.end(JSON.stringify(doc))
}

/** A version relative to ours: one minor up, or down (ours is 0.1.0 or later). */
const [MAJOR, MINOR] = SERVICE_VERSION.split('.').map(Number)
const NEWER = `${MAJOR}.${MINOR + 1}.0`
const OLDER = '0.0.1'

/** The sidecar's features, the update check driven by hand (no first-check timer) with a short deadline. */
const handDriven: Composition = (s, l, c) =>
  features(s, l, c).map((f) => (f.name === 'updates' ? updatesFeature(s, l, c, { firstCheckMs: null, dueLookMs: 3_600_000, timeoutMs: 500 }) : f))

const updatesOf = (sc: Sidecar) => sc.built.features.find((f) => f.name === 'updates') as UpdatesFeature

async function statusOf(sc: Sidecar, token: string): Promise<Record<string, unknown>> {
  const res = await call(sc, { url: '/authsvc/api/update-status', bearer: token })
  assert.equal(res.statusCode, 200, res.body)
  return JSON.parse(res.body) as Record<string, unknown>
}

const offline = { current_version: SERVICE_VERSION, latest_version: SERVICE_VERSION, update_available: false, mode: 'offline' }

describe('update status', () => {
  const source = new Source()
  before(() => source.start())
  after(() => source.stop())

  async function withSidecar(path: string, run: (sc: Sidecar, admin: string) => Promise<void>, opts: { dir?: string; clock?: FakeClock } = {}): Promise<void> {
    const sc = await openSidecar({ config: { update_check: { url: `${source.url}${path}` } }, compose: handDriven, dir: opts.dir, clock: opts.clock })
    try {
      const user = sc.services.users.byUsername('root-admin') ?? (await bootstrapAdmin(sc)).user
      await run(sc, await apiToken(sc, user, 24 * 365))
    } finally {
      await sc.close({ keepDir: opts.dir !== undefined })
    }
  }

  it('without a source: offline, latest = current, and nothing is asked', async () => {
    const sc = await openSidecar()
    try {
      const { user } = await bootstrapAdmin(sc)
      const admin = await apiToken(sc, user)
      const asked = source.requests.length
      assert.deepEqual(await statusOf(sc, admin), offline)
      assert.equal(updatesOf(sc).check().status().mode, 'offline')
      await updatesOf(sc).check().checkIfDue()
      assert.deepEqual(await statusOf(sc, admin), offline)
      assert.equal(source.requests.length, asked)
    } finally {
      await sc.close()
    }
  })

  describe('one sidecar asking /latest (the clock moves a day before each ask)', () => {
    let sc: Sidecar
    let admin: string
    before(async () => {
      sc = await openSidecar({ config: { update_check: { url: `${source.url}/latest` } }, compose: handDriven })
      admin = await apiToken(sc, (await bootstrapAdmin(sc)).user, 24 * 365 * 10)
    })
    after(() => sc.close())
    /** the next ask is due: a day after the last */
    const ask = async () => {
      sc.clock.advance(CHECK_INTERVAL_MS)
      await updatesOf(sc).check().checkIfDue()
    }

    it('before the first check: offline', async () => {
      assert.deepEqual(await statusOf(sc, admin), offline)
    })

    const online: Array<[string, unknown, string, boolean]> = [
      ['a newer GitHub release (tag v-prefixed)', { tag_name: `v${NEWER}`, name: 'x', draft: false }, NEWER, true],
      ['an older GitHub release', { tag_name: `v${OLDER}` }, OLDER, false],
      ['the same version (npm package document)', { name: 'authsvc', 'dist-tags': { latest: SERVICE_VERSION }, versions: {} }, SERVICE_VERSION, false],
      ['a newer npm package document', { 'dist-tags': { latest: NEWER, next: '9.0.0-rc.1' } }, NEWER, true],
      ['a newer npm `latest` document', { name: 'authsvc', version: NEWER }, NEWER, true],
      ['a prerelease of the next version', { version: `${NEWER}-rc.1` }, `${NEWER}-rc.1`, true],
    ]
    for (const [name, doc, latest, available] of online) {
      it(`online: ${name}`, async () => {
        source.answer = json(doc)
        await ask()
        assert.deepEqual(await statusOf(sc, admin), { current_version: SERVICE_VERSION, latest_version: latest, update_available: available, mode: 'online' })
      })
    }

    const failing: Array<[string, Answer]> = [
      ['a 500', json({ error: 'boom' }, 500)],
      ['a 404', json({ message: 'Not Found' }, 404)],
      ['garbage instead of JSON', (_q, res) => res.end('<html>not json')],
      ['JSON without a version', json({ hello: 'world' })],
      ['a version that is not semver', json({ tag_name: 'release-2024' })],
      ['a JSON array', json([{ tag_name: 'v9.9.9' }])],
      ['a huge answer (announced)', (_q, res) => res.end(Buffer.alloc(MAX_ANSWER_BYTES + 10, 0x20))],
      ['a huge answer (chunked, never announced)', (_q, res) => {
        res.writeHead(200, { 'content-type': 'application/json' })
        const chunk = Buffer.alloc(64 * 1024, 0x20)
        for (let i = 0; i * chunk.length <= MAX_ANSWER_BYTES; i++) res.write(chunk)
        res.end('{"version":"99.0.0"}')
      }],
      ['a redirect to plain http on another machine', (_q, res) => {
        res.writeHead(302, { location: 'http://192.0.2.1/latest' })
        res.end()
      }],
      ['nothing before its deadline', () => {}],
    ]
    for (const [name, answer] of failing) {
      it(`offline when the source answers ${name}`, async () => {
        source.answer = json({ version: NEWER })
        await ask()
        assert.equal((await statusOf(sc, admin)).mode, 'online', 'a success first, so the failure is what turns it offline')
        source.answer = answer
        await ask()
        assert.deepEqual(await statusOf(sc, admin), offline)
      })
    }

    it('a redirect to another loopback path is followed', async () => {
      source.answer = (req, res) => {
        if (req.url === '/latest') {
          res.writeHead(301, { location: '/moved' })
          res.end()
        } else json({ version: NEWER })(req, res)
      }
      await ask()
      assert.equal((await statusOf(sc, admin)).latest_version, NEWER)
      assert.equal(source.requests.at(-1)?.url, '/moved')
    })

    it('the route answers while the source holds its answer; a second check joins the one in flight', async () => {
      source.answer = json({ tag_name: 'nightly' })
      await ask()
      let release: () => void = () => {}
      source.answer = (req, res) => {
        release = () => json({ version: NEWER })(req, res)
      }
      const asked = source.asked()
      const count = source.requests.length
      sc.clock.advance(CHECK_INTERVAL_MS)
      const check = updatesOf(sc).check().checkIfDue()
      await asked
      // the source holds: the route still answers, from memory
      assert.deepEqual(await statusOf(sc, admin), offline)
      assert.equal(updatesOf(sc).check().checkIfDue(), check)
      release()
      await check
      assert.equal((await statusOf(sc, admin)).latest_version, NEWER)
      assert.equal(source.requests.length, count + 1)
    })

    it('sends nothing of ours: no cookie, no authorization; names itself', async () => {
      source.answer = json({ version: NEWER })
      await ask()
      const headers = source.requests.at(-1)!.headers
      assert.equal(headers.cookie, undefined)
      assert.equal(headers.authorization, undefined)
      assert.equal(headers['user-agent'], `authsvc/${SERVICE_VERSION}`)
    })

    it('admin only: a user gets 403 ADMIN_REQUIRED, no credential 401', async () => {
      const bob = await addUser(sc, 'bob', 'bob-passphrase-1')
      assertError(await call(sc, { url: '/authsvc/api/update-status', bearer: await apiToken(sc, bob) }), 403, 'ADMIN_REQUIRED')
      assertError(await call(sc, { url: '/api/authsvc/api/update-status' }), 401, 'AUTH_REQUIRED')
    })
  })

  it('after a failed ask the next is due in an hour, not a day (a source down for a moment)', async () => {
    const clock = fakeClock()
    const before = source.requests.length
    source.answer = json({ nothing: 'here' }, 500)
    await withSidecar('/latest', async (sc, admin) => {
      await updatesOf(sc).check().checkIfDue()
      assert.equal((await statusOf(sc, admin)).mode, 'offline')
      clock.advance(RETRY_AFTER_FAILURE_MS - 1)
      await updatesOf(sc).check().checkIfDue()
      assert.equal(source.requests.length - before, 1, 'not within the hour')
      source.answer = json({ version: NEWER })
      clock.advance(1)
      await updatesOf(sc).check().checkIfDue()
      assert.equal(source.requests.length - before, 2, 'an hour later')
      assert.equal((await statusOf(sc, admin)).mode, 'online')
    }, { clock })
  })

  it('at most one ask a day of the injected clock, across a restart; a new URL is asked at once', async () => {
    const dir = tempDir()
    const clock = fakeClock()
    try {
      source.answer = json({ version: NEWER })
      const before = source.requests.length
      await withSidecar('/latest', async (sc) => {
        await updatesOf(sc).check().checkIfDue()
        await updatesOf(sc).check().checkIfDue()
        clock.advance(CHECK_INTERVAL_MS - 1)
        await updatesOf(sc).check().checkIfDue()
        assert.equal(source.requests.length - before, 1)
      }, { dir, clock })
      // a restart within the day: what the last ask learned is still known, and nothing is asked
      await withSidecar('/latest', async (sc, admin) => {
        await updatesOf(sc).check().restore() // the read the sidecar started at bind (the same promise)
        assert.equal((await statusOf(sc, admin)).mode, 'online', 'the stored answer, before any ask')
        await updatesOf(sc).check().checkIfDue()
        assert.equal(source.requests.length - before, 1)
        clock.advance(1)
        await updatesOf(sc).check().checkIfDue()
        assert.equal(source.requests.length - before, 2, 'a day later')
      }, { dir, clock })
      await withSidecar('/other', async (sc, admin) => {
        assert.equal((await statusOf(sc, admin)).mode, 'offline', 'what another URL said does not count')
        await updatesOf(sc).check().checkIfDue()
        assert.equal(source.requests.length - before, 3)
        assert.equal(source.requests.at(-1)?.url, '/other')
      }, { dir, clock })
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})

describe('update source documents', () => {
  const rows: Array<[unknown, string | null]> = [
    [{ tag_name: 'v1.2.3' }, '1.2.3'],
    [{ tag_name: '1.2.3-beta.2' }, '1.2.3-beta.2'],
    [{ 'dist-tags': { latest: '2.0.0' } }, '2.0.0'],
    [{ version: '=3.1.4' }, '3.1.4'],
    [{ tag_name: 'v1.0.0', version: '9.9.9' }, '1.0.0'],
    [{ tag_name: 'nightly' }, null],
    [{ tag_name: 7 }, null],
    [{ 'dist-tags': 'latest' }, null],
    [{ version: '1.2' }, null],
    [{ version: '01.2.3' }, null],
    [null, null],
    ['1.2.3', null],
    [['1.2.3'], null],
  ]
  for (const [doc, expected] of rows) {
    it(`${JSON.stringify(doc)} → ${expected}`, () => assert.equal(latestVersionOf(doc), expected))
  }
})
