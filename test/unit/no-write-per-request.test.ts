/**
 * DESIGN §7: the decision path does no store write per request. Thousands of
 * decisions with a session (bearer and cookie), an API token and the query
 * channel leave the sqlite file and its WAL byte for byte as they were, and
 * no write reaches the store; `last_used` is persisted at most once a minute,
 * which the control rows show the measurement would see.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { addUser, apiToken, decide, openSidecar, sessionJwt, type Sidecar } from './fixtures.js'

describe('no store write per request', () => {
  let sc: Sidecar
  let writes: string[]
  let credentials: Array<{ name: string; headers?: Record<string, string>; query?: string }>

  /** sha256 of the sqlite file and its WAL, as they are on disk */
  const onDisk = (): string => {
    const hash = createHash('sha256')
    for (const suffix of ['', '-wal']) {
      const file = join(sc.dir, `authsvc.sqlite${suffix}`)
      hash.update(existsSync(file) ? readFileSync(file) : Buffer.alloc(0))
    }
    return hash.digest('hex')
  }

  const decideAll = async (rounds: number): Promise<void> => {
    for (let i = 0; i < rounds; i++) {
      for (const c of credentials) {
        const d = await decide(sc, { path: '/object_info', headers: c.headers, query: c.query })
        assert.equal(d.action, 'pass', `${c.name}: ${JSON.stringify(d)}`)
      }
    }
  }

  before(async () => {
    sc = await openSidecar()
    const alice = await addUser(sc, 'alice', 'alice-password-1')
    const jwt = await sessionJwt(sc, alice)
    const token = await apiToken(sc, alice)
    credentials = [
      { name: 'bearer session', headers: { authorization: `Bearer ${jwt}` } },
      { name: 'cookie session', headers: { cookie: `jwt_token=${jwt}` } },
      { name: 'bearer API token', headers: { authorization: `Bearer ${token}` } },
      { name: 'query API token', query: `token=${token}` },
    ]
    // first use persists last_used once per credential; that is not per request
    await decideAll(1)
    await sc.services.flush()
    writes = []
    const kv = sc.services.kv
    const set = kv.set.bind(kv)
    const del = kv.delete.bind(kv)
    kv.set = async (key, value) => {
      writes.push(`set ${key.split(':')[0]}`)
      return set(key, value)
    }
    kv.delete = async (key) => {
      writes.push(`delete ${key.split(':')[0]}`)
      return del(key)
    }
  })
  after(async () => {
    await sc.close()
  })

  it('2000 decisions within a minute: no write, the sqlite file and WAL unchanged', async () => {
    const before = onDisk()
    for (let second = 0; second < 50; second += 10) {
      await decideAll(100)
      sc.clock.advance(10_000)
    }
    await sc.services.flush()
    assert.deepEqual(writes, [])
    assert.equal(onDisk(), before, 'the sqlite file and its WAL are byte for byte the same')
  })

  it('control: a minute later, last_used is persisted once per session or token, and the file shows it', async () => {
    const before = onDisk()
    sc.clock.advance(61_000)
    await decideAll(50)
    await sc.services.flush()
    assert.deepEqual(writes.sort(), ['set session', 'set token'])
    assert.notEqual(onDisk(), before, 'the measurement sees a real write')
  })
})
