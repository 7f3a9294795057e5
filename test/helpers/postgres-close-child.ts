/**
 * Run by test/unit/store-postgres.test.ts as a process of its own, which must
 * exit by itself once the store is closed (close() left no connection or timer
 * behind). `node postgres-close-child.ts <url> connected`: opens a store, uses
 * every kind of connection (commands, the feed), closes it. `… down`: opens a
 * store, says `ready`, waits for its server to be killed and for a
 * reconnection attempt to fail, and closes it while it retries. `… frozen`:
 * opens a store, says `ready`, and closes it when told (on stdin), the server
 * having stopped answering meanwhile.
 */
import { openPostgresSharedStore } from '../../sidecar/src/store/postgres-store.js'

const [url, mode] = process.argv.slice(2)
const quiet = () => {}

if (mode === 'connected') {
  const store = await openPostgresSharedStore(url)
  const heard = new Promise<void>((resolve) => store.subscribe((c) => c.key === 'close-child:x' && resolve()))
  await Promise.all([store.set('close-child:x', { x: 1 }), store.get('close-child:x'), store.increment('close-child-n', 1000)])
  await heard
  await store.close()
  process.stdout.write('closed-connected\n')
} else if (mode === 'frozen') {
  const store = await openPostgresSharedStore(url)
  await Promise.all([store.set('close-child:y', { y: 1 }), store.get('close-child:y'), store.entries('close-child')])
  process.stdout.write('ready\n')
  // the parent stops the server, then says go: the store does not know yet
  await new Promise((resolve) => process.stdin.once('data', resolve))
  process.stdin.pause()
  const t0 = Date.now()
  await store.close()
  process.stdout.write(`closed-frozen ${Date.now() - t0}\n`)
} else {
  let retrying: () => void = () => {}
  const failedAttempt = new Promise<void>((resolve) => (retrying = resolve))
  const store = await openPostgresSharedStore(url, {
    log: {
      info: quiet,
      error: quiet,
      warn: (_obj: object, msg: string) => {
        if (/still unreachable/.test(msg)) retrying()
      },
    },
  })
  const down = new Promise<void>((resolve) => store.onConnection((connected) => connected || resolve()))
  process.stdout.write('ready\n')
  await down
  await failedAttempt
  await store.close()
  process.stdout.write('closed-down\n')
}
