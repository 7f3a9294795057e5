/**
 * Open WebSockets follow their credential: a socket stays open only while what
 * opened it would still be let in. Logout, a revoked, expired or idle session
 * (session_idle_minutes: a socket is no use of it), a revoked token, a
 * disabled or deleted user, guest login turned off (a guest's socket) close it
 * with 4401; a changed role, or an IP list that now refuses one of the
 * addresses it came from, with 4403.
 *
 * Rather than hooking every path that can end a credential, the registry
 * re-checks each open socket's credential against the live records a few times
 * a second while any socket is open (nothing runs while none is), so no way of
 * ending access can be forgotten. Each close is sent to the plugin (close_ws).
 */
import type { Principal } from '../identity/principal.js'

export interface CredentialState {
  /** 'ok', or the close code and reason that apply now */
  check(entry: SocketEntry): 'ok' | { code: number; reason: string }
}

export interface SocketEntry {
  tag: string
  userId: string | null
  role: string
  authType: Principal['authType']
  credentialId?: string
  /** the `clientId` it was opened with: its binding holds while the socket is open (client-ids.ts) */
  clientId?: string
  /** every address the upgrade may have come from (after trusted proxies): a ban of any closes it */
  addresses?: string[]
  /** opened with preview frames unchecked (the content-safety policy on, the user without sfw_check) */
  previewsUnchecked?: boolean
}

export const CHECK_INTERVAL_MS = 250
const MAX_SOCKETS = 10_000
/** open WebSockets of one principal (a user, a guest session, an anonymous role): tabs and devices, not floods */
export const MAX_PER_PRINCIPAL = 64

const principalOf = (e: SocketEntry): string => e.userId ?? e.credentialId ?? `role:${e.role}`

export class LiveSockets {
  private readonly entries = new Map<string, SocketEntry & { at: number }>()
  /** open sockets per clientId */
  private readonly byClientId = new Map<string, number>()
  private timer: NodeJS.Timeout | null = null

  constructor(
    private readonly state: CredentialState,
    private readonly close: (tags: string[], code: number, reason: string) => void,
    private readonly now: () => number = Date.now,
  ) {}

  get size(): number {
    return this.entries.size
  }

  /**
   * Watches a socket about to open; false (the upgrade is refused) when the principal already
   * has MAX_PER_PRINCIPAL open or the registry is full. Never evicts: an evicted socket would
   * stay open after its credential ended.
   */
  register(entry: SocketEntry): boolean {
    if (this.entries.size >= MAX_SOCKETS) return false
    const who = principalOf(entry)
    let mine = 0
    for (const e of this.entries.values()) if (principalOf(e) === who && ++mine >= MAX_PER_PRINCIPAL) return false
    this.forget(entry.tag) // the same socket handed back again (a reconnect's hello): counted once
    this.entries.set(entry.tag, { ...entry, at: this.now() })
    if (entry.clientId !== undefined) this.byClientId.set(entry.clientId, (this.byClientId.get(entry.clientId) ?? 0) + 1)
    if (this.timer === null) {
      this.timer = setInterval(() => this.sweep(), CHECK_INTERVAL_MS)
      this.timer.unref()
    }
    return true
  }

  /**
   * The plugin's open sockets after a (re)connect: entries this sidecar handed out, perhaps
   * before a restart. Checked at once, so access that ended meanwhile closes them now.
   */
  adopt(entries: unknown[]): void {
    for (const e of entries) {
      const x = e as Partial<SocketEntry>
      if (typeof x?.tag !== 'string' || typeof x.role !== 'string' || !(x.userId === null || typeof x.userId === 'string')) continue
      if (x.authType !== 'session' && x.authType !== 'api_token' && x.authType !== 'anonymous') continue
      if (x.credentialId !== undefined && typeof x.credentialId !== 'string') continue
      if (x.addresses !== undefined && !(Array.isArray(x.addresses) && x.addresses.every((a) => typeof a === 'string'))) continue
      if (x.clientId !== undefined && typeof x.clientId !== 'string') continue
      this.register({
        tag: x.tag, userId: x.userId, role: x.role, authType: x.authType,
        ...(x.credentialId !== undefined ? { credentialId: x.credentialId } : {}),
        ...(x.addresses !== undefined ? { addresses: x.addresses } : {}),
        ...(x.clientId !== undefined ? { clientId: x.clientId } : {}),
        ...(x.previewsUnchecked === true ? { previewsUnchecked: true } : {}),
      })
    }
    if (this.entries.size > 0) this.sweep()
  }

  /** The plugin says the socket is gone (its handler returned). */
  closed(tag: string): void {
    this.forget(tag)
    this.stopIfIdle()
  }

  /** Whether an open socket was opened with this clientId. */
  usesClientId(clientId: string): boolean {
    return this.byClientId.has(clientId)
  }

  private forget(tag: string): void {
    const entry = this.entries.get(tag)
    if (entry === undefined) return
    this.entries.delete(tag)
    if (entry.clientId === undefined) return
    const left = (this.byClientId.get(entry.clientId) ?? 1) - 1
    if (left > 0) this.byClientId.set(entry.clientId, left)
    else this.byClientId.delete(entry.clientId)
  }

  /** Closes every socket whose credential no longer admits it; returns how many. */
  sweep(): number {
    const byCode = new Map<string, string[]>()
    for (const entry of this.entries.values()) {
      const verdict = this.state.check(entry)
      if (verdict === 'ok') continue
      const key = `${verdict.code} ${verdict.reason}`
      const tags = byCode.get(key) ?? []
      tags.push(entry.tag)
      byCode.set(key, tags)
    }
    let closed = 0
    for (const [key, tags] of byCode) {
      const space = key.indexOf(' ')
      this.close(tags, Number(key.slice(0, space)), key.slice(space + 1))
      for (const tag of tags) this.forget(tag)
      closed += tags.length
    }
    this.stopIfIdle()
    return closed
  }

  private stopIfIdle(): void {
    if (this.entries.size === 0 && this.timer !== null) {
      clearInterval(this.timer)
      this.timer = null
    }
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer)
    this.timer = null
  }
}
