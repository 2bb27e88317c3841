// A parser for the Prometheus text exposition format (version 0.0.4), enough
// for the admin dashboard: samples with labels, comments and types skipped.

/**
 * parsePrometheus returns the samples of an exposition.
 * @param {string} text
 * @returns {{name: string, labels: Record<string, string>, value: number}[]}
 */
export function parsePrometheus(text) {
  const out = []
  for (const raw of text.split('\n')) {
    const line = raw.trim()
    if (!line || line.startsWith('#')) continue
    const s = parseLine(line)
    if (s) out.push(s)
  }
  return out
}

function parseLine(line) {
  let i = 0
  while (i < line.length && /[a-zA-Z0-9_:]/.test(line[i])) i++
  const name = line.slice(0, i)
  if (!name) return null
  const labels = {}
  if (line[i] === '{') {
    i++
    for (;;) {
      while (line[i] === ' ' || line[i] === ',') i++
      if (line[i] === '}') {
        i++
        break
      }
      const eq = line.indexOf('=', i)
      if (eq < 0 || line[eq + 1] !== '"') return null
      const key = line.slice(i, eq).trim()
      let j = eq + 2
      let val = ''
      for (; j < line.length && line[j] !== '"'; j++) {
        if (line[j] === '\\' && j + 1 < line.length) {
          j++
          val += line[j] === 'n' ? '\n' : line[j]
        } else {
          val += line[j]
        }
      }
      if (j >= line.length) return null
      labels[key] = val
      i = j + 1
    }
  }
  const rest = line.slice(i).trim().split(/\s+/)
  const value = parseValue(rest[0])
  if (value === null) return null
  return { name, labels, value }
}

function parseValue(s) {
  if (s === undefined || s === '') return null
  if (s === '+Inf') return Infinity
  if (s === '-Inf') return -Infinity
  if (s === 'NaN') return NaN
  const v = Number(s)
  return Number.isNaN(v) ? null : v
}

/**
 * seriesKey names a sample by the labels that matter, e.g. "result=SOLD_OUT".
 * @param {Record<string, string>} labels
 * @param {string[]} [only] the label names to keep (all when absent)
 */
export function seriesKey(labels, only) {
  const keys = (only ?? Object.keys(labels)).filter((k) => k in labels).sort()
  return keys.map((k) => `${k}=${labels[k]}`).join(',') || 'total'
}

/**
 * group sums the samples of metric name by the given labels.
 * @returns {Map<string, number>} seriesKey → value; empty when the metric is absent
 */
export function group(samples, name, by) {
  const m = new Map()
  for (const s of samples) {
    if (s.name !== name) continue
    const k = seriesKey(s.labels, by)
    m.set(k, (m.get(k) ?? 0) + s.value)
  }
  return m
}

/**
 * rates turns two readings of counters (seriesKey → value) taken dtMs apart
 * into per-second rates; a counter that went down (a restart) counts from 0.
 * A series without a previous reading has no rate yet.
 */
export function rates(prev, cur, dtMs) {
  const out = new Map()
  if (!prev || dtMs <= 0) return out
  for (const [k, v] of cur) {
    if (!prev.has(k)) continue
    const p = prev.get(k)
    const d = v >= p ? v - p : v
    out.set(k, (d * 1000) / dtMs)
  }
  return out
}
