import { describe, expect, it } from 'vitest'
import { ApiError, MESSAGES, friendlyMessage } from '../src/lib/errors.js'

// Every code of docs/spec.md §3 and of the gateway's error table.
const CODES = [
  'INVALID_ARGUMENT', 'UNAUTHENTICATED', 'FORBIDDEN', 'NOT_FOUND', 'PRODUCT_NOT_FOUND', 'METHOD_NOT_ALLOWED',
  'SALE_NOT_ACTIVE', 'SOLD_OUT', 'INSUFFICIENT_STOCK', 'PURCHASE_LIMIT_EXCEEDED', 'IDEMPOTENCY_KEY_REUSED',
  'INVALID_STATE', 'AMOUNT_MISMATCH', 'BAD_SIGNATURE', 'RATE_LIMITED', 'UNAVAILABLE', 'INTERNAL',
  // the operator API (issue 14)
  'SALE_PAUSED', 'SALE_STARTED', 'SALE_ENDED', 'ALREADY_REFUNDED', 'NOT_REFUNDABLE', 'PAYMENT_NO_REUSED', 'CONFLICT', 'PAYLOAD_TOO_LARGE',
  // wrong wiring (issue 27)
  'STOCK_CONFLICT',
]

describe('friendlyMessage', () => {
  it('has a message for every API error code', () => {
    for (const c of CODES) {
      expect(MESSAGES[c], c).toBeTruthy()
      expect(friendlyMessage(new ApiError(c))).toBe(MESSAGES[c])
    }
  })

  it('mentions Retry-After and the invalid field', () => {
    expect(friendlyMessage(new ApiError('RATE_LIMITED', '', 429, 3))).toContain('in 3 s')
    expect(friendlyMessage(new ApiError('INVALID_ARGUMENT', 'quantity: must be 1..2', 400))).toContain('quantity')
    const many = new ApiError('INVALID_ARGUMENT', 'invalid', 400, 0, [{ field: 'name', message: 'required' }, { field: 'price', message: 'must be ≥ 0' }])
    expect(friendlyMessage(many)).toContain('name: required; price: must be ≥ 0')
  })

  it('falls back on the HTTP status for unknown codes', () => {
    expect(friendlyMessage(new ApiError('SOMETHING_NEW', '', 403))).toBe(MESSAGES.FORBIDDEN)
    expect(friendlyMessage(new Error('boom'))).toBe(MESSAGES.INTERNAL)
  })

  it('knows which errors are worth retrying', () => {
    expect(new ApiError('TIMEOUT').retryable).toBe(true)
    expect(new ApiError('UNAVAILABLE', '', 503).retryable).toBe(true)
    expect(new ApiError('SOLD_OUT', '', 409).retryable).toBe(false)
  })
})
