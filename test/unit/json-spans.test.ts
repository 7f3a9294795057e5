/**
 * Editing JSON text without re-serialising it: the spans found are exactly
 * where JSON.parse sees the values, and an edit leaves every other byte alone
 * (64-bit integers, 1e400, \u escapes, key order, whitespace, duplicates).
 */
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import {
  applySplices, arrayElements, keepElements, keepMembers, lastMember, objectMembers, rootStart, setMembers, valueEnd,
} from '../../sidecar/src/isolation/json-spans.js'

const TRICKY = '{ "seed" : 18446744073709551615, "f": 1e400, "s": "a\\"b\\\\", "u": "\\u00e9\\ud83d\\ude00", "n": [1, [2, {"x": "]}"}]], "e": {}, "z": null }'

describe('json spans', () => {
  it('finds every member of an object where JSON.parse finds its value', () => {
    const { members, close } = objectMembers(TRICKY, rootStart(TRICKY))
    assert.deepEqual(members.map((m) => m.key), ['seed', 'f', 's', 'u', 'n', 'e', 'z'])
    assert.equal(TRICKY[close], '}')
    for (const m of members) {
      const raw = TRICKY.slice(m.valueStart, m.valueEnd)
      assert.deepEqual(JSON.parse(raw), (JSON.parse(TRICKY) as Record<string, unknown>)[m.key], m.key)
    }
    assert.equal(TRICKY.slice(members[0].valueStart, members[0].valueEnd), '18446744073709551615')
  })

  it('finds array elements, nested brackets inside strings included', () => {
    const text = '[ "]", {"a": "[{"}, [ ], 5 ]'
    const { elements } = arrayElements(text, 0)
    assert.deepEqual(elements.map((e) => text.slice(e.start, e.end)), ['"]"', '{"a": "[{"}', '[ ]', '5'])
  })

  it('strings ending in escaped backslashes end where JSON says', () => {
    for (const s of ['"\\\\"', '"a\\\\\\"b"', '"\\\\\\\\"']) assert.equal(valueEnd(`${s},`, 0), s.length, s)
  })

  it('setMembers replaces every occurrence of a key and adds missing ones together', () => {
    const text = '{"a":1,"k":"old","b":2,"k":"older"}'
    const obj = objectMembers(text, 0)
    const out = applySplices(text, setMembers(obj, [['k', '"new"'], ['x', '3'], ['y', '4']]))
    assert.equal(out, '{"a":1,"k":"new","b":2,"k":"new","x":3,"y":4}')
    const empty = '{ }'
    assert.equal(applySplices(empty, setMembers(objectMembers(empty, 0), [['x', '1'], ['y', '2']])), '{ "x":1,"y":2}')
    assert.deepEqual(JSON.parse(applySplices(empty, setMembers(objectMembers(empty, 0), [['x', '1'], ['y', '2']]))), { x: 1, y: 2 })
  })

  it('an edit changes nothing else: big integers, 1e400 and escapes stay as written', () => {
    const obj = objectMembers(TRICKY, rootStart(TRICKY))
    const out = applySplices(TRICKY, setMembers(obj, [['owner', '"alice"']]))
    assert.equal(out, TRICKY.replace(/ }$/, ' ,"owner":"alice"}'))
  })

  it('lastMember is the occurrence JSON.parse keeps', () => {
    const text = '{"k":1,"k":2}'
    const m = lastMember(objectMembers(text, 0).members, 'k')!
    assert.equal(text.slice(m.valueStart, m.valueEnd), '2')
  })

  it('keepMembers / keepElements rebuild from the raw text of what is kept', () => {
    const text = '{"a": 18446744073709551615, "b": 2, "c": [1e400]}'
    assert.equal(keepMembers(text, objectMembers(text, 0).members, (m) => m.key !== 'b'), '{"a": 18446744073709551615, "c": [1e400]}')
    const arr = '[1, 2, 3]'
    assert.equal(keepElements(arr, arrayElements(arr, 0).elements, (e) => (arr.slice(e.start, e.end) === '2' ? null : arr.slice(e.start, e.end))), '[1, 3]')
  })

  it('malformed text is refused, not guessed', () => {
    for (const bad of ['{"a" 1}', '{"a":1', '[1 2]', '{"a":"x']) {
      assert.throws(() => (bad[0] === '{' ? objectMembers(bad, 0) : arrayElements(bad, 0)), SyntaxError, bad)
    }
  })
})
