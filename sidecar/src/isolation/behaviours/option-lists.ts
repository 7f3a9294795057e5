/**
 * Where the option lists of an /object_info answer sit, in one pass over its
 * text: every `class.input.<section>.<name>` given as `[[options...], {config}]`
 * or `["COMBO", {"options": [...], ...}]`, with its entries, whether the config
 * marks it `*_upload`, and where its string `default` is.
 *
 * Why one pass: the answer is 320 KB to several MB; walking it member by member
 * with json-spans re-scans every nested value once per level (measured 40-240 ms
 * on the 550 KB capture, holding the event loop); this reads each byte once.
 * The text must be valid JSON (the host's own answer); spans index into it.
 */
import { stringEnd } from '../json-spans.js'

export interface OptionList {
  cls: string
  input: string
  /** the options array: `[` .. one past `]` */
  start: number
  end: number
  entries: Array<{ name: string; raw: string }>
  upload: boolean
  /** `image` for `image_upload`, `audio` for `audio_upload`, ...: what kind of file the input uploads */
  uploadKind?: string
  default?: { start: number; end: number; name: string }
}

type Role = 'root' | 'class' | 'inputs' | 'section' | 'spec' | 'options' | 'config' | 'other'

interface Frame {
  role: Role
  obj: boolean
  /** the key of the member being read (objects) */
  key: string
  /** the element being read (arrays) */
  index: number
  start: number
}

interface Spec {
  cls: string
  input: string
  combo: boolean
  options?: { start: number; end: number; entries: Array<{ name: string; raw: string }> }
  upload: boolean
  uploadKind?: string
  default?: { start: number; end: number; name: string }
}

const decode = (raw: string): string => (raw.includes('\\') ? (JSON.parse(raw) as string) : raw.slice(1, -1))

function roleOf(parent: Frame | undefined, obj: boolean): Role {
  if (parent === undefined) return 'root'
  switch (parent.role) {
    case 'root':
      return 'class'
    case 'class':
      return obj && parent.key === 'input' ? 'inputs' : 'other'
    case 'inputs':
      return obj ? 'section' : 'other'
    case 'section':
      return obj ? 'other' : 'spec'
    case 'spec':
      if (!obj && parent.index === 0) return 'options'
      return obj && parent.index === 1 ? 'config' : 'other'
    case 'config':
      return !obj && parent.key === 'options' ? 'options' : 'other'
    default:
      return 'other'
  }
}

/** Characters read per step: a fraction of a millisecond once warm, a few ms cold. */
const SLICE = 16 * 1024

/**
 * The lists, without holding the event loop: the scan runs in steps of SLICE
 * characters with a turn of the loop between them (the first scan in a process
 * runs before the JIT warms up, about 100 ms for 550 KB, and other users'
 * decisions must not wait for it).
 */
export async function optionListsOf(text: string): Promise<OptionList[]> {
  const scan = new OptionScanner(text)
  while (!scan.step(SLICE)) await new Promise<void>((resolve) => setImmediate(resolve))
  return scan.out
}

/** The same, in one go (small answers, tests). */
export function optionListsOfSync(text: string): OptionList[] {
  const scan = new OptionScanner(text)
  scan.step(text.length)
  return scan.out
}

class OptionScanner {
  readonly out: OptionList[] = []
  private readonly stack: Frame[] = []
  private readonly specs: Spec[] = []
  private entries: Array<{ name: string; raw: string }> = []
  private expectKey = false
  private i = 0

  constructor(private readonly text: string) {}

  /** Reads about `count` more characters; true once the text is read. */
  step(count: number): boolean {
    const { text, stack, specs } = this
    const n = text.length
    const stop = Math.min(n, this.i + count)
    let i = this.i
    let expectKey = this.expectKey
    while (i < stop) {
      const c = text.charCodeAt(i)
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) {
        i++
        continue
      }
      const top = stack[stack.length - 1]
      if (c === 0x22) {
        const end = stringEnd(text, i)
        // only strings where a list can be are sliced: keys down to the config, options, COMBO, default
        if (top?.obj && expectKey) {
          if (top.role !== 'other') top.key = decode(text.slice(i, end))
          expectKey = false
        } else if (top?.role === 'options') {
          const raw = text.slice(i, end)
          this.entries.push({ name: decode(raw), raw })
        } else if (top?.role === 'spec' && top.index === 0 && end - i === 7 && text.startsWith('"COMBO"', i)) {
          specs[specs.length - 1].combo = true
        } else if (top?.role === 'config' && top.key === 'default') {
          specs[specs.length - 1].default = { start: i, end, name: decode(text.slice(i, end)) }
        }
        i = end
        continue
      }
      if (c === 0x7b || c === 0x5b) {
        const obj = c === 0x7b
        const role = roleOf(top, obj)
        stack.push({ role, obj, key: '', index: 0, start: i })
        if (role === 'spec') {
          specs.push({ cls: stack[0].key, input: top!.key, combo: false, upload: false })
        } else if (role === 'options') {
          this.entries = []
        }
        expectKey = obj
        i++
        continue
      }
      if (c === 0x7d || c === 0x5d) {
        const frame = stack.pop()!
        if (stack[stack.length - 1]?.role === 'options') {
          // an option that is itself an array or object: kept whole, named by nothing
          this.entries.push({ name: '', raw: text.slice(frame.start, i + 1) })
        } else if (frame.role === 'options') {
          const spec = specs[specs.length - 1]
          const fromConfig = stack[stack.length - 1]?.role === 'config'
          // a COMBO's list is in its config; a classic input's list is its first element
          if (fromConfig === spec.combo) spec.options = { start: frame.start, end: i + 1, entries: this.entries }
        } else if (frame.role === 'spec') {
          const spec = specs.pop()!
          if (spec.options) {
            this.out.push({ cls: spec.cls, input: spec.input, ...spec.options, upload: spec.upload, ...(spec.uploadKind ? { uploadKind: spec.uploadKind } : {}), ...(spec.default ? { default: spec.default } : {}) })
          }
        }
        expectKey = false
        i++
        continue
      }
      if (c === 0x2c) {
        if (top?.obj) expectKey = true
        else if (top) top.index++
        i++
        continue
      }
      if (c === 0x3a) {
        expectKey = false
        i++
        continue
      }
      // a number, true, false or null
      let j = i
      while (j < n) {
        const d = text.charCodeAt(j)
        if (d === 0x2c || d === 0x7d || d === 0x5d || d === 0x20 || d === 0x0a || d === 0x0d || d === 0x09) break
        j++
      }
      if (top?.role === 'config' && j - i === 4 && text.startsWith('true', i) && top.key.endsWith('_upload')) {
        specs[specs.length - 1].upload = true
        specs[specs.length - 1].uploadKind = top.key.slice(0, -'_upload'.length)
      }
      else if (top?.role === 'options') this.entries.push({ name: '', raw: text.slice(i, j) })
      i = j
    }
    this.i = i
    this.expectKey = expectKey
    return i >= n
  }
}
