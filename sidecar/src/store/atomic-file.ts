/** Whole-file writes that are never seen half-done: write a temp file beside the target, fsync, rename. */
import { closeSync, fsyncSync, openSync, renameSync, unlinkSync, writeSync } from 'node:fs'
import { randomBytes } from 'node:crypto'

export function writeFileAtomic(path: string, data: string | Buffer, mode = 0o600): void {
  const temp = `${path}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`
  const fd = openSync(temp, 'wx', mode)
  try {
    writeSync(fd, typeof data === 'string' ? Buffer.from(data) : data)
    fsyncSync(fd)
  } catch (err) {
    closeSync(fd)
    unlinkSync(temp)
    throw err
  }
  closeSync(fd)
  try {
    renameSync(temp, path)
  } catch (err) {
    unlinkSync(temp)
    throw err
  }
}
