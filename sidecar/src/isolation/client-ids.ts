/**
 * WebSocket clientIds and their owners. ComfyUI sends a prompt's events to the
 * socket of its client_id and lets any new socket take over an id, so an id is
 * bound to the first owner that used it (on /ws or in a prompt) and refused to
 * everyone else (CLIENT_ID_TAKEN).
 *
 * - Kept in the store (`client_id:` records), memory first: a restarted sidecar still
 *   refuses an id to anyone but its owner.
 * - Ids a client chose are bounded per owner (CLIENT_IDS_PER_OWNER): a principal that
 *   floods new ids only ever evicts its own oldest bindings, never someone else's.
 * - Ids the gate minted for a prompt without one (`authsvc-<uuid>`) use no slot: they
 *   live exactly as long as their prompt's record (Ownership forgets it when the host
 *   forgets the prompt), so prompts without a client id never push out an owner's tabs.
 * - A chosen id also goes when the host forgets the last prompt that named it, unless a socket
 *   opened with it is still open (`heldOpen`: its owner's tab would otherwise be up for anyone to
 *   take over); one that only ever opened sockets stays until its owner's slots push it out.
 */
import type { Collection } from '../store/collection.js'

export const CLIENT_IDS_PER_OWNER = 256

export interface ClientIdRecord {
  client_id: string
  owner: string
  /** minted by the gate for one prompt: no slot, gone with the prompt */
  minted: boolean
  at_iso: string
}

export class ClientIdBindings {
  /** an owner's chosen ids, oldest first */
  private readonly chosenByOwner = new Map<string, Set<string>>()
  /** whether an open socket was opened with this id (the live sockets say, once they exist) */
  heldOpen: (clientId: string) => boolean = () => false

  constructor(
    private readonly records: Collection<ClientIdRecord>,
    private readonly clock: () => number = Date.now,
  ) {
    const chosen = [...records.values()].filter((r) => !r.minted).sort((a, b) => a.at_iso.localeCompare(b.at_iso))
    for (const r of chosen) this.slotsOf(r.owner).add(r.client_id)
  }

  private slotsOf(owner: string): Set<string> {
    let mine = this.chosenByOwner.get(owner)
    if (!mine) this.chosenByOwner.set(owner, (mine = new Set()))
    return mine
  }

  ownerOf(clientId: string): string | undefined {
    return this.records.get(clientId)?.owner
  }

  /** An id the client chose: true when it is (now) the owner's, false when somebody else has it. */
  claim(clientId: string, owner: string): boolean {
    const current = this.records.get(clientId)
    if (current !== undefined) {
      if (current.owner !== owner) return false
      // used again: the newest of the owner's, the last to be pushed out
      const mine = this.chosenByOwner.get(owner)
      if (mine?.delete(clientId) === true) mine.add(clientId)
      return true
    }
    const mine = this.slotsOf(owner)
    if (mine.size >= CLIENT_IDS_PER_OWNER) {
      // the oldest that no open socket holds (a user has fewer open sockets than slots: live-sockets.ts)
      for (const old of mine) {
        if (this.heldOpen(old)) continue
        this.drop(old)
        break
      }
    }
    mine.add(clientId)
    this.store({ client_id: clientId, owner, minted: false, at_iso: new Date(this.clock()).toISOString() })
    return true
  }

  /** An id the gate made for one prompt of `owner` (random: nobody else can hold it). */
  bindMinted(clientId: string, owner: string): void {
    this.store({ client_id: clientId, owner, minted: true, at_iso: new Date(this.clock()).toISOString() })
  }

  /** The host forgot a prompt that named this id; `inUse`: another known prompt still does. */
  promptForgotten(clientId: string, inUse: boolean): void {
    if (!inUse && !this.heldOpen(clientId)) this.drop(clientId)
  }

  get size(): number {
    return this.records.size
  }

  private drop(clientId: string): void {
    const record = this.records.get(clientId)
    if (record === undefined) return
    this.chosenByOwner.get(record.owner)?.delete(clientId)
    if (this.chosenByOwner.get(record.owner)?.size === 0) this.chosenByOwner.delete(record.owner)
    // memory first and retried until stored: the binding is gone for decisions at once
    this.records.narrowRemove(clientId).catch(() => {})
  }

  private store(record: ClientIdRecord): void {
    // memory first (the decision goes on at once); a refused write is retried in the background
    // by the collection, and the binding holds in memory meanwhile
    this.records.narrow(record.client_id, record).catch(() => {})
  }
}
