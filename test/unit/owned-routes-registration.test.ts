/**
 * Registration: the first user registers publicly and is the admin (exactly
 * one, even when racing); after that only an admin registers others, same-origin
 * when by cookie; usernames and passwords that are refused or accepted.
 *
 * Part of the owned routes through Fastify inject (SPEC §5.2, §5.4); the shared
 * request helpers are owned-requests.ts.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { addUser, assertError, bootstrapAdmin, call, openSidecar, sessionJwt, type Sidecar } from './fixtures.js'
import { FORM, form, json, login } from './owned-requests.js'

// ------------------------------------------------------------- registration

describe('registration', () => {
  it('the first user registers publicly and is admin (a role in the body is ignored)', async () => {
    const sc = await openSidecar()
    try {
      const res = await call(sc, { method: 'POST', url: '/register', body: { username: 'first', password: 'first-passphrase-1', role: 'guest' } })
      assert.equal(res.statusCode, 201)
      assert.deepEqual(json(res), { message: 'User registered', username: 'first', role: 'admin', signed_in: true })
      assert.equal(sc.services.users.byUsername('first')?.role, 'admin')
    } finally {
      await sc.close()
    }
  })

  it('the first user can register with a form body', async () => {
    const sc = await openSidecar()
    try {
      const res = await call(sc, { method: 'POST', url: '/register', headers: FORM, body: form({ username: 'formuser', password: 'form-passphrase-1' }) })
      assert.equal(res.statusCode, 201, res.body)
    } finally {
      await sc.close()
    }
  })

  it('two concurrent first registrations make exactly one admin', async () => {
    const sc = await openSidecar()
    try {
      const results = await Promise.all([
        call(sc, { method: 'POST', url: '/register', body: { username: 'racer-one', password: 'racer-passphrase-1' } }),
        call(sc, { method: 'POST', url: '/register', body: { username: 'racer-two', password: 'racer-passphrase-2' } }),
        call(sc, { method: 'POST', url: '/register', body: { username: 'racer-three', password: 'racer-passphrase-3' } }),
      ])
      assert.deepEqual(results.map((r) => r.statusCode).sort(), [201, 403, 403])
      assert.equal(sc.services.users.enabledAdmins().length, 1)
    } finally {
      await sc.close()
    }
  })

  describe('after the first user', () => {
    let sc: Sidecar
    let adminJwt: string
    let userJwt: string
    before(async () => {
      sc = await openSidecar()
      adminJwt = (await bootstrapAdmin(sc)).jwt
      userJwt = await sessionJwt(sc, await addUser(sc, 'plainuser', 'plain-passphrase-1'))
    })
    after(() => sc.close())

    it('anonymous registration → 403 REGISTRATION_CLOSED (even with valid fields or role admin)', async () => {
      for (const body of [{ username: 'eve', password: 'eve-passphrase-1' }, { username: 'eve', password: 'eve-passphrase-1', role: 'admin' }, { username: '!', password: 'x' }]) {
        assertError(await call(sc, { method: 'POST', url: '/register', body }), 403, 'REGISTRATION_CLOSED')
      }
      assert.equal(sc.services.users.byUsername('eve'), undefined)
    })

    it('a non-admin user cannot register others → 403 REGISTRATION_CLOSED', async () => {
      assertError(await call(sc, { method: 'POST', url: '/register', bearer: userJwt, body: { username: 'eve', password: 'eve-passphrase-1' } }), 403, 'REGISTRATION_CLOSED')
    })

    it('an admin registers users: role user by default, a known role when given, an unknown role refused', async () => {
      const a = await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: 'newbie', password: 'newbie-passphrase-1' } })
      assert.equal(a.statusCode, 201)
      assert.equal(json(a).role, 'user')
      const b = await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: 'guesty', password: 'guesty-passphrase-1', role: 'guest' } })
      assert.equal(json(b).role, 'guest')
      assertError(await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: 'nobody1', password: 'nobody-passphrase-1', role: 'root' } }), 400, 'VALIDATION_FAILED')
    })

    it('an admin cookie registration must be same-origin (CSRF), and passes when it is', async () => {
      assertError(await call(sc, { method: 'POST', url: '/register', cookie: adminJwt, body: { username: 'csrf-victim', password: 'csrf-passphrase-1' } }), 403, 'CSRF_REJECTED')
      assertError(await call(sc, { method: 'POST', url: '/register', cookie: adminJwt, headers: { origin: 'https://evil.example' }, body: { username: 'csrf-victim', password: 'csrf-passphrase-1' } }), 403, 'CSRF_REJECTED')
      assert.equal(sc.services.users.byUsername('csrf-victim'), undefined)
      const ok = await call(sc, { method: 'POST', url: '/register', cookie: adminJwt, sameOrigin: true, body: { username: 'csrf-ok', password: 'csrf-passphrase-1' } })
      assert.equal(ok.statusCode, 201)
    })

    const badUsernames = ['ab', 'a'.repeat(65), '.hidden', '-dash', 'has space', 'ünïcode', 'a/b', 'a\\b', '', 'semi;colon', 'new\nline', 'guest', 'Guest', 'default', 'DEFAULTS']
    for (const username of badUsernames) {
      it(`username ${JSON.stringify(username)} → 400 VALIDATION_FAILED`, async () => {
        assertError(await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username, password: 'valid-passphrase-1' } }), 400, 'VALIDATION_FAILED')
      })
    }

    for (const username of ['abc', 'a'.repeat(64), '_under', '0digit', 'dots.and-dashes_', 'admin']) {
      it(`username ${JSON.stringify(username.length > 20 ? `${username.slice(0, 8)}…(${username.length})` : username)} is accepted`, async () => {
        const res = await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username, password: 'valid-passphrase-1' } })
        assert.equal(res.statusCode, 201, res.body)
      })
    }

    it('usernames are unique case-insensitively → 409 CONFLICT', async () => {
      await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: 'Casey', password: 'casey-passphrase-1' } })
      assertError(await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: 'casey', password: 'casey-passphrase-2' } }), 409, 'CONFLICT')
      assertError(await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: 'ROOT-ADMIN', password: 'casey-passphrase-2' } }), 409, 'CONFLICT')
    })

    const badPasswords: Array<[string, string]> = [
      ['7 characters', 'abcdefg'],
      ['empty', ''],
      ['1025 characters', 'x'.repeat(1025)],
      ['a common password', 'password123'],
      ['a common password in other case', 'PassWord123'],
      ['another common one', 'qwertyuiop'],
    ]
    for (const [name, password] of badPasswords) {
      it(`password ${name} → 400 VALIDATION_FAILED`, async () => {
        assertError(await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: `pw-${name.length}-${password.length}`, password } }), 400, 'VALIDATION_FAILED')
      })
    }

    for (const [name, password] of [['8 characters', 'k9#Lm2@x'], ['1024 characters', 'Zq'.repeat(512)], ['only spaces', '         ']] as const) {
      it(`password of ${name} is accepted`, async () => {
        const res = await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: `pwok-${password.length}`, password } })
        assert.equal(res.statusCode, 201, res.body)
      })
    }

    it('passwords are compared exactly: a trailing or leading space is a different password', async () => {
      await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: 'spacey', password: 'trailing-space-pass ' } })
      assertError(await login(sc, 'spacey', 'trailing-space-pass'), 401, 'INVALID_CREDENTIALS')
      assertError(await login(sc, 'spacey', ' trailing-space-pass '), 401, 'INVALID_CREDENTIALS')
      assert.equal((await login(sc, 'spacey', 'trailing-space-pass ')).statusCode, 200)
      await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: 'plainpw', password: 'no-space-password' } })
      assertError(await login(sc, 'plainpw', 'no-space-password '), 401, 'INVALID_CREDENTIALS')
      assertError(await login(sc, 'plainpw', 'NO-SPACE-PASSWORD'), 401, 'INVALID_CREDENTIALS')
    })

    it('a long password is never truncated (the 1024th character counts)', async () => {
      const long = 'Lp'.repeat(511) + 'ab'
      await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, body: { username: 'longpw', password: long } })
      assertError(await login(sc, 'longpw', `${long.slice(0, 1023)}x`), 401, 'INVALID_CREDENTIALS')
      assertError(await login(sc, 'longpw', long.slice(0, 72)), 401, 'INVALID_CREDENTIALS')
      assert.equal((await login(sc, 'longpw', long)).statusCode, 200)
    })

    it('a form-body password keeps its exact bytes (+, %20, trailing space)', async () => {
      const password = 'a+b c%20d '
      const reg = await call(sc, { method: 'POST', url: '/register', bearer: adminJwt, headers: FORM, body: form({ username: 'formpw', password }) })
      assert.equal(reg.statusCode, 201, reg.body)
      assert.equal((await login(sc, 'formpw', password)).statusCode, 200)
    })
  })
})
