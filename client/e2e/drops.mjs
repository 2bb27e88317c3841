#!/usr/bin/env node
// Browser end-to-end test of the fair drops' pages (issue 28) against a
// running Stampede, in Debian's Chromium, after flow.mjs (run.sh runs both):
//
//   1. a pre-queued drop with a proof-of-work: the countdown to the
//      pre-queue, the ALTCHA widget solving the gateway's challenge in the
//      browser, the pre-queue's ticket and the commitment with the countdown
//      to the opening, "the line is being shuffled", the place in the shuffle
//      and its verify page (the place recomputed in the browser from the
//      published seed and list matches the served one; a seed that does not
//      match the commitment is caught), the console's drop panel before and
//      after the shuffle (commitment, seed checked against it, counters, the
//      order recomputed from the list);
//   2. a draw: entry, "entered" with the countdown to the close, then a
//      winner with the win's countdown, a reserve-list entry, a loss (and its
//      verify page), a win not used in time passed on (EXPIRED for the
//      winner, ADMITTED for the reserve), a win used by an order, and the
//      console's entries, winners, claims and pass-ons.
//
// Every state is photographed at desktop width (1280×800, desktop-drop-*.png)
// and the buyer's at phone width too (390×844, phone-drop-*.png, with a check
// that the page does not scroll sideways). Screenshots go to
// client/e2e/artifacts/. Environment as flow.mjs: STAMPEDE_URL,
// STAMPEDE_ADMIN_TOKEN (required), STAMPEDE_PUSH_URL, CHROMIUM,
// E2E_STEP_TIMEOUT_MS, E2E_WAIT_MS; and E2E_SWEEPER_PID, the process that
// runs the pacer (run.sh sets it): it is stopped over the opening so that
// "being shuffled" lasts (without it the state is only looked for: it may
// be over before the page shows it). Every wait is for evidence, bounded.
import { createHash } from 'node:crypto'
import { mkdir, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { chromium } from 'playwright-core'
import { BASE, WAIT_MS, api, check, finish, step, until, watchPage } from './harness.mjs'

const ADMIN_TOKEN = process.env.STAMPEDE_ADMIN_TOKEN || ''
const PUSH_URL = process.env.STAMPEDE_PUSH_URL || ''
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium'
const ARTIFACTS = path.join(path.dirname(fileURLToPath(import.meta.url)), 'artifacts')
const DESKTOP = { width: 1280, height: 800 }
const PHONE = { width: 390, height: 844 }
const SWEEPER_PID = Number(process.env.E2E_SWEEPER_PID || 0) // run.sh: the sweeper (pacer) process, held at an opening
const POW_COST = 20_000 // about half a second in headless Chromium (docs/sale-lifecycle.md "A price on bots")

const login = async (userId) => (await api('POST', '/api/auth/login', { userId })).token

// solvePow solves a room's ALTCHA v1 challenge as a script would (docs/sale-lifecycle.md
// "A price on bots"): n with hex SHA-256(salt ‖ n) = challenge.
async function solvePow(productId, token) {
  const c = await api('GET', `/api/products/${productId}/queue/challenge`, undefined, token)
  for (let n = 0; n <= c.maxnumber; n++) {
    if (createHash('sha256').update(`${c.salt}${n}`).digest('hex') === c.challenge) {
      const payload = { algorithm: c.algorithm, challenge: c.challenge, number: n, salt: c.salt, signature: c.signature }
      return Buffer.from(JSON.stringify(payload)).toString('base64')
    }
  }
  throw new Error('no solution')
}

// takeTickets gives n scripted buyers a ticket each (solving the room's
// proof-of-work when it has one) and returns [{uid, token, place}].
async function takeTickets(productId, n, base, pow) {
  const out = []
  for (let i = 0; i < n; i++) {
    const uid = base + i
    const token = await login(uid)
    const body = pow ? { altcha: await solvePow(productId, token) } : undefined
    out.push({ uid, token, place: await api('POST', `/api/products/${productId}/queue`, body, token) })
  }
  return out
}
const placeOf = async (productId, token) => api('POST', `/api/products/${productId}/queue`, undefined, token)

async function createDrop(name, startInMs, room, extra = {}) {
  const p = await api(
    'POST',
    '/api/admin/products',
    {
      name,
      description: 'A limited drop: every place is given by a shuffle anyone can check.',
      price: 12900,
      stock: 5,
      perUserLimit: 1,
      maxPerOrder: 1,
      waitingRoom: true,
      imageUrl: `${BASE}/demo/sneaker.svg`,
      saleStart: new Date(Date.now() + startInMs).toISOString(),
      saleEnd: new Date(Date.now() + 3600_000).toISOString(),
      ...extra,
    },
    ADMIN_TOKEN,
  )
  const terms = await api('POST', `/api/admin/products/${p.id}/waiting-room`, { on: true, ...room }, ADMIN_TOKEN)
  return { ...p, terms }
}

async function main() {
  if (!ADMIN_TOKEN) throw new Error('set STAMPEDE_ADMIN_TOKEN (e.g. `stampede token --user 1 --admin`)')
  await mkdir(ARTIFACTS, { recursive: true })
  console.log(`e2e (drops) against ${BASE}`)
  const userDir = await mkdtemp(path.join(tmpdir(), 'stampede-e2e-drops-'))
  const context = await chromium.launchPersistentContext(userDir, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: DESKTOP,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-sync'],
  })
  const page = context.pages()[0] ?? (await context.newPage())
  watchPage(page)
  const logs = []
  page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`))
  page.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`))
  page.setDefaultTimeout(WAIT_MS)
  if (PUSH_URL) await page.addInitScript((u) => localStorage.setItem('stampede.pushUrl', u), PUSH_URL)
  const shot = async (name) => {
    await page.evaluate(() => window.scrollTo(0, 0))
    await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true })
  }
  // shots: desktop and phone width, and no sideways scrolling on the phone.
  const shots = async (name) => {
    await shot(`desktop-${name}`)
    await page.setViewportSize(PHONE)
    await page.waitForTimeout(150)
    await shot(`phone-${name}`)
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)
    await page.setViewportSize(DESKTOP)
    check(overflow <= 1, `${name}: no sideways scrolling at phone width`, `${overflow}px`)
  }
  // as signs the page in as userId (the session the client keeps in
  // localStorage); with joined (a product id), as a buyer whose browser took
  // a ticket for it before (the page then asks for its place at once).
  const as = async (token, userId, joined = 0) => {
    await page.evaluate(
      ([t, u, j]) => {
        localStorage.setItem('stampede.session', JSON.stringify({ token: t, userId: u }))
        if (j) localStorage.setItem(`stampede.line.${u}.${j}`, '1')
      },
      [token, userId, joined],
    )
  }
  const roomState = (sel = '[data-testid=waiting-room]') => page.locator(sel).getAttribute('data-state')
  const text = (sel) => page.locator(sel).first().textContent().then((t) => t.trim())
  await page.goto(`${BASE}/`)

  try {
    await preQueueDrop(page, { shot, shots, as, roomState, text })
    await drawDrop(page, { shot, shots, as, roomState, text })
  } catch (err) {
    await shot('drop-failure').catch(() => {})
    console.log('--- browser console ---')
    for (const l of logs.slice(-40)) console.log(l)
    throw err
  } finally {
    await context.close()
    await rm(userDir, { recursive: true, force: true })
  }
}

// preQueueDrop is step 1: a fifo room with a pre-queue and a proof-of-work.
async function preQueueDrop(page, { shot, shots, as, roomState, text }) {
  step('1. a pre-queued drop with a proof-of-work')
  const adminUid = 1
  // The pre-queue opens in 12 s, the sale 32 s from now; one admission per second.
  const d = await createDrop('E2E drop: pre-queue', 32_000, { mode: 'fifo', preQueueSeconds: 20, powCost: POW_COST, ceiling: 1, windowSeconds: 60 })
  check(/^[0-9a-f]{64}$/.test(d.terms.commitment), 'the room published its commitment when it was set', d.terms.commitment.slice(0, 16))
  const base = 300_000_000 + Math.floor(Math.random() * 1e6) * 100
  const buyer = { uid: base + 99, token: await login(base + 99) }
  await as(buyer.token, buyer.uid)
  await page.goto(`${BASE}/products/${d.id}`)
  await page.locator('[data-testid=prequeue-countdown] time').waitFor()
  check(/^\d\d:\d\d/.test(await text('[data-testid=prequeue-countdown] time')), 'before the pre-queue: a countdown to it', await text('[data-testid=prequeue-countdown]'))
  await shots('drop-prequeue-not-open')

  await as(ADMIN_TOKEN, adminUid)
  await page.goto(`${BASE}/admin`)
  const panel = page.locator(`[data-testid=drop-${d.id}]`)
  await panel.locator('[data-testid=drop-commitment]').waitFor()
  check((await panel.locator('[data-testid=drop-commitment]').textContent()).trim() === d.terms.commitment, 'the console shows the commitment')
  check((await panel.locator('[data-testid=drop-seed]').count()) === 0, 'the console keeps the seed secret before the opening')
  await page.locator(`[data-testid=sale-${d.id}]`).screenshot({ path: path.join(ARTIFACTS, 'desktop-console-drop-prequeue.png') })

  // The pre-queue opens: the page offers the widget by itself.
  await as(buyer.token, buyer.uid)
  await page.goto(`${BASE}/products/${d.id}`)
  const widget = page.locator('[data-testid=pow] altcha-widget')
  await widget.waitFor({ timeout: WAIT_MS })
  await page.locator('[data-testid=pow][data-state=unverified]').waitFor()
  check((await roomState()) === 'NONE', 'the pre-queue opened without a reload: the proof-of-work is offered')
  await shots('drop-pow')
  const t0 = Date.now()
  await widget.locator('label').click() // as a buyer does: the widget's box is drawn over its input
  await page.locator('[data-testid=waiting-room][data-state=PRE_QUEUE]').waitFor()
  check(true, 'the ALTCHA widget solved the gateway challenge in the browser and the ticket was given', `${Date.now() - t0} ms`)
  const mine = await page.evaluate((id) => window.__stampede.place(id), d.id)
  check(/^[0-9a-f]{16}$/.test(mine.ticket) && (await text('[data-testid=ticket]')) === mine.ticket, 'the pre-queued ticket is shown, no position', mine.ticket)
  check((await page.locator('[data-testid=commitment] code').getAttribute('title')) === d.terms.commitment, 'the page shows the commitment')
  check(
    (await page.evaluate((id) => localStorage.getItem(`stampede.commitment.${id}`), d.id)) === d.terms.commitment,
    'the browser noted the commitment before the opening',
  )
  await shots('drop-prequeued')

  // Scripted buyers fill the pre-queue, each solving its own challenge.
  const others = await takeTickets(d.id, 12, base, true)
  check(others.every((o) => o.place.state === 'PRE_QUEUE' && o.place.position === 0), 'scripted pre-queue tickets carry no position', `${others.length}`)
  const again = await placeOf(d.id, buyer.token)
  check(again.ticket === mine.ticket, 'a buyer holding a ticket asks again without a new proof and keeps it')

  // The opening: "the line is being shuffled" until the place arrives. With
  // the sweeper's pid (run.sh) the pacer is held over the opening, so the
  // state lasts long enough to be checked on the API and photographed.
  if (SWEEPER_PID) process.kill(SWEEPER_PID, 'SIGSTOP')
  try {
    await page.locator('[data-testid=waiting-room][data-state=SHUFFLING]').waitFor({ timeout: 40_000 })
    if (SWEEPER_PID) {
      const st = await until(async () => ((await placeOf(d.id, buyer.token)).state === 'SHUFFLING' ? 'SHUFFLING' : ''), 'the API to say SHUFFLING')
      check(st === 'SHUFFLING', 'at the opening, before the shuffle is published, the API says SHUFFLING')
      await shots('drop-shuffling')
    } else await shot('desktop-drop-shuffling')
    check(true, 'at the opening the page says the line is being shuffled')
  } finally {
    if (SWEEPER_PID) process.kill(SWEEPER_PID, 'SIGCONT')
  }
  await page.waitForFunction(() => ['WAITING', 'ADMITTED'].includes(document.querySelector('[data-testid=waiting-room]')?.dataset.state), null, { timeout: WAIT_MS })
  const dropRec = await api('GET', `/api/products/${d.id}/drop`)
  check(dropRec.state === 'OPEN' && dropRec.preQueued === 13, 'the shuffle is published', `${dropRec.preQueued} tickets`)

  // The buyer furthest back (one admission per second: it waits long enough to be seen).
  const served = await Promise.all(others.map(async (o) => ({ ...o, place: await placeOf(d.id, o.token) })))
  const last = served.filter((o) => o.place.state === 'WAITING').sort((a, b) => b.place.shufflePosition - a.place.shufflePosition)[0]
  check(!!last, 'a scripted buyer still waits', `place ${last?.place.shufflePosition}`)
  await as(last.token, last.uid)
  await page.evaluate(([id, c]) => localStorage.setItem(`stampede.commitment.${id}`, c), [d.id, d.terms.commitment])
  await page.goto(`${BASE}/products/${d.id}`)
  await page.locator('[data-testid=shuffle-place] strong').waitFor()
  const shownPlace = Number(await text('[data-testid=shuffle-place] strong'))
  check(shownPlace === last.place.shufflePosition, 'the page shows the served place in the shuffle', `${shownPlace}`)
  check(Number(await text('[data-testid=position]')) >= 1, 'and the position in line', await text('[data-testid=position]'))
  await shots('drop-waiting-shuffled')

  await page.click('[data-testid=verify-link]')
  await page.locator('[data-testid=verify-result]').waitFor()
  check((await page.locator('[data-testid=verify-ok]').count()) === 1, 'verify: the place recomputed in the browser matches', await text('[data-testid=verify-result] h2'))
  check(Number((await text('[data-testid=verify-position]')).split(' ')[0]) === last.place.shufflePosition, 'verify: recomputed = served')
  check((await text('[data-testid=verify-seed]')) === dropRec.seed, 'verify shows the published seed')
  await shots('drop-verify')

  // A shop that changed its seed after the commitment: the page says so.
  const forged = { ...dropRec, seed: createHash('sha256').update(dropRec.seed).digest('hex') }
  await page.route(`**/api/products/${d.id}/drop`, (r) => r.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify(forged) }))
  await page.reload()
  await page.locator('[data-testid=verify-bad]').waitFor()
  check(/does not match the commitment/.test(await text('[data-testid=verify-problems]')), 'verify catches a seed that does not match the commitment')
  await shot('desktop-drop-verify-mismatch')
  await page.unroute(`**/api/products/${d.id}/drop`)

  await as(ADMIN_TOKEN, adminUid)
  await page.goto(`${BASE}/admin`)
  await panel.locator('[data-testid=drop-seed]').waitFor()
  check((await text(`[data-testid=drop-${d.id}] [data-testid=drop-seed-check]`)).includes('✓'), 'the console shows the seed and that it hashes to the commitment')
  await panel.locator('[data-testid=drop-order]').click()
  const row = panel.locator('[data-testid=drop-order-table] tr', { hasText: last.place.ticket })
  check(Number(await row.locator('td').first().textContent()) === last.place.shufflePosition, "the console's recomputed order agrees with the served place")
  await page.locator(`[data-testid=sale-${d.id}]`).screenshot({ path: path.join(ARTIFACTS, 'desktop-console-drop-shuffled.png') })
  await api('POST', `/api/admin/products/${d.id}/end`, undefined, ADMIN_TOKEN)
}

// drawDrop is step 2: a draw of 2 units with a reserve list of 2 among 8 entries.
async function drawDrop(page, { shot, shots, as, roomState, text }) {
  step('2. a draw')
  const d = await createDrop('E2E drop: draw', 20_000, { mode: 'draw', reserve: 2, windowSeconds: 30 }, { stock: 2 })
  const base = 310_000_000 + Math.floor(Math.random() * 1e6) * 100
  const buyer = { uid: base + 99, token: await login(base + 99) }
  await as(buyer.token, buyer.uid)
  await page.goto(`${BASE}/products/${d.id}`)
  await page.locator('[data-testid=join]').waitFor()
  check((await text('[data-testid=join]')) === 'Enter the draw', 'the draw offers an entry')
  await shots('draw-enter')
  await page.click('[data-testid=join]')
  await page.locator('[data-testid=waiting-room][data-state=PRE_QUEUE]').waitFor()
  check(/closes in/.test(await text('[data-testid=opening-countdown]')), 'entered: a countdown to the close')
  await shots('draw-entered')
  const others = await takeTickets(d.id, 7, base, false)
  const again = await placeOf(d.id, buyer.token)
  check(again.ticket === (await page.evaluate((id) => window.__stampede.place(id).ticket, d.id)), 'one entry per buyer: asking again gives the same')

  // The close: the buyer's own result arrives without a reload.
  await page.waitForFunction(() => ['ADMITTED', 'WAITING', 'LOST'].includes(document.querySelector('[data-testid=waiting-room]')?.dataset.state), null, { timeout: 40_000 })
  check(true, 'the result arrived without a reload', await roomState())
  const all = await Promise.all([...others, buyer].map(async (o) => ({ ...o, place: await placeOf(d.id, o.token) })))
  const by = (s) => all.filter((o) => o.place.state === s).sort((a, b) => a.place.shufflePosition - b.place.shufflePosition)
  const [won, lost, reserve] = [by('ADMITTED'), by('LOST'), by('WAITING')]
  check(won.length === 2 && reserve.length === 2 && lost.length === 4, 'two winners, two on the reserve list, four not drawn')
  const rec = await api('GET', `/api/products/${d.id}/drop`)
  check(rec.winners === 2 && won.every((o) => o.place.shufflePosition <= 2), 'the winners are the first two places of the shuffle')

  // The second winner's page: the win's countdown; it buys at once. (The
  // window, 30 s, outlasts the pictures of the reserve list below on a loaded
  // machine; the first winner's win then passes on.)
  await as(won[1].token, won[1].uid, d.id)
  await page.goto(`${BASE}/products/${d.id}`)
  await page.locator('[data-testid=won]').waitFor()
  check(/\d\d:\d\d/.test(await text('[data-testid=admitted]')) && !(await page.locator('[data-testid=buy]').isDisabled()), 'won: the win counts down, Buy is open')
  await shots('draw-won')
  await page.click('[data-testid=buy]')
  await page.waitForURL(/\/orders\/\d+$/)
  await page.goto(`${BASE}/products/${d.id}`)
  await page.locator('[data-testid=ordered]').waitFor()
  check(true, 'the win used by an order shows as such')
  await shots('draw-ordered')
  await as(reserve[0].token, reserve[0].uid, d.id)
  await page.goto(`${BASE}/products/${d.id}`)
  await page.locator('[data-testid=reserve]').waitFor()
  check(Number(await text('[data-testid=position]')) === 1, 'reserve list: number 1')
  await shots('draw-reserve')
  await as(lost[0].token, lost[0].uid, d.id)
  await page.goto(`${BASE}/products/${d.id}`)
  await page.locator('[data-testid=lost]').waitFor()
  await shots('draw-lost')
  await page.click('[data-testid=verify-link]')
  await page.locator('[data-testid=verify-ok]').waitFor()
  check(/not drawn/.test(await text('[data-testid=verify-ok]')), 'verify: the loss follows from the published draw', await text('[data-testid=verify-ok]'))
  await shot('desktop-draw-verify-lost')

  // The first winner does not buy: its win passes to the reserve list's first.
  await as(won[0].token, won[0].uid, d.id)
  await page.goto(`${BASE}/products/${d.id}`)
  await page.locator('[data-testid=expired]').waitFor({ timeout: WAIT_MS })
  check(true, 'the unused win shows as passed on')
  await shots('draw-expired')
  const passed = await until(async () => (await placeOf(d.id, reserve[0].token)).state === 'ADMITTED', 'the reserve to be admitted')
  check(passed, 'the reserve list’s first got the win passed on')

  await as(ADMIN_TOKEN, 1)
  await page.goto(`${BASE}/admin`)
  const panel = page.locator(`[data-testid=drop-${d.id}]`)
  await until(async () => (await panel.locator('[data-testid=drop-passons]').textContent().catch(() => '')) === '1', 'one pass-on in the console')
  const n = async (k) => Number(await panel.locator(`[data-testid=drop-${k}]`).textContent())
  check((await n('entries')) === 8 && (await n('winners')) === 2 && (await n('claims')) === 1 && (await n('passons')) === 1, 'the console: 8 entries, 2 winners, 1 claim, 1 pass-on')
  await panel.locator('[data-testid=drop-order]').click()
  await panel.locator('[data-testid=drop-order-table]').waitFor()
  await page.locator(`[data-testid=sale-${d.id}]`).screenshot({ path: path.join(ARTIFACTS, 'desktop-console-draw.png') })
}

finish('e2e (drops)', main, ARTIFACTS)
