/**
 * Run by test/unit/store-postgres.test.ts as a process of its own: opens a
 * PostgreSQL store and closes it, then opens another, waits for its server to
 * be killed and for a reconnection attempt to fail, and closes it. The process
 * must then exit by itself: close() left no connection or timer behind.
 */
import { openPostgresSharedStore } from '../../sidecar/src/store/postgres-store.js'

const url = process.argv[2]
const first = await openPostgresSharedStore(url)
await first.set('close-child:x', { x: 1 })
await first.close()
process.stdout.write('closed-connected\n')

let retrying: () => void = () => {}
const failedAttempt = new Promise<void>((resolve) => (retrying = resolve))
const quiet = () => {}
const second = await openPostgresSharedStore(url, {
  log: {
    info: quiet,
    error: quiet,
    warn: (_obj: object, msg: string) => {
      if (/still unreachable/.test(msg)) retrying()
    },
  },
})
const down = new Promise<void>((resolve) => second.onConnection((connected) => connected || resolve()))
process.stdout.write('ready\n')
await down
await failedAttempt
await second.close()
process.stdout.write('closed-down\n')
