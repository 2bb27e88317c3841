// What the waiting room's proof-of-work costs a browser (issue 28, docs/sale-lifecycle.md
// "A price on bots"): headless Chromium solves ALTCHA v1 challenges of each
// cost with the ALTCHA widget's own solver (npm altcha: altcha/lib's
// solveChallenge and its SHA worker, dist/workers/sha.js, run the way the
// widget runs a v1 challenge), once on the page's thread (one worker's
// worth) and once split over the widget's workers (navigator.hardwareConcurrency,
// as the widget does by default). Prints a Markdown table; with --out FILE
// also writes it there.
//
//   node e2e/pow-cost.mjs [--costs 10000,100000,1000000] [--runs 4] [--out ../bench/results/pow-cost.md]
//
// The challenges are made here (random salt and secret number, SHA-256), as
// the gateway makes them: only the solving is measured.

import { createHash, randomBytes, randomInt } from 'node:crypto'
import { readFileSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:http'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { chromium } from 'playwright-core'

const here = dirname(fileURLToPath(import.meta.url))
const arg = (name, def) => {
  const i = process.argv.indexOf(name)
  return i > 0 ? process.argv[i + 1] : def
}
const costs = arg('--costs', '10000,100000,1000000').split(',').map(Number)
const runs = Number(arg('--runs', '4'))
const out = arg('--out', '')
const lib = readFileSync(join(here, '../node_modules/altcha/dist/lib/index.js'), 'utf8')
const worker = readFileSync(join(here, '../node_modules/altcha/dist/workers/sha.js'), 'utf8')

function challenge(cost) {
  const salt = randomBytes(12).toString('hex') + `?expires=${Math.floor(Date.now() / 1000) + 300}&p=7&u=42`
  const number = randomInt(0, cost + 1)
  return { algorithm: 'SHA-256', challenge: createHash('sha256').update(salt + number).digest('hex'), maxnumber: cost, salt, signature: '', number }
}

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: ['--no-sandbox'] })
const version = browser.version()
const page = await browser.newPage()
// A page on loopback: a secure context, where crypto.subtle exists.
const server = createServer((_, res) => res.writeHead(200, { 'Content-Type': 'text/html' }).end('<!doctype html><title>pow</title>'))
await new Promise((ok) => server.listen(0, '127.0.0.1', ok))
await page.goto(`http://127.0.0.1:${server.address().port}/`)
const cores = await page.evaluate(() => navigator.hardwareConcurrency)
const rows = []
for (const cost of costs) {
  const cs = Array.from({ length: runs }, () => challenge(cost))
  const res = await page.evaluate(
    async ({ lib, worker, cs }) => {
      const m = await import(URL.createObjectURL(new Blob([lib], { type: 'text/javascript' })))
      const workerURL = URL.createObjectURL(new Blob([worker], { type: 'text/javascript' }))
      // The widget's createChallengeFromV1.
      const fromV1 = (c) => {
        const data = Object.fromEntries(new URLSearchParams(c.salt.split('?')[1] || '').entries())
        const nonce = Array.from(new TextEncoder().encode(c.salt), (b) => b.toString(16).padStart(2, '0')).join('')
        return { parameters: { algorithm: c.algorithm, cost: 1, data, keyLength: 32, nonce, keyPrefix: c.challenge, salt: '' }, signature: c.signature }
      }
      const out = []
      for (const c of cs) {
        let t0 = performance.now()
        const one = await m.solveChallenge({ challenge: fromV1(c), counterMode: 'string', deriveKey: m.sha.deriveKey, timeout: 600_000 })
        const single = performance.now() - t0
        t0 = performance.now()
        const many = await m.solveChallengeWorkers({ challenge: fromV1(c), counterMode: 'string', createWorker: () => new Worker(workerURL), timeout: 600_000 })
        const workers = performance.now() - t0
        out.push({ number: c.number, found: one?.counter, foundWorkers: many?.counter, single, workers })
      }
      return out
    },
    { lib, worker, cs },
  )
  for (const r of res) if (r.found !== r.number || r.foundWorkers !== r.number) throw new Error(`wrong solution ${JSON.stringify(r)}`)
  const hashes = res.reduce((n, r) => n + r.number + 1, 0)
  const single = res.reduce((n, r) => n + r.single, 0)
  const workers = res.reduce((n, r) => n + r.workers, 0)
  rows.push({ cost, runs, rate: hashes / (single / 1000), avgSingle: ((cost / 2 + 1) / (hashes / (single / 1000))) * 1000, meanSingle: single / runs, meanWorkers: workers / runs })
}
await browser.close()
server.close()

const fmt = (ms) => (ms < 1000 ? `${ms.toFixed(0)} ms` : `${(ms / 1000).toFixed(2)} s`)
let md = `Headless Chromium ${version}, ${cores} hardware threads (navigator.hardwareConcurrency), the ALTCHA widget's solver (npm altcha ${JSON.parse(readFileSync(join(here, '../node_modules/altcha/package.json'), 'utf8')).version}); ${runs} challenges per cost, secret numbers uniform in 0…cost.\n\n`
md += '| cost (maxnumber) | SHA-256/s, one worker | expected time per ticket, one worker (cost/2 hashes) | measured mean, one worker | measured mean, the widget\'s workers |\n|--:|--:|--:|--:|--:|\n'
for (const r of rows) md += `| ${r.cost.toLocaleString('en-US')} | ${Math.round(r.rate).toLocaleString('en-US')} | ${fmt(r.avgSingle)} | ${fmt(r.meanSingle)} | ${fmt(r.meanWorkers)} |\n`
console.log(md)
if (out) writeFileSync(out, md)
