/**
 * Issue 14: without Node.js (or with one older than 20), install.py and the page a browser
 * gets from the real ComfyUI both say that Node.js >= 20 is needed and how to point at one
 * (AUTHSVC_NODE); the log says it once; nothing is spawned, nothing crashes.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { REAL_HOST_SKIP, startRealHost, type RealHost } from '../helpers/real-host.js'
import { NAVIGATION, clone, get, lines, pathWithoutNode, runInstallPy, until } from './install-kit.js'

describe('no usable Node.js, on the real ComfyUI', { skip: REAL_HOST_SKIP }, () => {
  let dir = ''
  let pkg = ''
  let noNodePath = ''
  let oldNode = ''  // a "node" that is too old
  let host: RealHost | undefined
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'as-nonode-'))
    pkg = clone(join(dir, 'clone', 'authsvc'))
    noNodePath = pathWithoutNode(join(dir, 'bin'))
    oldNode = join(dir, 'node18')
    writeFileSync(oldNode, '#!/bin/sh\necho v18.20.4\n')
    chmodSync(oldNode, 0o755)
  })
  after(async () => {
    await host?.stop()
    rmSync(dir, { recursive: true, force: true })
  })

  const withoutNode = (): NodeJS.ProcessEnv => {
    const env: NodeJS.ProcessEnv = { ...process.env, PATH: noNodePath }
    delete env.AUTHSVC_NODE
    return env
  }

  it('install.py with no node on PATH: one clear error naming Node.js >= 20 and AUTHSVC_NODE', async () => {
    const run = await runInstallPy(pkg, withoutNode())
    assert.equal(run.status, 1, run.stdout + run.stderr)
    assert.match(run.stderr, /ERROR: Node\.js >= 20 is needed and was not found/)
    assert.match(run.stderr, /AUTHSVC_NODE/)
    assert.doesNotMatch(run.stderr, /Traceback/)
    assert.ok(!existsSync(join(pkg, 'node_modules')), 'nothing was installed')
  })

  it('install.py with a Node.js older than 20 names the version it found', async () => {
    const run = await runInstallPy(pkg, { ...withoutNode(), AUTHSVC_NODE: oldNode })
    assert.equal(run.status, 1, run.stdout + run.stderr)
    assert.match(run.stderr, /Node\.js >= 20 is needed; the node found is v18\.20\.4/)
  })

  it('ComfyUI started without node: the page says Node.js >= 20 is needed, the API gets JSON 503, the log says it once', { timeout: 120_000 }, async () => {
    const env = withoutNode()
    host = await startRealHost({ gate: false, customNodes: [pkg], noWait: true, env: { PATH: env.PATH, AUTHSVC_NODE: '' } })
    const page = await until(async () => {
      const res = await get(`${host!.url}/`, NAVIGATION)
      return /cannot start/.test(res.body) ? res : undefined
    }, 30_000, 'the page naming the missing Node.js', host.output)
    assert.equal(page.status, 503)
    assert.match(page.type, /^text\/html/)
    assert.match(page.body, /Node\.js &gt;= 20 is needed/)
    assert.match(page.body, /AUTHSVC_NODE/)
    for (let i = 0; i < 10; i++) {
      const api = await get(`${host.url}/object_info`)
      assert.equal(api.status, 503)
      assert.equal(JSON.parse(api.body).code, 'AUTHSVC_UNAVAILABLE')
    }
    const out = host.output()
    assert.equal(lines(out, /cannot start the sidecar: Node\.js >= 20 is needed/).length, 1, out)
    assert.deepEqual(lines(out, /custom_nodes\/authsvc\/.*", line \d+|setup failed|IMPORT FAILED.*authsvc/), [])
    assert.ok(!existsSync(join(host.dataDir, 'sidecar.pid')))
    await host.stop()
    host = undefined
  })

  it('ComfyUI started with a Node.js older than 20: the page names the version found', { timeout: 120_000 }, async () => {
    host = await startRealHost({ gate: false, customNodes: [pkg], noWait: true, env: { PATH: noNodePath, AUTHSVC_NODE: oldNode } })
    const page = await until(async () => {
      const res = await get(`${host!.url}/`, NAVIGATION)
      return /cannot start/.test(res.body) ? res : undefined
    }, 30_000, 'the page naming the old Node.js', host.output)
    assert.match(page.body, /Node\.js &gt;= 20 is needed; the node found is v18\.20\.4/)
    assert.doesNotMatch(page.body, /node18/, 'the page names no path')
    const out = host.output()
    assert.equal(lines(out, /cannot start the sidecar: Node\.js >= 20 is needed; the node found is v18\.20\.4 \(.*node18\)/).length, 1, out)
  })
})
