/**
 * What kind of file a /view serves, told by its first bytes (the host reads them: host_paths.py
 * `head`): the content-safety policy judges pictures and blocks what it cannot judge, but a file
 * that no browser shows as a picture or a video (ComfyUI's audio outputs, a saved latent) is no
 * business of it. Told by content, not by name: a picture named `x.flac` is still a picture to a
 * browser's `<img>`, which sniffs it. Only kinds whose first bytes leave no doubt pass; anything
 * else (GIF, video containers, SVG and other text, a 3D model with its textures, ZIP, unknown
 * bytes) stays with the policy, which blocks it for SFW users when it cannot classify it.
 *
 * "No doubt" is against polyglots too: bytes that start like one of these kinds and still open as
 * a picture, in a browser (which sniffs BMP, ICO, UTF-16 SVG...) or in Pillow (ComfyUI's /view
 * converts whatever Pillow opens when asked for `preview` or `channel`; Pillow tries TGA, which
 * has no signature, on anything). So each check reads the header's fields, not just its magic:
 * an MPEG frame header must be a valid Layer III one (a UTF-16 byte-order mark, FF FE, looks like
 * a Layer I frame), an ID3 header's version and size fields must be valid, and a safetensors
 * header must be short, start `{"` and be printable text up to where the head ends (a BMP, a TGA
 * or an ICO cannot: their headers hold zero bytes or longer lengths there).
 */

/** Whether `head` (a file's first bytes) is plainly audio or a tensor file, never a picture. */
export function notVisual(head: Uint8Array): boolean {
  const b = Buffer.from(head.buffer, head.byteOffset, head.byteLength)
  const text = (from: number, to: number): string => b.toString('latin1', from, to)
  if (b.length >= 4 && text(0, 4) === 'fLaC') return true // FLAC
  // MP3 behind an ID3v2 tag: version 2 to 4, revision 0, a size of four 7-bit bytes
  if (b.length >= 10 && text(0, 3) === 'ID3' && b[3] >= 2 && b[3] <= 4 && b[4] === 0 && (b[6] | b[7] | b[8] | b[9]) < 0x80) return true
  if (mp3Frame(b)) return true
  if (b.length >= 12 && text(0, 4) === 'RIFF' && text(8, 12) === 'WAVE') return true // WAV
  return oggAudio(b) || safetensors(b)
}

/**
 * A valid MPEG audio Layer III frame header: 11 sync bits, a version that is not the reserved one,
 * layer III, a bitrate that is neither free nor bad, a sample rate that is not reserved. (FF FE, a
 * UTF-16 byte-order mark, has the sync bits; it reads as Layer I and is refused.)
 */
function mp3Frame(b: Buffer): boolean {
  if (b.length < 4 || b[0] !== 0xff || (b[1] & 0xe0) !== 0xe0) return false
  const version = (b[1] >> 3) & 3
  const layer = (b[1] >> 1) & 3
  const bitrate = b[2] >> 4
  const rate = (b[2] >> 2) & 3
  return version !== 1 && layer === 1 && bitrate !== 0 && bitrate !== 15 && rate !== 3
}

/**
 * An Ogg file whose every logical stream is audio (Opus, Vorbis, FLAC, Speex): the streams all
 * begin (a BOS page each) before any other page, so once a page that begins none is seen, every
 * stream has been named. A stream of video (Theora) or a head too short to see them all: not.
 */
function oggAudio(b: Buffer): boolean {
  let at = 0
  let streams = 0
  while (at + 27 <= b.length && b.toString('latin1', at, at + 4) === 'OggS') {
    const segments = b[at + 26]
    const data = at + 27 + segments
    if (data > b.length) return false
    if ((b[at + 5] & 0x02) === 0) return streams > 0
    if (data + 8 > b.length) return false
    const id = b.toString('latin1', data, data + 8)
    const audio = id === 'OpusHead' || id === 'Speex   ' || id.startsWith('\x01vorbis') || id.startsWith('\x7fFLAC')
    if (!audio) return false
    streams++
    let size = 0
    for (let i = 0; i < segments; i++) size += b[at + 27 + i]
    at = data + size
  }
  return false
}

/**
 * A safetensors file (ComfyUI's `.latent`): an 8-byte little-endian header length (under 64 KiB:
 * a latent's header is tens of bytes), then its JSON: `{"` and printable text as far as the head
 * reaches into it.
 */
function safetensors(b: Buffer): boolean {
  if (b.length < 10) return false
  const length = b.readBigUInt64LE(0)
  if (length < 2n || length >= 65_536n || b[8] !== 0x7b || b[9] !== 0x22) return false // '{"'
  const end = Math.min(b.length, 8 + Number(length))
  for (let i = 10; i < end; i++) if (b[i] < 0x20 || b[i] > 0x7e) return false
  return true
}
