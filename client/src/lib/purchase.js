// A purchase intent owns one requestId (docs/spec.md §3: scoped per user, 1–64 chars of
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

/** Bounds of the automatic retry wait, in ms. */
export const RETRY_MIN_MS = 1000
export const RETRY_MAX_MS = 30_000

/**
 * retryDelayMs is how long to wait before automatic retry number tries
 * (0-based) after err: the server's Retry-After when it gave one, else an
 * exponential backoff from 1 s with up to 25 % jitter; within
 * [RETRY_MIN_MS, RETRY_MAX_MS].
 */
export function retryDelayMs(err, tries, random = Math.random) {
  let ms = err?.retryAfter > 0 ? err.retryAfter * 1000 : Math.min(8000, 1000 * 2 ** tries) * (1 + random() / 4)
  ms = Math.round(ms)
  return Math.min(RETRY_MAX_MS, Math.max(RETRY_MIN_MS, ms))
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
   * @param {number} [opts.autoRetries] automatic retries of RETRY outcomes (429, 503, timeouts, …), each after
   *   retryDelayMs (Retry-After when given); every one sends the same requestId
   * @param {(ms: number) => Promise<void>} [opts.sleep]
   * @param {(w: {until: number, ms: number, retry: number, error: any, requestId: string} | null) => void} [opts.onWait]
   *   told when an automatic retry is scheduled (until: Date.now() ms of the retry) and with null when it is sent
   * @param {() => number} [opts.now]
   */
  constructor({ send, newId = newRequestId, storage = null, scope = '', autoRetries = 5, sleep, onWait, now } = {}) {
    this.send = send
    this.newId = newId
    this.storage = storage
    this.key = STORAGE_PREFIX + scope
    this.autoRetries = autoRetries
    this.sleep = sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms)))
    this.onWait = onWait ?? (() => {})
    this.now = now ?? Date.now
    this.stopped = false
    /** @type {(() => void) | null} ends the current wait early */
    this.wake = null
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

  /**
   * stop ends a scheduled automatic retry (the page was left, or the buyer
   * gave up): the attempt returns RETRY at once and keeps its requestId.
   */
  stop() {
    this.stopped = true
    this.wake?.()
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
    this.stopped = false
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
        if (outcome === Outcome.RETRY && tries < this.autoRetries && !this.stopped) {
          const ms = retryDelayMs(err, tries)
          this.onWait({ until: this.now() + ms, ms, retry: tries + 1, error: err, requestId: intent.requestId })
          await this.#wait(ms)
          this.onWait(null)
          if (!this.stopped) continue
        }
        return { outcome, error: err, requestId: intent.requestId, stopped: this.stopped }
      }
    }
  }

  /** #wait sleeps ms, or less if stop is called meanwhile. */
  #wait(ms) {
    return new Promise((resolve) => {
      this.wake = resolve
      this.sleep(ms).then(resolve, resolve)
    }).finally(() => {
      this.wake = null
    })
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
