// A purchase intent owns one requestId (SPEC §3: scoped per user, 1–64 chars of
// [A-Za-z0-9._:-]). Every attempt to place the same purchase — the first click,
// a retry after a timeout, a 503 or a lost connection, even after a page
// reload — sends the same requestId, so the gateway turns them into at most one
// order. A new requestId is made only when the buyer starts a new purchase: a
// different product or quantity, after the previous one was accepted, or when
// the server says the id was used for something else (422).
//
// While one attempt is in flight, further submits return that same attempt:
// the Buy button cannot create two requests.

const STORAGE_PREFIX = 'stampede.purchase.'

/** newRequestId returns a fresh requestId. */
export function newRequestId() {
  const c = globalThis.crypto
  if (c?.randomUUID) return c.randomUUID()
  const b = new Uint8Array(16)
  c.getRandomValues(b)
  return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('')
}

/** Outcome of an attempt. */
export const Outcome = Object.freeze({
  ACCEPTED: 'accepted', // 202 or 200: the order exists (orderNo set)
  RETRY: 'retry', // may succeed if sent again: the intent keeps its requestId
  REJECTED: 'rejected', // the server said no (sold out, limit, …); sending it again is safe but pointless
})

/**
 * classify maps an error from send to RETRY or REJECTED.
 * @param {any} err an ApiError (code, status, retryable)
 */
export function classify(err) {
  if (err?.retryable) return Outcome.RETRY
  return Outcome.REJECTED
}

/**
 * PurchaseFlow keeps the buyer's current intent for one product page.
 *
 *   const flow = new PurchaseFlow({ send: api.createOrder })
 *   const r = await flow.submit(productId, quantity)
 *   // r.outcome, r.orderNo, r.error, r.requestId
 */
export class PurchaseFlow {
  /**
   * @param {object} opts
   * @param {(body: {productId: number, quantity: number, requestId: string}) => Promise<any>} opts.send
   * @param {() => string} [opts.newId]
   * @param {Storage|null} [opts.storage] keeps the intent across reloads (sessionStorage)
   * @param {string} [opts.scope] storage key part, e.g. the userId
   * @param {number} [opts.autoRetries] retries of RETRY outcomes honouring Retry-After
   * @param {(ms: number) => Promise<void>} [opts.sleep]
   */
  constructor({ send, newId = newRequestId, storage = null, scope = '', autoRetries = 2, sleep } = {}) {
    this.send = send
    this.newId = newId
    this.storage = storage
    this.key = STORAGE_PREFIX + scope
    this.autoRetries = autoRetries
    this.sleep = sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms)))
    /** @type {{productId: number, quantity: number, requestId: string, done: boolean} | null} */
    this.intent = this.#restore()
    /** @type {Promise<any> | null} */
    this.inFlight = null
  }

  /** busy is true while an attempt is in flight. */
  get busy() {
    return this.inFlight !== null
  }

  /** requestId of the current intent, or '' before the first submit. */
  get requestId() {
    return this.intent?.requestId ?? ''
  }

  /** startNew forgets the current intent: the next submit is a new purchase. */
  startNew() {
    if (this.busy) return false
    this.intent = null
    this.#save()
    return true
  }

  /** intentFor returns the intent to send for this payload, making a new one if needed. */
  #intentFor(productId, quantity) {
    const i = this.intent
    if (i && !i.done && i.productId === productId && i.quantity === quantity) return i
    this.intent = { productId, quantity, requestId: this.newId(), done: false }
    this.#save()
    return this.intent
  }

  /**
   * submit places the purchase, or joins the attempt already in flight.
   * @returns {Promise<{outcome: string, orderNo?: string, status?: string, requestId: string, error?: any, replay?: boolean}>}
   */
  submit(productId, quantity) {
    if (this.inFlight) return this.inFlight
    const intent = this.#intentFor(productId, quantity)
    this.inFlight = this.#attempt(intent).finally(() => {
      this.inFlight = null
    })
    return this.inFlight
  }

  async #attempt(intent) {
    const body = { productId: intent.productId, quantity: intent.quantity, requestId: intent.requestId }
    for (let tries = 0; ; tries++) {
      try {
        const res = await this.send(body)
        intent.done = true // the next Buy is a new purchase
        this.#save()
        return { outcome: Outcome.ACCEPTED, orderNo: res?.orderNo, status: res?.status, requestId: intent.requestId }
      } catch (err) {
        if (err?.code === 'IDEMPOTENCY_KEY_REUSED') {
          // The id belongs to another payload: this purchase needs its own.
          this.intent = null
          this.#save()
          return { outcome: Outcome.REJECTED, error: err, requestId: intent.requestId }
        }
        const outcome = classify(err)
        if (outcome === Outcome.RETRY && tries < this.autoRetries && err?.retryAfter > 0) {
          await this.sleep(Math.min(err.retryAfter, 5) * 1000)
          continue
        }
        return { outcome, error: err, requestId: intent.requestId }
      }
    }
  }

  #restore() {
    try {
      const v = JSON.parse(this.storage?.getItem(this.key) ?? 'null')
      if (v && typeof v.requestId === 'string' && v.requestId) return v
    } catch {
      /* ignore */
    }
    return null
  }

  #save() {
    try {
      if (this.intent) this.storage?.setItem(this.key, JSON.stringify(this.intent))
      else this.storage?.removeItem(this.key)
    } catch {
      /* storage full or disabled: the intent still lives in memory */
    }
  }
}
