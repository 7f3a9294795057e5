/**
 * A session's User-Agent in words (identity/session-device.ts): one row per
 * kind of client a person signs in from, and the agents that name nothing.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { describeUserAgent } from '../../sidecar/src/identity/session-device.js'

const rows: Array<[string, string | undefined, [string, string | null, string | null]]> = [
  ['an iPhone', 'Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1', ['iPhone', 'Safari 17', 'iOS 17.0']],
  ['an Android phone', 'Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Mobile Safari/537.36', ['Android phone', 'Chrome 126', 'Android 14']],
  ['an iPad', 'Mozilla/5.0 (iPad; CPU OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1', ['Tablet', 'Safari 17', 'iOS 17.0']],
  ['Firefox on Linux', 'Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0', ['Desktop', 'Firefox 128', 'Linux']],
  ['Edge on Windows', 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36 Edg/126.0.0.0', ['Desktop', 'Edge 126', 'Windows 10']],
  ['Safari on a Mac', 'Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Safari/605.1.15', ['Desktop', 'Safari 17', 'Mac OS 10.15.7']],
  ['curl', 'curl/8.5.0', ['Unknown device', null, null]],
  ['a script\'s own name', 'my-backup-script', ['Unknown device', null, null]],
  ['no agent at all', undefined, ['Unknown device', null, null]],
]

describe('describeUserAgent', () => {
  for (const [name, agent, expected] of rows) {
    it(`${name}: ${expected.join(', ')}`, () => {
      const d = describeUserAgent(agent)
      assert.deepEqual([d.device, d.browser, d.os], expected)
    })
  }

  it('answers the same for the same agent twice (the cache keeps nothing else)', () => {
    const agent = rows[0][1]
    assert.deepEqual(describeUserAgent(agent), describeUserAgent(agent))
  })
})
