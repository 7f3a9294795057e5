/**
 * WebSocket clientIds and their owners. ComfyUI sends a prompt's events to the
 * socket of its client_id and lets any new socket take over an id, so an id is
 * bound to the first owner that used it (on /ws or in a prompt) and refused to
 * everyone else (CLIENT_ID_TAKEN).
 *
 * Bounded per owner: a principal that floods new ids only ever evicts its own
 * oldest bindings, so it can never free someone else's. Kept in memory: ids are
 * random per browser tab and a restart of the sidecar forgets them (decisions.md).
 */
export const CLIENT_IDS_PER_OWNER = 256

export class ClientIdBindings {
  private readonly owners = new Map<string, string>()
  private readonly byOwner = new Map<string, Set<string>>()

  claim(clientId: string, owner: string): boolean {
    const current = this.owners.get(clientId)
    if (current !== undefined) return current === owner
    let mine = this.byOwner.get(owner)
    if (!mine) this.byOwner.set(owner, (mine = new Set()))
    if (mine.size >= CLIENT_IDS_PER_OWNER) {
      const oldest = mine.values().next().value as string
      mine.delete(oldest)
      this.owners.delete(oldest)
    }
    mine.add(clientId)
    this.owners.set(clientId, owner)
    return true
  }
}
