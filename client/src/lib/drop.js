// A fair drop as the storefront and the console show it (issue 28): where
// the room stands (before the pre-queue, pre-queue, shuffling, open), what a
// draw's rank means (won, reserve list, not drawn), the buyer's check of the
// served place against the one recomputed from the public record
// (shuffle.js), the commitment the buyer noted before the opening, and the
// console's counters. Plain functions of the API's answers:
//   drop   GET /api/products/{id}/drop
//   place  POST /api/products/{id}/queue (LinePlace, waitingRoom.js)
//   status GET /api/admin/products/{id}/waiting-room

/** Phase of a room for the page: what the buyer can do now. */
export const Phase = Object.freeze({
  OFF: 'OFF', // no room (or turned off): buy directly
  NOT_YET: 'NOT_YET', // the pre-queue opens later (preQueueOpensAt in the future)
  PRE_QUEUE: 'PRE_QUEUE', // tickets without a position until the opening
  SHUFFLING: 'SHUFFLING', // the opening passed, the shuffle is being published
  OPEN: 'OPEN', // the shuffle is published (seed, list); the line moves
})

/**
 * dropPhase reads the public record at time now (ms): OFF, NOT_YET (the
 * pre-queue opens at drop.preQueueOpensAt), PRE_QUEUE, SHUFFLING or OPEN.
 * A record without a state (an older gateway) counts as OPEN.
 */
export function dropPhase(drop, now = Date.now()) {
  if (!drop || drop.state === 'OFF') return Phase.OFF
  if (drop.state === 'PRE_QUEUE') {
    const at = Date.parse(drop.preQueueOpensAt ?? '')
    return Number.isFinite(at) && at > now ? Phase.NOT_YET : Phase.PRE_QUEUE
  }
  if (drop.state === 'SHUFFLING') return Phase.SHUFFLING
  return Phase.OPEN
}

/** Outcome of a draw's rank. */
export const Drawn = Object.freeze({ WON: 'WON', RESERVE: 'RESERVE', LOST: 'LOST' })

/**
 * drawOutcome classifies a draw entry's place in the shuffle (1 = first):
 * positions 1…winners win, the next `reserve` are the reserve list (rank =
 * place on it, 1 = next to get a win passed on), the rest are not drawn.
 * @returns {{outcome: string, rank: number}}
 */
export function drawOutcome(position, winners, reserve) {
  const w = Math.max(0, Number(winners) || 0)
  const r = Math.max(0, Number(reserve) || 0)
  if (position >= 1 && position <= w) return { outcome: Drawn.WON, rank: position }
  if (position > w && position <= w + r) return { outcome: Drawn.RESERVE, rank: position - w }
  return { outcome: Drawn.LOST, rank: 0 }
}

const NOTE = (productId) => `stampede.commitment.${productId}`

/** noteCommitment keeps the commitment the buyer saw before the opening (first one wins). */
export function noteCommitment(storage, productId, commitment) {
  if (!storage || !commitment) return
  if (!storage.getItem(NOTE(productId))) storage.setItem(NOTE(productId), commitment)
}

/** notedCommitment is what noteCommitment kept for productId, or ''. */
export function notedCommitment(storage, productId) {
  return storage?.getItem(NOTE(productId)) ?? ''
}

/** verifyLink is the route of the verify page for a buyer's place. */
export function verifyLink(productId, place) {
  const q = new URLSearchParams({ ticket: place.ticket })
  if (place.shufflePosition) q.set('position', String(place.shufflePosition))
  if (place.state) q.set('state', place.state)
  return `/products/${productId}/verify?${q}`
}

/**
 * roomCounts reads the console's counters from GET
 * /api/admin/products/{id}/waiting-room: entries (pre-queued tickets, a
 * draw's entries), issued (places given in all), winners (a draw's, null
 * before the close), claims (admissions used by an order: the sharded
 * products' claim counter, else admitted − expired − live), passOns
 * (admissions not used in time and passed to the next), live, waiting.
 */
export function roomCounts(s) {
  const admitted = s?.admitted ?? 0
  const expired = s?.expired ?? 0
  const live = s?.live ?? 0
  const claims = s?.claimed > 0 ? s.claimed : Math.max(0, admitted - expired - live)
  return {
    entries: s?.drop?.preQueued ?? 0,
    issued: s?.issued ?? 0,
    winners: s?.drop?.winners ?? null,
    admitted,
    claims,
    passOns: expired,
    live,
    waiting: s?.waiting ?? 0,
  }
}

/**
 * powEstimate is the buyer's expected solving time in seconds for a
 * challenge of cost (maxnumber): cost/2 hashes at perSecond hashes/s
 * (default 20,000: the ALTCHA solver in headless Chromium on one worker,
 * docs/sale-lifecycle.md "A price on bots").
 */
export function powEstimate(cost, perSecond = 20_000) {
  return cost > 0 ? cost / 2 / perSecond : 0
}

/** shortHex shows the first and last 8 digits of a long hex string. */
export const shortHex = (h) => (typeof h === 'string' && h.length > 20 ? `${h.slice(0, 8)}…${h.slice(-8)}` : (h ?? ''))
