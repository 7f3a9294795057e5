/**
 * Issue 21, item 6, in the real browser (Debian chromium via playwright-core): where a page's
 * own script or the browser's URL parser decides where a signed-in user ends up.
 *
 * - /loading?next=...: the page goes on by script; the browser drops tabs and newlines from a
 *   URL and reads `\` as `/`, so a rule checked on the text the script read was not the rule
 *   the browser applied. Every shape must land on this origin, at what the server's rule says.
 * - GET /logout from a link on another site (cross-site) or a sibling origin (same-site): the
 *   browser sends the Lax cookie with the top-level navigation; the session must survive.
 */
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Browser, BrowserContext, Page } from 'playwright-core'
import { destroyStack, startStack, type Stack } from '../helpers/stack.js'
import { PASSWORD, register } from '../helpers/client.js'
import { launchChromium } from './browser-kit.js'

/** `next` as it appears in the query, and the path of this origin the browser must end on. */
const SHAPES: Array<[string, string]> = [
  ['/%09/host:9/x', '/'],
  ['/%0A/host:9/x', '/'],
  ['/%0D/host:9/x', '/'],
  ['%09//host:9/x', '/'],
  ['//host:9/x', '/'],
  ['/%5Chost:9/x', '/'],
  ['/%5C/host:9/x', '/'],
  ['/%2F/host:9/x', '/'],
  ['/.//host:9/x', '/'],
  ['/%2e//host:9/x', '/'],
  ['/./%5Chost:9/x', '/'],
  ['javascript:alert(1)', '/'],
  ['http://host:9/x', '/'],
  ['/authsvc/account', '/authsvc/account'],
]

async function landing(page: Page, url: string): Promise<string> {
  await page.goto(url)
  // the page's script navigates on once /authsvc/api/me answers: wait for that navigation, not a time
  try {
    await page.waitForURL((u) => u.pathname !== '/loading')
  } catch (error) {
    // a navigation to another origin that failed to load (host:9) is a landing too: the row's answer
    return `a failed navigation (${(error as Error).message.split('\n')[0]})`
  }
  return page.url()
}

describe('/loading and GET /logout in chromium', () => {
  let stack: Stack
  let browser: Browser
  let context: BrowserContext
  let attacker: Server
  let attackerPort: number
  before(async () => {
    stack = await startStack()
    assert.equal((await register(stack, 'admin')).status, 201)
    browser = await launchChromium()
    attacker = createServer((req, res) => {
      res.writeHead(200, { 'Content-Type': 'text/html' })
      res.end(`<!doctype html><title>elsewhere</title><a id="go" href="${stack.url}/logout">free prize</a>`)
    })
    attacker.listen(0, '127.0.0.1')
    await new Promise((resolve) => attacker.once('listening', resolve))
    attackerPort = (attacker.address() as AddressInfo).port
  })
  after(async () => {
    await browser?.close()
    attacker?.close()
    await destroyStack(stack)
  })

  const signIn = async (): Promise<Page> => {
    context = await browser.newContext()
    const page = await context.newPage()
    await page.goto(`${stack.url}/login`)
    await page.fill('#username', 'admin')
    await page.fill('#password', PASSWORD)
    await page.click('#submit')
    await page.waitForURL(`${stack.url}/`)
    return page
  }

  it('a signed-in browser sent to /loading?next=<shape> stays on this origin, where the server\'s rule says', async () => {
    const page = await signIn()
    const wrong: string[] = []
    for (const [next, expected] of SHAPES) {
      const landed = await landing(page, `${stack.url}/loading?next=${next}`)
      if (landed !== `${stack.url}${expected}`) wrong.push(`next=${next}: landed on ${landed}`)
    }
    await context.close()
    assert.deepEqual(wrong, [])
  })

  it('an anonymous browser sent to /loading?next=<shape> goes to the login page with the same safe `next`', async () => {
    context = await browser.newContext()
    const page = await context.newPage()
    for (const [next, expected] of [['/%09/host:9/x', '/'], ['/authsvc/account', '/authsvc/account']]) {
      const landed = await landing(page, `${stack.url}/loading?next=${next}`)
      assert.equal(landed, `${stack.url}/login?next=${encodeURIComponent(expected)}`, next)
    }
    await context.close()
  })

  for (const [site, host] of [['cross-site', 'localhost'], ['same-site (a sibling port)', '127.0.0.1']] as const) {
    it(`a link to /logout on a ${site} page does not end the session`, async () => {
      const page = await signIn()
      await page.goto(`http://${host}:${attackerPort}/`)
      const [answer] = await Promise.all([page.waitForResponse(`${stack.url}/logout`), page.click('#go')])
      assert.equal(answer.status(), 403)
      assert.equal((await answer.json()).code, 'CSRF_REJECTED')
      await page.goto(`${stack.url}/authsvc/account`)
      assert.equal(page.url(), `${stack.url}/authsvc/account`, 'still signed in: not sent to the login page')
      // the control: typed into the address bar (Sec-Fetch-Site: none), it logs out. From a blank page:
      // the account page's own script sends it to /login?next=... when the session ends, which can
      // win the race with this navigation (as in login-pages.test.ts)
      await page.goto('about:blank')
      await page.goto(`${stack.url}/logout`)
      assert.equal(page.url(), `${stack.url}/login`)
      await page.goto(`${stack.url}/authsvc/account`)
      assert.equal(page.url(), `${stack.url}/login?next=%2Fauthsvc%2Faccount`)
      await context.close()
    })
  }
})
