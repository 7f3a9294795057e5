/**
 * Permissions: what a role without can_run, can_upload or
 * can_modify_workflows is refused, admin-only routes, roles missing from the
 * groups file, role changes on the next request, and userdata writes under
 * workflows/ in every spelling.
 *
 * Part of the decision path's attack table (DESIGN §6 "Attack tables", STYLE 7):
 * one row per bypass shape, through the real decider and real services; the
 * shared world is decide-world.ts.
 */
import { describe, it, before, after } from 'node:test'
import { addUser, apiToken, assertDenied, assertPass, bearer, decide, sessionJwt, type DescOptions } from './fixtures.js'
import { QUEUE, at, world, type World } from './decide-world.js'

// ------------------------------------------------------------- permissions

describe('permissions and admin routes', () => {
  let w: World
  before(async () => {
    w = await world({ admin_route_patterns: ['/manager/queue/start'] })
  })
  after(() => w.sc.close())

  const needsRun: Array<[string, string, string]> = [
    ['POST', '/prompt', '/prompt'], ['POST', '/api/prompt', '/api/prompt'], ['PUT', '/prompt', '/prompt'],
    ['POST', '/queue', '/queue'], ['POST', '/api/history', '/api/history'], ['POST', '/interrupt', '/interrupt'],
  ]
  for (const [method, path, pattern] of needsRun) {
    it(`a role without can_run → 403 PERMISSION_DENIED on ${method} ${path}`, async () => {
      assertDenied(await decide(w.sc, { method, path, pattern, headers: bearer(w.viewerJwt) }), 'PERMISSION_DENIED')
    })
  }

  for (const path of ['/upload/image', '/api/upload/mask']) {
    it(`a role without can_upload → 403 on POST ${path}`, async () => {
      assertDenied(await decide(w.sc, { method: 'POST', path, pattern: path, headers: bearer(w.viewerJwt) }), 'PERMISSION_DENIED')
    })
  }

  it('a role with can_access_api only still reads (GET /queue, /object_info, /api/history)', async () => {
    for (const [path, pattern] of [['/queue', '/queue'], ['/object_info', '/object_info'], ['/api/history', '/api/history']]) {
      assertPass(await decide(w.sc, { path, pattern, headers: bearer(w.viewerJwt) }), path)
    }
  })

  const adminOnly: Array<[string, string, string]> = [
    ['POST', '/free', '/free'], ['POST', '/api/free', '/api/free'], ['HEAD', '/internal/logs', '/internal/logs'],
    ['GET', '/internal/folder_paths', '/internal/folder_paths'], ['PATCH', '/internal/logs/subscribe', '/internal/logs/subscribe'],
    ['GET', '/api/internal/logs', '/api/internal/logs'], ['POST', '/manager/queue/start', '/manager/queue/start'],
    ['GET', '/api/manager/queue/start', '/api/manager/queue/start'],
  ]
  for (const [method, path, pattern] of adminOnly) {
    it(`admin-only ${method} ${path}: user → 403 ADMIN_REQUIRED, admin passes`, async () => {
      assertDenied(await decide(w.sc, { method, path, pattern, headers: bearer(w.aliceToken) }), 'ADMIN_REQUIRED')
      assertPass(await decide(w.sc, { method, path, pattern, headers: bearer(w.adminJwt) }))
    })
  }

  it('a role named "Admin" with every permission is not the admin role', async () => {
    assertDenied(await decide(w.sc, { method: 'POST', path: '/free', pattern: '/free', headers: bearer(w.fakeAdminJwt) }), 'ADMIN_REQUIRED')
  })

  it('a role missing from the groups file has no permission (deny, not default)', async () => {
    const ghost = await addUser(w.sc, 'ghost', 'ghost-passphrase-1', 'ghost-role')
    const jwt = await sessionJwt(w.sc, ghost)
    assertDenied(await decide(w.sc, at(QUEUE, { headers: bearer(jwt) })), 'PERMISSION_DENIED')
    assertPass(await decide(w.sc, { path: '/view', pattern: '/view', headers: bearer(jwt) }))
  })

  it('a role change applies to the very next request (no cached principal)', async () => {
    const fred = await addUser(w.sc, 'fred', 'fred-passphrase-1')
    const token = await apiToken(w.sc, fred)
    assertPass(await decide(w.sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: bearer(token) }))
    await w.sc.services.users.update(fred.user_id, { role: 'viewer' })
    assertDenied(await decide(w.sc, { method: 'POST', path: '/prompt', pattern: '/prompt', headers: bearer(token) }), 'PERMISSION_DENIED')
  })
})

// ------------------------------------------------------------ userdata writes

describe('userdata writes under workflows/', () => {
  let w: World
  before(async () => {
    w = await world()
  })
  after(() => w.sc.close())

  const write = (method: string, pattern: string, match_info: Record<string, string>, jwt: string): DescOptions => ({
    method, path: pattern.replace('{file}', encodeURIComponent(match_info.file)).replace('{dest}', encodeURIComponent(match_info.dest ?? '')),
    pattern, match_info, headers: bearer(jwt),
  })

  for (const [method, pattern] of [['POST', '/userdata/{file}'], ['DELETE', '/userdata/{file}'], ['POST', '/api/userdata/{file}']] as const) {
    it(`${method} ${pattern} workflows/a.json: without can_modify_workflows → 403; with it → pass`, async () => {
      assertDenied(await decide(w.sc, write(method, pattern, { file: 'workflows/a.json' }, w.viewerJwt)), 'PERMISSION_DENIED')
      assertDenied(await decide(w.sc, write(method, pattern, { file: '/workflows/a.json' }, w.viewerJwt)), 'PERMISSION_DENIED', 'leading slash')
      assertPass(await decide(w.sc, write(method, pattern, { file: 'workflows/a.json' }, w.aliceJwt)))
    })
  }

  it('other userdata files need only a principal', async () => {
    assertPass(await decide(w.sc, write('POST', '/userdata/{file}', { file: 'comfy.settings.json' }, w.viewerJwt)))
  })

  it('move of a workflow without can_modify_workflows → 403', async () => {
    assertDenied(await decide(w.sc, write('POST', '/userdata/{file}/move/{dest}', { file: 'workflows/a.json', dest: 'workflows/b.json' }, w.viewerJwt)), 'PERMISSION_DENIED')
  })

  const traversal: Array<[string, Record<string, string>]> = [
    ['./workflows/a.json', { file: './workflows/a.json' }],
    ['x/../workflows/a.json', { file: 'x/../workflows/a.json' }],
    ['.//workflows/a.json', { file: './/workflows/a.json' }],
    ['double-encoded workflows%2Fa.json (the host unquotes a file name holding "%" once more)', { file: 'workflows%2Fa.json' }],
    // Python's unquote turns bytes that are not UTF-8 into U+FFFD and decodes the rest of the run
    ['x%ff%2F..%2Fworkflows%2Fa.json (an invalid byte before the escaped slash)', { file: 'x%ff%2F..%2Fworkflows%2Fa.json' }],
    ['x%e2%82%2F..%2Fworkflows%2Fa.json (a cut UTF-8 sequence before it)', { file: 'x%e2%82%2F..%2Fworkflows%2Fa.json' }],
    ['%c0%ae%2F..%2Fworkflows%2Fa.json (an overlong dot)', { file: 'y%c0%ae%2F..%2Fworkflows%2Fa.json' }],
  ]
  for (const [name, match_info] of traversal) {
    it(`traversal into workflows/ (${name}) without can_modify_workflows → 403`, async () => {
      assertDenied(await decide(w.sc, write('POST', '/userdata/{file}', match_info, w.viewerJwt)), 'PERMISSION_DENIED', name)
    })
  }

  it('move INTO workflows/ from another userdata file without can_modify_workflows → 403', async () => {
    assertDenied(await decide(w.sc, write('POST', '/userdata/{file}/move/{dest}', { file: 'notes.json', dest: 'workflows/x.json' }, w.viewerJwt)), 'PERMISSION_DENIED')
  })
})
