/**
 * A tag the image already carries (SPEC §11): a PNG text chunk (`tEXt`, or an uncompressed
 * `iTXt`) with the keyword `authsvc:nsfw` and the value `true` (also `1`, `nsfw`, `yes`, any case;
 * a "false" is ignored: see valueOf). Read before the detector runs: such a tag is the image's own word and is stored with
 * source `metadata`. Only chunks before the first `IDAT` are read (where writers put text), so a
 * tag costs nothing but the header. Nothing else is parsed; a malformed chunk ends the reading.
 */
export const TAG_KEYWORD = 'authsvc:nsfw'

const SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])

/**
 * A tag may only mark an image NSFW, never clear it: whoever runs a prompt writes the PNG's text
 * chunks (ComfyUI's SaveImage writes every `extra_data.extra_pnginfo` key as one), so a "safe"
 * tag would let an sfw_check user switch the detector off for their own outputs. A "false" value
 * is no tag at all: the detector decides.
 */
function valueOf(text: string): boolean | null {
  // SaveImage writes the value as JSON: "true" arrives quoted
  const v = text.trim().replace(/^"(.*)"$/, '$1').trim().toLowerCase()
  if (v === 'true' || v === '1' || v === 'nsfw' || v === 'yes') return true
  return null
}

/** The tag in a PNG's text chunks: true / false, or null when it has none (or is not a PNG). */
export function pngTag(bytes: Uint8Array): boolean | null {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  if (buf.length < 8 || !buf.subarray(0, 8).equals(SIGNATURE)) return null
  let at = 8
  while (at + 12 <= buf.length) {
    const length = buf.readUInt32BE(at)
    const type = buf.toString('latin1', at + 4, at + 8)
    const start = at + 8
    const end = start + length
    if (end + 4 > buf.length || type === 'IDAT' || type === 'IEND') return null
    if (type === 'tEXt' || type === 'iTXt') {
      const data = buf.subarray(start, end)
      const nul = data.indexOf(0)
      if (nul > 0 && data.toString('latin1', 0, nul) === TAG_KEYWORD) {
        if (type === 'tEXt') return valueOf(data.toString('latin1', nul + 1))
        // iTXt: keyword NUL, compression flag, method, language NUL, translated keyword NUL, text
        if (data[nul + 1] !== 0) return null // compressed: not read
        const lang = data.indexOf(0, nul + 3)
        const translated = lang < 0 ? -1 : data.indexOf(0, lang + 1)
        if (translated < 0) return null
        return valueOf(data.toString('utf8', translated + 1))
      }
    }
    at = end + 4
  }
  return null
}

/**
 * Whether a PNG is an animation (APNG: an `acTL` chunk before the first `IDAT`, where browsers look
 * for it). Its frames cannot be decoded here (libvips reads the first), so it cannot be judged by
 * what the browser plays: the caller treats it as unclassifiable.
 */
export function isAnimatedPng(bytes: Uint8Array): boolean {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  if (buf.length < 8 || !buf.subarray(0, 8).equals(SIGNATURE)) return false
  for (let at = 8; at + 12 <= buf.length;) {
    const type = buf.toString('latin1', at + 4, at + 8)
    if (type === 'acTL') return true
    if (type === 'IDAT' || type === 'IEND') return false
    at += 12 + buf.readUInt32BE(at)
  }
  return false
}

/** Whether the bytes start like an image the classifier decodes (PNG, JPEG, WebP). */
export function looksLikeImage(bytes: Uint8Array): boolean {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  if (b.length >= 8 && b.subarray(0, 8).equals(SIGNATURE)) return true
  if (b.length >= 3 && b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff) return true
  return b.length >= 12 && b.toString('latin1', 0, 4) === 'RIFF' && b.toString('latin1', 8, 12) === 'WEBP'
}
