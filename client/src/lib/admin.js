// The operator console's own logic, kept out of the components so it is
// unit-tested: the refund numbers of "Record refund" clicks, the support
// lookup's filters, and small readings of the operator API's answers.

/** SALE_FILTERS are the console's sale list filters: GET /api/admin/products?state= values ('' = every sale). */
export const SALE_FILTERS = [
  ['', 'Every sale'],
  ['live', 'Live'],
  ['paused', 'Paused'],
  ['upcoming', 'Upcoming'],
  ['soldOut', 'Sold out'],
  ['ended', 'Ended'],
]

/** ORDER_FILTER_STATUSES are the statuses the order lookup can filter on. */
export const ORDER_FILTER_STATUSES = ['PROCESSING', 'WAITING_PAY', 'PAID', 'CANCELLED', 'FAILED']

/**
 * missingEndpoint says whether err is the gateway's answer for a route it
 * does not have (404 or 405 on a list endpoint): the console then hides
 * what needs it instead of showing an error on every refresh.
 */
export function missingEndpoint(err) {
  return err?.status === 404 || err?.status === 405
}

const REFUND_NO = /^[A-Za-z0-9._:-]{1,64}$/

/**
 * newRefundNo makes a refund number for one "Record refund" click: "rf-",
 * the time in base 36 and 8 random base-36 characters (at most 64 characters
 * of [A-Za-z0-9._:-], like every idempotency key of the API).
 * @param {() => number} [now] ms
 * @param {() => number} [random] in [0, 1)
 */
export function newRefundNo(now = Date.now, random = Math.random) {
  let r = ''
  for (let i = 0; i < 8; i++) r += Math.floor(random() * 36).toString(36)
  return `rf-${now().toString(36)}-${r}`
}

/** validRefundNo checks the shape POST /api/admin/payments/{paymentNo}/refund accepts. */
export const validRefundNo = (s) => typeof s === 'string' && REFUND_NO.test(s)

/**
 * RefundClicks keeps the refund number of each payment's click in flight.
 * A click takes a new number (begin); while the answer is unknown (network
 * error, timeout, 5xx) the retry reuses it, so the server's unique key makes
 * the retry change nothing; a definite answer (done) forgets it, so the next
 * click is a new intent.
 */
export class RefundClicks {
  constructor(make = newRefundNo) {
    this.make = make
    /** @type {Map<string, string>} paymentNo → refundNo still unanswered */
    this.pending = new Map()
  }

  /** begin returns the refund number for a click on paymentNo: the unanswered one, or a new one. */
  begin(paymentNo) {
    let no = this.pending.get(paymentNo)
    if (!no) {
      no = this.make()
      this.pending.set(paymentNo, no)
    }
    return no
  }

  /**
   * settle records the outcome of the call for paymentNo: err undefined (200),
   * or the ApiError. It returns 'refunded', 'already' (409 ALREADY_REFUNDED:
   * someone else recorded it), 'retry' (unknown outcome: the number is kept
   * for the retry) or 'failed'.
   */
  settle(paymentNo, err) {
    if (!err) {
      this.pending.delete(paymentNo)
      return 'refunded'
    }
    if (err.retryable || !err.status) return 'retry'
    this.pending.delete(paymentNo)
    return err.code === 'ALREADY_REFUNDED' ? 'already' : 'failed'
  }

  /** retrying says whether paymentNo has a click whose answer is unknown. */
  retrying(paymentNo) {
    return this.pending.has(paymentNo)
  }
}

/** waitingText renders a refund's waitingSeconds: "45 s", "12 min", "3 h 05 min", "2 d 4 h". */
export function waitingText(seconds) {
  const s = Math.max(0, Math.floor(Number(seconds) || 0))
  if (s < 60) return `${s} s`
  if (s < 3600) return `${Math.floor(s / 60)} min`
  if (s < 86400) return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')} min`
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`
}

const ORDER_NO = /^\d{20,40}$/
const parseLocal = (v) => (v ? new Date(v) : null)

/**
 * lookupQuery turns the support lookup's form ({orderNo, userId, productId,
 * status, from, to}; from/to datetime-local values, local time) into what to
 * ask: {orderNo} for a direct lookup, or {params} for GET /api/admin/orders
 * (from/to as RFC 3339 UTC), or {error} saying what is wrong.
 */
export function lookupQuery(f) {
  const orderNo = String(f?.orderNo ?? '').trim()
  if (orderNo) return ORDER_NO.test(orderNo) ? { orderNo } : { error: 'An order number is 20 to 40 digits.' }
  const params = {}
  for (const [k, label] of [
    ['userId', 'Buyer'],
    ['productId', 'Product'],
  ]) {
    const v = String(f?.[k] ?? '').trim()
    if (!v) continue
    if (!/^\d+$/.test(v) || Number(v) < 1 || !Number.isSafeInteger(Number(v))) return { error: `${label} must be a number (its id).` }
    params[k] = Number(v)
  }
  if (f?.status) {
    if (!ORDER_FILTER_STATUSES.includes(f.status)) return { error: `Unknown status ${f.status}.` }
    params.status = f.status
  }
  const from = parseLocal(f?.from)
  const to = parseLocal(f?.to)
  if ((from && Number.isNaN(from.getTime())) || (to && Number.isNaN(to.getTime()))) return { error: 'Pick the times from the calendar.' }
  if (from && to && to <= from) return { error: '“To” must be after “from”.' }
  if (from) params.from = from.toISOString()
  if (to) params.to = to.toISOString()
  return { params }
}

/**
 * historyRows is an order's history (GET /api/admin/orders/{orderNo}) oldest
 * first, each with the time since the previous step in ms (null for the first).
 */
export function historyRows(order) {
  const rows = [...(order?.history ?? [])].sort((a, b) => Date.parse(a.at) - Date.parse(b.at))
  return rows.map((h, i) => ({ ...h, afterMs: i === 0 ? null : Date.parse(h.at) - Date.parse(rows[i - 1].at) }))
}

/** afterText renders historyRows' afterMs: "+120 ms", "+3.4 s", "+2 min". */
export function afterText(ms) {
  if (ms == null || !Number.isFinite(ms)) return ''
  if (ms < 1000) return `+${Math.round(ms)} ms`
  if (ms < 60_000) return `+${(ms / 1000).toFixed(1)} s`
  return `+${Math.round(ms / 60_000)} min`
}

/**
 * mergePages appends a next page of rows to rows, leaving out keys already
 * listed (a row that moved between two reads of a keyset-paged list).
 */
export function mergePages(rows, next, key) {
  const seen = new Set(rows.map((r) => r[key]))
  return [...rows, ...next.filter((r) => !seen.has(r[key]))]
}

const AUDIT_ACTIONS = { create: 'Created', patch: 'Edited', pause: 'Paused', resume: 'Resumed', end: 'Ended', adjust: 'Stock adjusted' }

/** auditAction is the label of an audit entry's action (GET /api/admin/audit). */
export const auditAction = (a) => AUDIT_ACTIONS[a] ?? a

const short = (v) => {
  if (v == null || v === '') return '–'
  const s = typeof v === 'string' ? v : JSON.stringify(v)
  return s.length > 40 ? `${s.slice(0, 39)}…` : s
}

/**
 * auditChangeText summarises an audit entry's change: a patch's (or a
 * pause's, resume's, end's) {field: {from, to}} as "name: A → B; price: 100
 * → 200", an adjustment's {delta, reason} as "+5 (reason)", nothing for a
 * creation (its terms are the product itself).
 */
export function auditChangeText(e) {
  const c = e?.change
  if (!c || typeof c !== 'object') return ''
  if (e.action === 'adjust') return `${c.delta > 0 ? '+' : ''}${c.delta ?? '?'}${c.reason ? ` (${c.reason})` : ''}`
  if (e.action !== 'create')
    return Object.entries(c)
      .map(([k, v]) => (v && typeof v === 'object' && ('from' in v || 'to' in v) ? `${k}: ${short(v.from)} → ${short(v.to)}` : `${k}: ${short(v)}`))
      .join('; ')
  return ''
}
