import { readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { commitment, listHash, listText, parseList, randomKey, RULE, seedMatches, shuffle, verifyPosition } from '../src/lib/shuffle.js'

// The vectors the Go implementation (package drop) generated and checks: the
// browser must compute exactly what the server served.
const here = dirname(fileURLToPath(import.meta.url))
const vectors = JSON.parse(readFileSync(join(here, '../../drop/testdata/vectors.json'), 'utf8'))

describe('shuffle (shared vectors with the Go implementation)', () => {
  it('names the same rule', () => {
    expect(vectors.rule).toBe(RULE)
    expect(vectors.cases.length).toBeGreaterThan(3)
  })

  for (const c of vectors.cases) {
    it(`case "${c.name}": commitment, list hash, order and random keys`, () => {
      expect(commitment(c.seed)).toBe(c.commitment)
      expect(seedMatches(c.seed, c.commitment)).toBe(true)
      expect(listHash(listText(c.tickets))).toBe(c.listHash)
      expect(shuffle(c.seed, c.tickets)).toEqual(c.order)
      for (const [t, k] of Object.entries(c.randomKeys)) expect(randomKey(c.seed, t)).toBe(k)
    })
  }

  it('recomputes every served position from public data alone', () => {
    const c = vectors.cases.find((x) => x.order.length >= 100)
    const text = listText(c.tickets)
    const drop = { rule: RULE, commitment: c.commitment, seed: c.seed, listHash: c.listHash }
    c.order.forEach((t, i) => {
      const v = verifyPosition(drop, text, t)
      expect(v.ok).toBe(true)
      expect(v.position).toBe(i + 1)
    })
  })

  it('detects a seed changed after the commitment', () => {
    for (const tp of vectors.tampered) expect(seedMatches(tp.seed, tp.commitment)).toBe(false)
    const c = vectors.cases.find((x) => x.order.length === 5)
    const text = listText(c.tickets)
    const other = vectors.tampered[0].seed
    const v = verifyPosition({ commitment: c.commitment, seed: other, listHash: c.listHash }, text, c.order[0])
    expect(v.ok).toBe(false)
    expect(v.problems.join(' ')).toMatch(/commitment/)
  })

  it('detects a list that is not the published one, and a ticket not in it', () => {
    const c = vectors.cases.find((x) => x.order.length === 5)
    const drop = { commitment: c.commitment, seed: c.seed, listHash: c.listHash }
    const shorter = listText(c.tickets.slice(1))
    expect(verifyPosition(drop, shorter, c.tickets[2]).ok).toBe(false)
    const v = verifyPosition(drop, listText(c.tickets), 'ffffffffffffffff')
    expect(v.ok).toBe(false)
    expect(v.position).toBe(0)
    expect(() => parseList('b\na\n')).toThrow()
    expect(() => parseList('0000000000000001')).toThrow()
  })
})
