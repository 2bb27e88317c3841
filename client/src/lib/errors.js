// Friendly messages for every API error code of docs/spec.md §3 (plus the client's own
// NETWORK and TIMEOUT), and the ApiError every API call throws.

/** @type {Record<string, string>} */
export const MESSAGES = {
  INVALID_ARGUMENT: 'Something in the request was not valid.',
  UNAUTHENTICATED: 'Your session has ended. Please sign in again.',
  FORBIDDEN: 'This needs an administrator account.',
  NOT_FOUND: 'We could not find that order.',
  PRODUCT_NOT_FOUND: 'This product does not exist (any more).',
  METHOD_NOT_ALLOWED: 'That action is not supported.',
  SALE_NOT_ACTIVE: 'The sale is not open right now. Watch the countdown and try again when it starts.',
  SALE_PAUSED: 'The sale is paused for a moment. Nothing was ordered; try again when it resumes.',
  SALE_STARTED:
    'This sale has already opened, so only its name, picture, description, limit per buyer and a later end can change now. Nothing was changed.',
  SALE_ENDED:
    'This sale has ended, and an ended sale is final: its start and end can no longer change (its name, picture and description still can). Nothing was changed.',
  ALREADY_REFUNDED: 'This payment was already refunded (under another refund number). Nothing was changed.',
  NOT_REFUNDABLE: 'This payment paid its order, so it is not waiting for a refund.',
  PAYMENT_NO_REUSED: 'That payment number already paid another order.',
  CONFLICT: 'That refund number already refunded another payment. Click again for a new one.',
  PAYLOAD_TOO_LARGE: 'That is too much text for one request. Shorten the description.',
  STOCK_CONFLICT:
    'Redis still holds the stock of an earlier product with this id (another database, or a restored backup). Nothing was created; an operator must look at it (docs/production.md: Deployment identity).',
  SOLD_OUT: 'Sold out: every unit has been claimed.',
  INSUFFICIENT_STOCK: 'Not enough units left for that quantity. Try fewer.',
  PURCHASE_LIMIT_EXCEEDED: 'You have reached the purchase limit for this product.',
  IDEMPOTENCY_KEY_REUSED: 'This purchase was already sent with different details. Start a new purchase.',
  INVALID_STATE: 'The order cannot do that in its current state. The page shows its latest state.',
  AMOUNT_MISMATCH: 'The payment amount did not match the order. Nothing was charged.',
  BAD_SIGNATURE: 'The payment could not be verified.',
  RATE_LIMITED: 'Lots of buyers right now. Hold on, we will try again.',
  UNAVAILABLE: 'The shop is briefly unavailable. Hold on, we will try again.',
  NOT_ADMITTED: 'This sale has a waiting room: join the line, and buy once it is your turn.',
  WAITING_ROOM_OFF: 'This product has no waiting room: you can buy directly.',
  PRE_QUEUE_NOT_OPEN: 'The line does not take places yet. Watch the countdown: joining any time before the opening gives the same chance.',
  DRAW_CLOSED: 'The draw has closed: it takes no more entries.',
  POW_REQUIRED: 'This drop asks your browser to solve a small puzzle first (it keeps bots out). Tick the box to start it.',
  POW_INVALID: 'The puzzle answer was not accepted (it expired or belongs to another account). Solve a new one.',
  POW_REUSED: 'That puzzle answer was already used. Solve a new one.',
  ROOM_STARTED: 'The line already has tickets, so its mode, pre-queue and reserve list can no longer change.',
  SHUFFLE_NOT_PUBLISHED: 'The shuffle is not published yet. Try again in a moment.',
  INTERNAL: 'Something went wrong on our side. Please try again.',
  NETWORK: 'No connection to the shop. Check your network; we will try again.',
  TIMEOUT: 'The shop did not answer in time. Your purchase is kept; trying again is safe.',
}

// Codes after which sending the same request again may succeed.
const RETRYABLE = new Set(['RATE_LIMITED', 'UNAVAILABLE', 'INTERNAL', 'NETWORK', 'TIMEOUT'])

export class ApiError extends Error {
  /**
   * @param {string} code API error code
   * @param {string} [message] server's human text
   * @param {number} [status] HTTP status (0 without an answer)
   * @param {number} [retryAfter] seconds, from Retry-After
   * @param {{field: string, message: string}[]} [details] per-field problems (400 INVALID_ARGUMENT)
   */
  constructor(code, message = '', status = 0, retryAfter = 0, details = []) {
    super(message || code)
    this.name = 'ApiError'
    this.code = code
    this.status = status
    this.retryAfter = retryAfter
    this.serverMessage = message
    this.details = Array.isArray(details) ? details : []
  }

  get retryable() {
    return RETRYABLE.has(this.code) || this.status >= 500
  }
}

/** A code for an HTTP status without an error body. */
export function codeForStatus(status) {
  if (status === 400) return 'INVALID_ARGUMENT'
  if (status === 401) return 'UNAUTHENTICATED'
  if (status === 403) return 'FORBIDDEN'
  if (status === 404) return 'NOT_FOUND'
  if (status === 405) return 'METHOD_NOT_ALLOWED'
  if (status === 429) return 'RATE_LIMITED'
  if (status === 503) return 'UNAVAILABLE'
  return 'INTERNAL'
}

/**
 * friendlyMessage returns what to show a buyer for an error.
 * @param {unknown} err
 */
export function friendlyMessage(err) {
  if (!(err instanceof ApiError)) return MESSAGES.INTERNAL
  let text = MESSAGES[err.code] ?? MESSAGES[codeForStatus(err.status)] ?? MESSAGES.INTERNAL
  if (err.code === 'INVALID_ARGUMENT' && err.details?.length) {
    text = `${text} (${err.details.map((d) => `${d.field}: ${d.message}`).join('; ')})`
  } else if (err.code === 'INVALID_ARGUMENT' && err.serverMessage && err.serverMessage !== err.code) {
    text = `${text} (${err.serverMessage})`
  }
  if ((err.code === 'RATE_LIMITED' || err.code === 'UNAVAILABLE') && err.retryAfter > 0) {
    text = text.replace('we will try again', `we will try again in ${err.retryAfter} s`)
  }
  return text
}
