/**
 * The PostgreSQL backend keeps the SharedStore contract (issue 28) against a
 * real server (Debian's postgresql, started here in a temp dir), and survives
 * the server's death: fails fast while it is gone, says so once, comes back by
 * itself, loses no acknowledged write, and never logs the URL's credentials.
 */
import { after, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { once } from 'node:events'
import { createServer } from 'node:net'
import pg from 'pg'
import { fileURLToPath } from 'node:url'
import { conformance, nextChange } from '../helpers/store-conformance.js'
import { postgresSkipReason, startPostgres, type StoreServer } from '../helpers/store-servers.js'
import { COMMAND_TIMEOUT_MS, CONNECT_TIMEOUT_MS, END_TIMEOUT_MS, HEARTBEAT_MS, openPostgresSharedStore, RECONNECT_MAX_MS } from '../../sidecar/src/store/postgres-store.js'
import type { SharedStore } from '../../sidecar/src/store/shared-store.js'
import { AuthsvcError } from '../../sidecar/src/kernel/errors.js'

const skip = postgresSkipReason()

if (skip !== false) {
  describe('SharedStore: postgres', { skip }, () => {
    it('conformance, outage and reconnection against a real PostgreSQL', () => {})
  })
} else {
  let started: Promise<StoreServer> | undefined
  const server = () => (started ??= startPostgres())
  after(async () => {
    if (started !== undefined) await (await started).stop()
  })

  conformance({ name: 'postgres', shared: true, open: async () => openPostgresSharedStore((await server()).url) })

  describe('postgres: counters of keys never used again', () => {
    it('are removed once expired (at open, then every SWEEP_MS), and no live one is', async () => {
      const srv = await server()
      const k = `sweep${randomUUID().slice(0, 8)}`
      // a client whose clock is an hour behind writes counters that are long expired by the server's clock
      const behind = await openPostgresSharedStore(srv.url, { clock: () => Date.now() - 3_600_000 })
      await behind.increment(`${k}-old-throttle`, 60_000)
      assert.equal(await behind.claim(`${k}-old-step`, 60_000), true)
      await behind.close()
      const live = await openPostgresSharedStore(srv.url)
      await live.increment(`${k}-live`, 60_000)
      await live.close()
      const raw = new pg.Client({ connectionString: srv.url })
      await raw.connect()
      try {
        const before = await raw.query('SELECT key FROM authsvc_counters WHERE key LIKE $1 ORDER BY key', [`${k}-%`])
        assert.deepEqual(before.rows.map((r) => r.key), [`${k}-live`], 'the second open swept the expired ones')
      } finally {
        await raw.end()
      }
    })
  })

  describe('postgres: the server dies and comes back', () => {
    const password = `pw-${randomUUID()}`
    const lines: Array<{ level: string; obj: object; msg: string }> = []
    const log = {
      warn: (obj: object, msg: string) => lines.push({ level: 'warn', obj, msg }),
      error: (obj: object, msg: string) => lines.push({ level: 'error', obj, msg }),
      info: (obj: object, msg: string) => lines.push({ level: 'info', obj, msg }),
    }
    const connection = (store: SharedStore, wanted: boolean, ms: number) =>
      new Promise<number>((resolve, reject) => {
        const t0 = Date.now()
        const timer = setTimeout(() => {
          off()
          reject(new Error(`onConnection(${wanted}) not heard within ${ms} ms`))
        }, ms)
        const off = store.onConnection((value) => {
          if (value !== wanted) return
          clearTimeout(timer)
          off()
          resolve(Date.now() - t0)
        })
      })
    /** a loopback port nobody listens on: one the system just gave out and took back */
    const closedPort = async () => {
      const probe = createServer()
      await new Promise<void>((r) => probe.listen(0, '127.0.0.1', () => r()))
      const port = (probe.address() as { port: number }).port
      await new Promise<void>((r) => probe.close(() => r()))
      return port
    }
    const isUnavailable = (err: unknown) => err instanceof AuthsvcError && err.code === 'STORE_UNAVAILABLE' && err.statusCode === 503

    it('fails fast and says so once while it is gone, reconnects by itself, and keeps every acknowledged write', async () => {
      const srv = await server()
      // credentials in the URL (the test server trusts loopback, so the password is sent and ignored)
      const withPassword = srv.url.replace('postgres://authsvc@', `postgres://authsvc:${password}@`)
      const a = await openPostgresSharedStore(withPassword, { log })
      const b = await openPostgresSharedStore(srv.url)
      try {
        const k = `outage${randomUUID().slice(0, 8)}`
        // acknowledged before the outage: records, a commit, a counter, a claim
        for (let i = 0; i < 20; i++) await a.set(`${k}:before${i}`, { i })
        assert.equal(await b.commit([{ key: `${k}:name`, seq: null }], [{ key: `${k}:name`, value: { id: 'n' } }, { key: `${k}:user`, value: { u: 1 } }]), true)
        for (let i = 0; i < 7; i++) await a.increment(`${k}-counter`, 600_000)
        assert.equal(await b.claim(`${k}-step`, 600_000), true)

        // writes under load when the server dies: each one that resolved must survive
        const acked = new Map<string, number>()
        let failedWith: unknown
        let writing = true
        const writer = (async () => {
          for (let i = 0; writing; i++) {
            try {
              await (i % 2 === 0 ? a : b).set(`${k}:load${i}`, { i })
              acked.set(`${k}:load${i}`, i)
            } catch (err) {
              failedWith = err
              return
            }
          }
        })()
        const load = Date.now()
        while (acked.size < 30) {
          if (Date.now() - load > 10_000) throw new Error('the writer did not get going')
          await new Promise((r) => setImmediate(r))
        }

        const downA = connection(a, false, 5000)
        const downB = connection(b, false, 5000)
        await srv.kill()
        await Promise.all([downA, downB])
        assert.equal(a.connected, false)
        assert.equal(b.connected, false)
        writing = false
        await writer
        assert.ok(failedWith === undefined || isUnavailable(failedWith), `a write that failed in the outage is a 503: ${String(failedWith)}`)

        // every verb refuses quickly with 503 while the server is gone
        for (const [what, attempt] of [
          ['get', () => a.get(`${k}:before0`)],
          ['set', () => b.set(`${k}:during`, { x: 1 })],
          ['commit', () => a.commit([], [{ key: `${k}:during`, value: { x: 1 } }])],
          ['list', () => b.entries(k)],
          ['increment', () => a.increment(`${k}-counter`, 600_000)],
          ['claim', () => b.claim(`${k}-other-step`, 600_000)],
        ] as const) {
          const t0 = Date.now()
          await assert.rejects(attempt(), isUnavailable, what)
          const took = Date.now() - t0
          assert.ok(took < 1500, `${what} refused in ${took} ms (bound 1500)`)
        }

        // back: connected again within the backoff's bound, and a '*' change tells replicas to reload
        const upA = connection(a, true, 10_000)
        const upB = connection(b, true, 10_000)
        const reload = nextChange(b, (c) => c.key === '*', 10_000)
        await srv.restart()
        const t0 = Date.now()
        await Promise.all([upA, upB])
        const resumed = Date.now() - t0
        assert.ok(resumed <= RECONNECT_MAX_MS + 1000, `connected again ${resumed} ms after the server accepts connections`)
        assert.equal(a.connected, true)
        const star = await reload
        assert.equal(star.origin, '')
        assert.equal(star.exists, true)

        // nothing acknowledged is lost
        for (let i = 0; i < 20; i++) assert.deepEqual(await b.get(`${k}:before${i}`), { i })
        assert.deepEqual(await a.get(`${k}:name`), { id: 'n' })
        assert.deepEqual(await a.get(`${k}:user`), { u: 1 })
        for (const [key, i] of acked) assert.deepEqual(await a.get(key), { i }, key)
        assert.equal(await b.readCounter(`${k}-counter`), 7)
        assert.equal(await a.claim(`${k}-step`, 600_000), false, 'a step claimed before the outage stays claimed')
        const newest = Math.max(...(await a.entriesVersioned(k)).map(([, v]) => v.seq))
        assert.ok(star.seq >= newest, `the reload change's number ${star.seq} covers every write before it (${newest})`)

        // and writes work again, announced across clients
        const heard = nextChange(b, (c) => c.key === `${k}:after`)
        await a.set(`${k}:after`, { ok: true })
        assert.equal((await heard).origin, a.origin)
        assert.ok((await heard).seq > star.seq)

        // said once each way, naming the server, never the password
        const aLines = lines.map((l) => JSON.stringify(l))
        assert.equal(lines.filter((l) => l.level === 'warn' && /connection lost/.test(l.msg)).length, 1, aLines.join('\n'))
        assert.equal(lines.filter((l) => l.level === 'info' && /back/.test(l.msg)).length, 1, aLines.join('\n'))
        const lostLine = lines.find((l) => /connection lost/.test(l.msg))!.obj as Record<string, unknown>
        assert.equal(lostLine.host, '127.0.0.1')
        assert.equal(lostLine.port, srv.port)
        assert.equal(lostLine.database, 'postgres')
        for (const line of aLines) assert.ok(!line.includes(password) && !line.includes('authsvc:'), line)
      } finally {
        await a.close()
        await b.close()
      }
    })

    it('a server that stops answering (SIGSTOP): commands refuse within the timeouts, the loss is heard, and it comes back when the server does', async () => {
      const srv = await server()
      const a = await openPostgresSharedStore(srv.url)
      try {
        const k = `frozen${randomUUID().slice(0, 8)}`
        await a.set(`${k}:x`, { v: 1 })
        const down = connection(a, false, HEARTBEAT_MS + COMMAND_TIMEOUT_MS + 5000)
        await srv.freeze!()
        try {
          // on a pooled connection the server no longer reads: the query's timeout
          let t0 = Date.now()
          await assert.rejects(a.get(`${k}:x`), isUnavailable)
          let took = Date.now() - t0
          assert.ok(took < COMMAND_TIMEOUT_MS + 1000, `a command on a silent server refused in ${took} ms`)
          await down
          assert.equal(a.connected, false)
          // a new connection the server never answers: the connect timeout
          t0 = Date.now()
          await assert.rejects(a.increment(`${k}-c`, 60_000), isUnavailable)
          took = Date.now() - t0
          assert.ok(took < CONNECT_TIMEOUT_MS + 1000, `a command while the server is silent refused in ${took} ms`)
        } finally {
          const up = connection(a, true, 15_000)
          const reload = nextChange(a, (c) => c.key === '*', 15_000)
          await srv.thaw!()
          const back = await up
          assert.ok(back <= RECONNECT_MAX_MS + CONNECT_TIMEOUT_MS + 1000, `connected again ${back} ms after the server answers again`)
          assert.equal((await reload).origin, '')
        }
        assert.deepEqual(await a.get(`${k}:x`), { v: 1 })
        await a.set(`${k}:y`, { v: 2 })
        assert.deepEqual(await a.get(`${k}:y`), { v: 2 })
      } finally {
        await a.close()
      }
    })

    it('a command held up longer than its timeout (a locked row) is refused with 503, and is no loss of the connection', async () => {
      const srv = await server()
      const a = await openPostgresSharedStore(srv.url)
      const raw = new pg.Client({ connectionString: srv.url })
      await raw.connect()
      try {
        const k = `slow${randomUUID().slice(0, 8)}`
        await a.set(`${k}:x`, { v: 1 })
        const heard: boolean[] = []
        const off = a.onConnection((c) => heard.push(c))
        await raw.query('BEGIN')
        await raw.query('SELECT * FROM authsvc_records WHERE key = $1 FOR UPDATE', [`${k}:x`])
        const t0 = Date.now()
        await assert.rejects(a.set(`${k}:x`, { v: 2 }), isUnavailable)
        const took = Date.now() - t0
        assert.ok(took >= COMMAND_TIMEOUT_MS - 50 && took < COMMAND_TIMEOUT_MS + 1000, `refused after ${took} ms`)
        assert.deepEqual(await a.get(`${k}:y`), undefined, 'other commands go on meanwhile')
        // the refused write was sent: it lands once the row is free, and is announced like any write
        const landed = nextChange(a, (c) => c.key === `${k}:x`)
        await raw.query('COMMIT')
        assert.deepEqual((await landed).value, { v: 2 })
        off()
        assert.deepEqual(heard, [], 'the connection was never said lost')
        assert.equal(a.connected, true)
      } finally {
        await raw.end()
        await a.close()
      }
    })

    it('a server that is not there at open is a 503, logged once, naming no credentials', async () => {
      const before = lines.length
      const port = await closedPort()
      const t0 = Date.now()
      await assert.rejects(openPostgresSharedStore(`postgres://authsvc:${password}@127.0.0.1:${port}/postgres`, { log }), isUnavailable)
      assert.ok(Date.now() - t0 < 1500, `refused in ${Date.now() - t0} ms`)
      const said = lines.slice(before).map((l) => JSON.stringify(l))
      assert.equal(said.length, 1, said.join('\n'))
      assert.ok(said[0].includes(`"port":${port}`) && !said[0].includes(password), said[0])
    })

    it('never repeats the credentials of the URL, whatever is wrong with it (rows)', async () => {
      const srv = await server()
      const secret = `PW${randomUUID().slice(0, 8)}`
      const closed = await closedPort()
      const rows: Array<[string, string]> = [
        ['nobody listens', `postgres://authsvc:${secret}@127.0.0.1:${closed}/postgres`],
        ['no such database', `postgres://authsvc:${secret}@127.0.0.1:${srv.port}/nosuchdb`],
        ['no such user', `postgres://nosuchuser:${secret}@127.0.0.1:${srv.port}/postgres`],
        ['escaped characters', `postgres://authsvc:${secret}%40%3A%2F@127.0.0.1:${closed}/postgres`],
        ['password in the query', `postgres://authsvc@127.0.0.1:${closed}/postgres?password=${secret}`],
        ['not a number for a port', `postgres://authsvc:${secret}@127.0.0.1:x${secret}/postgres`],
        ['a keyword string', `host=127.0.0.1 port=${closed} password=${secret}`],
        ['a keyword that reads as a scheme', `password=${secret}:x@127.0.0.1`],
        ['another scheme', `http://authsvc:${secret}@127.0.0.1:${closed}/postgres`],
      ]
      for (const [name, url] of rows) {
        const said: string[] = []
        const capture = { warn: (o: object, m: string) => said.push(JSON.stringify([o, m])), error: (o: object, m: string) => said.push(JSON.stringify([o, m])), info: (o: object, m: string) => said.push(JSON.stringify([o, m])) }
        const err = await openPostgresSharedStore(url, { log: capture }).then(
          async (store) => {
            await store.close()
            return new Error(`${name}: opened`)
          },
          (e: unknown) => e,
        )
        assert.ok(err instanceof Error, name)
        assert.doesNotMatch(err.message, /opened$/, name)
        const cause = (err as { cause?: unknown }).cause
        const told = [err.message, String(err.stack), JSON.stringify(err), cause instanceof Error ? `${cause.message} ${JSON.stringify(cause)}` : '', ...said].join('\n')
        assert.ok(!told.includes(secret), `${name}: ${told}`)
      }
    })

    it('close() ends every connection and timer, connected, against a silent server or while reconnecting: the process exits by itself', async () => {
      const srv = await server()
      const script = fileURLToPath(new URL('../helpers/postgres-close-child.ts', import.meta.url))
      const run = (mode: 'connected' | 'down' | 'frozen') => {
        const child = spawn(process.execPath, ['--import', 'tsx', script, srv.url, mode], { stdio: ['pipe', 'pipe', 'inherit'] })
        const exit = once(child, 'exit') as Promise<[number | null, string | null]>
        // one reader for the whole run, so nothing the child says between two waits is lost
        let out = ''
        const waiters = new Set<() => void>()
        child.stdout.on('data', (chunk: Buffer) => {
          out += chunk.toString()
          for (const w of waiters) w()
        })
        const said = (word: string, ms = 15_000) =>
          new Promise<void>((resolve, reject) => {
            const check = () => {
              if (!out.includes(word)) return
              clearTimeout(timer)
              waiters.delete(check)
              resolve()
            }
            const timer = setTimeout(() => {
              waiters.delete(check)
              reject(new Error(`child did not say ${word} within ${ms} ms; said: ${out}`))
            }, ms)
            waiters.add(check)
            check()
          })
        /** once it said `word`, the child must end by itself */
        const endsAfter = async (word: string) => {
          await said(word)
          const timer = setTimeout(() => child.kill('SIGKILL'), 10_000)
          const [code, signal] = await exit
          clearTimeout(timer)
          assert.equal(signal, null, `${mode}: the child had to be killed, a handle kept it alive; said: ${out}`)
          assert.equal(code, 0, out)
        }
        return { said, endsAfter, tell: (line: string) => child.stdin.write(`${line}\n`), output: () => out }
      }
      // the server stays up: only close() can end the connections
      await run('connected').endsAfter('closed-connected')
      // the server stops answering while the store is connected: close() cuts what the server does not let end
      const frozen = run('frozen')
      await frozen.said('ready')
      await srv.freeze!()
      try {
        frozen.tell('close')
        await frozen.endsAfter('closed-frozen')
        const took = Number(/closed-frozen (\d+)/.exec(frozen.output())![1])
        assert.ok(took <= END_TIMEOUT_MS + 1000, `close() took ${took} ms against a silent server`)
      } finally {
        await srv.thaw!()
      }
      // the server dies; the store retries; close() stops that
      const down = run('down')
      await down.said('ready')
      await srv.kill()
      try {
        await down.endsAfter('closed-down')
      } finally {
        await srv.restart()
      }
    })
  })
}
