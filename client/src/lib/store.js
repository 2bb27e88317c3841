// Application state shared by the pages: the signed-in user's orders, the
// products, and the live connection to push.
import { reactive, watch } from 'vue'
import { api } from './api.js'
import { LiveClient } from './live.js'
import { OrderBook, TERMINAL } from './orderState.js'
import { session } from './session.js'
import { loadConfig, shop } from './shop.js'

export const orderBook = reactive(new OrderBook())

/** products by id, updated by product messages. */
export const products = reactive(new Map())

/** waiting-room places by productId (waitingRoom.js), updated by queue messages. */
export const places = reactive(new Map())

export const liveInfo = reactive({ state: 'idle', reconnects: 0, connectedAt: 0 })

/**
 * applyProduct merges a product message ({type: "product", productId,
 * available, soldOut, …}) or an API product. A message changes only the
 * fields it carries, so a sell-out shows the moment push announces it.
 */
export function applyProduct(p) {
  const id = p.id ?? p.productId
  const cur = products.get(id)
  if (p.type === 'product') {
    if (!cur) return
    for (const [k, v] of Object.entries(p)) if (k !== 'type' && k !== 'productId' && v !== undefined) cur[k] = v
    return
  }
  if (cur) Object.assign(cur, p)
  else products.set(id, { ...p })
}

const productLoads = new Map()

/** ensureProduct loads product id once if it is not known yet (order pages name their product). */
export function ensureProduct(id) {
  if (!id || products.has(id) || productLoads.has(id)) return
  productLoads.set(
    id,
    api.product(id).then(
      (p) => applyProduct(p),
      () => productLoads.delete(id),
    ),
  )
}

export const live = new LiveClient({
  // localStorage "stampede.pushUrl" overrides the server's answer (development
  // and the end-to-end test against a push on another port).
  pushUrl: async () => {
    const override = globalThis.localStorage?.getItem('stampede.pushUrl')
    if (override) return override
    await loadConfig()
    if (!shop.pushUrl) throw new Error('no pushUrl')
    return shop.pushUrl
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
