/**
 * The words and messages between a transfer thread (direct-body.ts) and its ring's hashing thread
 * (ring-hash-worker.ts, whose header describes the protocol).
 */
import type { MessagePort } from 'node:worker_threads'

/** buffers the transfer thread filled in this run */
export const FILLED = 0
/** buffers the hashing thread hashed in this run */
export const HASHED = 1
/** raised (and notified) whenever the hashing thread has something new to look at */
export const WAKE = 2
/** not 0: the hashing thread hashes nothing (a test's seam, to hold the hash behind the reads) */
export const HOLD = 3
/** the newest run the transfer thread abandoned: a resumed prefix being hashed for it stops there */
export const DROPPED = 4
/** the byte count of each buffer, from this word on */
export const LENGTHS = 8

export type HasherOrder =
  | { type: 'begin'; run: number; path: string; bytes: number }
  | { type: 'end'; run: number }
  | { type: 'drop'; run: number }

export type HasherReport =
  | { type: 'ready'; run: number }
  | { type: 'digest'; run: number; sha256: string }
  /** `message` never names the file (it reaches the job's error): the code does */
  | { type: 'failed'; run: number; message: string; code: string }

export interface HasherData {
  ring: SharedArrayBuffer
  ctl: SharedArrayBuffer
  slot: number
  slots: number
  port: MessagePort
}
