/**
 * The master secret and the keys derived from it (HKDF-SHA256, SPEC §10).
 * Source: env AUTHSVC_SECRET, else `authsvc_secret.key` in the data dir,
 * generated once (0600). The same secret gives the same keys, so a restart
 * never logs anybody out.
 */
import { hkdfSync, randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { writeFileAtomic } from '../store/atomic-file.js'

export interface DerivedKeys {
  jwt: Uint8Array
  encryption: Buffer
  backupCodes: Buffer
  /** the keyed hash of names in the audit log under `encryption_level: all` */
  auditNames: Buffer
  /** written to a shared store by the first instance; one started with another secret refuses to start (store/open.ts) */
  storeCheck: string
  /** the keyed hash of usernames in the store's name index (identity/users.ts) */
  nameIndex: Buffer
}

export function loadMasterSecret(dataDir: string, env: NodeJS.ProcessEnv): Buffer {
  const fromEnv = env.AUTHSVC_SECRET
  if (fromEnv !== undefined && fromEnv !== '') {
    if (fromEnv.length < 32) throw new Error('AUTHSVC_SECRET must be at least 32 characters')
    return Buffer.from(fromEnv, 'utf8')
  }
  const path = join(dataDir, 'authsvc_secret.key')
  try {
    const text = readFileSync(path, 'utf8').trim()
    if (text.length < 43) throw new Error(`${path} is too short; delete it to generate a new one (logs everybody out)`)
    return Buffer.from(text, 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
  }
  const secret = randomBytes(32).toString('base64url')
  writeFileAtomic(path, `${secret}\n`, 0o600)
  return Buffer.from(secret, 'utf8')
}

export function deriveKeys(master: Buffer): DerivedKeys {
  const derive = (info: string) => Buffer.from(hkdfSync('sha256', master, Buffer.alloc(0), info, 32))
  return { jwt: new Uint8Array(derive('authsvc/jwt/v1')), encryption: derive('authsvc/encryption/v1'), backupCodes: derive('authsvc/backup-codes/v1'), auditNames: derive('authsvc/audit-names/v1'), storeCheck: derive('authsvc/store-check/v1').toString('base64url'), nameIndex: derive('authsvc/name-index/v1') }
}
