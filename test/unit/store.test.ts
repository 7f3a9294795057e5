/**
 * The sqlite store on disk (SPEC §3, §10; DESIGN §2.7 "No secret leaves"):
 * the raw bytes of authsvc.sqlite and its WAL hold no password, no raw API
 * token, no JWT and no master secret; a restart on the same data dir keeps
 * users, sessions and tokens (nobody is logged out); WAL mode is on.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { existsSync, readFileSync, rmSync, statSync } from 'node:fs'
import { join } from 'node:path'
import sqlite3 from 'sqlite3'
import { SECRET, addUser, bootstrapAdmin, call, fakeClock, openSidecar, tempDir, type Sidecar } from './fixtures.js'

const STORE_FILES = ['authsvc.sqlite', 'authsvc.sqlite-wal', 'authsvc.sqlite-shm']

function storeBytes(dir: string): Buffer {
  return Buffer.concat(STORE_FILES.map((f) => join(dir, f)).filter(existsSync).map((p) => readFileSync(p)))
}

function leaks(bytes: Buffer, secrets: Record<string, string>): string[] {
  const found: string[] = []
  for (const [name, secret] of Object.entries(secrets)) {
    for (const encoding of ['utf8', 'utf16le'] as const) {
      if (bytes.includes(Buffer.from(secret, encoding))) found.push(`${name} (${encoding})`)
    }
  }
  return found
}

function pragma(path: string, sql: string): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const db = new sqlite3.Database(path, sqlite3.OPEN_READONLY, (err) => {
      if (err) return reject(err)
      db.get(sql, (e: Error | null, row: Record<string, unknown>) => {
        db.close()
        if (e) reject(e)
        else resolve(row)
      })
    })
  })
}

describe('the sqlite file holds no secret and survives a restart', () => {
  const dir = tempDir('authsvc-store-')
  const clock = fakeClock()
  const secrets: Record<string, string> = {}
  let sc: Sidecar
  let aliceJwt: string
  let aliceToken: string
  let revokedJwt: string
  let userCount: number

  before(async () => {
    sc = await openSidecar({ dir, clock })
    const admin = await bootstrapAdmin(sc, 'root-admin', 'Adm1n-store-passphrase')
    secrets.adminPassword = admin.password
    const reg = await call(sc, { method: 'POST', url: '/register', bearer: admin.jwt, body: { username: 'alice', password: 'Al1ce-store-passphrase' } })
    assert.equal(reg.statusCode, 201)
    secrets.alicePassword = 'Al1ce-store-passphrase'
    const login = await call(sc, { method: 'POST', url: '/login', body: { username: 'alice', password: secrets.alicePassword, remember_me: true } })
    aliceJwt = JSON.parse(login.body).jwt_token
    secrets.aliceJwt = aliceJwt
    secrets.aliceJwtSignature = aliceJwt.split('.')[2]
    const second = await call(sc, { method: 'POST', url: '/login', body: { username: 'alice', password: secrets.alicePassword } })
    revokedJwt = JSON.parse(second.body).jwt_token
    secrets.revokedJwt = revokedJwt
    assert.equal((await call(sc, { method: 'POST', url: '/logout', bearer: revokedJwt })).statusCode, 200)
    const tok = await call(sc, { method: 'POST', url: '/authsvc/generate_token', body: { username: 'alice', password: secrets.alicePassword, label: 'cli' } })
    aliceToken = JSON.parse(tok.body).token
    secrets.aliceToken = aliceToken
    secrets.aliceTokenBody = aliceToken.slice(4)
    secrets.adminJwt = admin.jwt
    secrets.masterSecret = SECRET
    const reset = await call(sc, { method: 'PUT', url: '/authsvc/api/users/root-admin', bearer: admin.jwt, body: { password: 'Rotated-admin-passphrase' } })
    assert.equal(reset.statusCode, 200)
    secrets.rotatedPassword = 'Rotated-admin-passphrase'
    await addUser(sc, 'bob', 'B0b-store-passphrase')
    secrets.bobPassword = 'B0b-store-passphrase'
    userCount = sc.services.users.count
    await sc.services.flush()
  })
  after(() => rmSync(dir, { recursive: true, force: true }))

  it('while open (database + WAL): no password, API token, JWT or master secret in the bytes', async () => {
    const bytes = storeBytes(dir)
    assert.ok(bytes.length > 0)
    assert.deepEqual(leaks(Buffer.concat([bytes, Buffer.from(`x${secrets.aliceToken}x`)]), secrets), ['aliceToken (utf8)', 'aliceTokenBody (utf8)'], 'the scanner itself finds a planted token')
    assert.deepEqual(leaks(bytes, secrets), [])
  })

  it('the store does hold what it should: argon2id PHC strings and the token\'s SHA-256', () => {
    const bytes = storeBytes(dir).toString('latin1')
    assert.ok(bytes.includes('$argon2id$'), 'password hashes are argon2id')
    assert.ok(bytes.includes(createHash('sha256').update(aliceToken).digest('hex')), 'the token is stored as its SHA-256 hex')
  })

  it('after close: still no secret, and the file is 0600', async () => {
    await sc.close({ keepDir: true })
    assert.deepEqual(leaks(storeBytes(dir), secrets), [])
    assert.equal(statSync(join(dir, 'authsvc.sqlite')).mode & 0o777, 0o600)
    assert.equal(statSync(join(dir, 'authsvc_groups.json')).mode & 0o777, 0o600)
  })

  it('WAL mode is on (PRAGMA journal_mode)', async () => {
    const row = await pragma(join(dir, 'authsvc.sqlite'), 'PRAGMA journal_mode')
    assert.equal(String(row.journal_mode).toLowerCase(), 'wal')
  })

  it('reopening the same dir keeps users, sessions (the old JWT still resolves) and tokens', async () => {
    const again = await openSidecar({ dir, clock })
    try {
      assert.equal(again.services.users.count, userCount)
      const me = await call(again, { url: '/authsvc/api/me', bearer: aliceJwt })
      assert.equal(me.statusCode, 200, me.body)
      assert.equal(JSON.parse(me.body).username, 'alice')
      const byToken = await call(again, { url: '/authsvc/api/me', bearer: aliceToken })
      assert.equal(JSON.parse(byToken.body).auth_type, 'api_token')
      const viaCookie = await call(again, { url: '/authsvc/api/me', cookie: aliceJwt })
      assert.equal(viaCookie.statusCode, 200)
      const tokens = JSON.parse((await call(again, { url: '/authsvc/api/tokens', bearer: aliceJwt })).body).tokens
      assert.deepEqual(tokens.map((t: { label: string }) => t.label), ['cli'])
      const sessions = JSON.parse((await call(again, { url: '/authsvc/me/sessions', bearer: aliceJwt })).body).sessions
      assert.equal(sessions.length, 1, 'the logged-out session is not listed')
      assert.equal(sessions[0].is_current, true)
    } finally {
      await again.close({ keepDir: true })
    }
  })

  it('revocations survive the restart too', async () => {
    const again = await openSidecar({ dir, clock })
    try {
      const revoked = await call(again, { url: '/authsvc/api/me', bearer: revokedJwt })
      assert.equal(revoked.statusCode, 401)
      assert.equal(JSON.parse(revoked.body).code, 'TOKEN_REVOKED')
      const oldAdmin = await call(again, { url: '/authsvc/api/me', bearer: secrets.adminJwt })
      assert.equal(oldAdmin.statusCode, 401, 'the password reset revoked the admin\'s session for good')
      const rotated = await call(again, { method: 'POST', url: '/login', body: { username: 'root-admin', password: secrets.rotatedPassword } })
      assert.equal(rotated.statusCode, 200)
      const old = await call(again, { method: 'POST', url: '/login', body: { username: 'root-admin', password: secrets.adminPassword } })
      assert.equal(old.statusCode, 401)
    } finally {
      await again.close({ keepDir: true })
    }
  })

  it('another master secret invalidates every JWT but not the API tokens (they are hashes, not signatures)', async () => {
    const other = await openSidecar({ dir, clock, secret: 'a-completely-different-master-secret-xyz' })
    try {
      assert.equal((await call(other, { url: '/authsvc/api/me', bearer: aliceJwt })).statusCode, 401)
      assert.equal((await call(other, { url: '/authsvc/api/me', bearer: aliceToken })).statusCode, 200)
    } finally {
      await other.close({ keepDir: true })
    }
  })
})

describe('the generated secret key file', () => {
  it('without AUTHSVC_SECRET a 0600 key file is generated once and a restart keeps sessions', async () => {
    const dir = tempDir('authsvc-keyfile-')
    try {
      const first = await openSidecar({ dir, secret: '' })
      const keyPath = join(dir, 'authsvc_secret.key')
      assert.equal(statSync(keyPath).mode & 0o777, 0o600)
      const key = readFileSync(keyPath, 'utf8')
      const alice = await addUser(first, 'alice', 'alice-passphrase-1')
      const { token } = await first.services.sessions.issue(alice, false)
      await first.close({ keepDir: true })
      assert.deepEqual(leaks(storeBytes(dir), { key: key.trim() }), [])
      const second = await openSidecar({ dir, secret: '' })
      try {
        assert.equal(readFileSync(keyPath, 'utf8'), key, 'not regenerated')
        assert.equal((await call(second, { url: '/authsvc/api/me', bearer: token })).statusCode, 200)
      } finally {
        await second.close({ keepDir: true })
      }
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('a too-short AUTHSVC_SECRET refuses to start', async () => {
    const dir = tempDir('authsvc-shortsecret-')
    try {
      await assert.rejects(openSidecar({ dir, secret: 'short' }), /at least 32 characters/)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
