/**
 * Issue 28, item 9: the data dir lives in ComfyUI's user directory (`<user_dir>/authsvc`), beside
 * every user's own space (`<user_dir>/<comfy-user>`). The gate refuses a userdata name that
 * leaves the caller's space itself (workflow-store.ts `leavesUserSpace`), whatever the host's own
 * check would do: the names as they reach the decision (`{file}` already decoded once by aiohttp,
 * the host unquoting once more when a `%` is left).
 */
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { leavesUserSpace } from '../../sidecar/src/workflows/workflow-store.js'

describe('leavesUserSpace: names that reach outside the caller\'s own userdata', () => {
  const outside: Array<[string, string]> = [
    ['..', 'the user dir itself'],
    ['../authsvc/authsvc.sqlite', 'the store, plainly'],
    ['..%2Fauthsvc%2Fauthsvc.sqlite', 'the store, slashes left encoded (the host unquotes once)'],
    ['%2e%2e%2Fauthsvc%2Fauthsvc_secret.key', 'dots encoded too'],
    ['workflows/../../authsvc/config.json', 'down then up twice'],
    ['workflows%2F..%2F..%2Fauthsvc', 'the folder, for a listing'],
    ['/home/u/ComfyUI/user/authsvc/authsvc.sqlite', 'an absolute path'],
    ['%2Fetc%2Fpasswd', 'an absolute path, encoded'],
    ['./../authsvc', 'a dot first'],
  ]
  for (const [name, why] of outside) {
    it(`refused: ${why} (${name})`, () => assert.equal(leavesUserSpace(name), true))
  }
  const inside: Array<[string, string]> = [
    ['', 'the own root (a listing without dir)'],
    ['workflows', 'a folder'],
    ['workflows/a.json', 'a file'],
    ['workflows%2Fa.json', 'a file, slash encoded'],
    ['workflows/../comfy.settings.json', 'up once, still inside'],
    ['authsvc/authsvc.sqlite', 'a folder of the caller\'s own that happens to be called authsvc'],
    ['workflows\\..\\..\\authsvc', 'backslashes: plain characters on the hosts the plugin runs on'],
    ['workflows%252F..%252F..', 'encoded twice: one unquote leaves a name with %2F in it'],
  ]
  for (const [name, why] of inside) {
    it(`passed to the host: ${why} (${name})`, () => assert.equal(leavesUserSpace(name), false))
  }
})
