// The check behind a fair drop's "verify" link (issue 28), its own module so
// that only the verify page loads the SHA-256 code (shuffle.js).
import { Drawn, drawOutcome } from './drop.js'
import { verifyPosition } from './shuffle.js'

// Served states that agree with each outcome: a reserve entry that got a win
// passed on is ADMITTED (then ORDERED or EXPIRED) too.
const AGREES = {
  WON: new Set(['ADMITTED', 'ORDERED', 'EXPIRED', 'SOLD_OUT']),
  RESERVE: new Set(['WAITING', 'ADMITTED', 'ORDERED', 'EXPIRED', 'SOLD_OUT']),
  LOST: new Set(['LOST']),
}

/**
 * checkPlace is what the "verify" link shows: it recomputes the buyer's place
 * from the public record (drop, the list text of …/drop/tickets) and the
 * buyer's own ticket, and compares it with what the shop served (place:
 * {ticket, state, shufflePosition}). noted is the commitment the buyer saw
 * before the opening ('' if none was noted).
 * @returns {{ok: boolean, position: number, served: number, outcome: object|null, problems: string[]}}
 *   ok: every check passed; position: recomputed (0 = the ticket is not in
 *   the list); served: the served shufflePosition (0 if the shop gave none);
 *   outcome: a draw's drawOutcome of the recomputed position (null otherwise).
 */
export function checkPlace(drop, text, place, noted = '') {
  const v = verifyPosition(drop, text, place.ticket)
  const problems = [...v.problems]
  if (noted && String(noted).toLowerCase() !== String(drop.commitment ?? '').toLowerCase())
    problems.unshift('the commitment published now is not the one you noted before the opening')
  const served = Number(place.shufflePosition) || 0
  if (v.position && served && served !== v.position) problems.push(`the shop served place ${served}, the shuffle gives ${v.position}`)
  let outcome = null
  if (drop.mode === 'draw' && v.position) {
    outcome = drawOutcome(v.position, drop.winners, drop.reserve)
    if (place.state && !AGREES[outcome.outcome].has(place.state))
      problems.push(`the shop says ${place.state}, the shuffle says ${outcome.outcome === Drawn.WON ? 'won' : outcome.outcome === Drawn.RESERVE ? 'reserve list' : 'not drawn'}`)
  }
  return { ok: problems.length === 0, position: v.position, served, outcome, problems }
}
