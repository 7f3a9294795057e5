/**
 * Files users put on the host reach the browser inert, on the REAL ComfyUI 0.3.64 (both aiohttp
 * versions): ComfyUI's /view serves an uploaded or generated file under the type its name gives,
 * inline, from the gate's own origin. It turns HTML, XHTML, JS and CSS into downloads, but not SVG
 * or XML: a user who uploads an SVG with a script, and gets an administrator to open it, would run
 * that script with the administrator's session. The gate adds `Content-Security-Policy: sandbox`
 * and `X-Content-Type-Options: nosniff` to the answers of the routes that serve such files
 * (access/host-routes.ts `inert`), so the script never runs; images in pages still show.
 *
 * In chromium, as the administrator signed in through the login page: the SVG opened as a page
 * runs nothing; an <img> of an image from /view on ComfyUI's page still loads. Over HTTP: the
 * headers on /view, /api/view, HEAD /view and /userdata/{file}, and not on the frontend page.
 * Skipped where no real ComfyUI exists.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { utimesSync } from 'node:fs'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import type { Browser } from 'playwright-core'
import { ROOT } from '../helpers/stack.js'
import { REAL_HOST_SKIP, destroyRealHost, startRealHost, type RealHost } from '../helpers/real-host.js'
import { PASSWORD, apiToken, bearer, json, register } from '../helpers/client.js'
import { testPng } from '../helpers/nsfw-images.js'
import { launchChromium, signInOnPage } from './browser-kit.js'

/** Marks its own document when its script runs: as the page's onload and as a script element. */
const EVIL_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64" onload="document.documentElement.setAttribute('data-onload', 'ran')">
<script>document.documentElement.setAttribute('data-script', 'ran'); fetch('/authsvc/api/me').then(() => document.documentElement.setAttribute('data-fetched', 'ran'))</script>
<rect width="64" height="64" fill="red"/></svg>`

const INERT = { 'content-security-policy': 'sandbox', 'x-content-type-options': 'nosniff', 'cache-control': 'no-cache' }

/** another package's routes that serve input files inline (test/e2e/fixtures/file-viewer) */
const FILE_VIEWER = join(ROOT, 'test', 'e2e', 'fixtures', 'file-viewer')
const OPERATOR_INERT = ['/authsvc_fixture/viewfile', '/authsvc_fixture/files']

for (const aiohttp of ['3.8', '3.11'] as const) {
  describe(`files users put on the real ComfyUI reach the browser inert (aiohttp ${aiohttp})`, { skip: REAL_HOST_SKIP, concurrency: false }, () => {
    let host: RealHost
    let browser: Browser | undefined
    let admin: string
    let mallory: string
    let svg: string
    let svgName: string
    let svgSub: string
    let png: string

    async function upload(name: string, bytes: string | Uint8Array<ArrayBuffer>, type: string): Promise<string> {
      const form = new FormData()
      form.append('image', new Blob([bytes], { type }), name)
      const res = await fetch(`${host.url}/upload/image`, { method: 'POST', headers: bearer(mallory), body: form })
      assert.equal(res.status, 200, await res.clone().text())
      const body = await json(res)
      return `filename=${encodeURIComponent(body.name)}&subfolder=${encodeURIComponent(body.subfolder)}&type=input`
    }

    before(async () => {
      ;[host, browser] = await Promise.all([
        startRealHost({
          aiohttp,
          args: ['--front-end-root', join(ROOT, 'test', 'host-standin', 'web')],
          customNodes: [FILE_VIEWER],
          // 3.8: the default list (it names /vhs/viewvideo); 3.11: an operator's own, which replaces it
          config: aiohttp === '3.11' ? { inert_route_patterns: OPERATOR_INERT } : undefined,
        }),
        aiohttp === '3.11' ? launchChromium() : Promise.resolve(undefined),
      ])
      assert.equal((await register(host, 'root')).status, 201)
      admin = await apiToken(host, 'root')
      assert.equal((await register(host, 'mallory', { bearer: admin })).status, 201)
      mallory = await apiToken(host, 'mallory')
      svg = await upload('evil.svg', EVIL_SVG, 'image/svg+xml')
      svgName = new URLSearchParams(svg).get('filename')!
      svgSub = new URLSearchParams(svg).get('subfolder')!
      png = await upload('fine.png', new Uint8Array(testPng(7, { size: 32 })), 'image/png')
    })
    after(async () => {
      await browser?.close()
      if (host) await destroyRealHost(host)
    })

    const rows: Array<[string, string, string, () => string]> = [
      ['GET /view of the SVG', 'GET', '/view', () => svg],
      ['GET /api/view of the SVG (the twin)', 'GET', '/api/view', () => svg],
      ['HEAD /view of the SVG', 'HEAD', '/view', () => svg],
      ['GET /view of a PNG', 'GET', '/view', () => png],
    ]
    for (const [name, method, path, query] of rows) {
      it(`${name}: the host's type, and the headers that keep it inert`, async () => {
        const res = await fetch(`${host.url}${path}?${query()}`, { method, headers: bearer(admin) })
        await res.arrayBuffer()
        assert.equal(res.status, 200)
        assert.equal(res.headers.get('content-type'), query() === svg ? 'image/svg+xml' : 'image/png', 'the host still names the type')
        for (const [header, value] of Object.entries(INERT)) assert.equal(res.headers.get(header), value, header)
      })
    }

    it('GET /userdata/{file}: a file a user wrote there is inert too', async () => {
      const file = encodeURIComponent('notes/evil.svg')
      const wrote = await fetch(`${host.url}/userdata/${file}`, { method: 'POST', headers: bearer(mallory), body: EVIL_SVG })
      assert.equal(wrote.status, 200, await wrote.text())
      const res = await fetch(`${host.url}/userdata/${file}`, { headers: bearer(mallory) })
      assert.equal(res.status, 200)
      assert.equal(await res.text(), EVIL_SVG)
      for (const [header, value] of Object.entries(INERT)) assert.equal(res.headers.get(header), value, header)
    })

    // another custom node's file routes: inert when the operator's list (or the default) names them, and only then
    const listed = aiohttp === '3.11' ? OPERATOR_INERT : ['/vhs/viewvideo']
    const customRows: Array<[string, string, () => string]> = [
      ['GET', '/vhs/viewvideo', () => `?${svg}`],
      ['GET', '/api/vhs/viewvideo', () => `?${svg}`],
      ['HEAD', '/vhs/viewvideo', () => `?${svg}`],
      ['GET', '/authsvc_fixture/viewfile', () => `?${svg}`],
      ['GET', '/api/authsvc_fixture/viewfile', () => `?${svg}`],
      ['GET', '/authsvc_fixture/plainfile', () => `?${svg}`],
      ['GET', '/authsvc_fixture/files', () => `/${svgSub === '' ? '' : `${svgSub}/`}${svgName}`],
    ]
    for (const [method, path, rest] of customRows) {
      const inert = listed.includes(path.replace(/^\/api\//, '/'))
      it(`another custom node's ${method} ${path}: ${inert ? 'inert, as listed' : 'not listed, so unmarked'}`, async () => {
        const res = await fetch(`${host.url}${path}${rest()}`, { method, headers: bearer(admin) })
        const body = await res.text()
        assert.equal(res.status, 200)
        assert.equal(res.headers.get('content-type'), 'image/svg+xml')
        if (method === 'GET') assert.equal(body, EVIL_SVG)
        for (const [header, value] of Object.entries(INERT)) assert.equal(res.headers.get(header), inert ? value : null, header)
      })
    }

    it("the frontend's own page is not sandboxed (its scripts must run)", async () => {
      const res = await fetch(`${host.url}/`, { headers: bearer(admin) })
      await res.arrayBuffer()
      assert.equal(res.status, 200)
      assert.equal(res.headers.get('content-security-policy'), null)
    })

    it('in chromium, the administrator opening the SVG (from /view, and from a listed custom node route) runs none of its script; an <img> of a /view image still shows', { skip: aiohttp === '3.8' ? 'the browser rows run once, on aiohttp 3.11' : false }, async () => {
      const context = await browser!.newContext()
      try {
        const page = await context.newPage()
        await signInOnPage(page, host.url, 'root', PASSWORD)

        // an image from /view in ComfyUI's page: the headers change nothing for it
        const width = await page.evaluate(async (src) => {
          const img = document.createElement('img')
          img.src = src
          document.body.append(img)
          await img.decode()
          return img.naturalWidth
        }, `/view?${png}`)
        assert.equal(width, 32)

        const opened = await page.goto(`${host.url}/view?${svg}`)
        assert.equal(opened?.status(), 200)
        assert.equal(await opened?.headerValue('content-type'), 'image/svg+xml')
        await page.waitForLoadState('load')
        // the document is the SVG itself, drawn; what its script would have marked is unmarked
        assert.equal(await page.evaluate(() => document.documentElement.localName), 'svg')
        const marks = await page.evaluate(() => ['data-onload', 'data-script', 'data-fetched'].map((a) => document.documentElement.getAttribute(a)))
        assert.deepEqual(marks, [null, null, null], 'no script of the SVG ran')

        // the same file through another custom node's route the operator listed
        const viewer = await page.goto(`${host.url}/authsvc_fixture/viewfile?${svg}`)
        assert.equal(viewer?.status(), 200)
        await page.waitForLoadState('load')
        assert.equal(await page.evaluate(() => document.documentElement.localName), 'svg')
        const viewerMarks = await page.evaluate(() => ['data-onload', 'data-script', 'data-fetched'].map((a) => document.documentElement.getAttribute(a)))
        assert.deepEqual(viewerMarks, [null, null, null], 'no script of the SVG ran through the listed route')
      } finally {
        await context.close()
      }
    })

    it('in chromium, an uploaded .js (served as application/javascript) runs neither as a <script> (also once fetched and cached) nor as a service worker on the origin; fetching it still works', { skip: aiohttp === '3.8' ? 'the browser rows run once, on aiohttp 3.11' : false }, async () => {
      const js = await upload('evil.js', 'self.__authsvcEvil = 1', 'text/javascript')
      // a file from a day ago: without a Cache-Control, a browser keeps such an answer fresh for hours (heuristically)
      const q = new URLSearchParams(js)
      const dayAgo = new Date(Date.now() - 86_400_000)
      utimesSync(join(host.inputDir, q.get('subfolder')!, q.get('filename')!), dayAgo, dayAgo)
      const context = await browser!.newContext()
      try {
        const page = await context.newPage()
        await signInOnPage(page, host.url, 'root', PASSWORD)
        const outcome = await page.evaluate(async (src) => {
          // fetched first (an <img>, a download, a viewer): a copy in the browser's cache must not run later
          const fetched = await fetch(src)
          await fetched.text()
          const script = document.createElement('script')
          script.src = src
          const loaded = await new Promise<string>((resolve) => {
            script.onload = () => resolve('loaded')
            script.onerror = () => resolve('refused')
            document.head.append(script)
          })
          let worker: string
          try {
            await navigator.serviceWorker.register(src, { scope: '/' })
            worker = 'registered'
          } catch {
            worker = 'refused'
          }
          return { loaded, ran: (self as unknown as { __authsvcEvil?: number }).__authsvcEvil ?? null, worker, fetched: fetched.status, type: fetched.headers.get('content-type') }
        }, `/view?${js}`)
        assert.deepEqual(outcome, { loaded: 'refused', ran: null, worker: 'refused', fetched: 200, type: 'application/javascript; charset=utf-8' })
      } finally {
        await context.close()
      }
    })

    it('in chromium, a page of a sibling origin (another port of this host: same-site, so the session cookie goes with its frame) cannot show ComfyUI in a frame; ComfyUI\'s own origin can', { skip: aiohttp === '3.8' ? 'the browser rows run once, on aiohttp 3.11' : false }, async () => {
      const hostOrigin = new URL(host.url).origin
      const sibling = createServer((_req, res) => {
        res.writeHead(200, { 'Content-Type': 'text/html' })
        res.end(`<!doctype html><title>sibling</title><iframe id="f" src="${hostOrigin}/"></iframe>`)
      })
      await new Promise<void>((resolve) => sibling.listen(0, '127.0.0.1', resolve))
      const context = await browser!.newContext()
      try {
        const page = await context.newPage()
        await signInOnPage(page, host.url, 'root', PASSWORD)
        // the frame's request reaches the gate signed in (200) and its answer names who may frame it
        const framed = page.waitForResponse((r) => r.url() === `${hostOrigin}/` && r.request().frame() !== page.mainFrame())
        await page.goto(`http://127.0.0.1:${(sibling.address() as AddressInfo).port}/`)
        const answer = await framed
        assert.equal(answer.status(), 200, 'the session cookie went with the frame: without a policy it would show ComfyUI signed in')
        assert.equal(await answer.headerValue('content-security-policy'), "frame-ancestors 'self'")
        const child = page.frames().find((f) => f !== page.mainFrame())!
        await page.waitForFunction(() => document.readyState === 'complete')
        assert.equal(child.url(), 'chrome-error://chromewebdata/', 'the browser refused to show it')
        // ComfyUI's own page may frame itself
        await page.goto(`${hostOrigin}/authsvc/api/me`)
        const own = await page.evaluate(async (src) => {
          const frame = document.createElement('iframe')
          frame.src = src
          await new Promise((resolve) => {
            frame.onload = resolve
            document.body.append(frame)
          })
          return frame.contentDocument?.title ?? null
        }, `${hostOrigin}/`)
        assert.equal(own, await page.evaluate(async (src) => new DOMParser().parseFromString(await (await fetch(src)).text(), 'text/html').title, `${hostOrigin}/`))
      } finally {
        await context.close()
        sibling.close()
      }
    })
  })
}
