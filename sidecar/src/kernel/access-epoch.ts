/**
 * The version of everything a decision reads besides the request itself: users, sessions,
 * API tokens, MFA records, roles, settings, IP lists, model grants; and of what the memo of a
 * keepable behaviour's filter names: whose prompts and files are whose, the model lists and
 * the host's model facts.
 *
 * The plugin may reuse a pass decision for the very same request description for a short
 * time (`cache` of a pass, docs/architecture.md). That is safe only because every change
 * of those inputs bumps this epoch and the bump is pushed to the plugin (`forget`) at
 * once, synchronously, at the moment the change becomes visible to decisions: the push is
 * on the decision socket before the change's own HTTP answer leaves, so no request made
 * after a change is ever passed on a decision made before it.
 */
export class AccessEpoch {
  private current = 0
  private readonly listeners: Array<(epoch: number) => void> = []

  get value(): number {
    return this.current
  }

  bump(): void {
    this.current++
    for (const listener of this.listeners) listener(this.current)
  }

  onBump(listener: (epoch: number) => void): void {
    this.listeners.push(listener)
  }
}
