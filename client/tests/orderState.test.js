import { describe, expect, it } from 'vitest'
import { OrderBook, canCancel, canPay, compareOrderNo, isNewer } from '../src/lib/orderState.js'

const no = '0000012345678901234007'

describe('isNewer', () => {
  it('accepts only strictly newer versions', () => {
    expect(isNewer(undefined, { version: 1 })).toBe(true)
    expect(isNewer({ version: 2 }, { version: 3 })).toBe(true)
    expect(isNewer({ version: 3 }, { version: 3 })).toBe(false)
    expect(isNewer({ version: 3 }, { version: 2 })).toBe(false)
    expect(isNewer({ version: 3 }, {})).toBe(false)
  })
})

describe('OrderBook', () => {
  it('drops events whose version is not newer', () => {
    const changes = []
    const book = new OrderBook((o) => changes.push(`${o.status}@${o.version}`))
    expect(book.apply({ type: 'order', orderNo: no, status: 'WAITING_PAY', version: 2 })).toBe(true)
    expect(book.apply({ type: 'order', orderNo: no, status: 'PROCESSING', version: 1 })).toBe(false)
    expect(book.apply({ type: 'order', orderNo: no, status: 'WAITING_PAY', version: 2 })).toBe(false)
    expect(book.apply({ type: 'order', orderNo: no, status: 'PAID', version: 3 })).toBe(true)
    expect(book.apply({ type: 'order', orderNo: no, status: 'CANCELLED', version: 2 })).toBe(false)
    expect(book.get(no)).toMatchObject({ status: 'PAID', version: 3 })
    expect(book.get(no).type).toBeUndefined()
    expect(changes).toEqual(['WAITING_PAY@2', 'PAID@3'])
    expect(book.dropped).toBe(3)
  })

  it('never goes backwards whatever the arrival order', () => {
    const versions = [5, 1, 3, 2, 7, 6, 4, 7, 2]
    const seen = []
    const book = new OrderBook((o) => seen.push(o.version))
    for (const v of versions) book.apply({ orderNo: no, status: 'WAITING_PAY', version: v })
    expect(seen).toEqual([5, 7])
    for (let i = 1; i < seen.length; i++) expect(seen[i]).toBeGreaterThan(seen[i - 1])
  })

  it('lets an older full order add details but not change the state', () => {
    const book = new OrderBook()
    book.apply({ type: 'order', orderNo: no, status: 'PAID', version: 3 })
    book.apply({ orderNo: no, status: 'WAITING_PAY', version: 2, amount: 1999, productId: 7, payDeadline: 'x' })
    expect(book.get(no)).toMatchObject({ status: 'PAID', version: 3, amount: 1999, productId: 7 })
    expect(book.get(no).payDeadline).toBeUndefined()
  })

  it('drops the pay deadline once the order left WAITING_PAY', () => {
    const book = new OrderBook()
    book.apply({ orderNo: no, status: 'WAITING_PAY', version: 2, payDeadline: '2030-01-01T00:00:00Z' })
    book.apply({ orderNo: no, status: 'CANCELLED', version: 3 })
    expect(book.get(no).payDeadline).toBeUndefined()
  })

  it('lists newest first', () => {
    const book = new OrderBook()
    const older = '0000000000000000001007'
    const newer = '0000000000000000002007'
    book.apply({ orderNo: older, status: 'PAID', version: 3 })
    book.apply({ orderNo: newer, status: 'PAID', version: 3 })
    expect(book.list().map((o) => o.orderNo)).toEqual([newer, older])
    expect(compareOrderNo(older, newer)).toBeLessThan(0)
  })

  it('says which buttons an order has', () => {
    expect(canPay({ status: 'WAITING_PAY' })).toBe(true)
    expect(canPay({ status: 'PROCESSING' })).toBe(false)
    expect(canCancel({ status: 'PROCESSING' })).toBe(true)
    expect(canCancel({ status: 'WAITING_PAY' })).toBe(true)
    expect(canCancel({ status: 'PAID' })).toBe(false)
  })
})
