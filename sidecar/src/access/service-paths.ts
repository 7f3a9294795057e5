/**
 * The path space the service owns (SPEC: "Route segment owned by the service: `authsvc`"):
 * `/authsvc` and `/api/authsvc`, and everything under them. A request there is the service's
 * whether or not one of its routes matches: it is answered by the service (its route, or its
 * JSON 400/404/405), never passed on to the host, whose text errors (and, for a long parameter,
 * 500) would otherwise answer for it.
 *
 * Judged on the meaning of the path, not its spelling: each segment is percent-decoded (a
 * segment that does not decode is taken as written) and empty segments are dropped, so
 * `/%61uthsvc/x`, `//authsvc/x` and `/authsvc%2Fx` are the service's too.
 */
const PREFIXES: ReadonlyArray<readonly string[]> = [['authsvc'], ['api', 'authsvc']]

function decodedSegments(rawPath: string): string[] {
  const decoded = rawPath.split('/').map((segment) => {
    try {
      return decodeURIComponent(segment)
    } catch {
      return segment
    }
  })
  return decoded.join('/').split('/').filter((segment) => segment !== '')
}

export function isServicePath(rawPath: string): boolean {
  const segments = decodedSegments(rawPath)
  return PREFIXES.some((prefix) => prefix.every((segment, i) => segments[i] === segment))
}

/** Whether the whole raw path is valid percent-encoded UTF-8 (what the sidecar's router can read). */
export function isDecodablePath(rawPath: string): boolean {
  try {
    decodeURIComponent(rawPath)
    return true
  } catch {
    return false
  }
}
