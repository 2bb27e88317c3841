import { describe, expect, it, vi } from 'vitest'
import { ApiError } from '../src/lib/errors.js'
import { Outcome, PurchaseFlow, RETRY_MAX_MS, newRequestId, retryDelayMs } from '../src/lib/purchase.js'

function ids() {
  let n = 0
  return () => `req-${++n}`
}

function memoryStorage() {
  const m = new Map()
  return {
    getItem: (k) => (m.has(k) ? m.get(k) : null),
    setItem: (k, v) => m.set(k, String(v)),
    removeItem: (k) => m.delete(k),
  }
}

const accepted = (orderNo) => ({ orderNo, status: 'PROCESSING' })

describe('PurchaseFlow', () => {
  it('makes valid request ids', () => {
    const id = newRequestId()
    expect(id).toMatch(/^[A-Za-z0-9._:-]{1,64}$/)
    expect(newRequestId()).not.toBe(id)
  })

  it('reuses the requestId on retries after a timeout, a 503 and a network error', async () => {
    const sent = []
    const errors = [new ApiError('TIMEOUT'), new ApiError('UNAVAILABLE', '', 503), new ApiError('NETWORK')]
    const send = vi.fn(async (body) => {
      sent.push(body)
      if (errors.length) throw errors.shift()
      return accepted('0001')
    })
    const flow = new PurchaseFlow({ send, newId: ids(), autoRetries: 0 })
    for (let i = 0; i < 3; i++) {
      const r = await flow.submit(7, 1)
      expect(r.outcome).toBe(Outcome.RETRY)
      expect(r.requestId).toBe('req-1')
    }
    const r = await flow.submit(7, 1)
    expect(r).toMatchObject({ outcome: Outcome.ACCEPTED, orderNo: '0001', requestId: 'req-1' })
    expect(sent.map((b) => b.requestId)).toEqual(['req-1', 'req-1', 'req-1', 'req-1'])
    expect(sent[0]).toEqual({ productId: 7, quantity: 1, requestId: 'req-1' })
  })

  it('keeps the requestId after a rejection until the buyer starts a new purchase', async () => {
    const send = vi.fn(async () => {
      throw new ApiError('SALE_NOT_ACTIVE', 'the sale is not open', 409)
    })
    const flow = new PurchaseFlow({ send, newId: ids() })
    expect((await flow.submit(7, 1)).outcome).toBe(Outcome.REJECTED)
    expect((await flow.submit(7, 1)).requestId).toBe('req-1')
    flow.startNew()
    expect((await flow.submit(7, 1)).requestId).toBe('req-2')
  })

  it('starts a new purchase after an accepted one', async () => {
    const send = vi.fn(async (b) => accepted(`order-${b.requestId}`))
    const flow = new PurchaseFlow({ send, newId: ids() })
    expect((await flow.submit(7, 1)).orderNo).toBe('order-req-1')
    expect((await flow.submit(7, 1)).orderNo).toBe('order-req-2')
  })

  it('starts a new purchase when the product or quantity changes', async () => {
    const send = vi.fn(async () => {
      throw new ApiError('TIMEOUT')
    })
    const flow = new PurchaseFlow({ send, newId: ids(), autoRetries: 0 })
    expect((await flow.submit(7, 1)).requestId).toBe('req-1')
    expect((await flow.submit(7, 2)).requestId).toBe('req-2')
    expect((await flow.submit(8, 2)).requestId).toBe('req-3')
  })

  it('joins the attempt in flight instead of sending twice', async () => {
    let resolve
    const send = vi.fn(() => new Promise((r) => (resolve = r)))
    const flow = new PurchaseFlow({ send, newId: ids() })
    const a = flow.submit(7, 1)
    const b = flow.submit(7, 1)
    const c = flow.submit(7, 3) // a different click while busy still joins
    expect(flow.busy).toBe(true)
    expect(flow.startNew()).toBe(false)
    resolve(accepted('0001'))
    const results = await Promise.all([a, b, c])
    expect(send).toHaveBeenCalledTimes(1)
    expect(new Set(results.map((r) => r.orderNo))).toEqual(new Set(['0001']))
    expect(flow.busy).toBe(false)
  })

  it('retries by itself after Retry-After, with the same requestId', async () => {
    const sleep = vi.fn(async () => {})
    const sent = []
    const send = vi.fn(async (b) => {
      sent.push(b.requestId)
      if (sent.length < 3) throw new ApiError('RATE_LIMITED', '', 429, 2)
      return accepted('0002')
    })
    const flow = new PurchaseFlow({ send, newId: ids(), autoRetries: 2, sleep })
    const r = await flow.submit(7, 1)
    expect(r.outcome).toBe(Outcome.ACCEPTED)
    expect(sent).toEqual(['req-1', 'req-1', 'req-1'])
    expect(sleep).toHaveBeenCalledWith(2000)
  })

  it('gives up auto retries after the budget and keeps the requestId', async () => {
    const send = vi.fn(async () => {
      throw new ApiError('UNAVAILABLE', '', 503, 1)
    })
    const flow = new PurchaseFlow({ send, newId: ids(), autoRetries: 2, sleep: async () => {} })
    const r = await flow.submit(7, 1)
    expect(r.outcome).toBe(Outcome.RETRY)
    expect(send).toHaveBeenCalledTimes(3)
    expect(flow.requestId).toBe('req-1')
  })

  it('takes a new requestId after IDEMPOTENCY_KEY_REUSED', async () => {
    const send = vi.fn(async () => {
      throw new ApiError('IDEMPOTENCY_KEY_REUSED', '', 422)
    })
    const flow = new PurchaseFlow({ send, newId: ids() })
    expect((await flow.submit(7, 1)).outcome).toBe(Outcome.REJECTED)
    expect((await flow.submit(7, 1)).requestId).toBe('req-2')
  })

  it('keeps an unfinished intent across a reload', async () => {
    const storage = memoryStorage()
    const failing = vi.fn(async () => {
      throw new ApiError('TIMEOUT')
    })
    const first = new PurchaseFlow({ send: failing, newId: ids(), storage, scope: '42.7', autoRetries: 0 })
    await first.submit(7, 1)
    const sent = []
    const reloaded = new PurchaseFlow({
      send: async (b) => (sent.push(b.requestId), accepted('0003')),
      newId: () => 'fresh',
      storage,
      scope: '42.7',
    })
    await reloaded.submit(7, 1)
    expect(sent).toEqual(['req-1'])
    // accepted: after another reload the next purchase is new
    const again = new PurchaseFlow({ send: async (b) => accepted(b.requestId), newId: () => 'next', storage, scope: '42.7' })
    expect((await again.submit(7, 1)).requestId).toBe('next')
  })

  it('tells the page when it waits to retry, and retries with the same requestId', async () => {
    const waits = []
    const sent = []
    const send = vi.fn(async (b) => {
      sent.push(b.requestId)
      if (sent.length === 1) throw new ApiError('RATE_LIMITED', '', 429, 3)
      if (sent.length === 2) throw new ApiError('UNAVAILABLE', '', 503) // no Retry-After: backoff
      return accepted('0004')
    })
    const flow = new PurchaseFlow({ send, newId: ids(), sleep: async () => {}, now: () => 1000, onWait: (w) => waits.push(w) })
    const r = await flow.submit(7, 1)
    expect(r).toMatchObject({ outcome: Outcome.ACCEPTED, orderNo: '0004' })
    expect(sent).toEqual(['req-1', 'req-1', 'req-1'])
    expect(waits[0]).toMatchObject({ until: 4000, ms: 3000, retry: 1, requestId: 'req-1' })
    expect(waits[1]).toBeNull()
    expect(waits[2]).toMatchObject({ retry: 2 })
    expect(waits[2].ms).toBeGreaterThanOrEqual(2000)
    expect(waits[3]).toBeNull()
  })

  it('stops waiting when told, keeping the intent', async () => {
    let release
    const sleep = () => new Promise((r) => (release = r))
    const send = vi.fn(async () => {
      throw new ApiError('RATE_LIMITED', '', 429, 10)
    })
    const flow = new PurchaseFlow({ send, newId: ids(), sleep })
    const p = flow.submit(7, 1)
    await vi.waitFor(() => expect(release).toBeTypeOf('function'))
    flow.stop()
    const r = await p
    expect(r).toMatchObject({ outcome: Outcome.RETRY, stopped: true, requestId: 'req-1' })
    expect(send).toHaveBeenCalledTimes(1)
    // the buyer tries again: same intent
    send.mockImplementationOnce(async (b) => accepted(b.requestId))
    expect((await flow.submit(7, 1)).orderNo).toBe('req-1')
  })

  it('bounds the retry delay', () => {
    expect(retryDelayMs({ retryAfter: 2 }, 0)).toBe(2000)
    expect(retryDelayMs({ retryAfter: 3600 }, 0)).toBe(RETRY_MAX_MS)
    expect(retryDelayMs({}, 0, () => 0)).toBe(1000)
    expect(retryDelayMs({}, 2, () => 1)).toBe(5000)
    expect(retryDelayMs({}, 10, () => 0)).toBe(8000)
  })
})
