import { describe, expect, it } from 'vitest'
import { PALETTE, STATUS_COLORS, colorsFor, formatValue, niceMax, paths } from '../src/lib/chart.js'
import { Timeline, backlogLabel, progressFromPulse, pulseReadings, saleProgress } from '../src/lib/console.js'

describe('Timeline', () => {
  it('keeps gauges and turns counters into per-second rates', () => {
    const t = new Timeline(3)
    t.push(0, { c: 10, g: 5 })
    t.push(2000, { c: 30, g: 7 })
    t.push(3000, { c: 25 }) // a reset: no negative rate
    t.push(4000, { c: 35, g: 1 })
    expect(t.points).toHaveLength(3)
    expect(t.rate(['c'])[0].values).toEqual([null, null, 10])
    expect(t.gauge(['g'])[0].values).toEqual([7, null, 1])
    expect(t.keys()).toEqual(['c', 'g'])
  })
})

describe('sale progress', () => {
  it('splits the units into sold, locked and available', () => {
    const p = saleProgress({ sold: 25, locked: 25, available: 50 })
    expect(p.total).toBe(100)
    expect(p.sold).toEqual({ n: 25, pct: 25 })
    expect(p.available.pct).toBe(50)
    expect(saleProgress().total).toBe(0)
  })
  it('counts units accepted but not yet locked as locked', () => {
    const p = progressFromPulse({ units: 110, available: 60, locked: 20, sold: 10 })
    expect([p.sold.n, p.locked.n, p.available.n, p.total]).toEqual([10, 40, 60, 110])
  })
  it('flattens a pulse into cumulative order counts and gauges', () => {
    const pulse = {
      sales: [
        { accepted: 10, lockedOrders: 8, orders: { WAITING_PAY: 5, PAID: 3, FAILED: 1 } },
        { accepted: 2, lockedOrders: 2, orders: { CANCELLED: 2 } },
      ],
      intakeBacklog: 1,
      outboxUnsent: 4,
      queues: { 'stampede.dlq': 2 },
      latency: { samples: 3, p50Ms: 12, p95Ms: 40, maxMs: 41 },
    }
    expect(pulseReadings(pulse)).toEqual({
      'orders:PROCESSING': 12,
      'orders:WAITING_PAY': 10,
      'orders:PAID': 3,
      'orders:CANCELLED': 2,
      'orders:FAILED': 1,
      'backlog:intake': 1,
      'backlog:outbox': 4,
      'backlog:stampede.dlq': 2,
      'latency:p50': 12,
      'latency:p95': 40,
      'latency:max': 41,
    })
    expect(pulseReadings({ latency: { samples: 0 } })).not.toHaveProperty('latency:p50')
    expect(backlogLabel('backlog:stampede.dlq')).toBe('Dead letters')
  })
})

describe('charts', () => {
  it('gives every series its own colour', () => {
    const keys = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j']
    const c = colorsFor(keys)
    expect(new Set(Object.values(c)).size).toBe(10)
    const s = colorsFor(['PAID', 'x', 'FAILED', 'y'], STATUS_COLORS)
    expect(s.PAID).toBe(STATUS_COLORS.PAID)
    expect(new Set(Object.values(s)).size).toBe(4)
    expect(PALETTE).not.toContain(undefined)
  })
  it('draws lines that break at missing readings', () => {
    const [p] = paths([{ key: 'a', values: [0, 5, null, 10] }], 4, 300, 100, 10)
    expect(p.d).toBe('M0.0 100.0L100.0 50.0M300.0 0.0')
  })
  it('rounds the scale and formats readings', () => {
    expect([niceMax(0), niceMax(0.3), niceMax(7), niceMax(13), niceMax(240)]).toEqual([1, 0.5, 10, 20, 250])
    expect([formatValue(null), formatValue(3), formatValue(2.345), formatValue(12.34), formatValue(12345)]).toEqual(['–', '3', '2.35', '12.3', '12.3k'])
  })
})
