// The verifiable shuffle of a drop (issue 28), computed in the browser: the
// same rule as the server's Go package drop ("stampede-shuffle-v1"), checked
// against the same vectors (drop/testdata/vectors.json, tests/shuffle.test.js).
//
//   commitment  hex(SHA-256(seed))                      published before the pre-queue opens
//   list        the pre-queued ticket ids sorted ascending, each followed by "\n"
//   listHash    SHA-256(list)
//   key(t)      SHA-256(seed ‖ listHash ‖ t)            t: the 16 ASCII hex digits of the ticket id
//   order       tickets by key ascending (bytewise; equal keys by ticket id); position = 1 + index
//   random key  SHA-256(seed ‖ t)                        (rooms in random mode admit the lowest first)
//
// verifyPosition is what a "verify" link runs: from the room's public data
// (GET /api/products/{id}/drop and …/drop/tickets) and the buyer's own ticket
// id it recomputes the buyer's position, learning nothing about who the other
// tickets belong to.

import { sha256 } from '@noble/hashes/sha2.js'

export const RULE = 'stampede-shuffle-v1'
const TICKET = /^[0-9a-f]{16}$/
const enc = new TextEncoder()

/** hexToBytes reads an even number of hex digits; throws on anything else. */
export function hexToBytes(hex) {
  if (typeof hex !== 'string' || hex.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(hex)) throw new Error('not hex')
  const out = new Uint8Array(hex.length / 2)
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16)
  return out
}

/** bytesToHex writes lower-case hex. */
export function bytesToHex(b) {
  let s = ''
  for (const x of b) s += x.toString(16).padStart(2, '0')
  return s
}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0))
  let o = 0
  for (const p of parts) {
    out.set(p, o)
    o += p.length
  }
  return out
}

function compareBytes(a, b) {
  for (let i = 0; i < a.length && i < b.length; i++) if (a[i] !== b[i]) return a[i] - b[i]
  return a.length - b.length
}

/** commitment is hex(SHA-256(seed)) of a 64-hex-digit seed. */
export function commitment(seedHex) {
  return bytesToHex(sha256(hexToBytes(seedHex)))
}

/** seedMatches reports whether a published seed hashes to the published commitment. */
export function seedMatches(seedHex, commitmentHex) {
  try {
    return seedHex.length === 64 && commitment(seedHex) === String(commitmentHex).toLowerCase()
  } catch {
    return false
  }
}

/** listText is the published list of tickets: sorted, each followed by "\n". */
export function listText(tickets) {
  return [...new Set(tickets)].sort().map((t) => t + '\n').join('')
}

/** parseList splits a published list and checks its form (sorted, unique ticket ids, newline-ended). */
export function parseList(text) {
  if (text === '') return []
  if (!text.endsWith('\n')) throw new Error('a list ends with a newline')
  const ids = text.slice(0, -1).split('\n')
  ids.forEach((t, i) => {
    if (!TICKET.test(t)) throw new Error(`list line ${i + 1} is not a ticket id`)
    if (i > 0 && ids[i - 1] >= t) throw new Error(`list line ${i + 1} is not above the line before`)
  })
  return ids
}

/** listHash is hex(SHA-256(list text)). */
export function listHash(text) {
  return bytesToHex(sha256(enc.encode(text)))
}

/** shuffleKey is SHA-256(seed ‖ listHash ‖ ticket) as bytes. */
export function shuffleKey(seedBytes, listHashBytes, ticket) {
  return sha256(concat(seedBytes, listHashBytes, enc.encode(ticket)))
}

/** randomKey is a random-mode room's admission key of a ticket, hex. */
export function randomKey(seedHex, ticket) {
  return bytesToHex(sha256(concat(hexToBytes(seedHex), enc.encode(ticket))))
}

/** shuffle returns the ticket ids in position order (index 0 = position 1). */
export function shuffle(seedHex, tickets) {
  const text = listText(tickets)
  const ids = parseList(text)
  const seed = hexToBytes(seedHex)
  const lh = sha256(enc.encode(text))
  const keyed = ids.map((id) => ({ id, key: shuffleKey(seed, lh, id) }))
  keyed.sort((a, b) => compareBytes(a.key, b.key) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
  return keyed.map((k) => k.id)
}

/**
 * verifyPosition checks a served shuffle from public data only.
 * drop: the answer of GET /api/products/{id}/drop after the shuffle
 * ({commitment, seed, listHash, rule}); text: GET …/drop/tickets; ticket: the
 * buyer's ticket id. Returns {ok, position, problems}: position is the ticket's
 * place in the shuffle (1 = first), 0 if the ticket is not in the list; ok is
 * false with the reasons in problems when the seed does not match the
 * commitment, the list does not match its hash, or the ticket is missing.
 */
export function verifyPosition(drop, text, ticket) {
  const problems = []
  if (drop.rule && drop.rule !== RULE) problems.push(`unknown rule ${drop.rule}`)
  if (!seedMatches(drop.seed || '', drop.commitment || '')) problems.push('the seed does not match the commitment published before the pre-queue')
  let ids = []
  try {
    ids = parseList(text)
  } catch (e) {
    problems.push(`the ticket list is malformed: ${e.message}`)
  }
  if (listHash(text) !== String(drop.listHash || '').toLowerCase()) problems.push('the ticket list does not match its published hash')
  let position = 0
  if (problems.length === 0 || ids.length) {
    try {
      const seed = hexToBytes(drop.seed)
      const lh = sha256(enc.encode(text))
      const mine = shuffleKey(seed, lh, ticket)
      let ahead = 0
      let found = false
      for (const t of ids) {
        if (t === ticket) {
          found = true
          continue
        }
        const c = compareBytes(shuffleKey(seed, lh, t), mine)
        if (c < 0 || (c === 0 && t < ticket)) ahead++
      }
      position = found ? ahead + 1 : 0
    } catch {
      position = 0
    }
  }
  if (!position) problems.push('this ticket is not in the published list')
  return { ok: problems.length === 0, position, problems }
}
