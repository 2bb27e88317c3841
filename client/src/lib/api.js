// The HTTP API client: JSON in and out, bearer token, timeouts, and errors as
// ApiError with the codes of docs/spec.md §3. The API is same-origin.
import { ApiError, codeForStatus } from './errors.js'
import { session } from './session.js'

const DEFAULT_TIMEOUT_MS = 10_000

/**
 * request sends one API call and returns the decoded JSON body.
 * @param {string} method
 * @param {string} path
 * @param {{body?: unknown, timeoutMs?: number, token?: string|null, fetchImpl?: typeof fetch}} [opts]
 */
export async function request(method, path, opts = {}) {
  const { body, timeoutMs = DEFAULT_TIMEOUT_MS, fetchImpl = globalThis.fetch } = opts
  const token = opts.token === undefined ? session.token : opts.token
  const headers = { Accept: 'application/json' }
  if (body !== undefined) headers['Content-Type'] = 'application/json'
  if (token) headers.Authorization = `Bearer ${token}`
  const ctl = new AbortController()
  const timer = setTimeout(() => ctl.abort(), timeoutMs)
  let res
  try {
    res = await fetchImpl(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: ctl.signal,
    })
  } catch (e) {
    throw new ApiError(ctl.signal.aborted ? 'TIMEOUT' : 'NETWORK', String(e?.message ?? e))
  } finally {
    clearTimeout(timer)
  }
  let data = null
  const text = await res.text().catch(() => '')
  if (text) {
    try {
      data = JSON.parse(text)
    } catch {
      data = null
    }
  }
  if (!res.ok) {
    const retryAfter = Number.parseInt(res.headers.get('Retry-After') ?? '', 10) || 0
    const code = data?.error?.code ?? codeForStatus(res.status)
    if (res.status === 401 && token === session.token) session.expired()
    throw new ApiError(code, data?.error?.message ?? '', res.status, retryAfter, data?.error?.details)
  }
  return data
}

/**
 * requestText GETs a text/plain answer without a token (the published
 * ticket list); errors as request's.
 */
export async function requestText(path, { timeoutMs = 30_000, fetchImpl = globalThis.fetch } = {}) {
  const ctl = new AbortController()
  const timer = setTimeout(() => ctl.abort(), timeoutMs)
  try {
    const res = await fetchImpl(path, { signal: ctl.signal })
    const text = await res.text()
    if (!res.ok) {
      let data = null
      try {
        data = JSON.parse(text)
      } catch {
        data = null
      }
      throw new ApiError(data?.error?.code ?? codeForStatus(res.status), data?.error?.message ?? '', res.status)
    }
    return text
  } catch (e) {
    if (e instanceof ApiError) throw e
    throw new ApiError(ctl.signal.aborted ? 'TIMEOUT' : 'NETWORK', String(e?.message ?? e))
  } finally {
    clearTimeout(timer)
  }
}

/** query renders params as ?a=1&b=2, leaving out empty ones ('' / null / undefined). */
export function query(params) {
  const q = new URLSearchParams()
  for (const [k, v] of Object.entries(params ?? {})) if (v !== '' && v != null) q.set(k, String(v))
  const s = q.toString()
  return s ? `?${s}` : ''
}

export const api = {
  login: (userId) => request('POST', '/api/auth/login', { body: { userId }, token: null }),
  products: () => request('GET', '/api/products'),
  product: (id) => request('GET', `/api/products/${encodeURIComponent(id)}`),
  /** @param {{productId: number, quantity: number, requestId: string}} body */
  createOrder: (body) => request('POST', '/api/orders', { body }),
  order: (orderNo) => request('GET', `/api/orders/${encodeURIComponent(orderNo)}`),
  orders: (cursor = '', limit = 20) =>
    request('GET', `/api/orders?limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`),
  pay: (orderNo) => request('POST', `/api/orders/${encodeURIComponent(orderNo)}/pay`),
  cancel: (orderNo) => request('POST', `/api/orders/${encodeURIComponent(orderNo)}/cancel`),
  /**
   * queue takes (or finds again) the buyer's place in a product's waiting room;
   * altcha: the solved proof-of-work payload of a room with powCost > 0.
   */
  queue: (productId, altcha = '') =>
    request('POST', `/api/products/${encodeURIComponent(productId)}/queue`, altcha ? { body: { altcha } } : {}),
  /** drop is the room's public record (GET /api/products/{id}/drop, no token): commitment, seed after the shuffle… */
  drop: (productId) => request('GET', `/api/products/${encodeURIComponent(productId)}/drop`, { token: null }),
  /** dropTickets is the published pre-queue list as text (sorted ticket ids, one per line). */
  dropTickets: (productId) => requestText(`/api/products/${encodeURIComponent(productId)}/drop/tickets`),
  config: () => request('GET', '/api/config', { token: null, timeoutMs: 3000 }),
}

/** admin is the operator API (admin token; 403 FORBIDDEN otherwise). */
export const admin = {
  /** GET /api/admin/products: {products, nextCursor}; state one of upcoming|live|paused|ended|soldOut or '' (all). */
  products: ({ state = '', limit = 50, cursor = '' } = {}) => request('GET', `/api/admin/products${query({ state, limit, cursor })}`),
  /** GET /api/admin/orders: {orders, nextCursor}, newest first; filters as lookupQuery (admin.js) makes them. */
  orders: (filters = {}) => request('GET', `/api/admin/orders${query(filters)}`),
  /** GET /api/admin/orders/{orderNo}: the order with its history [{status, at, event}]. */
  order: (orderNo) => request('GET', `/api/admin/orders/${encodeURIComponent(orderNo)}`),
  /** GET /api/admin/audit?productId=: {entries: [{id, at, adminId, action, productId, change}], nextCursor}, newest first. */
  audit: ({ productId = '', limit = 20, cursor = '' } = {}) => request('GET', `/api/admin/audit${query({ productId, limit, cursor })}`),
  createProduct: (body, token) => request('POST', '/api/admin/products', { body, token }),
  /** PATCH the fields given (what the sale's state allows). */
  edit: (id, body) => request('PATCH', `/api/admin/products/${encodeURIComponent(id)}`, { body }),
  pause: (id) => request('POST', `/api/admin/products/${encodeURIComponent(id)}/pause`),
  resume: (id) => request('POST', `/api/admin/products/${encodeURIComponent(id)}/resume`),
  end: (id) => request('POST', `/api/admin/products/${encodeURIComponent(id)}/end`),
  /** GET /api/admin/refunds: {refunds: [{paymentNo, orderNo, userId, amount, status, createdAt, waitingSeconds}], nextCursor}, oldest first. */
  refunds: ({ limit = 20, cursor = '' } = {}) => request('GET', `/api/admin/refunds${query({ limit, cursor })}`),
  /** refundNo makes the call idempotent: the same one again changes nothing. */
  refund: (paymentNo, refundNo) =>
    request('POST', `/api/admin/payments/${encodeURIComponent(paymentNo)}/refund`, { body: { refundNo } }),
  /** GET /api/admin/products/{id}/waiting-room: {terms, drop, paused, available, issued, admitted, expired, claimed, live, waiting, cutoff, ratePerSecond}. */
  room: (id) => request('GET', `/api/admin/products/${encodeURIComponent(id)}/waiting-room`),
  /** POST the room's terms ({on, mode, preQueueSeconds, reserve, powCost, windowSeconds, ceiling}; left out: kept). */
  setRoom: (id, body) => request('POST', `/api/admin/products/${encodeURIComponent(id)}/waiting-room`, { body }),
  pulse: (window = 10) => request('GET', `/api/admin/pulse?window=${window}`),
  reconcile: () => request('GET', '/api/admin/reconcile', { timeoutMs: 30_000 }),
  dlq: (limit = 50) => request('GET', `/api/admin/dlq?limit=${limit}`),
  /** @param {{eventIds?: string[], all?: boolean, dropPoison?: boolean}} body */
  replay: (body) => request('POST', '/api/admin/dlq/replay', { body, timeoutMs: 60_000 }),
}
