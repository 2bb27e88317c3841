// The ALTCHA widget (npm altcha, its "external" build: no inline styles or
// inline workers, so it runs under the client's Content-Security-Policy of
// script-src 'self' / style-src 'self'), loaded only by a page that needs a
// proof-of-work (a room with powCost > 0, issue 28). Its SHA-256 solver
// runs in the widget's own worker script, bundled as a file of this origin.
import 'altcha/external'
import 'altcha/altcha.css'
import ShaWorker from 'altcha/workers/sha?worker'

for (const alg of ['SHA-256', 'SHA-384', 'SHA-512']) globalThis.$altcha.algorithms.set(alg, () => new ShaWorker())

/**
 * authedFetch is the widget's fetch for GET /api/products/{id}/queue/challenge,
 * which needs the buyer's bearer token (the challenge is bound to the user).
 * @param {() => string} token
 */
export function authedFetch(token) {
  return (url, init = {}) => {
    const headers = new Headers(init.headers || {})
    const t = token()
    if (t) headers.set('Authorization', `Bearer ${t}`)
    return globalThis.fetch(url, { ...init, headers })
  }
}
