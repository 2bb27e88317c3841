import { describe, expect, it } from 'vitest'
import { etaText, LinePlace, Place } from '../src/lib/waitingRoom.js'

describe('LinePlace', () => {
  it('moves only forward and drops stale or foreign messages', () => {
    const p = new LinePlace()
    p.fromApi({ ticket: 40, state: 'WAITING', position: 40, etaSeconds: null })
    expect(p.fromPush({ type: 'queue', ticket: 40, state: 'WAITING', position: 30, seq: 5, etaSeconds: 15 })).toBe(true)
    expect(p.position).toBe(30)
    expect(p.progress).toBeCloseTo(1 - 29 / 40)
    expect(p.fromPush({ type: 'queue', ticket: 40, state: 'WAITING', position: 35, seq: 4 })).toBe(false) // older seq
    expect(p.fromPush({ type: 'queue', ticket: 40, state: 'WAITING', position: 36, seq: 6 })).toBe(false) // backwards
    expect(p.fromPush({ type: 'queue', ticket: 41, state: 'ADMITTED', position: 0, seq: 7 })).toBe(false) // not ours
    expect(p.position).toBe(30)
    expect(p.fromPush({ type: 'queue', ticket: 40, state: 'ADMITTED', position: 0, seq: 8 })).toBe(true)
    expect(p.state).toBe(Place.ADMITTED)
    expect(p.progress).toBe(1)
  })

  it('shows sold out and back in stock', () => {
    const p = new LinePlace()
    p.fromApi({ ticket: 9, state: 'WAITING', position: 4 })
    p.fromPush({ type: 'queue', ticket: 9, state: 'SOLD_OUT', position: 4, seq: 2 })
    expect(p.state).toBe(Place.SOLD_OUT)
    p.fromPush({ type: 'queue', ticket: 9, state: 'WAITING', position: 3, seq: 3, backInStock: true })
    expect(p.state).toBe(Place.WAITING)
    expect(p.backInStock).toBe(true)
  })

  it('takes the API answer after a reload as it is', () => {
    const p = new LinePlace()
    p.fromApi({ ticket: 3, state: 'ADMITTED', position: 0, admittedUntil: '2026-01-01T00:00:00Z', etaSeconds: 0 })
    expect(p.state).toBe(Place.ADMITTED)
    expect(p.admittedUntil).toBe('2026-01-01T00:00:00Z')
  })
})

describe('etaText', () => {
  it('rounds to a readable unit', () => {
    expect(etaText(null)).toBe('')
    expect(etaText(0.2)).toBe('about 1 s')
    expect(etaText(42)).toBe('about 42 s')
    expect(etaText(150)).toBe('about 3 min')
    expect(etaText(7200)).toBe('about 2 h')
  })
})
