// The operator console's readings: a bounded timeline of snapshots taken
// from the admin endpoints, turned into chart series (gauges as read,
// counters as per-second rates), and the per-sale progress split.

/**
 * Timeline keeps the last size snapshots, each {at (ms), values: {key: number}}.
 */
export class Timeline {
  constructor(size = 90) {
    this.size = size
    /** @type {{at: number, values: Record<string, number>}[]} */
    this.points = []
  }

  push(at, values) {
    this.points.push({ at, values: { ...values } })
    if (this.points.length > this.size) this.points.shift()
  }

  get labels() {
    return this.points.map((p) => new Date(p.at).toLocaleTimeString([], { hour12: false }))
  }

  /** keys seen in any snapshot, in first-seen order. */
  keys(prefix = '') {
    const out = []
    for (const p of this.points) for (const k of Object.keys(p.values)) if (k.startsWith(prefix) && !out.includes(k)) out.push(k)
    return out
  }

  /** gauge is the values of keys as read (null where a snapshot lacks one). */
  gauge(keys, label = (k) => k) {
    return keys.map((k) => ({ key: k, label: label(k), values: this.points.map((p) => p.values[k] ?? null) }))
  }

  /**
   * rate is the per-second increase of counter keys between consecutive
   * snapshots: null for the first point, a missing reading, or a decrease
   * (a counter reset, e.g. another gateway answering).
   */
  rate(keys, label = (k) => k) {
    return keys.map((k) => ({
      key: k,
      label: label(k),
      values: this.points.map((p, i) => {
        const prev = this.points[i - 1]
        const a = prev?.values[k]
        const b = p.values[k]
        if (!prev || !Number.isFinite(a) || !Number.isFinite(b) || b < a || p.at <= prev.at) return null
        return ((b - a) * 1000) / (p.at - prev.at)
      }),
    }))
  }
}

/**
 * saleProgress splits a sale's units into sold (PAID), locked (WAITING_PAY,
 * and PROCESSING orders not yet locked), available: each {n, pct}, with
 * total = their sum (the units including adjustments).
 */
export function saleProgress({ sold = 0, locked = 0, available = 0 } = {}) {
  const parts = { sold: Math.max(0, sold), locked: Math.max(0, locked), available: Math.max(0, available) }
  const total = parts.sold + parts.locked + parts.available
  const out = { total }
  for (const [k, n] of Object.entries(parts)) out[k] = { n, pct: total > 0 ? (100 * n) / total : 0 }
  return out
}

/**
 * progressFromPulse reads one sale's progress from a GET /api/admin/pulse
 * sale: sold from MySQL, available from Redis, and locked the rest of the
 * units (WAITING_PAY in MySQL plus reservations accepted but not locked yet).
 */
export function progressFromPulse(s) {
  const sold = s?.sold ?? 0
  const available = s?.available ?? 0
  const locked = Math.max(s?.locked ?? 0, (s?.units ?? 0) - sold - available)
  return saleProgress({ sold, locked, available })
}

/** ORDER_STATES are the order-rate series: cumulative counts of orders that reached each state. */
export const ORDER_STATES = ['PROCESSING', 'WAITING_PAY', 'PAID', 'CANCELLED', 'FAILED']

/**
 * pulseReadings flattens a pulse into the timeline's keys: cumulative
 * counts orders:<STATE> (accepted, reached WAITING_PAY, PAID, CANCELLED,
 * FAILED, summed over the sales), gauges backlog:<part> and latency:<stat>.
 */
export function pulseReadings(pulse) {
  const v = {}
  for (const st of ORDER_STATES) v[`orders:${st}`] = 0
  for (const s of pulse?.sales ?? []) {
    v['orders:PROCESSING'] += s.accepted ?? 0
    v['orders:WAITING_PAY'] += s.lockedOrders ?? 0
    for (const st of ['PAID', 'CANCELLED', 'FAILED']) v[`orders:${st}`] += s.orders?.[st] ?? 0
  }
  v['backlog:intake'] = pulse?.intakeBacklog ?? 0
  v['backlog:outbox'] = pulse?.outboxUnsent ?? 0
  for (const [q, n] of Object.entries(pulse?.queues ?? {})) v[`backlog:${q}`] = n
  const l = pulse?.latency
  if (l?.samples > 0) {
    v['latency:p50'] = l.p50Ms
    v['latency:p95'] = l.p95Ms
    v['latency:max'] = l.maxMs
  }
  return v
}

/** backlogLabel names a backlog series. */
export function backlogLabel(key) {
  const k = key.replace(/^backlog:/, '')
  return (
    {
      intake: 'Intake streams',
      outbox: 'Outbox unsent',
      'stampede.order.created': 'order.created queue',
      'stampede.stock.release': 'stock.release queue',
      'stampede.order.close': 'order.close queue',
      'stampede.dlq': 'Dead letters',
    }[k] ?? k
  )
}
