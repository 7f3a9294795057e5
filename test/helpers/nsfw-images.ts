/**
 * Images for the content-safety tests, made in the test (no binaries committed): PNGs with text
 * chunks (the deterministic classifier's markers, the `authsvc:nsfw` metadata tag), and pixels
 * that vary with a seed so every image is a different file.
 */
import { deflateSync } from 'node:zlib'
import { PNG_SIGNATURE, pngChunk } from './png.js'
import { TEST_MARKERS } from '../../sidecar/src/nsfw/engines.js'

/** A tEXt chunk: keyword, NUL, Latin-1 text. */
const textChunk = (key: string, value: string): Buffer => pngChunk('tEXt', Buffer.concat([Buffer.from(key, 'latin1'), Buffer.from([0]), Buffer.from(value, 'latin1')]))

export interface PngOptions {
  size?: number
  /** tEXt chunks before the pixels */
  text?: Record<string, string>
  /** uncompressed iTXt chunks before the pixels */
  itxt?: Record<string, string>
  /** tEXt chunks after the pixels (where the tag is not read) */
  textAfter?: Record<string, string>
  /** an APNG's animation control chunk (`acTL`, before the pixels: what makes a browser animate it) */
  animated?: boolean
}

/** An RGB PNG whose pixels depend on `seed`: smooth gradients, so it also decodes to a plausible picture. */
export function testPng(seed: number, options: PngOptions = {}): Buffer {
  const size = options.size ?? 16
  const ihdr = Buffer.alloc(13)
  ihdr.writeUInt32BE(size, 0)
  ihdr.writeUInt32BE(size, 4)
  ihdr.set([8, 2, 0, 0, 0], 8) // 8 bits, RGB
  const rows: number[] = []
  for (let y = 0; y < size; y++) {
    rows.push(0)
    for (let x = 0; x < size; x++) rows.push((seed * 31 + x * 8) & 255, (seed * 17 + y * 8) & 255, (seed * 5 + x + y) & 255)
  }
  const texts = Object.entries(options.text ?? {}).map(([k, v]) => textChunk(k, v))
  const itxts = Object.entries(options.itxt ?? {}).map(([k, v]) => pngChunk('iTXt', Buffer.concat([Buffer.from(k, 'latin1'), Buffer.from([0, 0, 0]), Buffer.from('en', 'latin1'), Buffer.from([0]), Buffer.from([0]), Buffer.from(v, 'utf8')])))
  const after = Object.entries(options.textAfter ?? {}).map(([k, v]) => textChunk(k, v))
  const actl = options.animated ? [pngChunk('acTL', Buffer.from([0, 0, 0, 2, 0, 0, 0, 0]))] : []
  return Buffer.concat([PNG_SIGNATURE, pngChunk('IHDR', ihdr), ...actl, ...texts, ...itxts, pngChunk('IDAT', deflateSync(Buffer.from(rows))), ...after, pngChunk('IEND', Buffer.alloc(0))])
}

/** What the deterministic classifier calls NSFW (a marker in a text chunk). */
export const nsfwPng = (seed: number): Buffer => testPng(seed, { text: { Comment: TEST_MARKERS.nsfw } })
/** An APNG (its frames cannot be decoded here, so it is never classified): otherwise clean. */
export const animatedPng = (seed: number): Buffer => testPng(seed, { animated: true })
/** What the deterministic classifier answers only after every deadline. */
export const slowPng = (seed: number): Buffer => testPng(seed, { text: { Comment: TEST_MARKERS.slow } })
/** A clean image. */
export const cleanPng = (seed: number): Buffer => testPng(seed)
/** Not an image at all, named like one. */
export const corruptPng = (): Buffer => Buffer.from('this is not a PNG, whatever its name says')

/** An Ogg page that begins a stream (BOS) whose first packet starts with `id` (Opus, Vorbis, Theora...). */
export function oggBos(id: Buffer, serial = 1): Buffer {
  const head = Buffer.alloc(27)
  head.write('OggS', 0, 'latin1')
  head[5] = 0x02 // begins a stream
  head.writeUInt32LE(serial, 14)
  head[26] = 1 // one segment
  return Buffer.concat([head, Buffer.from([id.length]), id])
}

/** An Ogg page that begins no stream (a comment header, data). */
export function oggPage(payload: Buffer, serial = 1): Buffer {
  const head = Buffer.alloc(27)
  head.write('OggS', 0, 'latin1')
  head.writeUInt32LE(serial, 14)
  head[26] = 1
  return Buffer.concat([head, Buffer.from([payload.length]), payload])
}

/** The start of a safetensors file (ComfyUI's `.latent`): its header length, then the JSON. */
export function safetensorsHead(): Buffer {
  const json = Buffer.from('{"latent_tensor":{"dtype":"F32","shape":[1,4,64,64],"data_offsets":[0,65536]}}')
  const length = Buffer.alloc(8)
  length.writeBigUInt64LE(BigInt(json.length))
  return Buffer.concat([length, json, Buffer.alloc(64)])
}
