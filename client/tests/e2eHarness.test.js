import { createServer } from 'node:http'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

// The browser tests' waits (e2e/harness.mjs): one that times out names what
// it waited for, the last value, and the last HTTP answer the flow saw — its
// method, path, status and body — not just "last: false".
let server
let base
let calls = 0

beforeAll(async () => {
  server = createServer((req, res) => {
    calls++
    res.writeHead(409, { 'Content-Type': 'application/json' })
    res.end(JSON.stringify({ error: { code: 'INVALID_STATE', message: `still PROCESSING (try ${calls})` } }))
  })
  await new Promise((r) => server.listen(0, '127.0.0.1', r))
  base = `http://127.0.0.1:${server.address().port}`
  process.env.STAMPEDE_URL = base
})

afterAll(() => new Promise((r) => server.close(r)))

describe('until', () => {
  it('reports the last status and body seen when it times out', async () => {
    const { call, until } = await import('../e2e/harness.mjs')
    const wait = until(async () => (await call('POST', '/api/orders/42/pay')).status === 200, 'pay 42', { timeoutMs: 300, intervalMs: 50 })
    await expect(wait).rejects.toThrow(/waited 300 ms for pay 42; last value: false; last HTTP answer: POST \/api\/orders\/42\/pay → 409 \(\d+\.\d s ago\): \{"error":\{"code":"INVALID_STATE","message":"still PROCESSING \(try \d+\)"\}\}/)
  })

  it('reports a server that never answered', async () => {
    const { answer, until } = await import('../e2e/harness.mjs')
    const closed = createServer()
    await new Promise((r) => closed.listen(0, '127.0.0.1', r))
    const url = `http://127.0.0.1:${closed.address().port}/readyz`
    await new Promise((r) => closed.close(r))
    const wait = until(async () => (await answer(url))?.ok ?? false, 'readyz', { timeoutMs: 100, intervalMs: 50 })
    await expect(wait).rejects.toThrow(/last HTTP answer: GET http:\/\/127\.0\.0\.1:\d+\/readyz → no answer .*ECONNREFUSED/)
  })
})
