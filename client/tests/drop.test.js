import { readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { Drawn, Phase, drawOutcome, dropPhase, noteCommitment, notedCommitment, powEstimate, roomCounts, shortHex, verifyLink } from '../src/lib/drop.js'
import { RULE, listText } from '../src/lib/shuffle.js'
import { checkPlace } from '../src/lib/verify.js'

// The Go implementation's vectors (drop/testdata/vectors.json): a served
// shuffle the browser check must accept, and tamper with.
const here = dirname(fileURLToPath(import.meta.url))
const vectors = JSON.parse(readFileSync(join(here, '../../drop/testdata/vectors.json'), 'utf8'))
const big = vectors.cases.find((x) => x.order.length >= 100)
const record = (over = {}) => ({ rule: RULE, mode: 'fifo', commitment: big.commitment, seed: big.seed, listHash: big.listHash, ...over })
const text = listText(big.tickets)

class Mem {
  constructor() {
    this.m = new Map()
  }
  getItem(k) {
    return this.m.has(k) ? this.m.get(k) : null
  }
  setItem(k, v) {
    this.m.set(k, String(v))
  }
}

describe('dropPhase', () => {
  const now = Date.parse('2026-12-02T00:00:00Z')
  it('reads the room state at a time', () => {
    expect(dropPhase(null, now)).toBe(Phase.OFF)
    expect(dropPhase({ state: 'OFF' }, now)).toBe(Phase.OFF)
    expect(dropPhase({ state: 'PRE_QUEUE', preQueueOpensAt: '2026-12-02T00:00:05Z' }, now)).toBe(Phase.NOT_YET)
    expect(dropPhase({ state: 'PRE_QUEUE', preQueueOpensAt: '2026-12-01T23:59:55Z' }, now)).toBe(Phase.PRE_QUEUE)
    expect(dropPhase({ state: 'PRE_QUEUE', preQueueOpensAt: null }, now)).toBe(Phase.PRE_QUEUE)
    expect(dropPhase({ state: 'SHUFFLING' }, now)).toBe(Phase.SHUFFLING)
    expect(dropPhase({ state: 'OPEN' }, now)).toBe(Phase.OPEN)
  })
})

describe('drawOutcome', () => {
  it('splits winners, the reserve list and the rest', () => {
    expect(drawOutcome(1, 3, 2)).toEqual({ outcome: Drawn.WON, rank: 1 })
    expect(drawOutcome(3, 3, 2)).toEqual({ outcome: Drawn.WON, rank: 3 })
    expect(drawOutcome(4, 3, 2)).toEqual({ outcome: Drawn.RESERVE, rank: 1 })
    expect(drawOutcome(5, 3, 2)).toEqual({ outcome: Drawn.RESERVE, rank: 2 })
    expect(drawOutcome(6, 3, 2)).toEqual({ outcome: Drawn.LOST, rank: 0 })
    expect(drawOutcome(1, 0, 0).outcome).toBe(Drawn.LOST)
    expect(drawOutcome(0, 3, 2).outcome).toBe(Drawn.LOST)
  })
})

describe('checkPlace', () => {
  it('matches every served place of the vectors', () => {
    big.order.forEach((t, i) => {
      const r = checkPlace(record(), text, { ticket: t, shufflePosition: i + 1, state: 'WAITING' })
      expect(r.ok, r.problems.join('; ')).toBe(true)
      expect(r.position).toBe(i + 1)
    })
  })

  it('says when the served place differs from the recomputed one', () => {
    const r = checkPlace(record(), text, { ticket: big.order[4], shufflePosition: 4 })
    expect(r.ok).toBe(false)
    expect(r.position).toBe(5)
    expect(r.problems.join()).toMatch(/served place 4, the shuffle gives 5/)
  })

  it('catches a seed changed after the commitment', () => {
    const r = checkPlace(record({ seed: vectors.tampered[0].seed }), text, { ticket: big.order[0], shufflePosition: 1 })
    expect(r.ok).toBe(false)
    expect(r.problems.join()).toMatch(/does not match the commitment/)
  })

  it('catches a commitment other than the one noted before the opening', () => {
    const r = checkPlace(record(), text, { ticket: big.order[0], shufflePosition: 1 }, 'ab'.repeat(32))
    expect(r.ok).toBe(false)
    expect(r.problems[0]).toMatch(/not the one you noted/)
    expect(checkPlace(record(), text, { ticket: big.order[0], shufflePosition: 1 }, big.commitment.toUpperCase()).ok).toBe(true)
  })

  it('catches a list changed after its hash and a ticket left out', () => {
    const shorter = listText(big.tickets.filter((t) => t !== big.order[2]))
    const r = checkPlace(record(), shorter, { ticket: big.order[2], shufflePosition: 3 })
    expect(r.ok).toBe(false)
    expect(r.position).toBe(0)
    expect(r.problems.join()).toMatch(/does not match its published hash/)
    expect(r.problems.join()).toMatch(/not in the published list/)
  })

  it("checks a draw's served outcome against the rank", () => {
    const d = record({ mode: 'draw', winners: 3, reserve: 2 })
    expect(checkPlace(d, text, { ticket: big.order[0], shufflePosition: 1, state: 'ADMITTED' }).outcome).toEqual({ outcome: Drawn.WON, rank: 1 })
    expect(checkPlace(d, text, { ticket: big.order[3], shufflePosition: 4, state: 'WAITING' }).ok).toBe(true)
    // A reserve entry that got a win passed on.
    expect(checkPlace(d, text, { ticket: big.order[4], shufflePosition: 5, state: 'ADMITTED' }).ok).toBe(true)
    expect(checkPlace(d, text, { ticket: big.order[9], shufflePosition: 10, state: 'LOST' }).ok).toBe(true)
    const wrong = checkPlace(d, text, { ticket: big.order[1], shufflePosition: 2, state: 'LOST' })
    expect(wrong.ok).toBe(false)
    expect(wrong.problems.join()).toMatch(/the shop says LOST, the shuffle says won/)
    expect(checkPlace(d, text, { ticket: big.order[9], shufflePosition: 10, state: 'ADMITTED' }).ok).toBe(false)
  })
})

describe('the noted commitment', () => {
  it('keeps the first one seen per product', () => {
    const s = new Mem()
    expect(notedCommitment(s, 7)).toBe('')
    noteCommitment(s, 7, 'aa')
    noteCommitment(s, 7, 'bb')
    noteCommitment(s, 8, '')
    expect(notedCommitment(s, 7)).toBe('aa')
    expect(notedCommitment(s, 8)).toBe('')
    expect(notedCommitment(null, 7)).toBe('')
  })
})

describe('roomCounts', () => {
  it('reads entries, winners, claims and pass-ons', () => {
    const s = { issued: 9, admitted: 5, expired: 2, live: 1, claimed: 0, waiting: 1, drop: { preQueued: 9, winners: 3 } }
    expect(roomCounts(s)).toEqual({ entries: 9, issued: 9, winners: 3, admitted: 5, claims: 2, passOns: 2, live: 1, waiting: 1 })
    // Sharded products count their claims.
    expect(roomCounts({ ...s, claimed: 4 }).claims).toBe(4)
    expect(roomCounts(null)).toEqual({ entries: 0, issued: 0, winners: null, admitted: 0, claims: 0, passOns: 0, live: 0, waiting: 0 })
  })
})

describe('small helpers', () => {
  it('links the verify page with the served place', () => {
    expect(verifyLink(3, { ticket: '00000000000000ab', shufflePosition: 12, state: 'WAITING' })).toBe(
      '/products/3/verify?ticket=00000000000000ab&position=12&state=WAITING',
    )
    expect(verifyLink(3, { ticket: '00000000000000ab' })).toBe('/products/3/verify?ticket=00000000000000ab')
  })
  it('estimates the proof-of-work time and shortens hex', () => {
    expect(powEstimate(0)).toBe(0)
    expect(powEstimate(100_000)).toBe(2.5)
    expect(shortHex('0123456789abcdef0123456789abcdef')).toBe('01234567…89abcdef')
    expect(shortHex('abc')).toBe('abc')
  })
})
