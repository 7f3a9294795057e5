/**
 * IpSet remembers its answers by the address text it was asked about (BlockList.check builds a
 * native SocketAddress per call, a tenth of a decision's CPU). The remembered answer must be the
 * answer: every spelling of an address (IPv4-mapped IPv6, brackets, case, spaces) is answered as
 * the list says, the first time and every later time, also after the memo has started over.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { IpSet } from '../../sidecar/src/access/ip.js'

const LIST = ['10.0.0.0/8', '192.168.1.7', 'fd00::/8', '::1']

const ROWS: Array<[string, boolean]> = [
  ['10.1.2.3', true],
  ['::ffff:10.1.2.3', true], // the mapped spelling of a listed IPv4 address
  ['::FFFF:10.1.2.3', true],
  ['[::ffff:10.1.2.3]', true],
  [' 10.1.2.3 ', true],
  ['11.1.2.3', false],
  ['::ffff:11.1.2.3', false],
  ['192.168.1.7', true],
  ['192.168.1.8', false],
  ['fd12::1', true],
  ['FD12::1', true],
  ['[fd12::1]', true],
  ['fe80::1', false],
  ['::1', true],
  ['[::1]', true],
  ['0:0:0:0:0:0:0:1', true],
  ['not an address', false],
  ['', false],
  ['10.0.0.1/8', false], // a network is not a client address
  ['10.0.0.256', false],
]

describe('IpSet', () => {
  it('answers every spelling as the list says, the first time and when asked again', () => {
    const set = new IpSet(LIST)
    const plain = new IpSet(LIST, false)
    for (let pass = 0; pass < 3; pass++) {
      for (const [ip, listed] of ROWS) {
        assert.equal(set.has(ip), listed, `pass ${pass}: ${JSON.stringify(ip)}`)
        assert.equal(plain.has(ip), listed, `without memo: ${JSON.stringify(ip)}`)
      }
    }
  })

  it('still answers right after the memo has started over (many distinct clients)', () => {
    const set = new IpSet(LIST)
    for (let i = 0; i < 10_000; i++) {
      const ip = `${i % 2 === 0 ? 10 : 11}.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`
      assert.equal(set.has(ip), i % 2 === 0, ip)
    }
    for (const [ip, listed] of ROWS) assert.equal(set.has(ip), listed, JSON.stringify(ip))
  })

  it('an empty list holds nothing', () => {
    const set = new IpSet([])
    for (const [ip] of ROWS) assert.equal(set.has(ip), false, JSON.stringify(ip))
  })
})
