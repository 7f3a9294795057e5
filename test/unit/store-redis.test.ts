/**
 * The Redis backend keeps the SharedStore contract (issue 28) on a real
 * redis-server, and survives an outage: commands fail fast while the server is
 * gone, the connection listeners hear the loss and the return, the feed says
 * "reload" once it is back, and nothing acknowledged is lost.
 */
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { spawn } from 'node:child_process'
import { createClient } from 'redis'
import { conformance, nextChange } from '../helpers/store-conformance.js'
import { redisSkipReason, startRedis, type StoreServer } from '../helpers/store-servers.js'
import { openRedisSharedStore, redisTarget, MAX_RETRY_MS, type StoreLog } from '../../sidecar/src/store/redis-store.js'
import { AuthsvcError } from '../../sidecar/src/kernel/errors.js'
import type { SharedStore } from '../../sidecar/src/store/shared-store.js'

const skip = redisSkipReason()

/** Resolves with the first value a connection listener hears that `wanted` accepts; rejects after `ms`. */
function nextConnection(store: SharedStore, wanted: boolean, ms: number): Promise<number> {
  const started = Date.now()
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      off()
      reject(new Error(`connection listeners did not hear ${wanted} within ${ms} ms`))
    }, ms)
    const off = store.onConnection((connected) => {
      if (connected !== wanted) return
      clearTimeout(timer)
      off()
      resolve(Date.now() - started)
    })
  })
}

async function until(what: string, check: () => boolean, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`)
    await new Promise((r) => setTimeout(r, 10))
  }
}

/** How long `work` takes to reject, and with what. */
async function rejection(work: () => Promise<unknown>): Promise<{ ms: number; err: unknown }> {
  const started = Date.now()
  try {
    await work()
  } catch (err) {
    return { ms: Date.now() - started, err }
  }
  throw new Error('it did not reject')
}

class CapturedLog implements StoreLog {
  readonly lines: string[] = []
  info(obj: object, msg?: string) {
    this.lines.push(JSON.stringify({ level: 'info', ...obj, msg }))
  }
  warn(obj: object, msg?: string) {
    this.lines.push(JSON.stringify({ level: 'warn', ...obj, msg }))
  }
  error(obj: object, msg?: string) {
    this.lines.push(JSON.stringify({ level: 'error', ...obj, msg }))
  }
}

describe('redis store', { skip }, () => {
  let server: Promise<StoreServer> | undefined
  const shared = () => (server ??= startRedis())
  conformance({
    name: 'redis',
    shared: true,
    open: async () => openRedisSharedStore((await shared()).url),
  })
  after(async () => (await server)?.stop())

  describe('redis: the URL', () => {
    const rows: Array<[string, string, { where: string; prefix: string } | RegExp]> = [
      ['plain', 'redis://127.0.0.1:6390', { where: '127.0.0.1:6390/0', prefix: 'authsvc:' }],
      ['default port, a database', 'redis://cache.internal/3', { where: 'cache.internal:6379/3', prefix: 'authsvc:' }],
      ['credentials stay out of where', 'redis://admin:hunter2@10.0.0.5:7000/1', { where: '10.0.0.5:7000/1', prefix: 'authsvc:' }],
      ['a prefix from the query', 'redis://h:1/0?prefix=studio-a:', { where: 'h:1/0', prefix: 'studio-a:' }],
      ['tls', 'rediss://u:pw@h:6380', { where: 'h:6380/0', prefix: 'authsvc:' }],
      ['not a URL', 'hunter2@@', /not a URL/],
      ['another scheme', 'http://u:hunter2@h:1', /redis:\/\/ or rediss:\/\//],
      ['a path that is no database', 'redis://u:hunter2@h:1/users', /database number/],
    ]
    for (const [name, url, expected] of rows) {
      it(name, () => {
        if (expected instanceof RegExp) {
          assert.throws(
            () => redisTarget(url),
            (err: Error) => expected.test(err.message) && !err.message.includes('hunter2'),
          )
          return
        }
        const target = redisTarget(url)
        assert.deepEqual({ where: target.where, prefix: target.prefix }, expected)
        assert.ok(!target.url.includes('prefix='), 'the prefix is not passed to the client')
      })
    }
    it('the prefix option wins over the query', () => {
      assert.equal(redisTarget('redis://h/0?prefix=a:', 'b:').prefix, 'b:')
    })
  })

  describe('redis: two prefixes on one server are two stores', () => {
    let srv: StoreServer
    before(async () => {
      srv = await shared()
    })
    it('neither sees the other’s records nor hears its feed', async () => {
      const one = await openRedisSharedStore(`${srv.url}?prefix=one:`)
      const two = await openRedisSharedStore(srv.url, { prefix: 'two:' })
      try {
        const heardByTwo: string[] = []
        const off = two.subscribe((c) => heardByTwo.push(c.key))
        await one.set('user:u1', { name: 'one' })
        await two.set('user:u2', { name: 'two' }) // resolves once two has heard it
        off()
        assert.deepEqual(heardByTwo, ['user:u2'])
        assert.deepEqual((await one.entries('user')).map(([k]) => k), ['user:u1'])
        assert.equal(await two.get('user:u1'), undefined)
        // a kind named with a colon lists the keys under it, as sqlite's prefix match does
        await one.set('grant:u1:m1', { m: 1 })
        await one.set('grant:u2:m1', { m: 2 })
        assert.deepEqual((await one.entries('grant:u1')).map(([k]) => k), ['grant:u1:m1'])
        assert.equal(await one.increment('n', 60_000), 1)
        assert.equal(await two.readCounter('n'), 0)
      } finally {
        await one.close()
        await two.close()
      }
    })
  })

  describe('redis: a writer reads its own writes from its feed', () => {
    it('set, delete and commit resolve only after this instance’s listeners heard them', async () => {
      const srv = await shared()
      const store = await openRedisSharedStore(srv.url, { prefix: `own-${randomUUID()}:` })
      try {
        const heard = new Map<string, number>()
        store.subscribe((c) => heard.set(c.key, c.seq))
        for (let i = 0; i < 50; i++) {
          await store.set(`user:${i}`, { i })
          assert.equal(heard.get(`user:${i}`), (await store.getVersioned(`user:${i}`))!.seq, `set ${i}`)
        }
        await Promise.all(Array.from({ length: 50 }, (_, i) => store.delete(`user:${i}`).then(() => assert.ok(heard.has(`user:${i}`)))))
        heard.clear()
        assert.equal(await store.commit([], [{ key: 'a:1', value: 1 }, { key: 'b:2', value: 2 }]), true)
        assert.deepEqual([...heard.keys()], ['a:1', 'b:2'])
        assert.equal(store.connected, true)
      } finally {
        await store.close()
      }
    })
  })

  describe('redis: one round trip per verb', () => {
    it('set, get, delete, commit, increment and claim each send one command', async () => {
      const srv = await shared()
      const store = await openRedisSharedStore(srv.url, { prefix: `rt-${randomUUID()}:` })
      const monitor = createClient({ url: srv.url, RESP: 2 })
      const marker = createClient({ url: srv.url, RESP: 2 })
      await Promise.all([monitor.connect(), marker.connect()])
      // MONITOR lists commands in the order the server ran them; a script's own calls say "lua"
      const seen: string[] = []
      const waiting = new Map<string, () => void>()
      await monitor.monitor((line: string) => {
        const echoed = /"ECHO" "(mark-\d+)"/.exec(line)
        if (echoed) waiting.get(echoed[1])?.()
        else if (!line.includes(' lua]')) seen.push(/\] "(\w+)"/.exec(line)?.[1] ?? line)
      })
      let marks = 0
      /** the top-level commands `work` sent, once the server has run them all */
      const commandsOf = async (work: () => Promise<unknown>): Promise<string[]> => {
        seen.length = 0
        await work()
        const name = `mark-${marks++}`
        const arrived = new Promise<void>((resolve) => waiting.set(name, resolve))
        await marker.sendCommand(['ECHO', name])
        await arrived
        return [...seen]
      }
      try {
        // the first run of a script on a server is EVALSHA, refused, then EVAL
        await commandsOf(() => store.set('warm:x', 1))
        await commandsOf(() => store.increment('warm', 1000))
        const rows: Array<[string, () => Promise<unknown>, string[]]> = [
          ['set', () => store.set('user:a', { n: 1 }), ['EVALSHA']],
          ['get', () => store.get('user:a'), ['HGET']],
          ['getVersioned', () => store.getVersioned('user:a'), ['HGET']],
          ['commit of three writes', () => store.commit([{ key: 'user:b', seq: null }], [{ key: 'user:b', value: 1 }, { key: 'name:b', value: 'b' }, { key: 'user:a', value: undefined }]), ['EVALSHA']],
          ['delete', () => store.delete('user:b'), ['EVALSHA']],
          ['entries of a small kind', () => store.entries('name'), ['HSCAN']],
          ['increment', () => store.increment('throttle:x', 60_000), ['EVALSHA']],
          ['readCounter', () => store.readCounter('throttle:x'), ['GET']],
          ['claim', () => store.claim('totp:x', 60_000), ['SET']],
        ]
        for (const [name, work, expected] of rows) assert.deepEqual(await commandsOf(work), expected, name)
      } finally {
        await Promise.all([monitor.close(), marker.close()])
        await store.close()
      }
    })
  })

  describe('redis: a large kind is listed in pages of HSCAN, every record once', () => {
    it('lists 5,000 records of one kind whole while they are written over', async () => {
      const srv = await shared()
      const store = await openRedisSharedStore(srv.url, { prefix: `big-${randomUUID()}:` })
      try {
        // written through the store, so the layout is the store's own
        for (let i = 0; i < 5000; i += 250) await Promise.all(Array.from({ length: 250 }, (_, j) => store.set(`session:s${i + j}`, { i: i + j })))
        const listing = store.entriesVersioned<{ i: number }>('session')
        const rewrites = Promise.all(Array.from({ length: 200 }, (_, j) => store.set(`session:s${j * 25}`, { i: j * 25 })))
        const [listed] = await Promise.all([listing, rewrites])
        assert.equal(listed.length, 5000)
        assert.equal(new Set(listed.map(([k]) => k)).size, 5000)
        assert.ok(listed.every(([k, v]) => k === `session:s${v.value.i}`))
      } finally {
        await store.close()
      }
    })
  })

  describe('redis: an outage', () => {
    let srv: StoreServer
    before(async () => {
      srv = await startRedis()
    })
    after(async () => {
      await srv?.stop()
    })

    it('commands fail fast with 503, listeners hear the loss and the return, the feed says reload, nothing acknowledged is lost', async () => {
      const log = new CapturedLog()
      const store = await openRedisSharedStore(srv.url, { log })
      const other = await openRedisSharedStore(srv.url)
      const events: boolean[] = []
      store.onConnection((c) => events.push(c))
      try {
        assert.equal(store.connected, true)
        const acknowledged: string[] = []
        for (let i = 0; i < 50; i++) {
          await store.set(`rec:${i}`, { i })
          acknowledged.push(`rec:${i}`)
        }
        assert.equal(await store.increment('attempts', 600_000), 1)
        assert.equal(await store.claim('step', 600_000), true)
        const lastSeq = (await store.getVersioned('rec:49'))!.seq

        const lost = nextConnection(store, false, 2000)
        await srv.kill()
        await lost
        assert.equal(store.connected, false)

        // every verb rejects quickly, as STORE_UNAVAILABLE
        for (const [name, work] of [
          ['get', () => store.get('rec:1')],
          ['set', () => store.set('rec:x', { x: 1 })],
          ['commit', () => store.commit([], [{ key: 'rec:y', value: 1 }])],
          ['increment', () => store.increment('attempts', 600_000)],
          ['claim', () => store.claim('step2', 600_000)],
          ['entries', () => store.entries('rec')],
        ] as const) {
          const { ms, err } = await rejection(work)
          assert.ok(ms < 1100, `${name} rejected after ${ms} ms`)
          assert.ok(err instanceof AuthsvcError && err.code === 'STORE_UNAVAILABLE' && err.statusCode === 503, `${name}: ${String(err)}`)
        }
        assert.equal(log.lines.filter((l) => l.includes('shared store unreachable')).length, 1, 'the loss is logged once')

        const reload = nextChange(store, (c) => c.key === '*', 5000)
        const back = nextConnection(store, true, 5000)
        const backOther = nextConnection(other, true, 5000)
        const restarted = Date.now()
        await srv.restart()
        const [change, ms] = await Promise.all([reload, back.then(() => Date.now() - restarted), backOther])
        assert.ok(ms <= MAX_RETRY_MS + 1000, `back ${ms} ms after the server listened again`)
        assert.equal(store.connected, true)
        assert.deepEqual(change, { key: '*', seq: lastSeq, exists: true, origin: '' })

        // writes work again, and are heard across instances
        const heard = nextChange(other, (c) => c.key === 'rec:after')
        await store.set('rec:after', { ok: true })
        assert.equal((await heard).origin, store.origin)
        // everything acknowledged before the kill is still there
        const listed = new Map(await other.entries<{ i: number }>('rec'))
        for (const key of acknowledged) assert.ok(listed.has(key), `${key} survived`)
        assert.equal(await other.increment('attempts', 600_000), 2)
        assert.equal(await other.claim('step', 600_000), false)
        assert.ok((await other.getVersioned('rec:after'))!.seq > lastSeq, 'the sequence went on from where it was')
        assert.deepEqual(events, [false, true], 'the loss and the return are heard once each')
      } finally {
        await store.close()
        await other.close()
      }
    })

    it('losing only the feed’s connection is a loss too: heard, reconnected, then a reload', async () => {
      const store = await openRedisSharedStore(srv.url)
      const admin = createClient({ url: srv.url, RESP: 2 })
      await admin.connect()
      const events: boolean[] = []
      store.onConnection((c) => events.push(c))
      try {
        await store.set('feedloss:a', 1)
        const reload = nextChange(store, (c) => c.key === '*', 5000)
        const back = nextConnection(store, true, 5000)
        assert.ok(Number(await admin.sendCommand(['CLIENT', 'KILL', 'TYPE', 'pubsub'])) >= 1)
        await back
        const change = await reload
        assert.equal(change.seq, (await store.getVersioned('feedloss:a'))!.seq)
        assert.deepEqual(events, [false, true])
        // and the feed works again
        const heard = nextChange(store, (c) => c.key === 'feedloss:b')
        await store.set('feedloss:b', 2)
        await heard
      } finally {
        await admin.close()
        await store.close()
      }
    })

    it('under load: every call settles within the bound, every failure is a 503, every acknowledged write is there afterwards', async () => {
      const store = await openRedisSharedStore(srv.url)
      const acknowledged: string[] = []
      const failures: unknown[] = []
      let slowest = 0
      let running = true
      let afterReturn = 0
      let back = false
      const writer = async (w: number) => {
        for (let n = 0; running; n++) {
          const key = `load:w${w}-${n}`
          const started = Date.now()
          try {
            await store.set(key, { w, n })
            acknowledged.push(key)
            if (back) afterReturn++
          } catch (err) {
            failures.push(err)
            await new Promise((r) => setTimeout(r, 5)) // pace the retries of a load generator
          }
          slowest = Math.max(slowest, Date.now() - started)
        }
      }
      const writers = Array.from({ length: 20 }, (_, w) => writer(w))
      try {
        await until('writes are acknowledged', () => acknowledged.length >= 200)
        const lost = nextConnection(store, false, 2000)
        await srv.kill()
        await lost
        await until('writes fail while the server is gone', () => failures.length >= 40)
        const returned = nextConnection(store, true, 5000)
        await srv.restart()
        await returned
        back = true
        await until('writes are acknowledged again', () => afterReturn >= 200)
      } finally {
        running = false
        await Promise.all(writers)
      }
      try {
        assert.ok(slowest < 1500, `the slowest call took ${slowest} ms`)
        for (const err of failures) assert.ok(err instanceof AuthsvcError && err.code === 'STORE_UNAVAILABLE', String(err))
        const stored = new Set((await store.entries('load')).map(([key]) => key))
        const missing = acknowledged.filter((key) => !stored.has(key))
        assert.deepEqual(missing, [], `${missing.length} of ${acknowledged.length} acknowledged writes are missing`)
      } finally {
        await store.close()
      }
    })

    it('a server that stops answering (SIGSTOP) is noticed by the probe; commands time out; it comes back after SIGCONT', async () => {
      const store = await openRedisSharedStore(srv.url, { commandTimeoutMs: 500, probeIntervalMs: 200 })
      try {
        await store.set('paused:a', { a: 1 })
        const lost = nextConnection(store, false, 3000)
        process.kill(srv.pid!, 'SIGSTOP')
        try {
          const { ms, err } = await rejection(() => store.get('paused:a'))
          assert.ok(ms >= 400 && ms < 1500, `rejected after ${ms} ms`)
          assert.ok(err instanceof AuthsvcError && err.code === 'STORE_UNAVAILABLE')
          await lost
          assert.equal(store.connected, false)
        } finally {
          process.kill(srv.pid!, 'SIGCONT')
        }
        await nextConnection(store, true, 3000)
        assert.deepEqual(await store.get('paused:a'), { a: 1 })
      } finally {
        await store.close()
      }
    })

    it('credentials in the URL are never logged, through an outage and a refused open', async () => {
      const password = `pw-${randomUUID()}`
      const admin = createClient({ url: srv.url, RESP: 2 })
      await admin.connect()
      await admin.sendCommand(['CONFIG', 'SET', 'requirepass', password])
      await admin.close()
      const withPassword = srv.url.replace('redis://', `redis://default:${password}@`)
      const log = new CapturedLog()
      const store = await openRedisSharedStore(withPassword, { log })
      try {
        await store.set('cred:a', { a: 1 })
        const lost = nextConnection(store, false, 2000)
        await srv.kill()
        await lost
        const back = nextConnection(store, true, 5000)
        await srv.restart() // the password set by CONFIG SET is gone: the default user takes any
        await back
      } finally {
        await store.close()
      }
      assert.ok(log.lines.length >= 2, 'the loss and the return are logged')
      const wrong = withPassword.replace(password, `wrong-${password}`)
      const admin2 = createClient({ url: srv.url, RESP: 2 })
      await admin2.connect()
      await admin2.sendCommand(['CONFIG', 'SET', 'requirepass', password])
      await admin2.close()
      const { err } = await rejection(() => openRedisSharedStore(wrong, { log, openTimeoutMs: 1500 }))
      assert.ok(err instanceof Error)
      assert.match(err.message, /127\.0\.0\.1:\d+\/0 did not answer within 1500 ms \(WRONGPASS/)
      for (const text of [...log.lines, err.message]) assert.ok(!text.includes(password), `a secret in: ${text}`)
      const admin3 = createClient({ url: withPassword, RESP: 2 })
      await admin3.connect()
      await admin3.sendCommand(['CONFIG', 'SET', 'requirepass', ''])
      await admin3.close()
    })

    it('open refuses within its bound when nothing listens, naming the server only', async () => {
      const { ms, err } = await rejection(() => openRedisSharedStore('redis://u:secret-pw@127.0.0.1:1/0', { openTimeoutMs: 800 }))
      assert.ok(ms < 2000, `refused after ${ms} ms`)
      assert.ok(err instanceof Error && err.message.includes('127.0.0.1:1/0') && err.message.includes('ECONNREFUSED') && !err.message.includes('secret-pw'), String(err))
    })

    it('close leaves no socket or timer behind: a process that opens, writes and closes exits by itself', async () => {
      const script = [
        `import { openRedisSharedStore } from ${JSON.stringify(new URL('../../sidecar/src/store/redis-store.ts', import.meta.url).href)}`,
        'const store = await openRedisSharedStore(process.env.URL)',
        "store.subscribe(() => {})",
        "store.onConnection(() => {})",
        "await store.set('exit:a', { a: 1 })",
        "await store.increment('exit:n', 60000)",
        'await store.close()',
        "console.log('closed')",
      ].join('\n')
      const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { env: { ...process.env, URL: srv.url }, stdio: ['ignore', 'pipe', 'pipe'] })
      let out = ''
      child.stdout.on('data', (d: Buffer) => (out += d.toString()))
      child.stderr.on('data', (d: Buffer) => (out += d.toString()))
      const code = await new Promise<number | string>((resolve) => {
        const timer = setTimeout(() => {
          child.kill('SIGKILL')
          resolve('still running 20 s later')
        }, 20_000)
        child.once('exit', (c) => {
          clearTimeout(timer)
          resolve(c ?? -1)
        })
      })
      assert.equal(code, 0, out)
      assert.match(out, /^closed$/m)
    })
  })
})
