/**
 * Reading and editing JSON text without re-serialising it.
 *
 * ComfyUI's JSON carries integers beyond 2^53 (64-bit seeds, `max` values in
 * /object_info); a JSON.parse/stringify round trip changes them. These helpers
 * find where members and elements sit in the text, so an edit replaces or adds
 * exactly the bytes it means to and every other byte stays as it was: numbers
 * of any size, key order, `\u` escapes, whitespace.
 *
 * The input must already be valid JSON (callers check with JSON.parse first, or
 * trust the host's own answer); the scanner then only needs to find boundaries.
 */

/** Where one member of an object sits: `"key": value`. */
export interface MemberSpan {
  key: string
  /** the opening quote of the key */
  start: number
  valueStart: number
  /** one past the value's last character */
  valueEnd: number
}

export interface ElementSpan {
  start: number
  end: number
}

const STRUCTURAL = /["[\]{}]/g

function skipSpace(text: string, i: number): number {
  for (;;) {
    const c = text.charCodeAt(i)
    if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) i++
    else return i
  }
}

/** Index one past the closing quote of the string whose opening quote is at `i`. */
export function stringEnd(text: string, i: number): number {
  let j = i + 1
  for (;;) {
    const q = text.indexOf('"', j)
    if (q < 0) throw new SyntaxError('unterminated string')
    let backslashes = 0
    for (let k = q - 1; text.charCodeAt(k) === 0x5c; k--) backslashes++
    if (backslashes % 2 === 0) return q + 1
    j = q + 1
  }
}

/** Index one past the value that starts at `i` (no leading whitespace). */
export function valueEnd(text: string, i: number): number {
  const c = text[i]
  if (c === '"') return stringEnd(text, i)
  if (c === '{' || c === '[') {
    let depth = 0
    STRUCTURAL.lastIndex = i
    for (;;) {
      const m = STRUCTURAL.exec(text)
      if (m === null) throw new SyntaxError('unterminated container')
      const ch = m[0]
      if (ch === '"') {
        STRUCTURAL.lastIndex = stringEnd(text, m.index)
      } else if (ch === '{' || ch === '[') {
        depth++
      } else {
        depth--
        if (depth === 0) return m.index + 1
      }
    }
  }
  // a number, true, false or null: runs to the next delimiter
  let j = i
  for (;;) {
    const d = text.charCodeAt(j)
    if (j >= text.length || d === 0x2c || d === 0x7d || d === 0x5d || d === 0x20 || d === 0x0a || d === 0x0d || d === 0x09) return j
    j++
  }
}

/** The members of the object whose `{` is at `start`, in text order (duplicates kept), and the index of its `}`. */
export function objectMembers(text: string, start: number): { members: MemberSpan[]; close: number } {
  if (text[start] !== '{') throw new SyntaxError('not an object')
  const members: MemberSpan[] = []
  let i = skipSpace(text, start + 1)
  if (text[i] === '}') return { members, close: i }
  for (;;) {
    const keyStart = i
    const keyEnd = stringEnd(text, keyStart)
    const key = JSON.parse(text.slice(keyStart, keyEnd)) as string
    i = skipSpace(text, keyEnd)
    if (text[i] !== ':') throw new SyntaxError('expected :')
    const valueStart = skipSpace(text, i + 1)
    const end = valueEnd(text, valueStart)
    members.push({ key, start: keyStart, valueStart, valueEnd: end })
    i = skipSpace(text, end)
    if (text[i] === '}') return { members, close: i }
    if (text[i] !== ',') throw new SyntaxError('expected , or }')
    i = skipSpace(text, i + 1)
  }
}

/** The elements of the array whose `[` is at `start`. */
export function arrayElements(text: string, start: number): { elements: ElementSpan[]; close: number } {
  if (text[start] !== '[') throw new SyntaxError('not an array')
  const elements: ElementSpan[] = []
  let i = skipSpace(text, start + 1)
  if (text[i] === ']') return { elements, close: i }
  for (;;) {
    const end = valueEnd(text, i)
    elements.push({ start: i, end })
    i = skipSpace(text, end)
    if (text[i] === ']') return { elements, close: i }
    if (text[i] !== ',') throw new SyntaxError('expected , or ]')
    i = skipSpace(text, i + 1)
  }
}

/** The start of the top-level value (after leading whitespace). */
export const rootStart = (text: string): number => skipSpace(text, 0)

/** The last member named `key` (the one JSON.parse and Python's json keep), or undefined. */
export function lastMember(members: MemberSpan[], key: string): MemberSpan | undefined {
  for (let i = members.length - 1; i >= 0; i--) if (members[i].key === key) return members[i]
  return undefined
}

/** A replacement of text[start, end) by `text`; edits never overlap. */
export interface Splice {
  start: number
  end: number
  text: string
}

export function applySplices(text: string, splices: Splice[]): string {
  if (splices.length === 0) return text
  const sorted = [...splices].sort((a, b) => a.start - b.start)
  let out = ''
  let at = 0
  for (const s of sorted) {
    if (s.start < at) throw new Error('overlapping edits')
    out += text.slice(at, s.start) + s.text
    at = s.end
  }
  return out + text.slice(at)
}

/**
 * The edits that give each key its value in an object: every occurrence of a
 * present key gets the value (so no duplicate can carry an older one); missing
 * keys are added together before the closing brace.
 */
export function setMembers(object: { members: MemberSpan[]; close: number }, pairs: Array<[string, string]>): Splice[] {
  const splices: Splice[] = []
  const added: string[] = []
  for (const [key, json] of pairs) {
    const found = object.members.filter((m) => m.key === key)
    if (found.length > 0) for (const m of found) splices.push({ start: m.valueStart, end: m.valueEnd, text: json })
    else added.push(`${JSON.stringify(key)}:${json}`)
  }
  if (added.length > 0) {
    const text = added.join(',')
    splices.push({ start: object.close, end: object.close, text: object.members.length > 0 ? `,${text}` : text })
  }
  return splices
}

/** The object rebuilt from the raw text of the members kept (for host answers, where spacing carries nothing). */
export function keepMembers(text: string, members: MemberSpan[], keep: (m: MemberSpan) => boolean): string {
  const kept: string[] = []
  for (const m of members) if (keep(m)) kept.push(text.slice(m.start, m.valueEnd))
  return `{${kept.join(', ')}}`
}

/** The array rebuilt from the raw text of the elements kept, each possibly rewritten. */
export function keepElements(text: string, elements: ElementSpan[], map: (e: ElementSpan) => string | null): string {
  const kept: string[] = []
  for (const e of elements) {
    const out = map(e)
    if (out !== null) kept.push(out)
  }
  return `[${kept.join(', ')}]`
}
