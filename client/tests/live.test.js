import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { LiveClient, State, defaultPushUrl } from '../src/lib/live.js'
import { OrderBook } from '../src/lib/orderState.js'

class FakeWS {
  static all = []
  constructor(url, protocols) {
    this.url = url
    this.protocols = protocols
    this.readyState = 0
    this.sent = []
    FakeWS.all.push(this)
  }
  send(d) {
    this.sent.push(JSON.parse(d))
  }
  close(code = 1000, reason = '') {
    if (this.readyState === 3) return
    this.readyState = 3
    this.onclose?.({ code, reason })
  }
  // the server's side
  open() {
    this.readyState = 1
    this.onopen?.()
  }
  push(m) {
    this.onmessage?.({ data: JSON.stringify(m) })
  }
  serverClose(code, reason = '') {
    this.readyState = 3
    this.onclose?.({ code, reason })
  }
}

const NO = '0000012345678901234007'
const last = () => FakeWS.all[FakeWS.all.length - 1]

function setup(over = {}) {
  const book = new OrderBook()
  const server = { order: { orderNo: NO, status: 'WAITING_PAY', version: 2 } }
  const fetchOrder = vi.fn(async () => ({ ...server.order }))
  const states = []
  const live = new LiveClient({
    pushUrl: async () => 'ws://push.test/ws',
    token: () => 'tok',
    fetchOrder,
    onOrder: (u) => book.apply(u),
    onState: (s) => states.push(s),
    WebSocketImpl: FakeWS,
    random: () => 1,
    ...over,
  })
  return { live, book, server, fetchOrder, states }
}

beforeEach(() => {
  FakeWS.all = []
  vi.useFakeTimers()
})
afterEach(() => {
  vi.useRealTimers()
})

describe('LiveClient', () => {
  it('connects with the token as subprotocol and subscribes watched orders on open', async () => {
    const { live } = setup()
    live.watch(NO)
    live.start()
    await vi.advanceTimersByTimeAsync(0)
    const ws = last()
    expect(ws.url).toBe('ws://push.test/ws')
    expect(ws.protocols).toEqual(['stampede', 'tok'])
    ws.open()
    expect(live.state).toBe(State.OPEN)
    expect(ws.sent).toContainEqual({ type: 'subscribe', orderNo: NO })
    live.watch('0000012345678901235007')
    expect(ws.sent).toContainEqual({ type: 'subscribe', orderNo: '0000012345678901235007' })
    live.stop()
  })

  it('falls back to port 8081 of the page host when /api/config fails', async () => {
    const { live } = setup({ pushUrl: async () => Promise.reject(new Error('404')) })
    live.start()
    await vi.advanceTimersByTimeAsync(0)
    expect(last().url).toBe(defaultPushUrl())
    expect(defaultPushUrl({ protocol: 'https:', hostname: 'shop.example' })).toBe('wss://shop.example:8081/ws')
    live.stop()
  })

  it('hands order and product messages over; stale versions are dropped by the book', async () => {
    const onProduct = vi.fn()
    const { live, book } = setup({ onProduct })
    live.start()
    await vi.advanceTimersByTimeAsync(0)
    const ws = last()
    ws.open()
    ws.push({ type: 'order', orderNo: NO, status: 'WAITING_PAY', version: 2 })
    ws.push({ type: 'order', orderNo: NO, status: 'PAID', version: 3 })
    ws.push({ type: 'order', orderNo: NO, status: 'WAITING_PAY', version: 2 })
    ws.push({ type: 'product', productId: 7, available: 3, soldOut: false })
    expect(book.get(NO)).toMatchObject({ status: 'PAID', version: 3 })
    expect(onProduct).toHaveBeenCalledWith({ type: 'product', productId: 7, available: 3, soldOut: false })
    live.stop()
  })

  it('reconnects with growing backoff and polls while the socket is down', async () => {
    const { live, fetchOrder } = setup()
    live.watch(NO)
    live.start()
    await vi.advanceTimersByTimeAsync(0)
    last().open()
    await vi.advanceTimersByTimeAsync(0)
    fetchOrder.mockClear()

    last().serverClose(1006)
    expect(live.state).toBe(State.RECONNECTING)
    // attempt 0 waits 250 ms (random = 1), attempt 1 500 ms, attempt 2 1000 ms
    await vi.advanceTimersByTimeAsync(250)
    expect(FakeWS.all).toHaveLength(2)
    last().serverClose(1006)
    await vi.advanceTimersByTimeAsync(499)
    expect(FakeWS.all).toHaveLength(2)
    await vi.advanceTimersByTimeAsync(1)
    expect(FakeWS.all).toHaveLength(3)
    last().serverClose(1006)
    await vi.advanceTimersByTimeAsync(2000)
    expect(fetchOrder.mock.calls.length).toBeGreaterThanOrEqual(1) // polling fallback
    const polls = fetchOrder.mock.calls.length
    await vi.advanceTimersByTimeAsync(4000)
    expect(fetchOrder.mock.calls.length).toBeGreaterThan(polls)

    // back up: re-subscribe, backoff reset, one immediate poll then only slow polls
    const ws = last()
    ws.open()
    expect(ws.sent).toContainEqual({ type: 'subscribe', orderNo: NO })
    expect(live.reconnects).toBe(1)
    fetchOrder.mockClear()
    await vi.advanceTimersByTimeAsync(10)
    expect(fetchOrder).toHaveBeenCalledTimes(1)
    await vi.advanceTimersByTimeAsync(10_000)
    expect(fetchOrder).toHaveBeenCalledTimes(1)
    live.stop()
  })

  it('stops on 4401 instead of reconnecting', async () => {
    const { live } = setup()
    live.start()
    await vi.advanceTimersByTimeAsync(0)
    last().open()
    last().serverClose(4401, 'unauthenticated')
    expect(live.state).toBe(State.UNAUTHENTICATED)
    await vi.advanceTimersByTimeAsync(30_000)
    expect(FakeWS.all).toHaveLength(1)
  })

  it('reconnects at once with a fresh token when 4401 closes a socket of an expired one', async () => {
    let tok = 'tok-1'
    const { live } = setup({ token: () => tok })
    live.watch(NO)
    live.start()
    await vi.advanceTimersByTimeAsync(0)
    last().open()
    tok = 'tok-2' // the session refreshed its token
    last().serverClose(4401, 'token expired')
    await vi.advanceTimersByTimeAsync(0)
    expect(FakeWS.all).toHaveLength(2)
    expect(last().protocols).toEqual(['stampede', 'tok-2'])
    last().open()
    expect(live.state).toBe(State.OPEN)
    expect(last().sent).toContainEqual({ type: 'subscribe', orderNo: NO })
    live.stop()
  })

  it('shows the current state right after reconnecting when the order changed while dropped', async () => {
    const { live, book, server, fetchOrder } = setup()
    live.watch(NO)
    live.start()
    await vi.advanceTimersByTimeAsync(0)
    last().open()
    last().push({ type: 'order', orderNo: NO, status: 'WAITING_PAY', version: 2 })
    await vi.advanceTimersByTimeAsync(0)
    fetchOrder.mockClear()

    live.dropSocket({ pauseMs: 3000 })
    server.order = { orderNo: NO, status: 'CANCELLED', version: 3 }
    await vi.advanceTimersByTimeAsync(2900)
    expect(FakeWS.all).toHaveLength(1) // paused: no reconnection
    expect(fetchOrder).not.toHaveBeenCalled() // and no polling
    expect(book.get(NO).status).toBe('WAITING_PAY')
    await vi.advanceTimersByTimeAsync(200)
    expect(FakeWS.all).toHaveLength(2)
    const ws = last()
    ws.open()
    // push answers the subscribe with the snapshot; an old event racing it is dropped
    ws.push({ type: 'order', orderNo: NO, status: 'CANCELLED', version: 3 })
    ws.push({ type: 'order', orderNo: NO, status: 'WAITING_PAY', version: 2 })
    expect(book.get(NO)).toMatchObject({ status: 'CANCELLED', version: 3 })
    await vi.advanceTimersByTimeAsync(10)
    expect(fetchOrder).toHaveBeenCalled() // polling resumed with the reconnection, and agrees
    expect(book.get(NO).status).toBe('CANCELLED')
    live.stop()
  })

  it('can hold polling back longer than the reconnection, so only push delivers', async () => {
    const { live, book, server, fetchOrder } = setup()
    live.watch(NO)
    live.start()
    await vi.advanceTimersByTimeAsync(0)
    last().open()
    last().push({ type: 'order', orderNo: NO, status: 'WAITING_PAY', version: 2 })
    await vi.advanceTimersByTimeAsync(0)
    fetchOrder.mockClear()
    live.dropSocket({ pauseMs: 1000, pollPauseMs: 5000 })
    server.order = { orderNo: NO, status: 'CANCELLED', version: 3 }
    await vi.advanceTimersByTimeAsync(1100)
    last().open()
    await vi.advanceTimersByTimeAsync(1000)
    expect(fetchOrder).not.toHaveBeenCalled()
    expect(book.get(NO).status).toBe('WAITING_PAY')
    last().push({ type: 'order', orderNo: NO, status: 'CANCELLED', version: 3 })
    expect(book.get(NO).status).toBe('CANCELLED')
    await vi.advanceTimersByTimeAsync(20_000)
    expect(fetchOrder).toHaveBeenCalled() // polling resumes afterwards
    live.stop()
  })

  it('pings and replaces a socket that went silent', async () => {
    const { live } = setup({ heartbeatMs: 1000, deadAfterMs: 2500 })
    live.start()
    await vi.advanceTimersByTimeAsync(0)
    const ws = last()
    ws.open()
    await vi.advanceTimersByTimeAsync(1000)
    expect(ws.sent).toContainEqual({ type: 'ping' })
    ws.push({ type: 'pong' })
    await vi.advanceTimersByTimeAsync(2000)
    expect(FakeWS.all).toHaveLength(1)
    await vi.advanceTimersByTimeAsync(2000) // 3 s without a message
    expect(ws.readyState).toBe(3)
    await vi.advanceTimersByTimeAsync(300)
    expect(FakeWS.all).toHaveLength(2)
    live.stop()
  })
})
