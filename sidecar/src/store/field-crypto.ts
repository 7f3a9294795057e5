/**
 * Secrets at rest (SPEC §10 `encryption_level`): AES-256-GCM under the key
 * derived from the master secret. `fields` seals single values (TOTP secrets,
 * backup-code material, API keys of sources, the ntfy token); `all` seals
 * whole records with sealRecord / openRecord.
 *
 * Sealed form: `enc:v1:<iv>:<tag>:<ciphertext>`, each part base64url.
 *
 * Guarantees: a fresh random 12-byte IV per value (never reused under one key,
 * which GCM cannot survive; so there is deliberately no way to inject it);
 * the `context` (e.g. `user:<id>:totp`) and the format version are bound as
 * additional authenticated data, so a sealed value copied into another record
 * or field does not open; a wrong key, a wrong context, a malformed value or
 * any flipped bit throws a FieldDecryptError the caller can catch: never a
 * plaintext, never a crash of the process.
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto'

const PREFIX = 'enc:v1:'
const KEY_BYTES = 32
const IV_BYTES = 12
const TAG_BYTES = 16
// 12 and 16 bytes are 16 and 22 base64url characters without padding.
const SEALED = /^enc:v1:([A-Za-z0-9_-]{16}):([A-Za-z0-9_-]{22}):([A-Za-z0-9_-]*)$/

/** A sealed value that cannot be opened: malformed, tampered with, or sealed under another key or context. */
export class FieldDecryptError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'FieldDecryptError'
  }
}

export class FieldCipher {
  readonly #key: Buffer

  /** `key`: 32 bytes, the encryption key derived from the master secret (identity/secrets.ts). */
  constructor(key: Buffer) {
    if (key.length !== KEY_BYTES) throw new RangeError(`field encryption key must be ${KEY_BYTES} bytes, got ${key.length}`)
    this.#key = Buffer.from(key) // a copy: the caller may reuse or zero its buffer
  }

  /** Seals `plain` for the record and field named by `context`. */
  encrypt(plain: string, context: string): string {
    const iv = randomBytes(IV_BYTES)
    const cipher = createCipheriv('aes-256-gcm', this.#key, iv, { authTagLength: TAG_BYTES })
    cipher.setAAD(additionalData(context))
    const ciphertext = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final()])
    const tag = cipher.getAuthTag()
    return `${PREFIX}${iv.toString('base64url')}:${tag.toString('base64url')}:${ciphertext.toString('base64url')}`
  }

  /** Opens a value sealed by encrypt() with the same key and context; throws FieldDecryptError otherwise. */
  decrypt(sealed: string, context: string): string {
    const aad = additionalData(context)
    const parts = typeof sealed === 'string' ? SEALED.exec(sealed) : null
    if (!parts) throw new FieldDecryptError(`not a sealed value (expected ${PREFIX}<iv>:<tag>:<ciphertext>) for ${context}`)
    const [iv, tag, ciphertext] = parts.slice(1).map(canonicalBase64url)
    if (!iv || !tag || !ciphertext) throw new FieldDecryptError(`sealed value for ${context} is not canonical base64url`)
    try {
      const decipher = createDecipheriv('aes-256-gcm', this.#key, iv, { authTagLength: TAG_BYTES })
      decipher.setAAD(aad)
      decipher.setAuthTag(tag)
      return Buffer.concat([decipher.update(ciphertext), decipher.final()]).toString('utf8')
    } catch {
      throw new FieldDecryptError(`sealed value for ${context} failed authentication: wrong key, wrong context, or tampered with`)
    }
  }

  /** Whether `value` has the sealed form (its shape only: decrypt() is what authenticates it). */
  isSealed(value: unknown): boolean {
    return typeof value === 'string' && SEALED.test(value)
  }
}

/** `encryption_level: all`: the whole record, as JSON, sealed under `context`. */
export function sealRecord<T>(cipher: FieldCipher, record: T, context: string): string {
  const json = JSON.stringify(record)
  if (json === undefined) throw new TypeError('record has no JSON form')
  return cipher.encrypt(json, context)
}

/** Opens a record sealed by sealRecord(); throws FieldDecryptError as decrypt() does. */
export function openRecord<T>(cipher: FieldCipher, sealed: string, context: string): T {
  return JSON.parse(cipher.decrypt(sealed, context)) as T
}

/**
 * Decodes only the one spelling encrypt() writes. Node's decoder ignores the
 * unused low bits of a final character, so without this check a changed
 * character could still open: harmless to the cipher, but a sealed string
 * would then not be the only spelling of its value.
 */
function canonicalBase64url(text: string): Buffer | null {
  const bytes = Buffer.from(text, 'base64url')
  return bytes.toString('base64url') === text ? bytes : null
}

function additionalData(context: string): Buffer {
  // An empty context would bind nothing, letting a value move between records unnoticed.
  if (typeof context !== 'string' || context === '') throw new TypeError('field encryption needs a non-empty context')
  return Buffer.from(`${PREFIX}${context}`, 'utf8')
}
