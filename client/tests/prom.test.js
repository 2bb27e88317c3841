import { describe, expect, it } from 'vitest'
import { History, PANELS } from '../src/lib/dashboard.js'
import { group, parsePrometheus, rates } from '../src/lib/prom.js'

const text = `# HELP stampede_reserve_total Reserve calls by result.
# TYPE stampede_reserve_total counter
stampede_reserve_total{result="OK"} 120
stampede_reserve_total{result="SOLD_OUT",product="7"} 30
stampede_reserve_total{product="8",result="SOLD_OUT"} 5
stampede_outbox_rows{status="NEW"} 4
stampede_outbox_rows{status="SENT"} 1.5e3
weird{path="a \\"quoted\\" \\\\ value"} 1 1700000000000
go_goroutines 42
bad line
`

describe('parsePrometheus', () => {
  it('reads samples, labels, escapes and timestamps', () => {
    const s = parsePrometheus(text)
    expect(s).toHaveLength(7)
    expect(s[0]).toEqual({ name: 'stampede_reserve_total', labels: { result: 'OK' }, value: 120 })
    expect(s[4].value).toBe(1500)
    expect(s[5].labels.path).toBe('a "quoted" \\ value')
    expect(s[6]).toEqual({ name: 'go_goroutines', labels: {}, value: 42 })
  })

  it('groups by the chosen labels', () => {
    const g = group(parsePrometheus(text), 'stampede_reserve_total', ['result'])
    expect(Object.fromEntries(g)).toEqual({ 'result=OK': 120, 'result=SOLD_OUT': 35 })
    expect(group(parsePrometheus(text), 'stampede_dlq_depth', []).size).toBe(0)
  })

  it('turns counters into rates, surviving a reset', () => {
    const prev = new Map([['a', 10], ['b', 50]])
    const cur = new Map([['a', 30], ['b', 5], ['new', 7]])
    expect(Object.fromEntries(rates(prev, cur, 2000))).toEqual({ a: 10, b: 2.5 })
  })
})

describe('History', () => {
  it('keeps a bounded history and knows which panels have data', () => {
    const h = new History(3)
    h.push(parsePrometheus('stampede_reserve_total{result="OK"} 10\nstampede_dlq_depth 2'), 0)
    h.push(parsePrometheus('stampede_reserve_total{result="OK"} 30\nstampede_dlq_depth 3'), 1000)
    expect(h.series.reserve.get('result=OK')).toEqual([null, 20])
    expect(h.hasData('reserve')).toBe(true)
    expect(h.hasData('dlq')).toBe(true)
    expect(h.hasData('drift')).toBe(false)
    h.push(parsePrometheus('stampede_reserve_total{result="OK"} 30\nstampede_reserve_total{result="SOLD_OUT"} 4'), 2000)
    h.push(parsePrometheus('stampede_reserve_total{result="OK"} 31\nstampede_reserve_total{result="SOLD_OUT"} 10'), 3000)
    h.push(parsePrometheus(''), 4000)
    expect(h.labels).toHaveLength(3)
    expect(h.series.dlq.get('total')).toEqual([null, null, null])
    expect(h.hasData('dlq')).toBe(false)
    expect(h.series.reserve.get('result=OK')).toEqual([0, 1, null])
    expect(h.series.reserve.get('result=SOLD_OUT')).toEqual([null, 6, null])
    expect(PANELS.map((p) => p.metric)).toContain('stampede_reconcile_drift')
  })
})
