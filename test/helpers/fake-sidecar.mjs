// A misbehaving sidecar for fail-closed tests: `node fake-sidecar.mjs MODE SOCKET`.
// Modes: slow (never answers a decision), garbage (answers with a non-JSON
// frame), mismatch (answers the hello with another protocol version),
// pass (answers every decision `pass`: proves the plugin did connect).
import net from 'node:net'
import fs from 'node:fs'

const [mode, path] = process.argv.slice(2)
try { fs.unlinkSync(path) } catch {}
const frame = (obj) => {
  const json = Buffer.from(JSON.stringify(obj))
  const head = Buffer.alloc(4)
  head.writeUInt32BE(json.length)
  return Buffer.concat([head, json])
}
net.createServer((socket) => {
  let buf = Buffer.alloc(0)
  socket.on('data', (chunk) => {
    buf = Buffer.concat([buf, chunk])
    while (buf.length >= 4 && buf.length >= 4 + buf.readUInt32BE(0)) {
      const n = buf.readUInt32BE(0)
      const msg = JSON.parse(buf.subarray(4, 4 + n).toString())
      buf = buf.subarray(4 + n)
      if (msg.type === 'hello') {
        socket.write(frame({ id: msg.id, type: 'hello', protocol: mode === 'mismatch' ? 999 : msg.protocol, sidecar_version: 'fake', http_socket: path + '-http' }))
        continue
      }
      console.log(msg.type === 'decide' ? 'FAKE DECIDE' : `FAKE ${msg.type}`)
      if (mode === 'garbage') {
        const junk = Buffer.from('this is not json')
        const head = Buffer.alloc(4)
        head.writeUInt32BE(junk.length)
        socket.write(Buffer.concat([head, junk]))
      } else if (mode === 'pass') {
        socket.write(frame({ id: msg.id, action: 'pass' }))
      }
      // slow: never answers
    }
  })
  socket.on('error', () => {})
}).listen(path, () => console.log('FAKE SIDECAR READY'))
