/**
 * A request's query as the host reads it. ComfyUI's handlers read `request.rel_url.query` (yarl),
 * and the plugin sends the raw query string it parsed that from. Two readings differ from WHATWG's
 * `URLSearchParams` on the same text, and each difference let a caller be decided on one value
 * while the host acted on another:
 * - a leading `?` (a request target `/ws??clientId=a&clientId=b`): URLSearchParams drops it, yarl
 *   keeps it in the first key, so the sidecar read `clientId=a` and the host `clientId=b`;
 * - escapes that are not UTF-8 (`%E9`): URLSearchParams and yarl 1.8 make U+FFFD of them, yarl 1.19
 *   keeps them as written. No one reading fits both hosts, so such a query is refused
 *   (`hostQueryProblem`) before anything reads it.
 * Everything else (`+` as a space, `&` only as the separator, `%zz` kept as written) reads alike.
 */
/** Runs of `%XX` escapes (what Python's unquote and yarl decode together, as bytes). */
export const ESCAPE_RUNS = /(?:%[0-9A-Fa-f]{2})+/g
const STRICT_UTF8 = new TextDecoder('utf-8', { fatal: true })

/** The bytes a run of `%XX` escapes stands for. */
export const escapedBytes = (run: string): Buffer => Buffer.from(run.replace(/%/g, ''), 'hex')

/** The query's pairs as yarl reads them (its leading `?` kept in the first key). */
export function hostQuery(raw: string): URLSearchParams {
  return new URLSearchParams(raw.startsWith('?') ? `&${raw}` : raw)
}

/** Why the host's readings of this query may differ (escapes that are not UTF-8), or null. */
export function hostQueryProblem(raw: string): string | null {
  if (!raw.includes('%')) return null
  for (const [run] of raw.matchAll(ESCAPE_RUNS)) {
    try {
      STRICT_UTF8.decode(escapedBytes(run))
    } catch {
      return 'The query is not valid percent-encoded UTF-8'
    }
  }
  return null
}
