/**
 * What kind of file a /view serves, told by its first bytes (the host reads them: host_paths.py
 * `head`): the content-safety policy judges pictures and blocks what it cannot judge, but a file
 * that no browser shows as a picture or a video (ComfyUI's audio outputs, a saved latent) is no
 * business of it. Told by content, not by name: a picture named `x.flac` is still a picture to a
 * browser's `<img>`, which sniffs it. Only kinds whose first bytes leave no doubt pass; anything
 * else (GIF, video containers, SVG and other text, a 3D model with its textures, ZIP, unknown
 * bytes) stays with the policy, which blocks it for SFW users when it cannot classify it.
 */

/** Whether `head` (a file's first bytes) is plainly audio or a tensor file, never a picture. */
export function notVisual(head: Uint8Array): boolean {
  const b = Buffer.from(head.buffer, head.byteOffset, head.byteLength)
  const text = (from: number, to: number): string => b.toString('latin1', from, to)
  if (b.length >= 4 && text(0, 4) === 'fLaC') return true // FLAC
  if (b.length >= 3 && text(0, 3) === 'ID3') return true // MP3 behind an ID3v2 tag
  // an MPEG audio frame: 11 sync bits, a layer that is not the reserved 00 (a JPEG's FF D8 is none)
  if (b.length >= 2 && b[0] === 0xff && (b[1] & 0xe0) === 0xe0 && (b[1] & 0x06) !== 0) return true
  if (b.length >= 12 && text(0, 4) === 'RIFF' && text(8, 12) === 'WAVE') return true // WAV
  return oggAudio(b) || safetensors(b)
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

/** A safetensors file (ComfyUI's `.latent`): an 8-byte little-endian header length, then its JSON. */
function safetensors(b: Buffer): boolean {
  if (b.length < 9) return false
  const length = b.readBigUInt64LE(0)
  return length >= 2n && length <= 100_000_000n && b[8] === 0x7b // '{'
}
