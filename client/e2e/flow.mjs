#!/usr/bin/env node
// Browser end-to-end test of a running Stampede, in Debian's Chromium.
//
//   1. admin guard: a signed-out visitor of /admin is sent to sign in, a buyer
//      back to the shop;
//   2. a sale run from the operator console: created with a picture, opened,
//      its progress (sold / locked / available) moving while a scripted burst
//      of buyers orders, then paused (a buyer's Buy meanwhile is refused with
//      the pause message), resumed, edited and ended; a payment arriving for a
//      cancelled order waits in the refund queue, opens in the support order
//      lookup with its history, and is recorded as refunded once;
//   3. the storefront: live sales first, upcoming with a countdown, ended ones
//      apart; the quantity picker bounded by maxPerOrder and by what the buyer
//      may still buy; sold out shown without a reload;
//   4. a purchase: a double click makes one order, WAITING_PAY appears live,
//      pay → PAID; a second order cancelled while the socket is down shows
//      CANCELLED within 2 s of reconnecting, never going backwards;
//   5. 429: the gateway refuses the Buy, the page counts down calmly and
//      retries with the same requestId: one order for the intent;
//   6. the waiting room (issue 17): wait in line, see the position move, get
//      admitted, buy; a buyer behind sees "sold out" without reloading;
//   7. screenshots of every page at desktop and phone width.
//
// Environment:
//   STAMPEDE_URL           gateway serving client/dist (default http://127.0.0.1:8080)
//   STAMPEDE_ADMIN_TOKEN   admin bearer token (`stampede token --user 1 --admin`), required
//   STAMPEDE_PUSH_URL      WebSocket URL of push, if GET /api/config does not give it
//   STAMPEDE_PAYMENT_SECRET the gateway's payment callback key (default: development mode's)
//   CHROMIUM               browser binary (default /usr/bin/chromium)
//   E2E_LIMITED_URL        a second gateway on the same services whose per-user
//                          bucket refills one token per 10 s (burst 1), for the 429
//                          step (run.sh starts it); without it that step is skipped
//   E2E_STEP_TIMEOUT_MS    bound on each numbered step (default 240000); the run
//                          stops with the step's name when one takes longer
//   E2E_WAIT_MS            bound on each wait for the server (an order reaching
//                          WAITING_PAY, a change reaching the page; default 60000)
//
// Every wait is for evidence (a status, an element, a response), never a fixed
// sleep, and its bound is for a broken system, not a slow one: a machine three
// times slower only makes the run longer. Each step prints its duration.
//
// Screenshots go to client/e2e/artifacts/ (desktop-*.png at 1280×800,
// phone-*.png at 390×844). Exit status 0 only if every check passed.
import { createHmac } from 'node:crypto'
import { mkdir, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { chromium } from 'playwright-core'
import { BASE, WAIT_MS, answer, api, call, check, finish, noteAnswer, sleep, step, until, watchPage } from './harness.mjs'

const ADMIN_TOKEN = process.env.STAMPEDE_ADMIN_TOKEN || ''
const PUSH_URL = process.env.STAMPEDE_PUSH_URL || ''
// The gateway's payment callback key (development mode's built-in one unless set).
const PAYMENT_SECRET = process.env.STAMPEDE_PAYMENT_SECRET || 'stampede-dev-payment-secret-change-me'
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium'
const LIMITED = (process.env.E2E_LIMITED_URL || '').replace(/\/$/, '')
const ARTIFACTS = path.join(path.dirname(fileURLToPath(import.meta.url)), 'artifacts')
const RECONNECT_BUDGET_MS = 2000
const DESKTOP = { width: 1280, height: 800 }
const PHONE = { width: 390, height: 844 }
const RUN = new Date().toISOString().slice(11, 19)

const login = async (userId) => (await api('POST', '/api/auth/login', { userId })).token

// payCallback sends a payment provider's signed callback (POST
// /api/payments/callback, HMAC-SHA256 of the body in X-Signature).
async function payCallback(payment) {
  const body = JSON.stringify(payment)
  const res = await fetch(`${BASE}/api/payments/callback`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'X-Signature': createHmac('sha256', PAYMENT_SECRET).update(body).digest('hex') },
    body,
    signal: AbortSignal.timeout(10_000),
  })
  const text = await res.text()
  noteAnswer('POST', '/api/payments/callback', res.status, text)
  return { status: res.status, data: text ? JSON.parse(text) : null }
}
const iso = (ms) => new Date(ms).toISOString()

async function waitReady() {
  for (const base of LIMITED ? [BASE, LIMITED] : [BASE]) {
    await until(
      async () => (await answer(`${base}/readyz`))?.ok ?? false, // null: not up yet
      `${base}/readyz`,
      { timeoutMs: Math.max(WAIT_MS, 180_000), intervalMs: 500 },
    )
  }
}

// signedInBrowser opens a second Chromium with a profile of its own in which
// userId is signed in with token (the session the client keeps in
// localStorage), with viewport if given; close() shuts it and removes the
// profile.
async function signedInBrowser(prefix, token, userId, viewport) {
  const dir = await mkdtemp(path.join(tmpdir(), prefix))
  const ctx = await chromium.launchPersistentContext(dir, {
    executablePath: CHROMIUM,
    headless: true,
    ...(viewport ? { viewport } : {}),
    args: ['--headless', '--no-sandbox', '--disable-gpu'],
  })
  const close = async () => {
    await ctx.close()
    await rm(dir, { recursive: true, force: true })
  }
  try {
    const page = ctx.pages()[0] ?? (await ctx.newPage())
    watchPage(page)
    page.setDefaultTimeout(WAIT_MS)
    await page.addInitScript(
      ([t, u, pu]) => {
        localStorage.setItem('stampede.session', JSON.stringify({ token: t, userId: u }))
        if (pu) localStorage.setItem('stampede.pushUrl', pu)
      },
      [token, userId, PUSH_URL],
    )
    return { page, close }
  } catch (err) {
    await close()
    throw err
  }
}

async function main() {
  if (!ADMIN_TOKEN) throw new Error('set STAMPEDE_ADMIN_TOKEN (e.g. `stampede token --user 1 --admin`)')
  await mkdir(ARTIFACTS, { recursive: true })
  console.log(`e2e against ${BASE}`)
  await waitReady()

  const userDir = await mkdtemp(path.join(tmpdir(), 'stampede-e2e-'))
  const context = await chromium.launchPersistentContext(userDir, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: DESKTOP,
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
  watchPage(page)
  const logs = []
  page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`))
  page.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`))
  page.on('dialog', (d) => d.accept())
  page.setDefaultTimeout(WAIT_MS)
  if (PUSH_URL) await page.addInitScript((u) => localStorage.setItem('stampede.pushUrl', u), PUSH_URL)
  // From the top: the sticky header then sits where it belongs in a full-page shot.
  const shot = async (name) => {
    await page.evaluate(() => window.scrollTo(0, 0))
    await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true })
  }
  // shots takes the page at desktop and at phone width and checks that the
  // phone layout does not scroll sideways.
  const shots = async (name, ready = async () => {}) => {
    await ready()
    await shot(`desktop-${name}`)
    await page.setViewportSize(PHONE)
    await page.waitForTimeout(150)
    await ready()
    await shot(`phone-${name}`)
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)
    await page.setViewportSize(DESKTOP)
    check(overflow <= 1, `${name}: no sideways scrolling at phone width`, `${overflow}px`)
  }
  const setSession = (token, userId) =>
    page.evaluate(([t, u]) => localStorage.setItem('stampede.session', JSON.stringify({ token: t, userId: u })), [token, userId])
  const text = (sel) => page.locator(sel).first().textContent().then((t) => t.trim())

  try {
    // ---------------------------------------------------------------- 1. admin guard
    step('1. admin guard')
    await page.goto(`${BASE}/admin`)
    await page.waitForURL(/\/login\?next=(%2F|\/)admin$/)
    check(true, 'a signed-out visitor of /admin is sent to sign in')
    await shots('login')
    const buyerId = 100_000 + Math.floor(Math.random() * 1e9)
    await page.fill('[data-testid=user-id]', String(buyerId))
    await page.click('[data-testid=login]')
    await page.waitForURL(/\/\?denied=admin$/)
    await page.locator('[data-testid=denied]').waitFor()
    check(true, 'a buyer signed in on the way to /admin is sent back to the shop', `user ${buyerId}`)
    await shots('admin-denied')
    await page.goto(`${BASE}/admin`)
    await page.waitForURL(/\/\?denied=admin$/)
    check((await page.locator('.console').count()) === 0, 'a buyer opening /admin directly is sent away too')
    const buyerToken = await page.evaluate(() => JSON.parse(localStorage.getItem('stampede.session')).token)
    const r403 = await call('GET', '/api/admin/reconcile', undefined, buyerToken)
    check(r403.status === 403, "the console's endpoints refuse a buyer", `${r403.status}`)

    // ---------------------------------------------------------------- 2. a sale from the console
    step('2. a sale from the console')
    await setSession(ADMIN_TOKEN, 1)
    await page.goto(`${BASE}/admin`)
    await page.locator('[data-testid=sale-form]').waitFor()
    const saleName = `Console sneaker ${RUN}`
    const image = `${BASE}/demo/sneaker.svg`
    const [startLocal, endLocal] = await page.evaluate(() => {
      const local = (ms) => {
        const d = new Date(ms)
        d.setMinutes(d.getMinutes() - d.getTimezoneOffset())
        return d.toISOString().slice(0, 16)
      }
      return [local(Date.now() - 60_000), local(Date.now() + 3600_000)]
    })
    await page.fill('[data-testid=f-name]', saleName)
    await page.fill('[data-testid=f-image]', image)
    await page.fill('[data-testid=f-description]', 'Hand-stitched, numbered pair. One drop only.')
    await page.fill('[data-testid=f-price]', '129.00')
    await page.fill('[data-testid=f-stock]', '60')
    await page.fill('[data-testid=f-limit]', '2')
    await page.fill('[data-testid=f-max]', '2')
    await page.fill('[data-testid=f-start]', startLocal)
    await page.fill('[data-testid=f-end]', endLocal)
    await page.click('[data-testid=f-submit]')
    await page.locator('[data-testid=created]').waitFor()
    const sale = (await api('GET', '/api/products')).find((p) => p.name === saleName)
    check(sale?.imageUrl === image && sale.price === 12900 && sale.total === 60, 'sale created from the console with its picture', `#${sale?.id}`)
    const row = page.locator(`[data-testid=sale-${sale.id}]`)
    await row.waitFor()
    await page.waitForFunction((id) => document.querySelector(`[data-testid=sale-${id}]`)?.dataset.state === 'live', sale.id)
    check(true, 'the sale is open (live) in the console')

    // Record every sold+locked total the console shows from now on.
    await page.evaluate((id) => {
      window.__e2eProgress = []
      const read = () => {
        const el = document.querySelector(`[data-testid=sale-${id}]`)
        const n = (t) => Number(el?.querySelector(`[data-testid=${t}]`)?.textContent ?? NaN)
        const v = { at: Date.now(), sold: n('sold'), locked: n('locked'), available: n('sale-available') }
        const h = window.__e2eProgress
        const last = h[h.length - 1]
        if (Number.isFinite(v.sold) && (!last || last.sold !== v.sold || last.locked !== v.locked)) h.push(v)
      }
      read()
      new MutationObserver(read).observe(document.body, { subtree: true, childList: true, characterData: true })
    }, sale.id)
    // A scripted burst: 40 buyers in four waves; the next wave goes once the
    // console shows this one locked (evidence of a live refresh, not a sleep).
    const shownTotal = (id) =>
      page.evaluate((i) => {
        const el = document.querySelector(`[data-testid=sale-${i}]`)
        const n = (t) => Number(el?.querySelector(`[data-testid=${t}]`)?.textContent)
        return n('sold') + n('locked')
      }, id)
    const burst = []
    for (let wave = 0; wave < 4; wave++) {
      const ids = Array.from({ length: 10 }, (_, i) => 2_000_000_000 + Math.floor(Math.random() * 1e9) + i)
      const res = await Promise.all(
        ids.map(async (u) => {
          const token = await login(u)
          const r = await call('POST', '/api/orders', { productId: sale.id, quantity: 1, requestId: `burst-${u}` }, token)
          return { ...r, token, userId: u }
        }),
      )
      burst.push(...res)
      const want = burst.filter((r) => r.status === 202).length
      await until(async () => (await shownTotal(sale.id)) >= want, `the console to show ${want} orders locked`)
    }
    const accepted = burst.filter((r) => r.status === 202)
    check(accepted.length === 40, 'the burst of 40 buyers was accepted', `${accepted.length} × 202`)
    // Five of them pay: sold moves too.
    for (const r of accepted.slice(0, 5)) {
      // 409 while still PROCESSING
      await until(async () => (await call('POST', `/api/orders/${r.data.orderNo}/pay`, undefined, r.token)).status === 200, `pay ${r.data.orderNo}`)
    }
    await page.waitForFunction(
      (id) => {
        const el = document.querySelector(`[data-testid=sale-${id}]`)
        const n = (t) => Number(el?.querySelector(`[data-testid=${t}]`)?.textContent)
        return n('sold') === 5 && n('locked') === 35 && n('sale-available') === 20
      },
      sale.id,
      { timeout: WAIT_MS },
    )
    const progress = await page.evaluate(() => window.__e2eProgress)
    const totals = progress.map((p) => p.sold + p.locked)
    const steps = new Set(totals).size
    const monotone = totals.every((t, i) => i === 0 || t >= totals[i - 1])
    check(
      steps >= 3 && monotone && totals[0] < 40,
      'the console showed the progress move without a reload (sold 5, locked 35, available 20)',
      totals.join(' → '),
    )
    await shots('console-sales')
    // The charts (Pipeline tab): accepted orders per second rose above zero
    // during the burst, and the accepted → WAITING_PAY latency was measured.
    await page.click('[data-testid=tab-pipeline]')
    await page.locator('[data-testid=panel-orders] svg').waitFor()
    const rose = await page.evaluate(() => {
      const d = document.querySelector('[data-testid=panel-orders] path[data-series="orders:PROCESSING"]')?.getAttribute('d') ?? ''
      return [...d.matchAll(/[ML][\d.]+ ([\d.]+)/g)].some((m) => Number(m[1]) < 179)
    })
    check(rose, 'the orders-per-second chart shows the burst')
    const p95 = await text('[data-testid=panel-latency] [data-series="latency:p95"] strong')
    check(/^[\d.]+ ms$/.test(p95), 'the console shows the accepted → WAITING_PAY latency', `p95 ${p95}`)
    await shots('console-pipeline', () => page.locator('[data-testid=panel-backlog] svg').waitFor())
    await page.click('[data-testid=tab-sales]')
    await row.waitFor()

    // A payment that arrives after its order closed: the buyer cancels a
    // WAITING_PAY order, then the provider's callback comes (REFUND_PENDING).
    const late = accepted[5]
    await until(
      async () => (await call('GET', `/api/orders/${late.data.orderNo}`, undefined, late.token)).data?.status === 'WAITING_PAY',
      `order ${late.data.orderNo} to reach WAITING_PAY`,
    )
    const lateOrder = await api('POST', `/api/orders/${late.data.orderNo}/cancel`, undefined, late.token)
    const latePaymentNo = `late-${RUN.replace(/:/g, '')}-${late.data.orderNo.slice(-6)}`
    const cb = await payCallback({ orderNo: late.data.orderNo, paymentNo: latePaymentNo, amount: lateOrder.amount, paidAt: new Date().toISOString() })
    check(cb.status === 200 && lateOrder.status === 'CANCELLED', 'a payment for a cancelled order is accepted for refund', `${cb.status} ${JSON.stringify(cb.data)}`)

    // Pause, resume, end, edit: the operator API of issue 14.
    const hasControls = (await row.locator('[data-testid=pause]').count()) > 0
    if (!hasControls) console.log('  - SKIPPED pause/resume/end/edit: no operator API on this gateway (GET /api/admin/products answered 404/405)')
    if (hasControls) {
      // A buyer in a browser of its own, on the product page while it is live.
      const buyerB = 4_000_000_000 + Math.floor(Math.random() * 1e6)
      const tokenB = await login(buyerB)
      const browserB = await signedInBrowser('stampede-e2e-p-', tokenB, buyerB, DESKTOP)
      try {
        const pageB = browserB.page
        await pageB.goto(`${BASE}/products/${sale.id}`)
        await pageB.waitForFunction(() => !document.querySelector('[data-testid=buy]')?.disabled)

        await row.locator('[data-testid=pause]').click()
        await page.waitForFunction((id) => document.querySelector(`[data-testid=sale-${id}]`)?.dataset.state === 'paused', sale.id)
        check(true, 'paused from the console')
        // The state filter (GET /api/admin/products?state=paused): only paused sales, this one among them.
        const [filtered] = await Promise.all([
          page.waitForResponse((r) => r.url().includes('/api/admin/products?state=paused')),
          page.selectOption('[data-testid=sale-filter]', 'paused'),
        ])
        const pausedList = (await filtered.json()).products ?? []
        await page.waitForFunction(() => [...document.querySelectorAll('.sale-row')].every((r) => r.dataset.state === 'paused'))
        check(
          filtered.status() === 200 && pausedList.some((p) => p.id === sale.id) && pausedList.every((p) => p.state === 'paused'),
          'the console filters the sales by state',
          `${pausedList.length} paused`,
        )
        await page.selectOption('[data-testid=sale-filter]', '')
        // The reserve script refuses within a bounded delay on every gateway.
        let refused
        let pausedTries = 0
        await until(async () => {
          // a new buyer each try: an order taken before the pause reached every gateway counts against no one's limit
          const t = await login(5_000_000_000 + Math.floor(Math.random() * 1e6))
          refused = await call('POST', '/api/orders', { productId: sale.id, quantity: 1, requestId: `paused-${RUN}-${pausedTries++}` }, t)
          return refused.status !== 202
        }, 'the pause to refuse orders')
        check(refused.status === 409 && refused.data?.error?.code === 'SALE_PAUSED', 'paused: the gateway refuses orders', `${refused.status} ${refused.data?.error?.code}`)
        // The buyer's Buy (the page still thought it live, or push told it
        // already): the page says the sale is paused, calmly.
        // Push may have told the page already (Buy off, the paused notice);
        // else the Buy goes out and the gateway's SALE_PAUSED is shown.
        const clicked = !(await pageB.locator('[data-testid=buy]').isDisabled())
        if (clicked) await pageB.click('[data-testid=buy]')
        const msgSel = clicked ? '[data-testid=buy-message]' : '.buy ~ p.warn, p.warn'
        await pageB.waitForFunction((sel) => /paused/i.test(document.querySelector(sel)?.textContent ?? ''), msgSel, { timeout: WAIT_MS })
        const pauseMsg = (await pageB.locator(msgSel).first().textContent()).trim()
        check(
          /paused/i.test(pauseMsg) && pageB.url().endsWith(`/products/${sale.id}`),
          'a buy during the pause is refused with the pause message',
          `${clicked ? 'Buy sent, refused' : 'Buy off, the page knew'}: ${pauseMsg.slice(0, 70)}`,
        )
        await pageB.screenshot({ path: path.join(ARTIFACTS, 'desktop-product-paused.png'), fullPage: true })
        await pageB.setViewportSize(PHONE)
        await pageB.screenshot({ path: path.join(ARTIFACTS, 'phone-product-paused.png'), fullPage: true })
        await shots('console-paused')

        await row.locator('[data-testid=resume]').click()
        await page.waitForFunction((id) => document.querySelector(`[data-testid=sale-${id}]`)?.dataset.state === 'live', sale.id)
        let again
        let resumedTries = 0
        await until(async () => {
          again = await call('POST', '/api/orders', { productId: sale.id, quantity: 1, requestId: `resumed-${RUN}-${resumedTries++}` }, buyerToken)
          return again.status === 202
        }, 'the resumed sale to accept an order')
        check(again.status === 202, 'resumed: live again, orders accepted', `${again.status}`)

        // Edit while live: the name and description may change, the price may not.
        await row.locator('[data-testid=edit]').click()
        const editor = row.locator('[data-testid=sale-form]')
        check(await editor.locator('[data-testid=f-price]').isDisabled(), 'an opened sale: the editor locks the price')
        await editor.locator('[data-testid=f-name]').fill(`${saleName} (numbered)`)
        await editor.locator('[data-testid=f-description]').fill('Hand-stitched, numbered pair. Last chance.')
        await shots('console-edit')
        await editor.locator('[data-testid=f-submit]').click()
        await row.locator('[data-testid=saved]').waitFor()
        const edited = await api('GET', `/api/products/${sale.id}`)
        check(edited.name === `${saleName} (numbered)`, 'edited from the console while live', edited.name)
        const late409 = await call('PATCH', `/api/admin/products/${sale.id}`, { price: 100 }, ADMIN_TOKEN)
        check(late409.status === 409 && late409.data?.error?.code === 'SALE_STARTED', 'the price of an opened sale cannot change', `${late409.status} ${late409.data?.error?.code}`)

        await row.locator('[data-testid=end]').click()
        await page.waitForFunction((id) => document.querySelector(`[data-testid=sale-${id}]`)?.dataset.state === 'ended', sale.id)
        const afterEnd = await call('POST', '/api/orders', { productId: sale.id, quantity: 1, requestId: `ended-${RUN}` }, buyerToken)
        check(afterEnd.status === 409, 'ended: the gateway refuses orders', `${afterEnd.status} ${afterEnd.data?.error?.code}`)
        // The sale's change log: who did what.
        await row.locator('[data-testid=audit]').click()
        await page.waitForFunction((id) => document.querySelectorAll(`[data-testid=sale-${id}] tr[data-testid^=audit-]`).length >= 5, sale.id, { timeout: WAIT_MS })
        const acts = await row.locator('tr[data-testid^=audit-] td:nth-child(3)').allTextContents()
        check(['Created', 'Paused', 'Resumed', 'Edited', 'Ended'].every((a) => acts.includes(a)), 'the sale’s change log lists every lifecycle change', acts.join(', '))
        await shots('console-ended')
      } finally {
        await browserB.close()
      }
    }

    // The refund queue: the late payment waits there; its order opens in
    // the support lookup with its history; "Record refund" records it.
    await page.click('[data-testid=tab-refunds]')
    const refundRow = page.locator(`[data-testid=refund-${latePaymentNo}]`)
    const hasRefunds = (await page.locator('[data-testid=no-refund-api]').count()) === 0
    if (!hasRefunds) console.log('  - SKIPPED refund queue and order lookup: no operator API on this gateway')
    if (hasRefunds) {
      await refundRow.waitFor({ timeout: WAIT_MS })
      check(true, 'the refund queue shows the payment REFUND_PENDING', latePaymentNo)
      await shots('console-refunds')
      await refundRow.locator('button.link').click()
      await page.waitForURL(/tab=orders/)
      const detail = page.locator('[data-testid=order-detail]')
      await detail.waitFor()
      const steps = await detail.locator('[data-testid=order-history] li[data-status]').evaluateAll((els) => els.map((e) => e.dataset.status))
      check(
        (await detail.getAttribute('data-status')) === 'CANCELLED' && steps.includes('WAITING_PAY') && steps.at(-1) === 'CANCELLED',
        'the refund opens its order in the support lookup, with its history',
        steps.join(' → '),
      )
      await page.fill('[data-testid=q-order]', '')
      await page.fill('[data-testid=q-user]', String(late.userId))
      await page.selectOption('[data-testid=q-status]', 'CANCELLED')
      await page.click('[data-testid=q-search]')
      await page.locator(`[data-testid=found-${late.data.orderNo}]`).waitFor()
      const found = await page.locator('[data-testid=order-lookup] tbody tr').count()
      check(found === 1, 'support finds the buyer’s cancelled order by buyer and status', `${found} row(s)`)
      await shots('console-orders')
      await page.click('[data-testid=tab-refunds]')
      await refundRow.locator('[data-testid=record-refund]').click()
      await refundRow.waitFor({ state: 'detached', timeout: WAIT_MS })
      const recorded = (await text('[data-testid=refund-recorded]')) ?? ''
      const refundNo = recorded.match(/Refund (\S+) recorded/)?.[1]
      const twice = await call('POST', `/api/admin/payments/${latePaymentNo}/refund`, { refundNo }, ADMIN_TOKEN)
      const other = await call('POST', `/api/admin/payments/${latePaymentNo}/refund`, { refundNo: `${refundNo}-x` }, ADMIN_TOKEN)
      check(
        twice.status === 200 && twice.data?.status === 'REFUNDED' && other.status === 409 && other.data?.error?.code === 'ALREADY_REFUNDED',
        'the console recorded the refund once (same number again: same answer; another number: refused)',
        `${refundNo} · ${twice.status} · ${other.status} ${other.data?.error?.code}`,
      )
    }
    await page.click('[data-testid=tab-reconcile]')
    await page.locator('[data-testid=reconcile-verdict]').waitFor({ timeout: WAIT_MS })
    await shots('console-reconcile')

    // ---------------------------------------------------------------- 3. the storefront
    step('3. the storefront')
    const now = Date.now()
    const mk = (o) =>
      api(
        'POST',
        '/api/admin/products',
        { price: 1999, stock: 10, shards: 1, perUserLimit: 0, saleStart: iso(now - 60_000), saleEnd: iso(now + 3600_000), ...o },
        ADMIN_TOKEN,
      )
    const upcoming = await mk({ name: `Upcoming watch ${RUN}`, imageUrl: `${BASE}/demo/watch.svg`, saleStart: iso(now + 3600_000), saleEnd: iso(now + 7200_000) })
    const bounded = await mk({
      name: `Headphones ${RUN}`,
      imageUrl: `${BASE}/demo/headphones.svg`,
      description: 'Closed-back, studio grade.',
      stock: 10,
      perUserLimit: 5,
      maxPerOrder: 3,
    })
    const scarce = await mk({ name: `Last two ${RUN}`, stock: 2, perUserLimit: 2, maxPerOrder: 2 })
    const product = await mk({ name: `E2E gadget ${RUN}`, stock: 10, perUserLimit: 5, maxPerOrder: 1 })
    const limited = await mk({ name: `Rate-limited ${RUN}`, stock: 5, maxPerOrder: 1 })
    // An ended sale: created open, then ended (the operator API refuses a
    // saleEnd in the past; an older gateway takes it).
    let ended
    try {
      ended = await mk({ name: `Ended early ${RUN}`, saleStart: iso(now - 2 * 86400_000), saleEnd: iso(now - 86400_000) })
    } catch {
      ended = await mk({ name: `Ended early ${RUN}` })
      await api('POST', `/api/admin/products/${ended.id}/end`, undefined, ADMIN_TOKEN)
    }

    await setSession(buyerToken, buyerId)
    await page.goto(`${BASE}/`)
    await page.waitForFunction(() => window.__stampede?.state === 'open', null, { timeout: WAIT_MS })
    check(true, 'WebSocket to push is open')
    await page.locator(`[data-testid=product-${upcoming.id}]`).waitFor()
    const order = await page.$$eval('[data-testid=catalog] > [data-state]', (els) => els.map((e) => e.dataset.state))
    const rank = { live: 0, paused: 1, upcoming: 2, soldout: 3 }
    check(
      order.length > 0 && order.every((s, i) => i === 0 || rank[s] >= rank[order[i - 1]]) && order[0] === 'live',
      'storefront lists live sales first, then upcoming, then sold out',
      order.join(','),
    )
    const endedInMain = await page.locator(`[data-testid=catalog] [data-testid=product-${ended.id}]`).count()
    const endedApart = await page.locator(`[data-testid=ended-sales] [data-testid=product-${ended.id}]`).count()
    const consoleSale = await page.locator(`[data-testid=ended-sales] [data-testid=product-${sale.id}]`).count()
    check(endedInMain === 0 && endedApart === 1 && (consoleSale === 1 || !hasControls), 'ended sales are listed apart, last (the console-ended one too)')
    const countdown = await text(`[data-testid=product-${upcoming.id}] .countdown time`)
    check(/^\d\d:\d\d(:\d\d)?$/.test(countdown), 'an upcoming sale shows a countdown on its card', countdown)
    const img = page.locator(`[data-testid=product-${bounded.id}] img[data-testid=product-image]`)
    await page.waitForFunction((id) => document.querySelector(`[data-testid=product-${id}] img`)?.naturalWidth > 0, bounded.id)
    check((await img.getAttribute('src')) === `${BASE}/demo/headphones.svg`, 'product cards show the picture')
    const price = await text(`[data-testid=product-${bounded.id}] .price`)
    check(price === '$19.99', 'prices go through Intl.NumberFormat in the configured currency', price)
    await shots('storefront')

    // Quantity bound: maxPerOrder 3, then what the limit leaves.
    await page.goto(`${BASE}/products/${bounded.id}`)
    await page.waitForFunction(() => !document.querySelector('[data-testid=buy]')?.disabled)
    const plus = async (n) => {
      for (let i = 0; i < n && !(await page.locator('[data-testid=qty-plus]').isDisabled()); i++) await page.click('[data-testid=qty-plus]')
    }
    await plus(5)
    const q = await page.inputValue('[data-testid=quantity]')
    const plusOff = await page.locator('[data-testid=qty-plus]').isDisabled()
    check(q === '3' && plusOff, 'the quantity picker stops at maxPerOrder', `quantity ${q}`)
    check((await text('[data-testid=description]')) === 'Closed-back, studio grade.', 'the product page shows the description')
    await shots('product')
    await page.click('[data-testid=buy]')
    await page.waitForURL(/\/orders\/\d+$/)
    await page.waitForSelector('[data-testid=order-status][data-status=WAITING_PAY]', { timeout: WAIT_MS })
    const title = await text('[data-testid=order-title]')
    check(title === bounded.name, 'the order page is titled with the product name, not the orderNo', title)
    await page.goto(`${BASE}/products/${bounded.id}`)
    await page.waitForFunction(() => document.querySelector('[data-testid=quantity]')?.max === '2', null, { timeout: WAIT_MS })
    await plus(3)
    const q2 = await page.inputValue('[data-testid=quantity]')
    const note = await text('[data-testid=bound-note]')
    check(q2 === '2' && /hold 3 of the 5/.test(note), 'after buying 3 of 5 the picker offers at most 2', note)

    // Sold out without a reload: another buyer takes the last two units.
    await page.goto(`${BASE}/products/${scarce.id}`)
    await page.waitForFunction(() => !document.querySelector('[data-testid=buy]')?.disabled)
    await page.evaluate(() => (window.__e2eSamePage = true))
    const other = await login(3_000_000_000 + Math.floor(Math.random() * 1e6))
    const took = await call('POST', '/api/orders', { productId: scarce.id, quantity: 2, requestId: `take-${RUN}` }, other)
    check(took.status === 202, 'another buyer took the last two units')
    const t0 = Date.now()
    await page.locator('[data-testid=soldout]').waitFor({ timeout: WAIT_MS })
    const same = await page.evaluate(() => window.__e2eSamePage === true)
    const buyOff = await page.locator('[data-testid=buy]').isDisabled()
    check(same && buyOff, 'the product page flipped to sold out without a reload', `${Date.now() - t0} ms`)
    await shots('product-soldout')

    // ---------------------------------------------------------------- 4. purchase, pay, reconnect
    step('4. purchase, pay, reconnect')
    await page.goto(`${BASE}/products/${product.id}`)
    const buy = page.locator('[data-testid=buy]')
    await page.waitForFunction(() => !document.querySelector('[data-testid=buy]')?.disabled)
    await page.evaluate(() => (window.__e2eSamePage = true))
    await buy.dblclick() // a double click must not place two orders
    await page.waitForURL(/\/orders\/\d+$/)
    const orderNo = page.url().split('/').pop()
    check(/^\d{22,40}$/.test(orderNo), 'purchase accepted', orderNo)
    await page.waitForSelector('[data-testid=order-status][data-status=WAITING_PAY]', { timeout: WAIT_MS })
    check(await page.evaluate(() => window.__e2eSamePage === true), 'WAITING_PAY shown live, without a reload')
    await page.locator('[data-testid=pay-deadline]').waitFor()
    const liveBadges = await page.locator('[data-testid=live-state]').count()
    const pageConn = await page.locator('[data-testid=connection]').count()
    check(liveBadges === 1 && pageConn === 0, 'one connection indicator (the header), none repeated on the page')
    await shots('order-waiting-pay')
    await page.click('[data-testid=pay]')
    await page.waitForSelector('[data-testid=order-status][data-status=PAID]', { timeout: WAIT_MS })
    check(true, 'PAID shown after paying')
    await shots('order-paid')

    await page.goto(`${BASE}/products/${product.id}`)
    await page.waitForFunction(() => !document.querySelector('[data-testid=buy]')?.disabled)
    await page.click('[data-testid=buy]')
    await page.waitForURL(/\/orders\/\d+$/)
    const orderNo2 = page.url().split('/').pop()
    check(orderNo2 !== orderNo, 'a new purchase made a new order', orderNo2)
    await page.waitForSelector('[data-testid=order-status][data-status=WAITING_PAY]', { timeout: WAIT_MS })
    await page.waitForFunction(() => window.__stampede?.state === 'open')
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
    const cancelled = await api('POST', `/api/orders/${orderNo2}/cancel`, undefined, buyerToken)
    check(cancelled.status === 'CANCELLED', 'order cancelled through the API while disconnected')
    await shots('order-offline')
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
    const mine = (await api('GET', '/api/orders?limit=100', undefined, buyerToken)).orders.filter((o) => o.productId === product.id)
    check(mine.length === 2, 'one order per purchase (the double click made one)', `${mine.length} orders`)

    // ---------------------------------------------------------------- 5. 429: calm retry, same requestId
    step('5. 429: calm retry, same requestId')
    if (!LIMITED) {
      console.log('  - SKIPPED the 429 step: E2E_LIMITED_URL not set (client/e2e/run.sh starts that gateway)')
    } else {
      // On the second gateway this buyer's bucket holds one token and gains
      // one every REFILL_S seconds. Cause the condition, then check it: spend
      // the token with a request that reserves nothing until a 429 proves
      // the bucket empty; the page's Buy that follows is refused unless it
      // took longer than REFILL_S to reach the gateway (then the check below
      // says so, with the time it took).
      const REFILL_S = 10
      await page.goto(`${LIMITED}/products/${limited.id}`)
      await setSession(buyerToken, buyerId) // the session lives in this origin's localStorage
      await page.reload()
      await page.waitForFunction(() => !document.querySelector('[data-testid=buy]')?.disabled)
      const sent = []
      const onResponse = async (res) => {
        const req = res.request()
        if (req.method() === 'POST' && new URL(req.url()).pathname === '/api/orders') {
          sent.push({ status: res.status(), requestId: JSON.parse(req.postData() || '{}').requestId, retryAfter: Number(res.headers()['retry-after'] || 0) })
        }
      }
      page.on('response', onResponse)
      let spent = 0
      await until(async () => {
        const r = await call('POST', '/api/orders', { productId: 999_999_999, quantity: 1, requestId: `flood-${RUN}-${spent++}` }, buyerToken, LIMITED)
        return r.status === 429
      }, "the buyer's bucket on the limited gateway to run empty")
      const emptiedAt = Date.now()
      await page.click('[data-testid=buy]')
      const first = await until(() => sent[0], "the page's first order request to be answered")
      check(
        first.status === 429 && first.retryAfter >= 1,
        'the gateway refused the Buy with 429 and Retry-After',
        `${first.status}, Retry-After ${first.retryAfter} s, ${Date.now() - emptiedAt} ms after the bucket emptied (refill ${REFILL_S} s)`,
      )
      const wait = page.locator('[data-testid=retry-wait]')
      await wait.waitFor()
      const waitText = (await wait.textContent()).replace(/\s+/g, ' ').trim()
      check(/Trying again in \d\d:\d\d/.test(waitText), 'a 429 shows a calm retry countdown', waitText.slice(0, 60))
      await shots('product-retry-wait')
      // The page waits Retry-After (at most REFILL_S) and retries; a token is
      // there by then. Bound: the page's five automatic retries, each at most
      // REFILL_S + the gateway's answer.
      await page.waitForURL(/\/orders\/\d+$/, { timeout: 5 * (REFILL_S * 1000 + WAIT_MS) })
      page.off('response', onResponse)
      const refusedN = sent.filter((s) => s.status === 429).length
      const ids = new Set(sent.map((s) => s.requestId))
      check(
        refusedN >= 1 && sent[sent.length - 1].status === 202 && ids.size === 1,
        'the page retried after Retry-After with the same requestId until accepted',
        sent.map((s) => `${s.status}${s.retryAfter ? `(${s.retryAfter} s)` : ''}`).join(' → '),
      )
      // The order list reads MySQL: wait for the writer, then make sure no
      // second order follows (the intent's request is answered; nothing is in flight).
      const limitedOrders = async () =>
        (await api('GET', '/api/orders?limit=100', undefined, buyerToken)).orders.filter((o) => o.productId === limited.id).length
      await until(async () => (await limitedOrders()) > 0, 'the accepted order to be stored')
      const nLimited = await limitedOrders()
      check(nLimited === 1, 'one order for the intent', `${nLimited} orders`)
    }

    step('6. the waiting room')
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
    const browserB = await signedInBrowser('stampede-e2e-b-', tokenB, uidB)
    try {
      const pageB = browserB.page
      await pageB.goto(`${BASE}/products/${room.id}`)
      await pageB.click('[data-testid=join]')
      await pageB.locator('[data-testid=position]').waitFor()
      // A reload keeps the place.
      const beforeReload = await pageB.evaluate(() => window.__stampede.place(Number(location.pathname.split('/').pop())).ticket)
      await pageB.reload()
      await pageB.locator('[data-testid=position]').waitFor()
      const afterReload = await pageB.evaluate(() => window.__stampede.place(Number(location.pathname.split('/').pop())).ticket)
      check(!!beforeReload && beforeReload === afterReload, 'a reload keeps the place in line', `ticket ${afterReload}`)
      await pageB.evaluate(() => (window.__e2eSamePageB = true))

      await page.waitForSelector('[data-testid=waiting-room][data-state=ADMITTED]', { timeout: WAIT_MS })
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

      await pageB.waitForSelector('[data-testid=waiting-room][data-state=SOLD_OUT]', { timeout: WAIT_MS })
      check(await pageB.evaluate(() => window.__e2eSamePageB === true), 'the buyer still waiting sees "sold out" without reloading')
      await pageB.screenshot({ path: path.join(ARTIFACTS, '12-line-sold-out.png'), fullPage: true })
    } finally {
      await browserB.close()
    }


    // ---------------------------------------------------------------- 6. the remaining pages
    step('7. the remaining pages')
    await page.goto(`${BASE}/orders`)
    await page.locator(`[data-testid=order-${orderNo2}]`).waitFor()
    await page.waitForFunction((n) => document.querySelector(`[data-testid=order-${n}] [data-testid=order-name]`)?.textContent.includes('E2E gadget'), orderNo2)
    check(true, 'the order list names the products')
    await shots('orders')
    await page.goto(`${BASE}/products/${upcoming.id}`)
    await page.locator('.countdown-big time').waitFor()
    const cd = (await text('.countdown-big time')) ?? ''
    check(/^\d\d:\d\d(:\d\d)?$/.test(cd) && (await page.locator('[data-testid=buy]').isDisabled()), 'upcoming sale page: countdown and a disabled Buy', cd)
    await shots('product-upcoming')
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

finish('e2e', main, ARTIFACTS)
