/**
 * What the browser suites share: chromium (Debian's, via playwright-core), screenshots of a
 * page at 1280 px and 390 px in light and dark (test-results/screenshots/, gitignored), the
 * axe-core accessibility check (injected through DevTools, so the pages' CSP stays as sent),
 * and a watch for Content-Security-Policy violations.
 */
import assert from 'node:assert/strict'
import { mkdirSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core'
import { ROOT } from '../helpers/stack.js'

/** A new browser context signed in through the login page as `username`, landing on the admin panel. */
export async function adminContext(browser: Browser, baseUrl: string, username: string, password: string): Promise<BrowserContext> {
  const context = await browser.newContext()
  const signIn = await context.newPage()
  await signIn.goto(`${baseUrl}/login?next=%2Fauthsvc%2Fadmin`)
  await signIn.getByLabel('Username').fill(username)
  await signIn.getByLabel('Password').fill(password)
  await signIn.getByRole('button', { name: 'Sign in' }).click()
  await signIn.waitForURL(`${baseUrl}/authsvc/admin`)
  await signIn.close()
  return context
}

/**
 * Signs `page` in through the login page as `username`. Without `next` it opens the login page and
 * lands on ComfyUI's page (`/`); with `next` it opens that page, is sent to the login page, and
 * lands back on `next`.
 */
export async function signInOnPage(page: Page, baseUrl: string, username: string, password: string, next?: string): Promise<void> {
  if (next === undefined) await page.goto(`${baseUrl}/login`)
  else {
    await page.goto(`${baseUrl}${next}`)
    await page.waitForURL(/\/login\?next=/)
  }
  await page.getByLabel('Username').fill(username)
  await page.getByLabel('Password').fill(password)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.waitForURL(`${baseUrl}${next ?? '/'}`)
}

/** A new page of `context`, signed in as `username` by way of `next` (`signInOnPage`). */
export async function signedInPage(context: BrowserContext, baseUrl: string, username: string, password: string, next: string): Promise<Page> {
  const page = await context.newPage()
  await signInOnPage(page, baseUrl, username, password, next)
  return page
}

export const SCREENSHOTS = join(ROOT, 'test-results', 'screenshots')
const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8')

export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  })
}

export const VIEWS = [
  { width: 1280, height: 900, scheme: 'light' },
  { width: 1280, height: 900, scheme: 'dark' },
  { width: 390, height: 844, scheme: 'light' },
  { width: 390, height: 844, scheme: 'dark' },
] as const

interface AxeViolation { id: string; impact: string | null; help: string; nodes: Array<{ target: string[]; failureSummary?: string }> }

/** axe-core on the page as it is now: the serious and critical violations. */
export async function axeViolations(page: Page): Promise<AxeViolation[]> {
  if (!(await page.evaluate(() => 'axe' in window))) await page.evaluate(AXE_SOURCE)
  const result = await page.evaluate(async () => {
    const axe = (window as unknown as { axe: { run(ctx: Document, opts: object): Promise<{ violations: AxeViolation[] }> } }).axe
    return axe.run(document, { resultTypes: ['violations'] })
  })
  return result.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
}

/**
 * Screenshots of the page in every view (`<name>-<width>-<scheme>.png`) and the axe check in
 * each; the page is left at the first view. Returns the files written.
 */
export async function shootAndCheck(page: Page, name: string): Promise<string[]> {
  mkdirSync(SCREENSHOTS, { recursive: true })
  const files: string[] = []
  for (const view of VIEWS) {
    await page.setViewportSize({ width: view.width, height: view.height })
    await page.emulateMedia({ colorScheme: view.scheme })
    const file = join(SCREENSHOTS, `${name}-${view.width}-${view.scheme}.png`)
    await page.screenshot({ path: file, fullPage: true })
    files.push(file)
    const violations = await axeViolations(page)
    assert.deepEqual(violations.map((v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`), [], `axe on ${name} at ${view.width} px ${view.scheme}`)
  }
  await page.setViewportSize({ width: VIEWS[0].width, height: VIEWS[0].height })
  await page.emulateMedia({ colorScheme: 'light' })
  return files
}

/** Collects CSP violations the page reports (an inline script or style, a foreign origin). */
export function watchCsp(page: Page): string[] {
  const seen: string[] = []
  page.on('console', (message) => {
    if (/Content Security Policy/i.test(message.text())) seen.push(message.text())
  })
  return seen
}
