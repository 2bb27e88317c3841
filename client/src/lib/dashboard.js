// The admin dashboard's series: which metrics it charts and how it keeps a
// short history of them. The metrics may not exist yet; a panel without
// samples says "no data yet".
import { group, rates } from './prom.js'

/** PANELS lists the charts: metric, grouping labels, and whether it is a counter (charted as a rate). */
export const PANELS = [
  { id: 'reserve', title: 'Reservations per second by result', metric: 'stampede_reserve_total', by: ['result'], rate: true },
  { id: 'outbox', title: 'Outbox rows by status', metric: 'stampede_outbox_rows', by: ['status'] },
  { id: 'intake', title: 'Intake stream backlog (entries)', metric: 'stampede_intake_backlog', by: [] },
  { id: 'dlq', title: 'Dead-letter queue depth', metric: 'stampede_dlq_depth', by: [] },
  { id: 'drift', title: 'Reconciliation drift (units)', metric: 'stampede_reconcile_drift', by: [] },
]

/**
 * History keeps the last `size` points of every panel.
 * push(samples, atMs) adds one scrape.
 */
export class History {
  constructor(size = 60) {
    this.size = size
    this.labels = [] // time labels
    /** @type {Record<string, Map<string, (number|null)[]>>} panel id → series → values */
    this.series = Object.fromEntries(PANELS.map((p) => [p.id, new Map()]))
    this.prev = {} // panel id → last counter reading
    this.prevAt = null
  }

  push(samples, atMs) {
    this.labels.push(new Date(atMs).toLocaleTimeString([], { hour12: false }))
    const n = this.labels.length
    for (const p of PANELS) {
      let values = group(samples, p.metric, p.by)
      if (p.rate) {
        const reading = values
        values = this.prevAt !== null ? rates(this.prev[p.id], reading, atMs - this.prevAt) : new Map()
        this.prev[p.id] = reading
      }
      const panel = this.series[p.id]
      for (const [k, v] of values) {
        if (!panel.has(k)) panel.set(k, new Array(n - 1).fill(null))
      }
      for (const [k, arr] of panel) arr.push(values.has(k) ? values.get(k) : null)
    }
    this.prevAt = atMs
    if (n > this.size) {
      this.labels.shift()
      for (const panel of Object.values(this.series)) for (const arr of panel.values()) arr.shift()
    }
  }

  /** hasData reports whether a panel's metric appeared in any scrape kept. */
  hasData(id) {
    for (const arr of this.series[id].values()) if (arr.some((v) => v !== null)) return true
    return false
  }
}
