// The storefront's view of products: what state a sale is in, the order the
// storefront lists them in, the stock line and how many units the buyer may
// put in one order. Plain functions of the product JSON (docs/spec.md §3; the
// operator API may add state, maxPerOrder and a total that includes stock
// adjustments) and of the time, so they are unit-tested without a browser.

/** States, in storefront order. */
export const STATES = ['live', 'paused', 'upcoming', 'soldout', 'ended']

/** The buyer-facing label of a state. */
export const STATE_LABELS = {
  live: 'On sale',
  paused: 'Paused',
  upcoming: 'Coming soon',
  soldout: 'Sold out',
  ended: 'Ended',
}

const time = (v) => (v ? Date.parse(v) : Number.NaN)

/**
 * productState says where p's sale is at time now: 'live', 'paused',
 * 'upcoming', 'soldout' or 'ended'. The clock decides upcoming/live/ended (a
 * countdown flips to live without a reload), the latest available/soldOut
 * (push product messages) decides sold out, and the server's state adds what
 * only it knows: paused, ended early.
 */
export function productState(p, now = Date.now()) {
  if (!p) return 'upcoming'
  const end = time(p.saleEnd)
  if (p.state === 'ended' || now >= end) return 'ended'
  if (p.state === 'paused' || p.paused === true) return 'paused'
  const start = time(p.saleStart)
  if (p.soldOut || p.available <= 0) return now >= start || !Number.isFinite(start) ? 'soldout' : 'upcoming'
  if (now < start) return 'upcoming'
  return 'live'
}

/**
 * sortCatalog orders products for the storefront: live sales first (the one
 * ending soonest first), then paused, then upcoming (starting soonest
 * first), then sold out (newest first), then ended (most recently ended
 * first). It returns {shown, ended}: the storefront lists ended sales apart.
 */
export function sortCatalog(products, now = Date.now()) {
  const rows = products.map((p) => ({ p, state: productState(p, now) }))
  const key = ({ p, state }) => {
    switch (state) {
      case 'live':
      case 'paused':
        return Number.isFinite(time(p.saleEnd)) ? time(p.saleEnd) : Number.MAX_SAFE_INTEGER
      case 'upcoming':
        return time(p.saleStart)
      case 'soldout':
        return -time(p.saleStart)
      default:
        return -time(p.saleEnd)
    }
  }
  rows.sort((a, b) => STATES.indexOf(a.state) - STATES.indexOf(b.state) || key(a) - key(b) || a.p.id - b.p.id)
  return {
    shown: rows.filter((r) => r.state !== 'ended').map((r) => r.p),
    ended: rows.filter((r) => r.state === 'ended').map((r) => r.p),
  }
}

/**
 * stockLine is what the stock bar shows: units left, out of how many, and the
 * bar's fill (0…1). total is at least available: a product JSON whose total
 * does not include an adjustment never shows "149 of 100".
 */
export function stockLine(p) {
  const left = Math.max(0, Math.trunc(p?.available ?? 0))
  const total = Math.max(left, Math.trunc(p?.total ?? 0))
  return { left, total, fill: total > 0 ? left / total : 0 }
}

/** LIVE_STATUSES are the order states that hold units against the per-buyer limit. */
export const HOLDING = new Set(['PROCESSING', 'WAITING_PAY', 'PAID'])

/**
 * heldUnits is how many units of productId the buyer's orders hold: those in
 * PROCESSING, WAITING_PAY or PAID (a cancelled or failed order gave its units,
 * and its share of the limit, back).
 */
export function heldUnits(orders, productId) {
  let n = 0
  for (const o of orders) {
    if (o?.productId === productId && HOLDING.has(o.status)) n += o.quantity ?? 0
  }
  return n
}

/** The gateway's maxPerOrder when a product does not say: min(perUserLimit or 10, 10). */
export function perOrderMax(p) {
  if (p?.maxPerOrder > 0) return p.maxPerOrder
  return Math.min(p?.perUserLimit > 0 ? p.perUserLimit : 10, 10)
}

/**
 * quantityBound is the largest quantity the buyer may order now and which
 * bound decides it: 'order' (the product's maxPerOrder), 'limit' (what is
 * left of perUserLimit after the units held), 'stock' (units left). max 0 means
 * no order is possible.
 */
export function quantityBound(p, held = 0) {
  const bounds = [['order', perOrderMax(p)]]
  if (p?.perUserLimit > 0) bounds.push(['limit', p.perUserLimit - held])
  if (Number.isFinite(p?.available)) bounds.push(['stock', p.available])
  let [by, max] = bounds[0]
  for (const [k, v] of bounds) if (v < max) [by, max] = [k, v]
  return { max: Math.max(0, max), by, held }
}

/** clampQuantity keeps a picked quantity within 1…max (1 when max is 0). */
export function clampQuantity(q, max) {
  const n = Math.trunc(Number(q))
  if (!Number.isFinite(n) || n < 1) return 1
  return Math.max(1, Math.min(n, max))
}
