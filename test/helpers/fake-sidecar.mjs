// A misbehaving sidecar for fail-closed tests: `node fake-sidecar.mjs MODE SOCKET`.
// Modes: slow (never answers a decision), garbage (answers with a non-JSON
// frame), mismatch (answers the hello with another protocol version),
// pass (answers every decision `pass`: proves the plugin did connect).
// Speaks the framing of protocol v2: u32 total length, u32 JSON length, JSON, payload.
import net from 'node:net'
import fs from 'node:fs'

const [mode, path] = process.argv.slice(2)
try { fs.unlinkSync(path) } catch {}
const frameOf = (json, payload = Buffer.alloc(0)) => {
  const head = Buffer.alloc(8)
  head.writeUInt32BE(4 + json.length + payload.length, 0)
  head.writeUInt32BE(json.length, 4)
  return Buffer.concat([head, json, payload])
}
const frame = (obj) => frameOf(Buffer.from(JSON.stringify(obj)))
net.createServer((socket) => {
  let buf = Buffer.alloc(0)
  socket.on('data', (chunk) => {
    buf = Buffer.concat([buf, chunk])
    while (buf.length >= 8 && buf.length >= 4 + buf.readUInt32BE(0)) {
      const total = buf.readUInt32BE(0)
      const jsonLength = buf.readUInt32BE(4)
      const msg = JSON.parse(buf.subarray(8, 8 + jsonLength).toString())
      buf = buf.subarray(4 + total)
      if (msg.type === 'hello') {
        socket.write(frame({ id: msg.id, type: 'hello', protocol: mode === 'mismatch' ? 999 : msg.protocol, sidecar_version: 'fake', http_socket: path + '-http' }))
        continue
      }
      if (msg.type === 'event') continue // host events are never answered
      console.log(msg.type === 'decide' ? 'FAKE DECIDE' : `FAKE ${msg.type}`)
      if (mode === 'garbage') {
        socket.write(frameOf(Buffer.from('this is not json')))
      } else if (mode === 'pass') {
        socket.write(frame({ id: msg.id, action: 'pass' }))
      }
      // slow: never answers
    }
  })
  socket.on('error', () => {})
}).listen(path, () => console.log('FAKE SIDECAR READY'))
