import { describe, expect, it } from 'vitest'
import { clampQuantity, heldUnits, productState, quantityBound, sortCatalog, stockLine } from '../src/lib/catalog.js'

const T = Date.parse('2026-12-01T12:00:00Z')
const iso = (ms) => new Date(ms).toISOString()
const product = (id, o = {}) => ({
  id,
  name: `p${id}`,
  price: 100,
  total: 10,
  available: 10,
  saleStart: iso(T - 60_000),
  saleEnd: iso(T + 60_000),
  perUserLimit: 0,
  soldOut: false,
  ...o,
})

describe('productState', () => {
  it('follows the clock, the stock and the server', () => {
    expect(productState(product(1), T)).toBe('live')
    expect(productState(product(1, { saleStart: iso(T + 1000) }), T)).toBe('upcoming')
    expect(productState(product(1, { saleStart: iso(T + 1000) }), T + 1000)).toBe('live')
    expect(productState(product(1), T + 60_000)).toBe('ended')
    expect(productState(product(1, { available: 0, soldOut: true }), T)).toBe('soldout')
    expect(productState(product(1, { available: 0, soldOut: true }), T + 60_000)).toBe('ended')
    expect(productState(product(1, { state: 'paused' }), T)).toBe('paused')
    expect(productState(product(1, { state: 'ended' }), T)).toBe('ended')
    // a stale server soldOut state loses to the latest available (an adjustment added units)
    expect(productState(product(1, { state: 'soldOut', available: 5, soldOut: false }), T)).toBe('live')
    // an open-ended sale (saleEnd null)
    expect(productState(product(1, { saleEnd: null }), T + 1e12)).toBe('live')
    // an upcoming sale with no stock is still upcoming
    expect(productState(product(1, { saleStart: iso(T + 1000), available: 0, soldOut: true }), T)).toBe('upcoming')
  })
})

describe('sortCatalog', () => {
  it('lists live sales first, then upcoming, sold out, and ended apart', () => {
    const ps = [
      product(1, { saleEnd: iso(T - 1) }), // ended
      product(2, { saleStart: iso(T + 5000) }), // upcoming, later
      product(3, { available: 0, soldOut: true }), // sold out
      product(4, { saleEnd: iso(T + 90_000) }), // live, ends later
      product(5, { saleStart: iso(T + 1000) }), // upcoming, sooner
      product(6), // live, ends sooner
      product(7, { state: 'paused' }),
      product(8, { saleEnd: iso(T - 5000) }), // ended earlier
    ]
    const { shown, ended } = sortCatalog(ps, T)
    expect(shown.map((p) => p.id)).toEqual([6, 4, 7, 5, 2, 3])
    expect(ended.map((p) => p.id)).toEqual([1, 8])
  })
})

describe('stockLine', () => {
  it('never shows more left than the total', () => {
    expect(stockLine({ available: 149, total: 100 })).toEqual({ left: 149, total: 149, fill: 1 })
    expect(stockLine({ available: 25, total: 100 })).toEqual({ left: 25, total: 100, fill: 0.25 })
    expect(stockLine({ available: -2, total: 0 })).toEqual({ left: 0, total: 0, fill: 0 })
  })
})

describe('quantityBound', () => {
  it('is the smallest of maxPerOrder, what is left of the limit, and the stock', () => {
    expect(quantityBound(product(1, { maxPerOrder: 3 }))).toMatchObject({ max: 3, by: 'order' })
    expect(quantityBound(product(1, { maxPerOrder: 3, perUserLimit: 5 }), 3)).toMatchObject({ max: 2, by: 'limit' })
    expect(quantityBound(product(1, { maxPerOrder: 3, perUserLimit: 5 }), 5)).toMatchObject({ max: 0, by: 'limit' })
    expect(quantityBound(product(1, { maxPerOrder: 3, available: 2 }))).toMatchObject({ max: 2, by: 'stock' })
    // without maxPerOrder: the gateway's default min(perUserLimit or 10, 10)
    expect(quantityBound(product(1, { perUserLimit: 4 }))).toMatchObject({ max: 4 })
    expect(quantityBound(product(1, { available: 50, perUserLimit: 0 }))).toMatchObject({ max: 10, by: 'order' })
  })

  it('counts the units the buyer holds', () => {
    const orders = [
      { productId: 1, quantity: 2, status: 'WAITING_PAY' },
      { productId: 1, quantity: 1, status: 'PAID' },
      { productId: 1, quantity: 1, status: 'PROCESSING' },
      { productId: 1, quantity: 5, status: 'CANCELLED' },
      { productId: 1, quantity: 5, status: 'FAILED' },
      { productId: 2, quantity: 3, status: 'PAID' },
      { orderNo: 'x', status: 'WAITING_PAY' }, // a push update without details
    ]
    expect(heldUnits(orders, 1)).toBe(4)
    expect(heldUnits(orders, 3)).toBe(0)
  })

  it('clamps a picked quantity', () => {
    expect(clampQuantity(5, 3)).toBe(3)
    expect(clampQuantity(0, 3)).toBe(1)
    expect(clampQuantity('2', 3)).toBe(2)
    expect(clampQuantity('x', 3)).toBe(1)
    expect(clampQuantity(2.7, 3)).toBe(2)
    expect(clampQuantity(4, 0)).toBe(1)
  })
})
