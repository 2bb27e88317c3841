// Application state shared by the pages: the signed-in user's orders, the
// products, and the live connection to push.
import { reactive, watch } from 'vue'
import { api } from './api.js'
import { LiveClient } from './live.js'
import { OrderBook, TERMINAL } from './orderState.js'
import { session } from './session.js'

export const orderBook = reactive(new OrderBook())

/** products by id, updated by product messages. */
export const products = reactive(new Map())

/** waiting-room places by productId (waitingRoom.js), updated by queue messages. */
export const places = reactive(new Map())

export const liveInfo = reactive({ state: 'idle', reconnects: 0, connectedAt: 0 })

/** applyProduct merges a product message or API product. */
export function applyProduct(p) {
  const id = p.id ?? p.productId
  const cur = products.get(id)
  if (p.type === 'product') {
    if (cur) Object.assign(cur, { available: p.available, soldOut: p.soldOut })
    return
  }
  if (cur) Object.assign(cur, p)
  else products.set(id, { ...p })
}

export const live = new LiveClient({
  // localStorage "stampede.pushUrl" overrides the server's answer (development
  // and the end-to-end test against a push on another port).
  pushUrl: async () => {
    const override = globalThis.localStorage?.getItem('stampede.pushUrl')
    if (override) return override
    const cfg = await api.config()
    if (!cfg?.pushUrl) throw new Error('no pushUrl')
    return cfg.pushUrl
  },
  token: () => session.token,
  fetchOrder: (orderNo) => api.order(orderNo),
  onOrder: (u) => orderBook.apply(u),
  onProduct: (m) => applyProduct(m),
  onQueue: (m) => places.get(m.productId)?.fromPush(m),
  onState: (state, info) => Object.assign(liveInfo, { state, ...info }),
  shouldPoll: (orderNo) => !TERMINAL.has(orderBook.get(orderNo)?.status),
})

/** startLive follows the session: one socket per signed-in user. */
export function startLive() {
  watch(
    () => session.token,
    (token, old) => {
      live.stop()
      if (token !== old) {
        orderBook.orders.clear()
        live.watched.clear()
        live.lines.clear()
        places.clear()
      }
      if (token) live.start()
    },
    { immediate: true },
  )
  // Test hook for the browser end-to-end test (client/e2e/flow.mjs).
  globalThis.__stampede = {
    dropSocket: (opts) => live.dropSocket(opts),
    get state() {
      return live.state
    },
    get connectedAt() {
      return live.connectedAt
    },
    get reconnects() {
      return live.reconnects
    },
    order: (orderNo) => ({ ...orderBook.get(orderNo) }),
    place: (productId) => ({ ...places.get(productId) }),
  }
}
