// harness.mjs: what every browser flow (flow.mjs, drops.mjs) shares — the
// checks and their tally, waiting for evidence instead of fixed sleeps, the
// numbered steps with a watchdog each, the JSON API calls, the last HTTP
// answer seen (every wait that times out and every failed run report it), and
// the end of a run. One flow runs per Node process (run.sh), so the tally and the current
// step are this module's state.
//
// Environment: STAMPEDE_URL (the gateway, default http://127.0.0.1:8080),
// E2E_STEP_TIMEOUT_MS (a step's budget, default 240 s), E2E_WAIT_MS (until's
// default time-out, 60 s).

export const BASE = (process.env.STAMPEDE_URL || 'http://127.0.0.1:8080').replace(/\/$/, '')
export const STEP_TIMEOUT_MS = Number(process.env.E2E_STEP_TIMEOUT_MS || 240_000)
export const WAIT_MS = Number(process.env.E2E_WAIT_MS || 60_000)

let passed = 0
let failed = 0
let stepName = ''
let stepStart = 0
let watchdog = null

// check counts a check and prints it; a failed one throws, ending the flow.
export function check(ok, what, detail = '') {
  const line = `${what}${detail ? ` (${detail})` : ''}`
  if (ok) {
    passed++
    console.log(`  ✓ ${line}`)
    return
  }
  failed++
  console.log(`  ✗ ${line}`)
  throw new Error(`check failed: ${what} ${detail}`)
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// The last HTTP answer the flow saw: from call/api/answer, and from the pages
// watchPage watches (their /api/ and /readyz requests).
let lastAnswer = null

// noteAnswer records an HTTP answer as the last one seen (body cut to 500
// characters).
export function noteAnswer(method, url, status, body) {
  const text = typeof body === 'string' ? body : JSON.stringify(body)
  lastAnswer = { at: Date.now(), method, url: String(url).replace(BASE, ''), status, body: (text ?? '').slice(0, 500) }
}

// lastSeen describes the last HTTP answer seen: method, path, status, age
// and body.
export function lastSeen() {
  if (!lastAnswer) return 'no HTTP answer seen yet'
  const a = lastAnswer
  return `${a.method} ${a.url} → ${a.status} (${((Date.now() - a.at) / 1000).toFixed(1)} s ago): ${a.body || '(empty body)'}`
}

// watchPage records the answers to page's API requests (and /readyz) as
// they arrive, so a browser wait that times out can say what the page last
// got from the server.
export function watchPage(page) {
  page.on('response', async (res) => {
    const u = new URL(res.url())
    if (!u.pathname.startsWith('/api/') && u.pathname !== '/readyz') return
    let body = ''
    try {
      body = await res.text()
    } catch {
      body = '(body not available)'
    }
    noteAnswer(res.request().method(), u.pathname + u.search, res.status(), body)
  })
}

// answer fetches url (GET, 5 s time-out) and records the answer; it
// resolves to the Response, or null when there was none (refused, timed out).
export async function answer(url) {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(5000) })
    noteAnswer('GET', url, res.status, await res.clone().text())
    return res
  } catch (err) {
    const cause = err?.cause
    noteAnswer('GET', url, 'no answer', [err?.message, cause?.code || cause?.errors?.[0]?.code || cause?.message].filter(Boolean).join(': '))
    return null
  }
}

// until calls fn every intervalMs until it returns something truthy, and
// returns that; after timeoutMs it throws, naming what it waited for, the
// last value fn returned and the last HTTP answer seen (lastSeen).
export async function until(fn, what, { timeoutMs = WAIT_MS, intervalMs = 250 } = {}) {
  const deadline = Date.now() + timeoutMs
  let last
  for (;;) {
    last = await fn()
    if (last) return last
    if (Date.now() > deadline) throw new Error(`waited ${timeoutMs} ms for ${what}; last value: ${JSON.stringify(last)}; last HTTP answer: ${lastSeen()}`)
    await sleep(intervalMs)
  }
}

// step starts a numbered step: it prints the previous step's duration and
// arms the watchdog with this step's budget (ms); step('') ends the last one.
export function step(name, budgetMs = STEP_TIMEOUT_MS) {
  if (stepName) console.log(`  (${stepName}: ${((Date.now() - stepStart) / 1000).toFixed(1)} s)`)
  clearTimeout(watchdog)
  stepName = name
  stepStart = Date.now()
  if (!name) return
  console.log(`— ${name}`)
  watchdog = setTimeout(() => {
    console.error(`e2e: step "${name}" still running after ${budgetMs} ms (E2E_STEP_TIMEOUT_MS); last HTTP answer: ${lastSeen()}`)
    process.exit(1)
  }, budgetMs)
  watchdog.unref()
}

// call sends one JSON request (10 s time-out) and answers {status, data}:
// data parsed as JSON, or the text when it is not JSON.
export async function call(method, p, body, token, base = BASE) {
  const res = await fetch(base + p, {
    method,
    headers: { 'Content-Type': 'application/json', ...(token ? { Authorization: `Bearer ${token}` } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  })
  const text = await res.text()
  noteAnswer(method, base + p, res.status, text)
  let data = null
  try {
    data = text ? JSON.parse(text) : null
  } catch {
    data = text
  }
  return { status: res.status, data }
}

// api is call for a request that must succeed: it throws on a status ≥ 300.
export async function api(method, p, body, token) {
  const r = await call(method, p, body, token)
  if (r.status >= 300) throw new Error(`${method} ${p}: ${r.status} ${JSON.stringify(r.data)}`)
  return r.data
}

// finish runs a flow's main and prints the tally under label; a thrown error
// names the step it ended and the last HTTP answer seen, and sets exit
// status 1.
export function finish(label, main, artifacts) {
  main().then(
    () => {
      step('')
      console.log(`${label}: ${passed} passed, ${failed} failed`)
      console.log(`screenshots in ${artifacts}`)
    },
    (err) => {
      if (failed === 0) failed = 1
      console.error(`${label}: step "${stepName}" failed after ${((Date.now() - stepStart) / 1000).toFixed(1)} s: ${err.stack || err}`)
      console.error(`${label}: last HTTP answer: ${lastSeen()}`)
      console.log(`${label}: ${passed} passed, ${failed} failed`)
      process.exitCode = 1
    },
  )
}
