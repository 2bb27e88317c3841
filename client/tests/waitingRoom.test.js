import { describe, expect, it } from 'vitest'
import { etaText, LinePlace, Place } from '../src/lib/waitingRoom.js'

describe('LinePlace', () => {
  it('follows a pre-queued ticket through the shuffle and asks the API for its shuffle place', () => {
    const p = new LinePlace()
    p.fromApi({ ticket: 'aa', mode: 'fifo', state: 'PRE_QUEUE', position: 0, shufflePosition: 0, opensAt: '2026-12-02T00:00:00Z' })
    expect(p.opensAt).toBe('2026-12-02T00:00:00Z')
    expect(p.needsApi).toBe(false)
    expect(p.fromPush({ type: 'queue', ticket: 'aa', state: 'SHUFFLING', position: 0, seq: 1 })).toBe(true)
    expect(p.needsApi).toBe(false)
    expect(p.fromPush({ type: 'queue', ticket: 'aa', state: 'WAITING', position: 7, seq: 2 })).toBe(true)
    expect(p.firstPosition).toBe(7)
    expect(p.needsApi).toBe(true) // push carries no shufflePosition
    p.fromApi({ ticket: 'aa', mode: 'fifo', state: 'WAITING', position: 7, shufflePosition: 9 })
    expect(p.shufflePosition).toBe(9)
    expect(p.needsApi).toBe(false)
  })

  it("keeps a draw's final outcome", () => {
    const p = new LinePlace()
    p.fromApi({ ticket: 'bb', mode: 'draw', state: 'PRE_QUEUE', position: 0 })
    expect(p.fromPush({ type: 'queue', ticket: 'bb', state: 'LOST', position: 0, seq: 3 })).toBe(true)
    expect(p.state).toBe(Place.LOST)
    expect(p.needsApi).toBe(false) // nothing more to ask for a loss
    expect(p.fromPush({ type: 'queue', ticket: 'bb', state: 'WAITING', position: 1, seq: 4 })).toBe(false)
    const q = new LinePlace()
    q.fromApi({ ticket: 'cc', mode: 'random', state: 'PRE_QUEUE' })
    q.fromPush({ type: 'queue', ticket: 'cc', state: 'WAITING', position: 0, seq: 1 })
    expect(q.needsApi).toBe(false) // a random room publishes no place
  })

  it('asks for an admission deadline push does not carry', () => {
    const p = new LinePlace()
    p.fromApi({ ticket: 'dd', state: 'WAITING', position: 2 })
    p.fromPush({ type: 'queue', ticket: 'dd', state: 'ADMITTED', position: 0, seq: 1 })
    expect(p.needsApi).toBe(true)
    p.fromApi({ ticket: 'dd', state: 'ADMITTED', position: 0, admittedUntil: '2026-12-02T00:02:00Z' })
    expect(p.needsApi).toBe(false)
  })

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
