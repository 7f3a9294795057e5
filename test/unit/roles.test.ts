/**
 * RoleStore (SPEC §4): seeds the defaults; a valid edit on disk applies
 * (reload(), or the watcher within 2 s); an invalid edit is refused with a
 * logged error and the last valid policy stays in force (never fail open).
 * Watcher tests wait for an observable event (the policy or the log), polled
 * up to 3 s; nothing sleeps for time to pass.
 */
import { describe, it, afterEach } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, readFileSync, renameSync, rmSync, statSync, unlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { once, type EventEmitter } from 'node:events'
import pino from 'pino'
import type { FastifyBaseLogger } from 'fastify'
import { PERMISSION_KEYS } from '../../sidecar/src/identity/principal.js'
import { DEFAULT_GROUPS, RoleStore, validateGroups, type GroupMap } from '../../sidecar/src/access/roles.js'
import { tempDir } from './fixtures.js'

interface Capture {
  log: FastifyBaseLogger
  errors: () => Array<{ msg: string; problems?: string[] }>
}

function capture(): Capture {
  const lines: string[] = []
  const log = pino({ level: 'info' }, { write: (line: string) => void lines.push(line) }) as unknown as FastifyBaseLogger
  return {
    log,
    errors: () => lines.map((l) => JSON.parse(l) as { level: number; msg: string; problems?: string[] }).filter((l) => l.level >= 50),
  }
}

async function waitFor(what: string, condition: () => boolean, timeoutMs = 3000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!condition()) {
    if (Date.now() > deadline) assert.fail(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

/** chokidar's initial scan must be done before an edit, or the edit counts as the initial state */
async function watcherReady(store: RoleStore): Promise<void> {
  const watcher = (store as unknown as { watcher?: EventEmitter }).watcher
  assert.ok(watcher, 'watch() started a watcher')
  await once(watcher, 'ready')
}

const opened: RoleStore[] = []
const dirs: string[] = []
afterEach(async () => {
  for (const store of opened.splice(0)) await store.close()
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true })
})

function setup(initial?: unknown): { path: string; cap: Capture; open: () => RoleStore } {
  const dir = tempDir('authsvc-roles-')
  dirs.push(dir)
  const path = join(dir, 'authsvc_groups.json')
  if (initial !== undefined) writeFileSync(path, typeof initial === 'string' ? initial : JSON.stringify(initial, null, 2))
  const cap = capture()
  return {
    path,
    cap,
    open: () => {
      const store = RoleStore.open(path, cap.log)
      opened.push(store)
      return store
    },
  }
}

const withUser = (patch: Record<string, unknown>): GroupMap =>
  ({ ...structuredClone(DEFAULT_GROUPS), user: { ...DEFAULT_GROUPS.user, ...patch } }) as GroupMap

/** a policy where `user` may not run */
const USER_CANNOT_RUN = withUser({ can_run: false })

describe('seeding and opening', () => {
  it('seeds the default roles (0600) when the file is missing', () => {
    const { path, open } = setup()
    const store = open()
    assert.ok(existsSync(path))
    assert.equal(statSync(path).mode & 0o777, 0o600)
    assert.deepEqual(JSON.parse(readFileSync(path, 'utf8')), DEFAULT_GROUPS)
    assert.deepEqual(store.snapshot(), DEFAULT_GROUPS)
  })

  it('the defaults are SPEC §4\'s table', () => {
    const store = setup().open()
    const table: Record<string, Record<string, boolean>> = {
      admin: { can_run: true, can_access_api: true, can_upload: true, can_modify_workflows: true, can_have_api_tokens: true, can_view_all_comfyui_items: true, can_download_models: true },
      user: { can_run: true, can_access_api: true, can_upload: true, can_modify_workflows: true, can_have_api_tokens: true, can_view_all_comfyui_items: true, can_download_models: false },
      guest: { can_run: false, can_access_api: true, can_upload: false, can_modify_workflows: false, can_have_api_tokens: false, can_view_all_comfyui_items: false, can_download_models: false },
    }
    for (const [role, perms] of Object.entries(table)) {
      assert.deepEqual(store.permissions(role), perms, role)
      assert.equal(store.mfaRequired(role), false, role)
    }
    assert.deepEqual([...PERMISSION_KEYS].sort(), Object.keys(table.user).sort())
  })

  it('an existing valid file is used as is, never overwritten', () => {
    const { path, open } = setup(USER_CANNOT_RUN)
    const before = readFileSync(path, 'utf8')
    const store = open()
    assert.equal(store.permissions('user').can_run, false)
    assert.equal(readFileSync(path, 'utf8'), before)
  })

  it('an invalid file at start refuses to start (never fails open)', () => {
    for (const bad of ['{', JSON.stringify({ admin: {}, user: { can_fly: true } }), JSON.stringify({ user: {} }), '[]']) {
      const { open } = setup(bad)
      assert.throws(() => open(), /authsvc_groups\.json/, bad)
    }
  })

  it('an unknown role has no permission; the admin role has every one whatever the file says', () => {
    const store = setup({ admin: { can_run: false, can_access_api: false }, user: {} }).open()
    assert.ok(Object.values(store.permissions('nobody')).every((v) => v === false))
    assert.ok(Object.values(store.permissions('admin')).every((v) => v === true))
    assert.ok(Object.values(store.permissions('user')).every((v) => v === false), 'missing keys are false')
    assert.equal(store.has('nobody'), false)
    assert.equal(store.has('toString'), false, 'prototype names are not roles')
    assert.ok(Object.values(store.permissions('__proto__')).every((v) => v === false))
    assert.ok(Object.values(store.permissions('constructor')).every((v) => v === false))
  })

  it('snapshot is a copy: mutating it changes nothing', () => {
    const store = setup().open()
    const snap = store.snapshot()
    snap.user.can_run = false
    assert.equal(store.permissions('user').can_run, true)
  })
})

describe('reload()', () => {
  it('a valid edit on disk applies', () => {
    const { path, open } = setup()
    const store = open()
    assert.equal(store.permissions('user').can_run, true)
    writeFileSync(path, JSON.stringify({ ...USER_CANNOT_RUN, artist: { can_run: true, mfa_required: true } }))
    assert.equal(store.reload(), true)
    assert.equal(store.permissions('user').can_run, false)
    assert.equal(store.permissions('artist').can_run, true)
    assert.equal(store.permissions('artist').can_upload, false)
    assert.equal(store.mfaRequired('artist'), true)
  })

  const invalid: Array<[string, string]> = [
    ['bad JSON', '{"admin": {}, "user": {"can_run": true,'],
    ['an empty file', ''],
    ['an unknown key', JSON.stringify({ ...DEFAULT_GROUPS, user: { ...DEFAULT_GROUPS.user, can_run: true, can_fly: true } })],
    ['a non-boolean value', JSON.stringify({ ...DEFAULT_GROUPS, user: { ...DEFAULT_GROUPS.user, can_run: 'true' } })],
    ['a numeric value', JSON.stringify({ ...DEFAULT_GROUPS, user: { ...DEFAULT_GROUPS.user, can_run: 1 } })],
    ['a null value', JSON.stringify({ ...DEFAULT_GROUPS, user: { ...DEFAULT_GROUPS.user, can_run: null } })],
    ['the admin role removed', JSON.stringify({ user: { can_run: true } })],
    ['a role that is not an object', JSON.stringify({ ...DEFAULT_GROUPS, user: true })],
    ['an invalid role name', JSON.stringify({ ...DEFAULT_GROUPS, 'bad role': {} })],
    ['a top-level array', JSON.stringify([DEFAULT_GROUPS])],
    ['JSON null', 'null'],
  ]
  for (const [name, text] of invalid) {
    it(`${name}: refused with a logged error; a denied action stays denied`, () => {
      const { path, cap, open } = setup(USER_CANNOT_RUN)
      const store = open()
      writeFileSync(path, text)
      assert.equal(store.reload(), false)
      assert.equal(store.permissions('user').can_run, false, 'the previous (denying) policy stays')
      assert.deepEqual(store.snapshot(), USER_CANNOT_RUN)
      const errors = cap.errors()
      assert.equal(errors.length, 1)
      assert.match(errors[0].msg, /refused|unreadable/)
    })
  }

  it('a deleted file keeps the previous policy', () => {
    const { path, cap, open } = setup(USER_CANNOT_RUN)
    const store = open()
    unlinkSync(path)
    assert.equal(store.reload(), false)
    assert.equal(store.permissions('user').can_run, false)
    assert.equal(cap.errors().length, 1)
  })

  it('after an invalid edit, the next valid edit applies', () => {
    const { path, open } = setup(USER_CANNOT_RUN)
    const store = open()
    writeFileSync(path, '{oops')
    assert.equal(store.reload(), false)
    writeFileSync(path, JSON.stringify(withUser({ can_run: true, can_upload: false })))
    assert.equal(store.reload(), true)
    assert.equal(store.permissions('user').can_run, true)
    assert.equal(store.permissions('user').can_upload, false)
  })

  it('replace() writes the file atomically and applies at once', () => {
    const { path, open } = setup()
    const store = open()
    store.replace(USER_CANNOT_RUN)
    assert.deepEqual(JSON.parse(readFileSync(path, 'utf8')), USER_CANNOT_RUN)
    assert.equal(statSync(path).mode & 0o777, 0o600)
    assert.equal(store.permissions('user').can_run, false)
  })
})

describe('watch()', () => {
  it('an edit written in place applies within 2 s', async () => {
    const { path, open } = setup()
    const store = open()
    store.watch()
    await watcherReady(store)
    const started = Date.now()
    writeFileSync(path, JSON.stringify(USER_CANNOT_RUN))
    await waitFor('the edit to apply', () => store.permissions('user').can_run === false)
    assert.ok(Date.now() - started < 2000, `applied after ${Date.now() - started} ms`)
  })

  it('an edit saved the editor way (temp file + rename) applies', async () => {
    const { path, open } = setup()
    const store = open()
    store.watch()
    await watcherReady(store)
    writeFileSync(`${path}.tmp`, JSON.stringify(withUser({ can_upload: false })))
    renameSync(`${path}.tmp`, path)
    await waitFor('the renamed edit to apply', () => store.permissions('user').can_upload === false)
    writeFileSync(`${path}.tmp`, JSON.stringify(withUser({ can_upload: true, can_run: false })))
    renameSync(`${path}.tmp`, path)
    await waitFor('a second renamed edit to apply', () => store.permissions('user').can_run === false)
  })

  it('replace() is one change: the watcher seeing its write, or an unchanged save, moves nothing', async () => {
    const { path, open } = setup()
    const store = open()
    let changes = 0
    store.onChange = () => void changes++
    store.watch()
    await watcherReady(store)
    const watcher = (store as unknown as { watcher: EventEmitter }).watcher
    // the store's own listener was added first, so it has run when this one resolves
    const seen = once(watcher, 'change')
    store.replace(USER_CANNOT_RUN)
    assert.equal(changes, 1, 'the replace itself')
    await seen
    assert.equal(changes, 1, 'the watcher read back the same roles: no second change')
    const again = once(watcher, 'change')
    writeFileSync(path, `${JSON.stringify(USER_CANNOT_RUN)}\n`) // saved again, other spacing, same roles
    await again
    assert.equal(changes, 1, 'an unchanged save is no change')
    const third = once(watcher, 'change')
    writeFileSync(path, JSON.stringify(withUser({ can_run: true })))
    await third
    assert.equal(changes, 2, 'a real edit is one')
  })

  it('an invalid edit is refused (logged) and the denying policy stays in force', async () => {
    const { path, cap, open } = setup(USER_CANNOT_RUN)
    const store = open()
    store.watch()
    await watcherReady(store)
    writeFileSync(path, JSON.stringify({ ...DEFAULT_GROUPS, user: { ...DEFAULT_GROUPS.user, can_run: true, sudo: true } }))
    await waitFor('the refusal to be logged', () => cap.errors().length > 0)
    assert.equal(store.permissions('user').can_run, false)
    writeFileSync(path, '{ not json')
    await waitFor('the second refusal to be logged', () => cap.errors().length > 1)
    assert.equal(store.permissions('user').can_run, false)
    writeFileSync(path, JSON.stringify(withUser({ can_run: true })))
    await waitFor('the valid edit to apply', () => store.permissions('user').can_run === true)
  })
})

describe('validateGroups', () => {
  it('reports every problem of a map at once', () => {
    const result = validateGroups({ user: { can_fly: true, can_run: 'x' }, 'bad name': {}, guest: 3 })
    assert.ok('problems' in result)
    const text = result.problems.join('\n')
    for (const part of ['can_fly', 'can_run', 'bad name', 'guest', 'admin role']) assert.ok(text.includes(part), `${part} in ${text}`)
  })

  it('accepts mfa_required and every permission key; extra roles are allowed', () => {
    const result = validateGroups({ ...DEFAULT_GROUPS, artist: { can_run: true, mfa_required: true } })
    assert.ok('groups' in result)
  })
})
