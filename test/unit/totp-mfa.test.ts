/**
 * The second factor's primitives (SPEC §5.3).
 * TOTP: the RFC 6238 appendix B SHA-1 vectors (their last six digits), a code
 * accepted at most once and never one of an older step than the last accepted,
 * exactly ±1 step of drift, malformed input refused without throwing, and
 * agreement with oathtool where it is installed. Expected codes come from an
 * independent HOTP on node:crypto, not from otplib.
 * Backup codes: shape and alphabet, keyed hashes only, typed variants accepted,
 * single use, every kind of junk refused without throwing.
 */
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { createHmac, randomBytes } from 'node:crypto'
import { existsSync } from 'node:fs'
import { generateTotpSecret, provisioningUri, verifyTotp } from '../../sidecar/src/identity/totp.js'
import {
  BACKUP_CODE_ALPHABET,
  consumeBackupCode,
  generateBackupCodes,
  hashBackupCode,
  normaliseBackupCode,
} from '../../sidecar/src/identity/backup-codes.js'

const BASE32 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567'

function base32Encode(bytes: Buffer): string {
  let bits = ''
  for (const byte of bytes) bits += byte.toString(2).padStart(8, '0')
  let out = ''
  for (let i = 0; i < bits.length; i += 5) out += BASE32[parseInt(bits.slice(i, i + 5).padEnd(5, '0'), 2)]
  return out
}

function base32Decode(text: string): Buffer {
  let bits = ''
  for (const char of text.replace(/=+$/, '')) {
    const value = BASE32.indexOf(char.toUpperCase())
    assert.ok(value >= 0, `not base32: ${char}`)
    bits += value.toString(2).padStart(5, '0')
  }
  const bytes: number[] = []
  for (let i = 0; i + 8 <= bits.length; i += 8) bytes.push(parseInt(bits.slice(i, i + 8), 2))
  return Buffer.from(bytes)
}

/** RFC 4226 HOTP-SHA1 at `step`, six digits: the reference the module is checked against. */
function codeAt(secret: string, step: number): string {
  const counter = Buffer.alloc(8)
  counter.writeBigUInt64BE(BigInt(step))
  const mac = createHmac('sha1', base32Decode(secret)).update(counter).digest()
  const offset = mac[mac.length - 1] & 0xf
  return String((mac.readUInt32BE(offset) & 0x7fffffff) % 1_000_000).padStart(6, '0')
}

const RFC_SECRET = base32Encode(Buffer.from('12345678901234567890', 'ascii'))
/** RFC 6238 appendix B, SHA-1 column (8 digits): unix time → TOTP. */
const RFC_VECTORS: Array<[number, string]> = [
  [59, '94287082'],
  [1111111109, '07081804'],
  [1111111111, '14050471'],
  [1234567890, '89005924'],
  [2000000000, '69279037'],
  [20000000000, '65353130'],
]
const STEP_MS = 30_000
/** Mid-step instant in step 56_666_666 (2023-11-14). */
const NOW = 56_666_666 * STEP_MS + 12_345
const NOW_STEP = 56_666_666

describe('TOTP secrets and provisioning URIs', () => {
  it('a secret is 160 random bits in base32', () => {
    const secret = generateTotpSecret()
    assert.match(secret, /^[A-Z2-7]{32}$/)
    assert.equal(base32Decode(secret).length, 20)
    assert.notEqual(generateTotpSecret(), secret)
  })

  it('the URI names issuer and account and carries the secret', () => {
    const secret = generateTotpSecret()
    const uri = new URL(provisioningUri(secret, 'alice'))
    assert.equal(uri.protocol, 'otpauth:')
    assert.equal(uri.host, 'totp')
    assert.equal(decodeURIComponent(uri.pathname), '/authsvc:alice')
    assert.equal(uri.searchParams.get('secret'), secret)
    assert.equal(uri.searchParams.get('issuer'), 'authsvc')
  })

  it('an issuer with spaces is escaped, a colon in issuer or account is refused', () => {
    const secret = generateTotpSecret()
    const uri = new URL(provisioningUri(secret, 'bob.smith', 'My Comfy'))
    assert.equal(decodeURIComponent(uri.pathname), '/My Comfy:bob.smith')
    assert.equal(uri.searchParams.get('issuer'), 'My Comfy')
    assert.throws(() => provisioningUri(secret, 'evil:name'), RangeError)
    assert.throws(() => provisioningUri(secret, 'alice', 'a:b'), RangeError)
  })
})

describe('RFC 6238 appendix B vectors (SHA-1, last six digits)', () => {
  it('the reference HOTP reproduces the RFC values', () => {
    for (const [time, code8] of RFC_VECTORS) assert.equal(codeAt(RFC_SECRET, Math.floor(time / 30)), code8.slice(-6), `t=${time}`)
  })

  for (const [time, code8] of RFC_VECTORS) {
    it(`t=${time}: ${code8.slice(-6)} is accepted at its step`, () => {
      assert.deepEqual(verifyTotp(RFC_SECRET, code8.slice(-6), time * 1000, null), { valid: true, timeStep: Math.floor(time / 30) })
    })
  }

  it('the eight-digit form and a neighbouring value are refused', () => {
    assert.deepEqual(verifyTotp(RFC_SECRET, '94287082', 59_000, null), { valid: false })
    assert.deepEqual(verifyTotp(RFC_SECRET, '287083', 59_000, null), { valid: false })
  })
})

describe('a TOTP code is accepted at most once, never an older step (SPEC §5.3)', () => {
  const secret = generateTotpSecret()

  it('the same code again is refused, within the same step and later in the window', () => {
    const code = codeAt(secret, NOW_STEP)
    const first = verifyTotp(secret, code, NOW, null)
    assert.deepEqual(first, { valid: true, timeStep: NOW_STEP })
    assert.deepEqual(verifyTotp(secret, code, NOW, NOW_STEP), { valid: false })
    assert.deepEqual(verifyTotp(secret, code, NOW + 10_000, NOW_STEP), { valid: false })
    assert.deepEqual(verifyTotp(secret, code, NOW + STEP_MS, NOW_STEP), { valid: false })
  })

  it('a code of an older step is refused once a newer one was accepted', () => {
    const ahead = verifyTotp(secret, codeAt(secret, NOW_STEP + 1), NOW, null)
    assert.deepEqual(ahead, { valid: true, timeStep: NOW_STEP + 1 })
    assert.deepEqual(verifyTotp(secret, codeAt(secret, NOW_STEP), NOW, NOW_STEP + 1), { valid: false })
    assert.deepEqual(verifyTotp(secret, codeAt(secret, NOW_STEP - 1), NOW, NOW_STEP + 1), { valid: false })
  })

  it('the code of the next step is accepted after one of this step', () => {
    assert.deepEqual(verifyTotp(secret, codeAt(secret, NOW_STEP + 1), NOW + STEP_MS, NOW_STEP), { valid: true, timeStep: NOW_STEP + 1 })
  })

  it('a last accepted step beyond the window (clock stepped back) refuses without throwing', () => {
    assert.deepEqual(verifyTotp(secret, codeAt(secret, NOW_STEP), NOW, NOW_STEP + 5), { valid: false })
    assert.deepEqual(verifyTotp(secret, codeAt(secret, NOW_STEP + 1), NOW, NOW_STEP + 1), { valid: false })
  })
})

describe('drift window: ±1 step, not ±2', () => {
  const secret = generateTotpSecret()
  const instants = { 'start of step': NOW_STEP * STEP_MS, 'mid step': NOW, 'end of step': NOW_STEP * STEP_MS + STEP_MS - 1 }

  for (const [name, now] of Object.entries(instants)) {
    it(`${name}: steps -1, 0, +1 accepted; -2, +2 refused`, () => {
      for (const offset of [-1, 0, 1]) {
        assert.deepEqual(verifyTotp(secret, codeAt(secret, NOW_STEP + offset), now, null), { valid: true, timeStep: NOW_STEP + offset }, `offset ${offset}`)
      }
      for (const offset of [-2, 2]) {
        assert.deepEqual(verifyTotp(secret, codeAt(secret, NOW_STEP + offset), now, null), { valid: false }, `offset ${offset}`)
      }
    })
  }
})

describe('malformed codes are refused without throwing', () => {
  const secret = RFC_SECRET
  const junk: unknown[] = ['', '28708', '2870820', '94287082', 'abcdef', ' 287082', '287082 ', '287 082', '287-082', '２８７０８２', '+28708', '-28708', '2.8708', '0x1234', null, undefined, 287082, {}, ['287082']]

  for (const code of junk) {
    it(`${JSON.stringify(code) ?? String(code)}`, () => {
      assert.deepEqual(verifyTotp(secret, code, 59_000, null), { valid: false })
    })
  }
})

const OATHTOOL = '/usr/bin/oathtool'

describe('agreement with oathtool', { skip: existsSync(OATHTOOL) ? false : 'oathtool is not installed' }, () => {
  const oathtool = (secret: string, unixSeconds: number) =>
    execFileSync(OATHTOOL, ['--totp', '-b', secret, '-N', `@${unixSeconds}`], { encoding: 'utf8' }).trim()

  it('oathtool gives the RFC values', () => {
    for (const [time, code8] of RFC_VECTORS) assert.equal(oathtool(RFC_SECRET, time), code8.slice(-6), `t=${time}`)
  })

  it("oathtool's codes for a fresh secret are accepted at their time", () => {
    const secret = generateTotpSecret()
    for (const seconds of [59, 1_000_000_007, 1_700_000_000, 2_000_000_029, 4_102_444_800]) {
      const result = verifyTotp(secret, oathtool(secret, seconds), seconds * 1000, null)
      assert.deepEqual(result, { valid: true, timeStep: Math.floor(seconds / 30) }, `t=${seconds}`)
    }
  })
})

describe('backup codes (SPEC §5.3)', () => {
  const key = randomBytes(32)
  const SHAPE = /^[23456789ABCDEFGHJKMNPQRSTUVWXYZ]{10}$/

  it('ten distinct codes of ten characters from the unambiguous alphabet', () => {
    const codes = generateBackupCodes()
    assert.equal(codes.length, 10)
    assert.equal(new Set(codes).size, 10)
    for (const code of codes) assert.match(code, SHAPE)
    assert.equal(generateBackupCodes(3).length, 3)
  })

  it('the alphabet has no look-alikes, and every character of it gets used', () => {
    assert.doesNotMatch(BACKUP_CODE_ALPHABET, /[01OIL]/)
    const seen = new Set(generateBackupCodes(500).join(''))
    assert.deepEqual([...seen].sort().join(''), [...BACKUP_CODE_ALPHABET].sort().join(''))
  })

  it('the stored form is a keyed HMAC-SHA256, hex, that does not contain the code', () => {
    const [code] = generateBackupCodes(1)
    const hash = hashBackupCode(key, code)
    assert.match(hash, /^[0-9a-f]{64}$/)
    assert.equal(hash, createHmac('sha256', key).update(code).digest('hex'))
    assert.notEqual(hashBackupCode(randomBytes(32), code), hash)
    assert.ok(!hash.toUpperCase().includes(code))
  })

  it('typed variants (case, spaces, dashes) hash alike', () => {
    const canonical = hashBackupCode(key, 'ABCDEFGHJK')
    for (const typed of ['abcd-efgh-jk', 'ABCDE FGHJK', ' abcdefghjk ', 'AbCdE-fGhJk']) {
      assert.equal(normaliseBackupCode(typed), 'ABCDEFGHJK')
      assert.equal(hashBackupCode(key, typed), canonical, typed)
    }
  })

  it('a short key is refused', () => {
    assert.throws(() => hashBackupCode(Buffer.alloc(16), 'ABCDEFGHJK'), RangeError)
  })

  it('a code works once; the remaining list lacks exactly its hash', () => {
    const codes = generateBackupCodes()
    const hashes = codes.map((c) => hashBackupCode(key, c))
    const frozen = [...hashes]
    const first = consumeBackupCode(key, hashes, codes[3])
    assert.ok(first.ok)
    assert.deepEqual(first.remaining, hashes.filter((_, i) => i !== 3))
    assert.deepEqual(hashes, frozen, 'the input list is not mutated')
    assert.deepEqual(consumeBackupCode(key, first.remaining, codes[3]), { ok: false })
    const other = consumeBackupCode(key, first.remaining, codes[7])
    assert.ok(other.ok)
    assert.equal(other.remaining.length, 8)
  })

  it('a typed variant of a code is accepted', () => {
    const [code] = generateBackupCodes(1)
    const typed = `${code.slice(0, 4)}-${code.slice(4, 8)}-${code.slice(8)}`.toLowerCase()
    const result = consumeBackupCode(key, [hashBackupCode(key, code)], typed)
    assert.deepEqual(result, { ok: true, remaining: [] })
  })

  it('a code hashed under another key, a wrong code and junk are refused without throwing', () => {
    const codes = generateBackupCodes()
    const hashes = codes.map((c) => hashBackupCode(key, c))
    assert.deepEqual(consumeBackupCode(randomBytes(32), hashes, codes[0]), { ok: false })
    const wrong = generateBackupCodes(20).find((c) => !codes.includes(c)) as string
    assert.deepEqual(consumeBackupCode(key, hashes, wrong), { ok: false })
    for (const junk of ['', 'ABCDEFGHJ', 'ABCDEFGHJKM', 'ABCDEFGH0K', 'x'.repeat(10_000), null, undefined, 42, {}]) {
      assert.deepEqual(consumeBackupCode(key, hashes, junk), { ok: false }, String(junk))
    }
    assert.deepEqual(consumeBackupCode(key, [], codes[0]), { ok: false })
  })

  it('malformed stored hashes never match and never throw', () => {
    const [code] = generateBackupCodes(1)
    const good = hashBackupCode(key, code)
    const result = consumeBackupCode(key, ['', 'zz', good.slice(0, 62), `${good}00`, good], code)
    assert.deepEqual(result, { ok: true, remaining: ['', 'zz', good.slice(0, 62), `${good}00`] })
  })
})
