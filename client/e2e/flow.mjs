#!/usr/bin/env node
// Browser end-to-end test of a running Stampede (issue 6): log in, buy, see
// WAITING_PAY appear without a reload, pay, see PAID; then drop the socket
// while the order changes state and check that the page shows the current
// state within 2 s of reconnecting, never going backwards; then the waiting
// room (issue 17): wait in line, see the position move, get admitted, buy,
// and a buyer behind sees "sold out" without reloading.
//
// Environment:
//   STAMPEDE_URL           gateway serving client/dist (default http://127.0.0.1:8080)
//   STAMPEDE_ADMIN_TOKEN   admin bearer token (`stampede token --user 1 --admin`), required
//   STAMPEDE_PUSH_URL      WebSocket URL of push, if GET /api/config does not give it
//   CHROMIUM               browser binary (default /usr/bin/chromium)
//   E2E_TIMEOUT_MS         bound on the whole run (default 120000)
//
// Screenshots go to client/e2e/artifacts/. Exit status 0 only if every check passed.
import { mkdir, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { chromium } from 'playwright-core'

const BASE = (process.env.STAMPEDE_URL || 'http://127.0.0.1:8080').replace(/\/$/, '')
const ADMIN_TOKEN = process.env.STAMPEDE_ADMIN_TOKEN || ''
const PUSH_URL = process.env.STAMPEDE_PUSH_URL || ''
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium'
const TIMEOUT_MS = Number(process.env.E2E_TIMEOUT_MS || 120_000)
const ARTIFACTS = path.join(path.dirname(fileURLToPath(import.meta.url)), 'artifacts')
const RECONNECT_BUDGET_MS = 2000

let passed = 0
let failed = 0
const check = (ok, what, detail = '') => {
  if (ok) {
    passed++
    console.log(`  ✓ ${what}${detail ? ` (${detail})` : ''}`)
  } else {
    failed++
    console.log(`  ✗ ${what}${detail ? ` (${detail})` : ''}`)
    throw new Error(`check failed: ${what} ${detail}`)
  }
}

async function api(method, p, body, token) {
  const res = await fetch(BASE + p, {
    method,
    headers: { 'Content-Type': 'application/json', ...(token ? { Authorization: `Bearer ${token}` } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  })
  const text = await res.text()
  let data = null
  try {
    data = text ? JSON.parse(text) : null
  } catch {
    data = text
  }
  if (!res.ok) throw new Error(`${method} ${p}: ${res.status} ${text}`)
  return data
}

async function waitReady() {
  const deadline = Date.now() + 60_000
  for (;;) {
    try {
      const res = await fetch(`${BASE}/readyz`, { signal: AbortSignal.timeout(2000) })
      if (res.ok) return
    } catch {
      /* not up yet */
    }
    if (Date.now() > deadline) throw new Error(`${BASE}/readyz not ready after 60 s`)
    await new Promise((r) => setTimeout(r, 500))
  }
}

async function main() {
  if (!ADMIN_TOKEN) throw new Error('set STAMPEDE_ADMIN_TOKEN (e.g. `stampede token --user 1 --admin`)')
  await mkdir(ARTIFACTS, { recursive: true })
  console.log(`e2e against ${BASE}`)
  await waitReady()

  const now = Date.now()
  const product = await api(
    'POST',
    '/api/admin/products',
    {
      name: `E2E gadget ${new Date(now).toISOString().slice(11, 19)}`,
      price: 1999,
      stock: 10,
      shards: 1,
      perUserLimit: 5,
      maxPerOrder: 1,
      saleStart: new Date(now - 1000).toISOString(),
      saleEnd: new Date(now + 3600_000).toISOString(),
    },
    ADMIN_TOKEN,
  )
  check(product?.id > 0, 'admin API created a product', `#${product.id}`)

  const userDir = await mkdtemp(path.join(tmpdir(), 'stampede-e2e-'))
  const context = await chromium.launchPersistentContext(userDir, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1280, height: 800 },
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  })
  const page = context.pages()[0] ?? (await context.newPage())
  const logs = []
  page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`))
  page.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`))
  page.setDefaultTimeout(20_000)
  if (PUSH_URL) await page.addInitScript((u) => localStorage.setItem('stampede.pushUrl', u), PUSH_URL)
  const shot = (name) => page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true })

  try {
    // --- log in as a fresh buyer
    const userId = 100_000 + Math.floor(Math.random() * 1e9)
    await page.goto(`${BASE}/login`)
    await page.fill('[data-testid=user-id]', String(userId))
    await page.click('[data-testid=login]')
    await page.waitForURL(`${BASE}/`)
    check(true, 'logged in', `user ${userId}`)
    await page.waitForFunction(() => window.__stampede?.state === 'open', null, { timeout: 10_000 })
    check(true, 'WebSocket to push is open')
    await page.locator(`[data-testid=product-${product.id}]`).waitFor()
    await shot('00-storefront')

    // --- buy
    await page.goto(`${BASE}/products/${product.id}`)
    const buy = page.locator('[data-testid=buy]')
    await buy.waitFor()
    await page.waitForFunction(() => !document.querySelector('[data-testid=buy]')?.disabled)
    await shot('01-product')
    await page.evaluate(() => (window.__e2eSamePage = true))
    await buy.dblclick() // a double click must not place two orders
    await page.waitForURL(/\/orders\/\d+$/)
    const orderNo = page.url().split('/').pop()
    check(/^\d{22,40}$/.test(orderNo), 'purchase accepted', orderNo)

    // --- WAITING_PAY appears without a reload
    const status = page.locator('[data-testid=order-status]')
    await page.waitForSelector('[data-testid=order-status][data-status=WAITING_PAY]', { timeout: 30_000 })
    check(await page.evaluate(() => window.__e2eSamePage === true), 'WAITING_PAY shown live, without a reload')
    await page.locator('[data-testid=pay-deadline]').waitFor()
    await shot('02-waiting-pay')

    // --- pay
    await page.click('[data-testid=pay]')
    await page.waitForSelector('[data-testid=order-status][data-status=PAID]', { timeout: 20_000 })
    check(true, 'PAID shown after paying')
    await shot('03-paid')

    // --- a second order, changed while the socket is down
    await page.click('text=← My orders')
    await page.waitForURL(`${BASE}/orders`)
    await page.locator(`[data-testid=order-${orderNo}]`).waitFor()
    await page.goto(`${BASE}/products/${product.id}`)
    await page.waitForFunction(() => !document.querySelector('[data-testid=buy]')?.disabled)
    await page.click('[data-testid=buy]')
    await page.waitForURL(/\/orders\/\d+$/)
    const orderNo2 = page.url().split('/').pop()
    check(orderNo2 !== orderNo, 'a new purchase made a new order', orderNo2)
    await page.waitForSelector('[data-testid=order-status][data-status=WAITING_PAY]', { timeout: 30_000 })
    await page.waitForFunction(() => window.__stampede?.state === 'open')

    // Record every state the page shows from now on.
    await page.evaluate(() => {
      const el = document.querySelector('[data-testid=order-status]')
      window.__e2eHistory = [{ at: Date.now(), status: el.dataset.status, version: Number(el.dataset.version) }]
      new MutationObserver(() => {
        const h = window.__e2eHistory
        const cur = { at: Date.now(), status: el.dataset.status, version: Number(el.dataset.version) }
        if (h[h.length - 1].version !== cur.version || h[h.length - 1].status !== cur.status) h.push(cur)
      }).observe(el, { attributes: true, subtree: true, childList: true, characterData: true })
    })
    // No reconnection for pauseMs and no polling for longer: the new state can
    // only come from the snapshot push sends when the socket is back.
    const pauseMs = 2500
    const droppedAt = await page.evaluate((ms) => {
      window.__stampede.dropSocket({ pauseMs: ms, pollPauseMs: ms + 10_000 })
      return Date.now()
    }, pauseMs)
    await page.waitForFunction(() => window.__stampede.state !== 'open')
    check(true, 'socket dropped by the test hook')
    const token = await page.evaluate(() => JSON.parse(localStorage.getItem('stampede.session')).token)
    const cancelled = await api('POST', `/api/orders/${orderNo2}/cancel`, undefined, token)
    check(cancelled.status === 'CANCELLED', 'order cancelled through the API while disconnected')
    await shot('04-disconnected')

    await page.waitForFunction((t) => window.__stampede.state === 'open' && window.__stampede.connectedAt > t, droppedAt, {
      timeout: pauseMs + 15_000,
    })
    await page.waitForSelector('[data-testid=order-status][data-status=CANCELLED]', { timeout: RECONNECT_BUDGET_MS + 3000 })
    const { history, connectedAt } = await page.evaluate(() => ({
      history: window.__e2eHistory,
      connectedAt: window.__stampede.connectedAt,
    }))
    const shown = history.find((h) => h.status === 'CANCELLED')
    check(shown.at >= droppedAt + pauseMs - 100, 'the change reached the page only after reconnecting', `${shown.at - droppedAt} ms after the drop`)
    const lag = shown.at - connectedAt
    check(lag <= RECONNECT_BUDGET_MS, `current state shown within ${RECONNECT_BUDGET_MS} ms of reconnecting`, `${lag} ms`)
    const backwards = history.some((h, i) => i > 0 && h.version < history[i - 1].version)
    check(!backwards, 'the page never went backwards', history.map((h) => `${h.status}@${h.version}`).join(' → '))
    await shot('05-after-reconnect')
    const mine = await api('GET', '/api/orders?limit=20', undefined, token)
    check(mine.orders.length === 2, 'one order per purchase (the double click made one)', `${mine.orders.length} orders`)

    // --- an upcoming sale: countdown, Buy disabled
    const upcoming = await api(
      'POST',
      '/api/admin/products',
      {
        name: 'E2E upcoming',
        price: 500,
        stock: 3,
        perUserLimit: 1,
        saleStart: new Date(Date.now() + 3600_000).toISOString(),
        saleEnd: new Date(Date.now() + 7200_000).toISOString(),
      },
      ADMIN_TOKEN,
    )
    await page.goto(`${BASE}/products/${upcoming.id}`)
    await page.locator('.countdown-big time').waitFor()
    const countdown = await page.locator('.countdown-big time').textContent()
    const disabled = await page.locator('[data-testid=buy]').isDisabled()
    check(/^\d\d:\d\d(:\d\d)?$/.test(countdown.trim()) && disabled, 'upcoming sale shows a countdown and a disabled Buy button', countdown.trim())
    await shot('06-upcoming')

    // --- waiting room (issue 17): a buyer waits, sees the position move, is
    // admitted and buys; another, further back, sees "sold out" without a reload.
    const room = await api(
      'POST',
      '/api/admin/products',
      {
        name: 'E2E waiting room',
        price: 900,
        stock: 1,
        perUserLimit: 1,
        waitingRoom: true,
        saleStart: new Date(Date.now() - 1000).toISOString(),
        saleEnd: new Date(Date.now() + 3600_000).toISOString(),
      },
      ADMIN_TOKEN,
    )
    check(room.waitingRoom === true, 'product created with its waiting room on', `#${room.id}`)
    await api('POST', `/api/admin/products/${room.id}/waiting-room`, { on: true, ceiling: 1, windowSeconds: 60 }, ADMIN_TOKEN)
    const lineUser = async (uid) => {
      const { token: t } = await api('POST', '/api/auth/login', { userId: uid })
      return t
    }
    const queueAs = async (t) => api('POST', `/api/products/${room.id}/queue`, undefined, t)
    const base = 200_000_000 + Math.floor(Math.random() * 1e6) * 10
    for (let i = 1; i <= 3; i++) await queueAs(await lineUser(base + i)) // three buyers ahead
    await page.goto(`${BASE}/products/${room.id}`)
    await page.click('[data-testid=join]')
    await page.locator('[data-testid=position]').waitFor()
    const firstPos = Number(await page.locator('[data-testid=position]').textContent())
    check(firstPos >= 1 && (await page.locator('[data-testid=buy]').isDisabled()), 'joined the line, Buy waits for the turn', `position ${firstPos}`)
    await shot('10-waiting-room')
    await page.evaluate(() => {
      window.__e2eLine = []
      window.__e2eLineSamePage = true
      setInterval(() => {
        const el = document.querySelector('[data-testid=position]')
        const st = document.querySelector('[data-testid=waiting-room]')?.dataset.state
        const v = el ? Number(el.textContent) : 0
        const h = window.__e2eLine
        if (!h.length || h[h.length - 1].pos !== v || h[h.length - 1].st !== st) h.push({ pos: v, st })
      }, 50)
    })
    for (let i = 4; i <= 7; i++) await queueAs(await lineUser(base + i)) // four more behind
    // The second buyer, in a browser of its own, joins behind them.
    const uidB = base + 8
    const tokenB = await lineUser(uidB)
    const dirB = await mkdtemp(path.join(tmpdir(), 'stampede-e2e-b-'))
    const ctxB = await chromium.launchPersistentContext(dirB, { executablePath: CHROMIUM, headless: true, args: ['--headless', '--no-sandbox', '--disable-gpu'] })
    try {
      const pageB = ctxB.pages()[0] ?? (await ctxB.newPage())
      pageB.setDefaultTimeout(20_000)
      await pageB.addInitScript(
        ([t, u, pu]) => {
          localStorage.setItem('stampede.session', JSON.stringify({ token: t, userId: u }))
          if (pu) localStorage.setItem('stampede.pushUrl', pu)
        },
        [tokenB, uidB, PUSH_URL],
      )
      await pageB.goto(`${BASE}/products/${room.id}`)
      await pageB.click('[data-testid=join]')
      await pageB.locator('[data-testid=position]').waitFor()
      // A reload keeps the place.
      const beforeReload = await pageB.evaluate(() => window.__stampede.place(Number(location.pathname.split('/').pop())).ticket)
      await pageB.reload()
      await pageB.locator('[data-testid=position]').waitFor()
      const afterReload = await pageB.evaluate(() => window.__stampede.place(Number(location.pathname.split('/').pop())).ticket)
      check(beforeReload > 0 && beforeReload === afterReload, 'a reload keeps the place in line', `ticket ${afterReload}`)
      await pageB.evaluate(() => (window.__e2eSamePageB = true))

      await page.waitForSelector('[data-testid=waiting-room][data-state=ADMITTED]', { timeout: 30_000 })
      const line = await page.evaluate(() => window.__e2eLine)
      const waits = line.filter((h) => h.st === 'WAITING').map((h) => h.pos)
      const falling = waits.every((p, i) => i === 0 || p < waits[i - 1])
      check(waits.length >= 2 && falling, 'the position moved down live, never up', waits.join(' → '))
      check(await page.evaluate(() => window.__e2eLineSamePage === true), 'admitted without a reload')
      await shot('11-admitted')
      await page.reload() // the admission survives a reload
      await page.waitForSelector('[data-testid=waiting-room][data-state=ADMITTED]')
      await page.waitForFunction(() => !document.querySelector('[data-testid=buy]')?.disabled)
      check(true, 'the admission survives a reload')
      await page.click('[data-testid=buy]')
      await page.waitForURL(/\/orders\/\d+$/)
      check(true, 'the admitted buyer bought', page.url().split('/').pop())

      await pageB.waitForSelector('[data-testid=waiting-room][data-state=SOLD_OUT]', { timeout: 10_000 })
      check(await pageB.evaluate(() => window.__e2eSamePageB === true), 'the buyer still waiting sees "sold out" without reloading')
      await pageB.screenshot({ path: path.join(ARTIFACTS, '12-line-sold-out.png'), fullPage: true })
    } finally {
      await ctxB.close()
      await rm(dirB, { recursive: true, force: true })
    }

    // --- phone-sized screenshots and the admin page
    await page.setViewportSize({ width: 390, height: 844 })
    await page.goto(`${BASE}/orders`)
    await page.locator(`[data-testid=order-${orderNo2}]`).waitFor()
    await shot('07-phone-orders')
    await page.goto(`${BASE}/products/${product.id}`)
    await page.locator('[data-testid=buy]').waitFor()
    await shot('08-phone-product')
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth + 1)
    check(!overflow, 'no horizontal scrolling at phone width')
    await page.evaluate((t) => localStorage.setItem('stampede.session', JSON.stringify({ token: t, userId: 1 })), ADMIN_TOKEN)
    await page.setViewportSize({ width: 1280, height: 800 })
    await page.goto(`${BASE}/admin`)
    await page.locator('[data-testid=panel-reserve]').waitFor()
    await page.waitForTimeout(4500) // two scrapes, so counters have a rate
    await shot('09-admin')
    check(true, 'admin page with dashboard rendered')
  } catch (err) {
    await shot('failure').catch(() => {})
    console.log('--- browser console ---')
    for (const l of logs.slice(-40)) console.log(l)
    throw err
  } finally {
    await context.close()
    await rm(userDir, { recursive: true, force: true })
  }
}

const watchdog = setTimeout(() => {
  console.error(`e2e: timed out after ${TIMEOUT_MS} ms`)
  process.exit(1)
}, TIMEOUT_MS)
watchdog.unref()

main().then(
  () => {
    console.log(`e2e: ${passed} passed, ${failed} failed`)
    console.log(`screenshots in ${ARTIFACTS}`)
  },
  (err) => {
    if (failed === 0) failed = 1
    console.error(`e2e: ${err.stack || err}`)
    console.log(`e2e: ${passed} passed, ${failed} failed`)
    process.exitCode = 1
  },
)
