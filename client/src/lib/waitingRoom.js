// The waiting room of a product (issue 17): the buyer's place in line, merged
// from the answers of POST /api/products/{id}/queue and the push service's
// {"type":"queue"} messages. A place only moves forward: a push message older
// (lower seq) than one already applied is dropped, and a WAITING position
// never grows again unless the line was sold out and came back.

export const Place = Object.freeze({
  NONE: 'NONE', // no ticket yet
  WAITING: 'WAITING',
  ADMITTED: 'ADMITTED',
  SOLD_OUT: 'SOLD_OUT',
  // issue 28: the pre-queue, its shuffle, and a draw's outcomes
  PRE_QUEUE: 'PRE_QUEUE', // taken before the opening: no position yet (a draw: entered)
  SHUFFLING: 'SHUFFLING', // the opening passed, the shuffle is being published
  LOST: 'LOST', // a draw: not drawn
  EXPIRED: 'EXPIRED', // a draw: the win was not used in time and passed on
  ORDERED: 'ORDERED', // a draw: the win was used by an order
})

/** FINAL are the states after which nothing more comes for the ticket. */
export const FINAL = new Set([Place.LOST, Place.EXPIRED, Place.ORDERED])

export class LinePlace {
  constructor() {
    this.state = Place.NONE
    this.ticket = '' // the opaque ticket id (issue 28)
    this.mode = 'fifo' // fifo | random | draw
    this.position = 0
    this.shufflePosition = 0 // a pre-queued ticket's place in the published shuffle (0: none)
    this.opensAt = null // the opening (ISO)
    this.firstPosition = 0 // position when the buyer joined: the progress bar's 0 %
    this.etaSeconds = null
    this.admittedUntil = null
    this.seq = 0
    this.backInStock = false
    this.preQueued = false // seen before the opening: its shuffle place is worth asking for
  }

  /** fromApi applies an answer of POST /api/products/{id}/queue (authoritative). */
  fromApi(p) {
    if (!p) return
    if (p.ticket !== this.ticket) {
      this.firstPosition = p.position || 0
      this.seq = 0
      this.preQueued = false
    }
    this.ticket = p.ticket
    if (p.state === Place.PRE_QUEUE || p.state === Place.SHUFFLING) this.preQueued = true
    this.state = p.state
    this.position = p.position ?? 0
    this.mode = p.mode ?? this.mode
    this.shufflePosition = p.shufflePosition ?? 0
    this.opensAt = p.opensAt ?? this.opensAt
    this.etaSeconds = p.etaSeconds ?? null
    this.admittedUntil = p.admittedUntil ?? null
    if (!this.firstPosition) this.firstPosition = this.position
  }

  /**
   * needsApi says whether the API should be asked after a push message:
   * push carries neither the admission's deadline nor the place in the
   * published shuffle (shufflePosition), which the page shows once the
   * pre-queue's shuffle is out.
   */
  get needsApi() {
    if (this.state === Place.ADMITTED && !this.admittedUntil) return true
    return this.mode !== 'random' && !this.shufflePosition && this.preQueued && !FINAL.has(this.state) &&
      this.state !== Place.PRE_QUEUE && this.state !== Place.SHUFFLING
  }

  /** fromPush applies a push message; false if it was dropped as stale or foreign. */
  fromPush(m) {
    if (!m || m.type !== 'queue' || m.ticket !== this.ticket || !this.ticket) return false
    if (m.seq <= this.seq) return false
    if (this.state === Place.ADMITTED || FINAL.has(this.state)) return false // only the API says what follows an admission
    if (m.state === Place.WAITING && this.state === Place.WAITING && m.position > this.position) return false
    if (this.state === Place.PRE_QUEUE || this.state === Place.SHUFFLING) this.preQueued = true
    this.seq = m.seq
    this.backInStock = !!m.backInStock
    this.state = m.state
    this.position = m.position ?? 0
    this.etaSeconds = m.etaSeconds ?? null
    if (!this.firstPosition) this.firstPosition = this.position
    return true
  }

  /** progress is the share of the way from joining to the front, 0…1. */
  get progress() {
    if (this.state === Place.ADMITTED) return 1
    if (!this.firstPosition || this.position >= this.firstPosition) return 0
    return Math.min(1, Math.max(0, 1 - (this.position - 1) / this.firstPosition))
  }
}

/** etaText is a human estimate: "about 40 s", "about 3 min", or "" if unknown. */
export function etaText(s) {
  if (s === null || s === undefined || s < 0) return ''
  if (s < 60) return `about ${Math.max(1, Math.round(s))} s`
  if (s < 3600) return `about ${Math.round(s / 60)} min`
  return `about ${Math.round(s / 3600)} h`
}
