import { afterEach, describe, expect, it, vi } from 'vitest'
import {
  RefundClicks,
  afterText,
  historyRows,
  lookupQuery,
  mergePages,
  missingEndpoint,
  newRefundNo,
  validRefundNo,
  waitingText,
} from '../src/lib/admin.js'
import { admin, query } from '../src/lib/api.js'
import { ApiError } from '../src/lib/errors.js'

// A fetch stub answering one canned response per call and recording the calls.
function stubFetch(...answers) {
  const calls = []
  const fn = vi.fn(async (url, init) => {
    calls.push({ url, method: init.method, body: init.body === undefined ? undefined : JSON.parse(init.body) })
    const [status, body] = answers.shift() ?? [500, { error: { code: 'INTERNAL', message: 'no answer left' } }]
    return new Response(body === undefined ? '' : JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } })
  })
  vi.stubGlobal('fetch', fn)
  return calls
}
afterEach(() => vi.unstubAllGlobals())

describe('refund numbers', () => {
  it('are valid idempotency keys, different per click', () => {
    const a = newRefundNo()
    const b = newRefundNo()
    expect(validRefundNo(a)).toBe(true)
    expect(a).not.toBe(b)
    expect(newRefundNo(() => 36 ** 8, () => 0.999)).toBe('rf-100000000-zzzzzzzz')
    expect(validRefundNo('x'.repeat(65))).toBe(false)
    expect(validRefundNo('has space')).toBe(false)
  })

  it('a click whose answer is unknown is retried with the same number; a definite answer forgets it', () => {
    let n = 0
    const clicks = new RefundClicks(() => `rf-${++n}`)
    expect(clicks.begin('p1')).toBe('rf-1')
    expect(clicks.settle('p1', new ApiError('TIMEOUT'))).toBe('retry')
    expect(clicks.retrying('p1')).toBe(true)
    expect(clicks.begin('p1')).toBe('rf-1') // the retry: same intent
    expect(clicks.settle('p1', new ApiError('INTERNAL', '', 502))).toBe('retry')
    expect(clicks.begin('p1')).toBe('rf-1')
    expect(clicks.settle('p1', undefined)).toBe('refunded')
    expect(clicks.retrying('p1')).toBe(false)
    expect(clicks.begin('p1')).toBe('rf-2') // a new click: a new intent
    expect(clicks.settle('p1', new ApiError('ALREADY_REFUNDED', '', 409))).toBe('already')
    expect(clicks.begin('p2')).toBe('rf-3')
    expect(clicks.settle('p2', new ApiError('NOT_REFUNDABLE', '', 409))).toBe('failed')
    expect(clicks.retrying('p2')).toBe(false)
  })

  it('posts {refundNo} to the payment and retries with the same body', async () => {
    const ok = { paymentNo: 'pay-1', orderNo: '1', status: 'REFUNDED', refundNo: 'rf-1', refundedAt: '2026-12-01T15:00:00Z' }
    const calls = stubFetch([503, { error: { code: 'UNAVAILABLE', message: 'busy' } }], [200, ok])
    const clicks = new RefundClicks(() => 'rf-1')
    let err
    await admin.refund('pay-1', clicks.begin('pay-1')).catch((e) => (err = e))
    expect(clicks.settle('pay-1', err)).toBe('retry')
    const r = await admin.refund('pay-1', clicks.begin('pay-1'))
    expect(clicks.settle('pay-1')).toBe('refunded')
    expect(r).toEqual(ok)
    expect(calls.map((c) => [c.method, c.url, c.body])).toEqual([
      ['POST', '/api/admin/payments/pay-1/refund', { refundNo: 'rf-1' }],
      ['POST', '/api/admin/payments/pay-1/refund', { refundNo: 'rf-1' }],
    ])
  })
})

describe('operator API calls', () => {
  it('leave empty filters out of the query', async () => {
    expect(query({ state: '', limit: 50, cursor: null, userId: 7 })).toBe('?limit=50&userId=7')
    expect(query({})).toBe('')
    const calls = stubFetch([200, { products: [], nextCursor: '' }], [200, { orders: [] }], [200, { refunds: [] }])
    await admin.products({ state: 'soldOut', cursor: 'c 1' })
    await admin.orders({ userId: 5, status: 'PAID', from: '2026-12-01T10:00:00.000Z' })
    await admin.refunds()
    expect(calls.map((c) => c.url)).toEqual([
      '/api/admin/products?state=soldOut&limit=50&cursor=c+1',
      '/api/admin/orders?userId=5&status=PAID&from=2026-12-01T10%3A00%3A00.000Z',
      '/api/admin/refunds?limit=20',
    ])
  })

  it('carry the per-field problems of a 400 and tell a missing endpoint', async () => {
    stubFetch(
      [400, { error: { code: 'INVALID_ARGUMENT', message: 'bad', details: [{ field: 'price', message: 'must be ≥ 0' }] } }],
      [404, { error: { code: 'NOT_FOUND', message: 'no such endpoint' } }],
      [409, { error: { code: 'SALE_STARTED', message: 'price cannot change after the sale opened' } }],
    )
    const e1 = await admin.edit(3, { price: -1 }).catch((e) => e)
    expect(e1.details).toEqual([{ field: 'price', message: 'must be ≥ 0' }])
    const e2 = await admin.orders({}).catch((e) => e)
    expect(missingEndpoint(e2)).toBe(true)
    const e3 = await admin.edit(3, { price: 5 }).catch((e) => e)
    expect([e3.status, e3.code, missingEndpoint(e3)]).toEqual([409, 'SALE_STARTED', false])
  })
})

describe('order lookup', () => {
  it('opens an order by its number, or builds the list filters', () => {
    expect(lookupQuery({ orderNo: ' 1234567890123456789012 ', userId: '9' })).toEqual({ orderNo: '1234567890123456789012' })
    expect(lookupQuery({ orderNo: '12ab' }).error).toMatch(/20 to 40 digits/)
    const from = '2026-12-01T10:00'
    const q = lookupQuery({ userId: '42', productId: '', status: 'PAID', from, to: '' })
    expect(q).toEqual({ params: { userId: 42, status: 'PAID', from: new Date(from).toISOString() } })
    expect(lookupQuery({})).toEqual({ params: {} })
  })

  it('refuses what the endpoint would', () => {
    expect(lookupQuery({ userId: '-3' }).error).toMatch(/Buyer/)
    expect(lookupQuery({ productId: '1.5' }).error).toMatch(/Product/)
    expect(lookupQuery({ status: 'SHIPPED' }).error).toMatch(/SHIPPED/)
    expect(lookupQuery({ from: '2026-12-01T10:00', to: '2026-12-01T09:00' }).error).toMatch(/after/)
  })

  it('puts the history oldest first with the time between steps', () => {
    const rows = historyRows({
      history: [
        { status: 'WAITING_PAY', at: '2026-12-01T10:00:00.250Z', event: 'order.locked' },
        { status: 'PROCESSING', at: '2026-12-01T10:00:00.000Z', event: 'order.created' },
        { status: 'PAID', at: '2026-12-01T10:00:05.250Z', event: 'order.paid' },
      ],
    })
    expect(rows.map((r) => [r.status, r.afterMs])).toEqual([
      ['PROCESSING', null],
      ['WAITING_PAY', 250],
      ['PAID', 5000],
    ])
    expect(rows.map((r) => afterText(r.afterMs))).toEqual(['', '+250 ms', '+5.0 s'])
    expect(historyRows({})).toEqual([])
  })
})

describe('list helpers', () => {
  it('merge keyset pages without repeating a row', () => {
    expect(mergePages([{ k: 1 }, { k: 2 }], [{ k: 2 }, { k: 3 }], 'k')).toEqual([{ k: 1 }, { k: 2 }, { k: 3 }])
  })
  it('say how long a refund waits', () => {
    expect([5, 125, 3 * 3600 + 5 * 60, 2 * 86400 + 4 * 3600, -1].map(waitingText)).toEqual(['5 s', '2 min', '3 h 05 min', '2 d 4 h', '0 s'])
  })
})

describe('audit entries', async () => {
  const { auditAction, auditChangeText } = await import('../src/lib/admin.js')
  it('say who changed what', () => {
    expect(auditAction('pause')).toBe('Paused')
    expect(auditAction('something')).toBe('something')
    const patch = { action: 'patch', change: { name: { from: 'Sneaker', to: 'Sneaker v2' }, saleEnd: { from: null, to: '2026-12-01T15:00:00Z' } } }
    expect(auditChangeText(patch)).toBe('name: Sneaker → Sneaker v2; saleEnd: – → 2026-12-01T15:00:00Z')
    expect(auditChangeText({ action: 'adjust', change: { repairNo: 'r1', delta: 5, reason: 'recount' } })).toBe('+5 (recount)')
    expect(auditChangeText({ action: 'adjust', change: { delta: -2 } })).toBe('-2')
    expect(auditChangeText({ action: 'pause', change: null })).toBe('')
    expect(auditChangeText({ action: 'pause', change: { paused: { from: false, to: true } } })).toBe('paused: false → true')
    expect(auditChangeText({ action: 'create', change: { name: 'x', price: 1 } })).toBe('')
    expect(auditChangeText({ action: 'patch', change: { description: { from: '', to: 'x'.repeat(60) } } })).toMatch(/^description: – → x{39}…$/)
  })
})
