// Order state on the client: every update — a WebSocket message, a polled
// GET /api/orders/{orderNo}, the answer of pay or cancel — goes through
// apply, which keeps an update only if its version is newer than the one held.
// So the page never goes backwards, whatever order updates arrive in.

export const STATUSES = ['PROCESSING', 'WAITING_PAY', 'PAID', 'CANCELLED', 'FAILED']
export const TERMINAL = new Set(['PAID', 'CANCELLED', 'FAILED'])

/**
 * isNewer reports whether incoming should replace current.
 * @param {{version?: number}|undefined|null} current
 * @param {{version?: number}} incoming
 */
export function isNewer(current, incoming) {
  if (!incoming || !Number.isFinite(incoming.version)) return false
  if (!current) return true
  return incoming.version > (current.version ?? 0)
}

/** The fields of an order update that describe its state. */
const STATE_FIELDS = ['status', 'version', 'updatedAt', 'payDeadline']

/**
 * OrderBook holds orders by orderNo. onChange(order) runs after an order changed.
 */
export class OrderBook {
  constructor(onChange = () => {}) {
    /** @type {Map<string, any>} */
    this.orders = new Map()
    this.onChange = onChange
    this.dropped = 0
  }

  get(orderNo) {
    return this.orders.get(orderNo)
  }

  /**
   * apply merges an update. A full order (from the API) may add details such
   * as amount or productId even at the same version; state fields only change
   * with a newer version. Returns true if the order's state changed.
   */
  apply(update) {
    if (!update?.orderNo) return false
    const cur = this.orders.get(update.orderNo)
    const newer = isNewer(cur, update)
    if (!newer) {
      this.dropped++
      if (cur) {
        let added = false
        for (const [k, v] of Object.entries(update)) {
          if (k === 'type' || STATE_FIELDS.includes(k) || v === undefined || cur[k] !== undefined) continue
          cur[k] = v
          added = true
        }
        if (added) this.onChange(cur)
      }
      return false
    }
    const next = { ...(cur ?? {}) }
    for (const [k, v] of Object.entries(update)) {
      if (k !== 'type' && v !== undefined) next[k] = v
    }
    if (update.payDeadline === undefined && next.status !== 'WAITING_PAY') delete next.payDeadline
    this.orders.set(update.orderNo, next)
    this.onChange(next)
    return true
  }

  /** list returns the orders, newest orderNo first (orderNos sort by acceptance time). */
  list() {
    return [...this.orders.values()].sort((a, b) => compareOrderNo(b.orderNo, a.orderNo))
  }
}

/** compareOrderNo orders orderNos by acceptance time: their first 19 digits are a time-ordered id. */
export function compareOrderNo(a, b) {
  const ia = a.slice(0, 19)
  const ib = b.slice(0, 19)
  if (ia !== ib) return ia < ib ? -1 : 1
  return a < b ? -1 : a > b ? 1 : 0
}

/** canPay and canCancel say which buttons an order shows (docs/spec.md §2). */
export const canPay = (o) => o?.status === 'WAITING_PAY'
export const canCancel = (o) => o?.status === 'PROCESSING' || o?.status === 'WAITING_PAY'

/** statusLabel is the buyer-facing name of a status. */
export function statusLabel(status) {
  return (
    {
      PROCESSING: 'Processing',
      WAITING_PAY: 'Waiting for payment',
      PAID: 'Paid',
      CANCELLED: 'Cancelled',
      FAILED: 'Failed',
    }[status] ?? status ?? '…'
  )
}
