// Geometry of the console's line charts (components/LineChart.vue draws it
// as SVG): scales, paths and ticks, kept out of the component so it is
// unit-tested. Series values may be null (no reading): the line breaks there.

/** PALETTE: ten colours that stay distinct from one another (Tableau 10, darkened for contrast on white). */
export const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#17becf', '#e377c2', '#8c564b', '#7f7f7f', '#bcbd22']

/** Fixed colours of the order states, the same in every chart and badge. */
export const STATUS_COLORS = {
  PROCESSING: '#4f46e5',
  WAITING_PAY: '#d97706',
  PAID: '#16a34a',
  CANCELLED: '#6b7280',
  FAILED: '#dc2626',
}

/**
 * colorsFor gives every key its own colour: a fixed one when fixed names it,
 * else the next palette colour no other key of the chart uses.
 * @param {string[]} keys
 * @param {Record<string, string>} [fixed]
 */
export function colorsFor(keys, fixed = {}) {
  const used = new Set(keys.map((k) => fixed[k]).filter(Boolean))
  const free = PALETTE.filter((c) => !used.has(c))
  const out = {}
  let i = 0
  for (const k of keys) out[k] = fixed[k] ?? free[i++ % free.length]
  return out
}

/** niceMax rounds a positive maximum up to 1, 2, 2.5 or 5 × 10^n (at least 1). */
export function niceMax(v) {
  if (!(v > 0)) return 1
  const p = 10 ** Math.floor(Math.log10(v))
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p
  return 10 * p
}

/**
 * paths returns an SVG path per series over a width × height box: x spread
 * evenly over n points, y from 0 (bottom) to max (top); a null value breaks
 * the line.
 * @param {{key: string, values: (number|null)[]}[]} series
 */
export function paths(series, n, width, height, max) {
  const x = (i) => (n <= 1 ? width : (i * width) / (n - 1))
  const y = (v) => height - (Math.max(0, v) / max) * height
  return series.map((s) => {
    let d = ''
    let pen = false
    s.values.forEach((v, i) => {
      if (v === null || v === undefined || !Number.isFinite(v)) {
        pen = false
        return
      }
      d += `${pen ? 'L' : 'M'}${x(i).toFixed(1)} ${y(v).toFixed(1)}`
      pen = true
    })
    return { key: s.key, d }
  })
}

/** seriesMax is the largest value of every series (0 without any). */
export function seriesMax(series) {
  let m = 0
  for (const s of series) for (const v of s.values) if (Number.isFinite(v) && v > m) m = v
  return m
}

/** formatValue renders a reading compactly: 0.25, 3.4, 12, 1.2k, 3.4M. */
export function formatValue(v) {
  if (v === null || v === undefined || !Number.isFinite(v)) return '–'
  const a = Math.abs(v)
  if (a >= 1e6) return `${(v / 1e6).toFixed(1)}M`
  if (a >= 1e4) return `${(v / 1e3).toFixed(1)}k`
  if (a >= 100 || Number.isInteger(v)) return String(Math.round(v))
  if (a >= 10) return v.toFixed(1)
  return v.toFixed(2)
}
