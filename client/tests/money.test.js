import { describe, expect, it } from 'vitest'
import { formatMoney, minorDigits, parseMoney, toMajorText } from '../src/lib/money.js'
import { saleBody, validateSale } from '../src/lib/saleForm.js'

describe('money', () => {
  it('formats minor units in the configured currency', () => {
    expect(formatMoney(1999, 'USD', 'en-US')).toBe('$19.99')
    expect(formatMoney(1999, 'EUR', 'de-DE')).toBe('19,99\u00a0€')
    expect(formatMoney(1999, 'JPY', 'en-US')).toBe('¥1,999') // no minor unit
    expect(formatMoney(1999, 'KWD', 'en-US')).toMatch(/1\.999/) // three
    expect(formatMoney(Number.NaN, 'USD')).toBe('')
    expect(minorDigits('USD')).toBe(2)
    expect(minorDigits('JPY')).toBe(0)
  })

  it('parses what an admin types into minor units', () => {
    expect(parseMoney('19.99', 'USD')).toBe(1999)
    expect(parseMoney('19,9', 'EUR')).toBe(1990)
    expect(parseMoney(' 1 999 ', 'JPY')).toBe(1999)
    expect(parseMoney('7', 'USD')).toBe(700)
    expect(parseMoney('1.999', 'USD')).toBeNaN()
    expect(parseMoney('1.5', 'JPY')).toBeNaN()
    expect(parseMoney('-1', 'USD')).toBeNaN()
    expect(parseMoney('abc', 'USD')).toBeNaN()
    expect(toMajorText(1999, 'USD')).toBe('19.99')
    expect(toMajorText(1999, 'JPY')).toBe('1999')
  })
})

describe('sale form', () => {
  const f = {
    name: ' Sneaker ',
    imageUrl: ' https://cdn.test/a.png ',
    description: '',
    price: '19.99',
    stock: 100,
    shards: 2,
    perUserLimit: 3,
    maxPerOrder: 2,
    saleStart: '2026-12-01T12:00',
    saleEnd: '2026-12-01T13:00',
  }
  it('builds the API body', () => {
    const b = saleBody(f, 'USD')
    expect(b).toMatchObject({ name: 'Sneaker', imageUrl: 'https://cdn.test/a.png', price: 1999, stock: 100, shards: 2, perUserLimit: 3, maxPerOrder: 2 })
    expect(b).not.toHaveProperty('description')
    expect(validateSale(b)).toBe('')
    expect(saleBody(f, 'USD', true)).not.toHaveProperty('stock')
  })
  it('says what is wrong', () => {
    expect(validateSale(saleBody({ ...f, name: ' ' }, 'USD'))).toMatch(/name/)
    expect(validateSale(saleBody({ ...f, price: '1.999' }, 'USD'))).toMatch(/price/)
    expect(validateSale(saleBody({ ...f, maxPerOrder: 4 }, 'USD'))).toMatch(/Max per order/)
    expect(validateSale(saleBody({ ...f, imageUrl: 'javascript:alert(1)' }, 'USD'))).toMatch(/picture/)
    expect(validateSale(saleBody({ ...f, saleEnd: f.saleStart }, 'USD'))).toMatch(/end after/)
    expect(validateSale(saleBody({ ...f, description: 'x'.repeat(2001) }, 'USD'))).toMatch(/2000/)
  })
})

describe('sale edit', () => {
  const p = {
    name: 'Sneaker',
    price: 1999,
    perUserLimit: 2,
    maxPerOrder: 1,
    saleStart: '2026-12-01T12:00:00.000Z',
    saleEnd: '2026-12-01T13:00:00.000Z',
    imageUrl: 'https://cdn.test/a.png',
  }
  it('sends only what changed and what the state allows', async () => {
    const { editBody } = await import('../src/lib/saleForm.js')
    const b = { ...p, name: 'Sneaker v2', price: 2999, saleEnd: '2026-12-01T14:00:00.000Z' }
    expect(editBody(b, p, 'upcoming')).toEqual({ name: 'Sneaker v2', price: 2999, saleEnd: '2026-12-01T14:00:00.000Z' })
    expect(editBody(b, p, 'live')).toEqual({ name: 'Sneaker v2', saleEnd: '2026-12-01T14:00:00.000Z' })
    expect(editBody({ ...b, perUserLimit: 4 }, p, 'paused')).toEqual({ name: 'Sneaker v2', saleEnd: '2026-12-01T14:00:00.000Z', perUserLimit: 4 })
    // the form's minute precision: the same minute is no change
    expect(editBody({ ...p, saleEnd: '2026-12-01T13:00:00.000Z' }, { ...p, saleEnd: '2026-12-01T13:00:42.123Z' }, 'live')).toEqual({})
    expect(editBody(b, p, 'ended')).toEqual({ name: 'Sneaker v2' })
    expect(editBody({ ...p }, p, 'upcoming')).toEqual({})
    const cleared = { ...p }
    delete cleared.imageUrl
    expect(editBody({ ...cleared, description: 'New text' }, p, 'live')).toEqual({ imageUrl: '', description: 'New text' })
  })
  it('refuses what an opened sale may not do', async () => {
    const { validateEdit } = await import('../src/lib/saleForm.js')
    expect(validateEdit({ saleEnd: '2026-12-01T12:30:00.000Z' }, p, 'live')).toMatch(/End sale/)
    expect(validateEdit({ saleEnd: '2026-12-01T12:30:00.000Z' }, p, 'upcoming')).toBe('')
    expect(validateEdit({ saleEnd: '2026-12-01T14:00:00.000Z' }, p, 'live')).toBe('')
    expect(validateEdit({ perUserLimit: 1 }, { ...p, maxPerOrder: 2 }, 'live')).toMatch(/limit per buyer/)
    expect(validateEdit({ perUserLimit: 0 }, { ...p, maxPerOrder: 2 }, 'live')).toBe('')
  })
  it('leaves an empty end out: open until sold out', async () => {
    const { saleBody, validateSale } = await import('../src/lib/saleForm.js')
    const b = saleBody({ name: 'x', price: '1.00', perUserLimit: 0, maxPerOrder: 1, saleStart: '2026-12-01T10:00', saleEnd: '', stock: 5, shards: 1 }, 'USD')
    expect('saleEnd' in b).toBe(false)
    expect(validateSale(b)).toBe('')
    const e = saleBody({ name: 'x', price: '1.00', perUserLimit: 0, maxPerOrder: 1, saleStart: '2026-12-01T10:00', saleEnd: '' }, 'USD', true)
    expect(e.saleEnd).toBe(null)
    expect(validateSale(e)).toBe('')
    const { editBody, validateEdit } = await import('../src/lib/saleForm.js')
    const live = { name: 'x', saleStart: '2026-12-01T10:00:00Z', saleEnd: '2026-12-01T11:00:00Z', perUserLimit: 0, maxPerOrder: 1 }
    expect(editBody(e, live, 'live')).toEqual({ saleEnd: null })
    expect(validateEdit({ saleEnd: null }, live, 'live')).toBe('')
    expect(editBody(e, { ...live, saleEnd: null }, 'live')).toEqual({})
  })
})
