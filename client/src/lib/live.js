// LiveClient keeps the buyer's WebSocket to push open: it reconnects with
// exponential backoff and jitter, re-subscribes the watched orders on every
// (re)connection (push then sends their current snapshots first), and polls
// GET /api/orders/{orderNo} for watched orders while the socket is down, once
// right after each reconnection, and slowly while it is up. Every update goes
// to onOrder; the OrderBook drops the ones whose version is not newer.

export const State = Object.freeze({
  IDLE: 'idle',
  CONNECTING: 'connecting',
  OPEN: 'open',
  RECONNECTING: 'reconnecting',
  UNAUTHENTICATED: 'unauthenticated',
  STOPPED: 'stopped',
})

const realTimers = {
  setTimeout: (f, ms) => globalThis.setTimeout(f, ms),
  clearTimeout: (id) => globalThis.clearTimeout(id),
  now: () => Date.now(),
}

/** defaultPushUrl is the fallback when GET /api/config does not answer. */
export function defaultPushUrl(loc = globalThis.location) {
  const scheme = loc?.protocol === 'https:' ? 'wss' : 'ws'
  return `${scheme}://${loc?.hostname || '127.0.0.1'}:8081/ws`
}

export class LiveClient {
  /**
   * @param {object} o
   * @param {() => Promise<string>} o.pushUrl resolves the WebSocket URL
   * @param {() => string} o.token bearer token
   * @param {(orderNo: string) => Promise<any>} o.fetchOrder GET /api/orders/{orderNo}
   * @param {(update: any) => void} o.onOrder
   * @param {(msg: any) => void} [o.onProduct]
   * @param {(msg: any) => void} [o.onQueue] waiting-room places ({"type":"queue"})
   * @param {(state: string, info: object) => void} [o.onState]
   * @param {(orderNo: string) => boolean} [o.shouldPoll] false for orders that cannot change any more
   * @param {typeof WebSocket} [o.WebSocketImpl]
   */
  constructor(o) {
    this.o = {
      onProduct: () => {},
      onQueue: () => {},
      onState: () => {},
      shouldPoll: () => true,
      WebSocketImpl: globalThis.WebSocket,
      timers: realTimers,
      random: Math.random,
      minBackoffMs: 250,
      maxBackoffMs: 10_000,
      pollMs: 2_000, // while the socket is down
      slowPollMs: 15_000, // while it is up: a safety net for lost events
      heartbeatMs: 20_000, // app-level ping; browsers cannot see WebSocket pings
      deadAfterMs: 45_000, // no message for this long: the socket is dead
      ...o,
    }
    this.state = State.IDLE
    this.ws = null
    this.url = ''
    this.watched = new Set()
    this.lines = new Set() // productIds whose waiting-room line is followed
    this.attempt = 0
    this.reconnects = 0
    this.connectedAt = 0
    this.lastMessageAt = 0
    this.pausedUntil = 0
    this.pollPausedUntil = 0
    this.timer = null // reconnect
    this.pollTimer = null
    this.beatTimer = null
    this.polling = false
  }

  #setState(s) {
    this.state = s
    this.o.onState(s, { reconnects: this.reconnects, connectedAt: this.connectedAt })
  }

  start() {
    if (this.state !== State.IDLE && this.state !== State.STOPPED && this.state !== State.UNAUTHENTICATED) return
    this.attempt = 0
    this.#connect()
  }

  stop() {
    this.#setState(State.STOPPED)
    this.#clearTimers()
    const ws = this.ws
    this.ws = null
    if (ws) {
      ws.onclose = ws.onmessage = ws.onopen = ws.onerror = null
      try {
        ws.close(1000, 'bye')
      } catch {
        /* already closed */
      }
    }
  }

  /** watch follows orderNo: subscribe now if open, and poll it while not. */
  watch(orderNo) {
    if (!orderNo || this.watched.has(orderNo)) return
    this.watched.add(orderNo)
    if (this.state === State.OPEN) this.#send({ type: 'subscribe', orderNo })
    this.#schedulePoll(0)
  }

  /** followLine follows the buyer's place in productId's waiting room, now and after every reconnection. */
  followLine(productId) {
    this.lines.add(productId)
    if (this.state === State.OPEN) this.#send({ type: 'queue', productId })
  }

  unwatch(orderNo) {
    this.watched.delete(orderNo)
  }

  /**
   * dropSocket closes the socket as a network failure would (test hook). For
   * pauseMs no reconnection happens and for pollPauseMs (default pauseMs) no
   * poll, so with pollPauseMs > pauseMs a change made meanwhile can only reach
   * the page through the snapshots push sends on reconnection.
   */
  dropSocket({ pauseMs = 0, pollPauseMs = pauseMs } = {}) {
    this.pausedUntil = this.o.timers.now() + pauseMs
    this.pollPausedUntil = this.o.timers.now() + pollPauseMs
    if (this.ws) {
      try {
        this.ws.close(4000, 'dropped by test hook')
      } catch {
        /* ignore */
      }
    }
  }

  #clearTimers() {
    const t = this.o.timers
    for (const k of ['timer', 'pollTimer', 'beatTimer']) {
      if (this[k] !== null) t.clearTimeout(this[k])
      this[k] = null
    }
  }

  async #connect() {
    this.#setState(this.attempt === 0 && this.reconnects === 0 ? State.CONNECTING : State.RECONNECTING)
    if (!this.url) {
      try {
        this.url = await this.o.pushUrl()
      } catch {
        this.url = defaultPushUrl()
      }
    }
    if (this.state === State.STOPPED) return
    const token = this.o.token()
    let ws
    try {
      ws = new this.o.WebSocketImpl(this.url, ['stampede', token])
    } catch {
      this.#scheduleReconnect()
      return
    }
    this.ws = ws
    ws.onopen = () => {
      if (this.ws !== ws) return
      if (this.attempt > 0 || this.connectedAt > 0) this.reconnects++
      this.attempt = 0
      this.connectedAt = this.o.timers.now()
      this.lastMessageAt = this.connectedAt
      this.#setState(State.OPEN)
      for (const orderNo of this.watched) this.#send({ type: 'subscribe', orderNo })
      for (const productId of this.lines) this.#send({ type: 'queue', productId })
      this.#schedulePoll(0) // one poll right away: covers orders push has no row for yet
      this.#scheduleBeat()
    }
    ws.onmessage = (ev) => {
      if (this.ws !== ws) return
      this.lastMessageAt = this.o.timers.now()
      let m
      try {
        m = JSON.parse(ev.data)
      } catch {
        return
      }
      if (m?.type === 'order') this.o.onOrder(m)
      else if (m?.type === 'product') this.o.onProduct(m)
      else if (m?.type === 'queue') this.o.onQueue(m)
    }
    ws.onerror = () => {}
    ws.onclose = (ev) => {
      if (this.ws !== ws) return
      this.ws = null
      if (this.beatTimer !== null) this.o.timers.clearTimeout(this.beatTimer)
      this.beatTimer = null
      if (ev?.code === 4401) {
        // 4401: the token is no good (push closes a socket at the token's
        // exp, or when its key was withdrawn). A fresh token since this
        // socket opened: reconnect with it at once; the same token: stop
        // until the session gets a new one.
        if (this.o.token() && this.o.token() !== token) {
          this.attempt = 0
          this.#connect()
          return
        }
        this.#setState(State.UNAUTHENTICATED)
        return
      }
      this.#setState(State.RECONNECTING)
      this.#scheduleReconnect()
      this.#schedulePoll(this.o.pollMs)
    }
  }

  #send(m) {
    try {
      if (this.ws?.readyState === 1) this.ws.send(JSON.stringify(m))
    } catch {
      /* the close handler reconnects */
    }
  }

  /** backoffMs is the wait before reconnection attempt n (0-based), with jitter. */
  backoffMs(n) {
    const base = Math.min(this.o.maxBackoffMs, this.o.minBackoffMs * 2 ** n)
    return Math.round(base / 2 + (this.o.random() * base) / 2)
  }

  #scheduleReconnect() {
    if (this.state === State.STOPPED) return
    const t = this.o.timers
    const wait = Math.max(this.backoffMs(this.attempt), this.pausedUntil - t.now())
    this.attempt++
    if (this.timer !== null) t.clearTimeout(this.timer)
    this.timer = t.setTimeout(() => {
      this.timer = null
      this.#connect()
    }, wait)
  }

  #scheduleBeat() {
    const t = this.o.timers
    this.beatTimer = t.setTimeout(() => {
      this.beatTimer = null
      if (this.state !== State.OPEN || !this.ws) return
      if (t.now() - this.lastMessageAt > this.o.deadAfterMs) {
        this.dropSocket() // half-open connection: reconnect
        return
      }
      this.#send({ type: 'ping' })
      this.#scheduleBeat()
    }, this.o.heartbeatMs)
  }

  #schedulePoll(ms) {
    if (this.state === State.STOPPED || this.state === State.UNAUTHENTICATED) return
    const t = this.o.timers
    if (this.pollTimer !== null) t.clearTimeout(this.pollTimer)
    this.pollTimer = t.setTimeout(() => {
      this.pollTimer = null
      this.#poll()
    }, ms)
  }

  async #poll() {
    const t = this.o.timers
    const paused = t.now() < this.pollPausedUntil
    if (!paused && !this.polling) {
      this.polling = true
      try {
        const nos = [...this.watched].filter((no) => this.o.shouldPoll(no))
        await Promise.all(
          nos.map((no) =>
            this.o.fetchOrder(no).then(
              (order) => order && this.o.onOrder(order),
              () => {}, // 404 while not yet written, or offline: try again next round
            ),
          ),
        )
      } finally {
        this.polling = false
      }
    }
    if (this.watched.size === 0) return
    const next = paused ? Math.max(50, this.pollPausedUntil - t.now()) : this.state === State.OPEN ? this.o.slowPollMs : this.o.pollMs
    this.#schedulePoll(next)
  }
}
