/**
 * Secrets at rest (SPEC §10 `encryption_level`): AES-256-GCM values of the
 * form enc:v1:<iv>:<tag>:<ciphertext>. Round trips; a fresh IV per value; any
 * changed character, a wrong key or a wrong context throws FieldDecryptError
 * (catchable, never a plaintext); the plaintext shows in no encoding; the
 * format, including the AAD, is pinned by decrypting with node:crypto directly.
 */
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { createDecipheriv, randomBytes } from 'node:crypto'
import { FieldCipher, FieldDecryptError, openRecord, sealRecord } from '../../sidecar/src/store/field-crypto.js'

const key = randomBytes(32)
const cipher = new FieldCipher(key)
const CONTEXT = 'user:7b0c6a2e:totp'
const SECRET = 'JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP'
const FORMAT = /^enc:v1:[A-Za-z0-9_-]{16}:[A-Za-z0-9_-]{22}:[A-Za-z0-9_-]*$/
const B64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'

describe('FieldCipher round trip and format', () => {
  for (const plain of ['', SECRET, 'pâté ☕ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢', 'x'.repeat(100_000)]) {
    it(`round trip (${plain.length} chars)`, () => {
      const sealed = cipher.encrypt(plain, CONTEXT)
      assert.match(sealed, FORMAT)
      assert.equal(cipher.decrypt(sealed, CONTEXT), plain)
    })
  }

  it('the format: 12-byte IV, 16-byte tag, AAD "enc:v1:" + context (opened with node:crypto alone)', () => {
    const [, , iv, tag, ct] = cipher.encrypt(SECRET, CONTEXT).split(':')
    const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(iv, 'base64url'))
    decipher.setAAD(Buffer.from(`enc:v1:${CONTEXT}`))
    decipher.setAuthTag(Buffer.from(tag, 'base64url'))
    const plain = Buffer.concat([decipher.update(Buffer.from(ct, 'base64url')), decipher.final()]).toString('utf8')
    assert.equal(Buffer.from(iv, 'base64url').length, 12)
    assert.equal(Buffer.from(tag, 'base64url').length, 16)
    assert.equal(plain, SECRET)
  })

  it('every value gets a fresh IV, so equal secrets do not look equal', () => {
    const sealed = Array.from({ length: 2000 }, () => cipher.encrypt(SECRET, CONTEXT))
    assert.equal(new Set(sealed.map((s) => s.split(':')[2])).size, sealed.length)
    assert.equal(new Set(sealed).size, sealed.length)
  })

  it('another cipher with the same key opens the value (a restart keeps the data)', () => {
    assert.equal(new FieldCipher(Buffer.from(key)).decrypt(cipher.encrypt(SECRET, CONTEXT), CONTEXT), SECRET)
  })

  it('the cipher keeps its own copy of the key', () => {
    const mine = randomBytes(32)
    const own = new FieldCipher(mine)
    const sealed = own.encrypt(SECRET, CONTEXT)
    mine.fill(0)
    assert.equal(own.decrypt(sealed, CONTEXT), SECRET)
  })

  it('isSealed recognises the shape only', () => {
    assert.equal(cipher.isSealed(cipher.encrypt(SECRET, CONTEXT)), true)
    assert.equal(cipher.isSealed(cipher.encrypt('', CONTEXT)), true)
    for (const value of [SECRET, '', 'enc:v1:', 'enc:v1:a:b:c', 'enc:v2:AAAAAAAAAAAAAAAA:AAAAAAAAAAAAAAAAAAAAAA:', null, undefined, 42, {}]) {
      assert.equal(cipher.isSealed(value), false, String(value))
    }
  })

  it('a key that is not 32 bytes and an empty context are refused', () => {
    for (const size of [0, 16, 31, 33, 64]) assert.throws(() => new FieldCipher(randomBytes(size)), RangeError)
    assert.throws(() => cipher.encrypt(SECRET, ''), TypeError)
    assert.throws(() => cipher.decrypt(cipher.encrypt(SECRET, CONTEXT), ''), TypeError)
  })
})

describe('no plaintext leaves', () => {
  it('the sealed string holds the plaintext in no common encoding', () => {
    for (const plain of [SECRET, 'hunter2-hunter2', '{"token":"tk_live_51Habc"}']) {
      const sealed = cipher.encrypt(plain, CONTEXT)
      const bytes = Buffer.from(plain, 'utf8')
      for (const form of [plain, plain.toLowerCase(), bytes.toString('base64'), bytes.toString('base64url'), bytes.toString('hex')]) {
        assert.ok(!sealed.includes(form), `${plain} shows as ${form}`)
      }
      assert.ok(!Buffer.from(sealed.split(':')[4], 'base64url').includes(bytes))
    }
  })

  it('a sealed record shows none of its values', () => {
    const record = { user_id: 'u-1', totp_secret: SECRET, ntfy_token: 'tk_9f8e7d6c5b4a' }
    const sealed = sealRecord(cipher, record, 'mfa:u-1')
    for (const value of Object.values(record)) assert.ok(!sealed.includes(value), value)
  })
})

describe('a changed, moved or foreign value throws FieldDecryptError', () => {
  const sealed = cipher.encrypt(SECRET, CONTEXT)

  it('any single character of iv, tag or ciphertext changed', () => {
    let tried = 0
    for (let i = 'enc:v1:'.length; i < sealed.length; i++) {
      if (sealed[i] === ':') continue
      for (const replacement of [B64URL[(B64URL.indexOf(sealed[i]) + 1) % 64], B64URL[(B64URL.indexOf(sealed[i]) + 32) % 64]]) {
        const tampered = sealed.slice(0, i) + replacement + sealed.slice(i + 1)
        assert.throws(() => cipher.decrypt(tampered, CONTEXT), FieldDecryptError, `position ${i}`)
        tried++
      }
    }
    assert.ok(tried > 100)
  })

  it('any single bit of the decoded iv, tag or ciphertext flipped', () => {
    const [, , ...parts] = sealed.split(':')
    parts.forEach((part, which) => {
      const bytes = Buffer.from(part, 'base64url')
      for (let bit = 0; bit < bytes.length * 8; bit++) {
        const flipped = Buffer.from(bytes)
        flipped[bit >> 3] ^= 1 << (bit & 7)
        const copy = [...parts]
        copy[which] = flipped.toString('base64url')
        assert.throws(() => cipher.decrypt(`enc:v1:${copy.join(':')}`, CONTEXT), FieldDecryptError, `part ${which} bit ${bit}`)
      }
    })
  })

  it('truncated, extended, reordered or not sealed at all', () => {
    const [, , iv, tag, ct] = sealed.split(':')
    const broken = [
      sealed.slice(0, -1),
      `${sealed}A`,
      `${sealed}:`,
      `enc:v1:${tag}:${iv}:${ct}`,
      `enc:v1:${iv}:${tag}`,
      `enc:v2:${iv}:${tag}:${ct}`,
      `enc:v1:${iv}:${tag}:`,
      `enc:v1:${iv}:${tag}:${ct}${ct}`,
      SECRET,
      '',
    ]
    for (const value of broken) assert.throws(() => cipher.decrypt(value, CONTEXT), FieldDecryptError, value)
    assert.throws(() => cipher.decrypt(42 as unknown as string, CONTEXT), FieldDecryptError)
  })

  it('the value moved to another record or field (wrong context)', () => {
    for (const other of ['user:7b0c6a2f:totp', 'user:7b0c6a2e:backup', `${CONTEXT} `, 'USER:7B0C6A2E:TOTP']) {
      assert.throws(() => cipher.decrypt(sealed, other), FieldDecryptError, other)
    }
  })

  it('another key', () => {
    assert.throws(() => new FieldCipher(randomBytes(32)).decrypt(sealed, CONTEXT), FieldDecryptError)
  })

  it('the error says what went wrong and is an ordinary catchable Error', () => {
    try {
      new FieldCipher(randomBytes(32)).decrypt(sealed, CONTEXT)
      assert.fail('expected a throw')
    } catch (err) {
      assert.ok(err instanceof FieldDecryptError && err instanceof Error)
      assert.equal(err.name, 'FieldDecryptError')
      assert.match(err.message, /failed authentication/)
      assert.ok(!err.message.includes(SECRET))
    }
  })
})

describe('whole records (encryption_level: all)', () => {
  const record = { jti: 'a1', user_id: 'u-1', revoked: false, exp_at_iso: '2026-03-01T12:00:00.000Z', scopes: ['x', 'y'], n: 3 }

  it('round trip', () => {
    const sealed = sealRecord(cipher, record, 'session:a1')
    assert.ok(cipher.isSealed(sealed))
    assert.deepEqual(openRecord<typeof record>(cipher, sealed, 'session:a1'), record)
  })

  it('a record opened under another key name throws', () => {
    const sealed = sealRecord(cipher, record, 'session:a1')
    assert.throws(() => openRecord(cipher, sealed, 'session:a2'), FieldDecryptError)
  })

  it('a value with no JSON form is refused', () => {
    assert.throws(() => sealRecord(cipher, undefined, 'session:a1'), TypeError)
  })
})
