/**
 * The contract every SharedStore backend keeps (issue 28, item 6), as one
 * suite each backend's test file runs: test/unit/store-sqlite.test.ts,
 * store-postgres.test.ts, store-redis.test.ts.
 *
 * `open()` returns a new client of the same database each call: for a shared
 * backend, two clients are two instances, and the feed and the atomic verbs
 * are checked across them.
 */
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { FEED_VALUE_LIMIT, type Change, type SharedStore } from '../../sidecar/src/store/shared-store.js'
import type { AuditRow, StoredAuditRow } from '../../sidecar/src/store/audit-repository.js'

export interface BackendUnderTest {
  name: string
  /** true: several clients share one database (and one feed) */
  shared: boolean
  open(): Promise<SharedStore>
  /** called once after the suite */
  teardown?(): Promise<void>
}

/** Resolves with the first change `predicate` accepts, or rejects after `ms`. */
export function nextChange(store: SharedStore, predicate: (c: Change) => boolean, ms = 5000): Promise<Change> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      off()
      reject(new Error(`no matching change within ${ms} ms`))
    }, ms)
    const off = store.subscribe((change) => {
      if (!predicate(change)) return
      clearTimeout(timer)
      off()
      resolve(change)
    })
  })
}

async function until(what: string, check: () => Promise<boolean>, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`)
    await new Promise((r) => setTimeout(r, 25))
  }
}

export function conformance(backend: BackendUnderTest): void {
  describe(`SharedStore conformance: ${backend.name}`, () => {
    let a: SharedStore
    let b: SharedStore
    const opened: SharedStore[] = []
    // every test writes under its own kind, so tests never see each other's records
    const kind = () => `k${randomUUID().replace(/-/g, '').slice(0, 12)}`

    before(async () => {
      a = await backend.open()
      opened.push(a)
      b = backend.shared ? await backend.open() : a
      if (b !== a) opened.push(b)
    })
    after(async () => {
      for (const store of opened) await store.close()
      await backend.teardown?.()
    })

    it('reads back what it wrote, lists a kind and only that kind, deletes', async () => {
      const k = kind()
      const value = { name: 'Ünïcode ✓', n: 42, nested: { list: [1, 'two', null], flag: false } }
      await a.set(`${k}:one`, value)
      await a.set(`${k}:two`, { n: 2 })
      await a.set(`${k}x:three`, { n: 3 })
      assert.deepEqual(await b.get(`${k}:one`), value)
      const listed = (await b.entries<{ n: number }>(k)).map(([key, v]) => [key, v.n]).sort()
      assert.deepEqual(listed, [[`${k}:one`, 42], [`${k}:two`, 2]])
      assert.equal(await a.delete(`${k}:one`), true)
      assert.equal(await a.delete(`${k}:one`), false)
      assert.equal(await b.get(`${k}:one`), undefined)
    })

    it('pages through a kind: every record of it, none of a neighbouring kind, each page bounded', async () => {
      const k = kind()
      const writes = Array.from({ length: 250 }, (_, i) => ({ key: `${k}:r${String(i).padStart(3, '0')}`, value: { i } }))
      for (let i = 0; i < writes.length; i += 50) await a.commit([], writes.slice(i, i + 50))
      await a.set(`${k}x:other`, { i: -1 })
      await a.set(`${k}_:other`, { i: -2 })
      const seen = new Map<string, number>()
      let cursor: string | null = null
      let pages = 0
      do {
        const page: { rows: Array<[string, { value: { i: number }; seq: number }]>; next: string | null } = await b.entriesPage<{ i: number }>(k, cursor, 40)
        // Redis's HSCAN takes the count as a hint (a small hash comes whole); the others keep the limit
        if (backend.name !== 'redis') assert.ok(page.rows.length <= 40, `a page of at most 40, not ${page.rows.length}`)
        for (const [key, v] of page.rows) {
          assert.ok(key.startsWith(`${k}:`), key)
          assert.ok(v.seq > 0)
          seen.set(key, v.value.i) // Redis may repeat a key across pages: a reader is idempotent
        }
        cursor = page.next
        assert.ok(++pages < 100, 'the pages end')
      } while (cursor !== null)
      assert.equal(seen.size, 250)
      assert.deepEqual([...seen.values()].sort((x, y) => x - y), writes.map((w) => w.value.i))
    })

    it('lists a kind whose name holds LIKE and glob characters literally', async () => {
      const k = kind()
      await a.set(`${k}_a%*?[:1`, { v: 1 })
      await a.set(`${k}Xa%*?[:2`, { v: 2 })
      assert.deepEqual((await a.entries(`${k}_a%*?[`)).map(([key]) => key), [`${k}_a%*?[:1`])
    })

    it('numbers every write from one sequence: later writes, of any key, have larger numbers', async () => {
      const k = kind()
      await a.set(`${k}:x`, { v: 1 })
      const first = (await a.getVersioned(`${k}:x`))!.seq
      await b.set(`${k}:y`, { v: 1 })
      const second = (await a.getVersioned(`${k}:y`))!.seq
      await a.set(`${k}:x`, { v: 2 })
      const third = (await b.getVersioned(`${k}:x`))!.seq
      assert.ok(first < second && second < third, `${first} < ${second} < ${third}`)
      const listed = new Map(await b.entriesVersioned(k))
      assert.equal(listed.get(`${k}:x`)!.seq, third)
    })

    it('commit: writes only when every check holds, all or nothing', async () => {
      const k = kind()
      assert.equal(await a.commit([{ key: `${k}:name`, seq: null }], [{ key: `${k}:name`, value: { id: 1 } }, { key: `${k}:rec`, value: { r: 1 } }]), true)
      // the name exists now: a second create refuses and writes nothing at all
      assert.equal(await b.commit([{ key: `${k}:name`, seq: null }], [{ key: `${k}:name`, value: { id: 2 } }, { key: `${k}:other`, value: { r: 2 } }]), false)
      assert.deepEqual(await a.get(`${k}:name`), { id: 1 })
      assert.equal(await a.get(`${k}:other`), undefined)
      const seq = (await a.getVersioned(`${k}:rec`))!.seq
      assert.equal(await a.commit([{ key: `${k}:rec`, seq: seq + 1000 }], [{ key: `${k}:rec`, value: { r: 9 } }]), false)
      assert.equal(await b.commit([{ key: `${k}:rec`, seq }], [{ key: `${k}:rec`, value: { r: 3 } }, { key: `${k}:name`, value: undefined }]), true)
      assert.deepEqual(await a.get(`${k}:rec`), { r: 3 })
      assert.equal(await a.get(`${k}:name`), undefined)
      // the old number is stale now
      assert.equal(await a.commit([{ key: `${k}:rec`, seq }], [{ key: `${k}:rec`, value: { r: 4 } }]), false)
    })

    it('20 parallel commits on one read: exactly one wins (two admins demoting each other)', async () => {
      const k = kind()
      await a.set(`${k}:admins`, { ids: ['x', 'y'] })
      const seq = (await a.getVersioned(`${k}:admins`))!.seq
      const attempts = Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? a : b).commit([{ key: `${k}:admins`, seq }], [{ key: `${k}:admins`, value: { ids: [`only-${i}`] } }]))
      const results = await Promise.all(attempts)
      assert.equal(results.filter(Boolean).length, 1)
      const winner = results.indexOf(true)
      assert.deepEqual(await b.get(`${k}:admins`), { ids: [`only-${winner}`] })
    })

    it('20 parallel creates of one absent name, each with a record of its own: exactly one wins, and only its record is written', async () => {
      const k = kind()
      const attempts = Array.from({ length: 20 }, (_, i) =>
        (i % 2 === 0 ? a : b).commit([{ key: `${k}:name`, seq: null }], [{ key: `${k}:name`, value: { id: i } }, { key: `${k}:rec${i}`, value: { r: i } }]),
      )
      const results = await Promise.all(attempts)
      assert.equal(results.filter(Boolean).length, 1)
      const winner = results.indexOf(true)
      assert.deepEqual(await b.get(`${k}:name`), { id: winner })
      assert.deepEqual((await a.entries(k)).map(([key]) => key).sort(), [`${k}:name`, `${k}:rec${winner}`].sort())
    })

    it('50 parallel increments give 50 distinct counts, 1 to 50', async () => {
      const key = `throttle-${randomUUID()}`
      const counts = await Promise.all(Array.from({ length: 50 }, (_, i) => (i % 2 === 0 ? a : b).increment(key, 60_000)))
      assert.deepEqual([...counts].sort((x, y) => x - y), Array.from({ length: 50 }, (_, i) => i + 1))
      assert.equal(await b.readCounter(key), 50)
      await a.resetCounter(key)
      assert.equal(await b.readCounter(key), 0)
      assert.equal(await b.increment(key, 60_000), 1)
    })

    it('a counter expires its ttl after the first increment, or after the last with refresh', async () => {
      const fixed = `fixed-${randomUUID()}`
      assert.equal(await a.increment(fixed, 300), 1)
      assert.equal(await a.increment(fixed, 300), 2)
      await until('the counter expires', async () => (await b.readCounter(fixed)) === 0)
      assert.equal(await a.increment(fixed, 300), 1, 'an expired counter starts over')
      const refreshed = `refresh-${randomUUID()}`
      await a.increment(refreshed, 60_000, true)
      assert.equal(await a.increment(refreshed, 60_000, true), 2)
      assert.equal(await a.readCounter(refreshed), 2)
    })

    it('20 parallel claims of one TOTP step give exactly one winner; it can be claimed again once expired', async () => {
      const key = `totp-${randomUUID()}`
      const results = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? a : b).claim(key, 400)))
      assert.equal(results.filter(Boolean).length, 1)
      assert.equal(await a.claim(`other-${key}`, 400), true, 'another step is its own claim')
      await until('the claim expires', async () => b.claim(key, 60_000))
    })

    it('announces every write with its key, number, value and origin; a delete as such', async () => {
      const k = kind()
      const heard = nextChange(b, (c) => c.key === `${k}:one` && c.exists)
      await a.set(`${k}:one`, { v: 'hello' })
      const change = await heard
      assert.equal(change.origin, a.origin)
      assert.deepEqual(change.value, { v: 'hello' })
      assert.equal(change.seq, (await a.getVersioned(`${k}:one`))!.seq)
      const gone = nextChange(b, (c) => c.key === `${k}:one` && !c.exists)
      await a.delete(`${k}:one`)
      const deletion = await gone
      assert.ok(deletion.seq > change.seq)
      assert.equal(deletion.value, undefined)
    })

    it('announces a commit’s writes, and writes of one key in order', async () => {
      const k = kind()
      const seen: Change[] = []
      const off = b.subscribe((c) => {
        if (c.key.startsWith(`${k}:`)) seen.push(c)
      })
      const last = nextChange(b, (c) => c.key === `${k}:n` && (c.value as { i?: number } | undefined)?.i === 19)
      for (let i = 0; i < 20; i++) await a.set(`${k}:n`, { i })
      await last
      await a.commit([], [{ key: `${k}:p`, value: { p: 1 } }, { key: `${k}:q`, value: { q: 1 } }])
      await until('the commit is heard', async () => seen.some((c) => c.key === `${k}:q`))
      off()
      const ns = seen.filter((c) => c.key === `${k}:n`).map((c) => (c.value as { i: number }).i)
      assert.deepEqual(ns, Array.from({ length: 20 }, (_, i) => i))
      const seqs = seen.filter((c) => c.key === `${k}:n`).map((c) => c.seq)
      assert.deepEqual(seqs, [...seqs].sort((x, y) => x - y))
      assert.ok(seen.some((c) => c.key === `${k}:p`))
    })

    it('a write resolves only after this client’s own listeners heard it (a replica reads its own writes)', async () => {
      const k = kind()
      let heard = 0
      const off = a.subscribe((c) => {
        if (c.key === `${k}:own`) heard += 1
      })
      await a.set(`${k}:own`, { v: 1 })
      assert.equal(heard, 1, 'set')
      await a.commit([], [{ key: `${k}:own`, value: { v: 2 } }])
      assert.equal(heard, 2, 'commit')
      await a.delete(`${k}:own`)
      assert.equal(heard, 3, 'delete')
      off()
    })

    it('a value too large for the feed arrives without it, and reads back whole', async () => {
      const k = kind()
      const big = { blob: 'x'.repeat(FEED_VALUE_LIMIT + 100) }
      const heard = nextChange(b, (c) => c.key === `${k}:big`)
      await a.set(`${k}:big`, big)
      const change = await heard
      assert.equal(change.exists, true)
      assert.equal(change.value, undefined)
      assert.deepEqual((await b.getVersioned(`${k}:big`))!.value, big)
    })

    it('kinds lists every kind that holds a record, once, and not a kind whose records are gone', async () => {
      const k = kind()
      await a.set(`${k}:1`, { v: 1 })
      await a.set(`${k}:2`, { v: 2 })
      await a.set(`${k}x:1`, { v: 3 })
      const listed = await b.kinds()
      assert.ok(listed.includes(k) && listed.includes(`${k}x`), listed.join(','))
      assert.equal(listed.filter((x) => x === k).length, 1)
      await a.delete(`${k}x:1`)
      assert.ok(!(await b.kinds()).includes(`${k}x`))
      assert.deepEqual(listed, [...listed].sort())
    })

    it('a claim reset is free again at once (the audit log’s prune lock)', async () => {
      const key = `lock-${randomUUID()}`
      assert.equal(await a.claim(key, 600_000), true)
      assert.equal(await b.claim(key, 600_000), false)
      await b.resetCounter(key)
      assert.equal(await b.claim(key, 600_000), true)
    })

    describe('the audit log', () => {
      const row = (over: Partial<AuditRow> & { kind: string }): AuditRow => ({ at: Date.now(), actor: null, subject: null, ip: null, outcome: 'success', details: '{}', ...over })
      const auditKind = () => `audit_${randomUUID().replace(/-/g, '').slice(0, 10)}`

      it('appends in order across instances; reads newest first; every row numbered above every earlier one', async () => {
        const k = auditKind()
        await a.audit.append([row({ kind: k, details: '{"n":1}' }), row({ kind: k, details: '{"n":2}' })])
        await b.audit.append([row({ kind: k, details: '{"n":3}' })])
        await a.audit.append([row({ kind: k, details: '{"n":4}', actor: 'Ünï', subject: 'bob', ip: '203.0.113.5', outcome: 'refused' })])
        const rows = await b.audit.query({ kinds: [k], limit: 10 })
        assert.deepEqual(rows.map((r) => JSON.parse(r.details).n), [4, 3, 2, 1])
        const seqs = rows.map((r) => r.seq)
        assert.deepEqual(seqs, [...seqs].sort((x, y) => y - x))
        assert.equal(new Set(seqs).size, 4)
        assert.deepEqual({ ...rows[0], seq: 0, at: 0 }, { seq: 0, at: 0, kind: k, actor: 'Ünï', subject: 'bob', ip: '203.0.113.5', outcome: 'refused', details: '{"n":4}' })
      })

      it('parallel appends from two instances: every row stored once, each instance’s rows in its own order', async () => {
        const k = auditKind()
        await Promise.all(
          Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? a : b).audit.append([row({ kind: k, actor: `w${i}`, details: '{"i":0}' }), row({ kind: k, actor: `w${i}`, details: '{"i":1}' })])),
        )
        const rows = await a.audit.query({ kinds: [k], limit: 100 })
        assert.equal(rows.length, 40)
        for (let i = 0; i < 20; i++) {
          const mine = rows.filter((r) => r.actor === `w${i}`).map((r) => JSON.parse(r.details).i)
          assert.deepEqual(mine, [1, 0], `appender ${i}: newest first, its two rows in order`)
        }
      })

      it('filters by name (actor or subject), kinds, an inclusive time range, and pages with before', async () => {
        const k = auditKind()
        const other = auditKind()
        const t = 1_700_000_000_000
        const name = `n-${randomUUID()}`
        await a.audit.append([
          row({ kind: k, at: t, actor: name }),
          row({ kind: k, at: t + 1000, subject: name }),
          row({ kind: other, at: t + 2000, actor: name }),
          row({ kind: k, at: t + 3000, actor: 'someone-else' }),
          row({ kind: k, at: t + 4000, actor: name, subject: name }),
        ])
        const ats = (rows: StoredAuditRow[]) => rows.map((r) => r.at - t)
        assert.deepEqual(ats(await b.audit.query({ name, limit: 10 })), [4000, 2000, 1000, 0])
        assert.deepEqual(ats(await b.audit.query({ name, kinds: [k], limit: 10 })), [4000, 1000, 0])
        assert.deepEqual(ats(await b.audit.query({ kinds: [k, other], since: t + 1000, until: t + 3000, limit: 10 })), [3000, 2000, 1000])
        const first = await b.audit.query({ kinds: [k], limit: 2 })
        assert.deepEqual(ats(first), [4000, 3000])
        assert.deepEqual(ats(await b.audit.query({ kinds: [k], before: first[1].seq, limit: 10 })), [1000, 0])
        assert.deepEqual(await b.audit.query({ name: `nobody-${randomUUID()}`, limit: 10 }), [])
      })

      it('lists the oldest row of each name, and pages oldest first after a number', async () => {
        const k = auditKind()
        const x = `x-${randomUUID()}`
        const y = `y-${randomUUID()}`
        await a.audit.append([row({ kind: k, actor: x, details: '"first-x"' }), row({ kind: k, actor: x, subject: y, details: '"first-y"' }), row({ kind: k, subject: y })])
        const firsts = (await b.audit.firstOfEachName()).filter((r) => r.kind === k)
        assert.deepEqual(firsts.map((r) => r.details), ['"first-x"', '"first-y"'])
        const start = firsts[0].seq - 1
        const paged = await b.audit.page(start, 2)
        assert.deepEqual(paged.map((r) => r.details), ['"first-x"', '"first-y"'])
        assert.equal((await b.audit.page(paged[1].seq, 10)).filter((r) => r.kind === k).length, 1)
      })

      it('prunes rows older than a time, then all but the newest N', async () => {
        const day = 86_400_000
        await a.audit.prune(Date.now() + day, 1_000_000_000) // an empty log to start from
        assert.equal(await b.audit.count(), 0)
        const k = auditKind()
        const now = Date.now()
        const gone = `gone-${randomUUID()}`
        const stays = `stays-${randomUUID()}`
        await a.audit.append(Array.from({ length: 30 }, (_, i) => row({ kind: k, at: now - 10 * day + i, actor: i % 2 === 0 ? gone : stays, details: `{"old":${i}}` })))
        await b.audit.append(Array.from({ length: 20 }, (_, i) => row({ kind: k, at: now + i, subject: i === 19 ? stays : null, details: `{"young":${i}}` })))
        assert.equal(await a.audit.count(), 50)
        assert.equal(await b.audit.prune(now - day, 1000), 30)
        assert.equal(await a.audit.count(), 20)
        // a name's rows went with the log's: none left to read or list
        assert.deepEqual(await b.audit.query({ name: gone, limit: 100 }), [])
        assert.deepEqual((await b.audit.query({ name: stays, limit: 100 })).map((r) => JSON.parse(r.details).young), [19])
        const names = (await a.audit.firstOfEachName()).flatMap((r) => [r.actor, r.subject])
        assert.ok(!names.includes(gone) && names.includes(stays))
        assert.equal(await a.audit.prune(now - day, 15), 5)
        const kept = (await b.audit.query({ limit: 100 })).map((r) => JSON.parse(r.details).young)
        assert.deepEqual(kept, Array.from({ length: 15 }, (_, i) => 19 - i), 'the newest 15')
        assert.equal(await a.audit.prune(now - day, 15), 0)
      })

      it('append and the numbers go on after a prune emptied the log', async () => {
        const k = auditKind()
        await a.audit.append([row({ kind: k })])
        const before = (await a.audit.query({ kinds: [k], limit: 1 }))[0].seq
        await a.audit.prune(Date.now() + 86_400_000, 1_000_000_000)
        assert.equal(await a.audit.count(), 0)
        await b.audit.append([row({ kind: k })])
        assert.ok((await a.audit.query({ kinds: [k], limit: 1 }))[0].seq > before)
      })
    })

    if (backend.shared) {
      it('two clients have two origins; each hears the other', async () => {
        assert.notEqual(a.origin, b.origin)
        const k = kind()
        const heardByA = nextChange(a, (c) => c.key === `${k}:from-b`)
        await b.set(`${k}:from-b`, { v: 1 })
        assert.equal((await heardByA).origin, b.origin)
      })
    }
  })
}
