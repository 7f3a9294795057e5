/**
 * SPEC §2: "unknown users cost the same time as known ones (a dummy hash
 * verify)". Proved by counting, not timing (a timing on a shared machine is
 * load-sensitive; `npm run bench` measures it): every password check through
 * the real routes runs exactly one argon2 verify, against a hash of the same
 * argon2 parameters, whether the user exists, is disabled, or the password is
 * right or wrong.
 */
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { addUser, call, openSidecar, type Sidecar } from './fixtures.js'

/** `$argon2id$v=19$m=64,t=1,p=1$salt$hash` → `argon2id v=19 m=64,t=1,p=1`: what decides a verify's cost. */
const costOf = (phc: string): string => phc.split('$').slice(1, 4).join(' ')

describe('a password check costs one argon2 verify of the same cost, whoever is named', () => {
  let sc: Sidecar
  let verified: string[] = []
  let userCost = ''
  before(async () => {
    sc = await openSidecar()
    const alice = await addUser(sc, 'alice', 'alice-passphrase-1')
    userCost = costOf(alice.password_hash)
    const dora = await addUser(sc, 'dora', 'dora-passphrase-1')
    await sc.services.users.update(dora.user_id, { disabled: true })
    // every verify goes through this method (verifyDummy included): record the hash it checks against
    const passwords = sc.services.passwords
    const verify = passwords.verify.bind(passwords)
    passwords.verify = (hash: string, password: string) => {
      verified.push(hash)
      return verify(hash, password)
    }
  })
  after(() => sc.close())

  const rows: Array<[string, string, { username: string; password: string }, number]> = [
    ['known user, wrong password', '/login', { username: 'alice', password: 'wrong-password-1' }, 401],
    ['known user, right password', '/login', { username: 'alice', password: 'alice-passphrase-1' }, 200],
    ['known user in another case, wrong password', '/login', { username: 'ALICE', password: 'wrong-password-1' }, 401],
    ['unknown user', '/login', { username: 'nobody-here', password: 'wrong-password-1' }, 401],
    ['unknown user with the dummy password itself', '/login', { username: 'nobody-here', password: 'authsvc-dummy-password' }, 401],
    ['disabled user, right password', '/login', { username: 'dora', password: 'dora-passphrase-1' }, 401],
    ['disabled user, wrong password', '/login', { username: 'dora', password: 'wrong-password-1' }, 401],
    ['generate_token, known user, wrong password', '/authsvc/generate_token', { username: 'alice', password: 'wrong-password-1' }, 401],
    ['generate_token, unknown user', '/authsvc/generate_token', { username: 'nobody-here', password: 'wrong-password-1' }, 401],
  ]
  for (const [name, url, body, status] of rows) {
    it(name, async () => {
      verified = []
      const res = await call(sc, { method: 'POST', url, body })
      assert.equal(res.statusCode, status, res.body)
      assert.equal(verified.length, 1, 'exactly one argon2 verify')
      assert.equal(costOf(verified[0]), userCost, 'against a hash of the users\' argon2 cost')
    })
  }
})
