import { readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { sha, solveChallenge } from 'altcha/lib'

// A challenge the gateway issued (gateway/testdata/altcha_vector.json, made
// and checked by gateway/pow_test.go), solved with the ALTCHA widget's own
// solver the way the widget runs it for a v1 challenge: the widget and the
// gateway must agree on the number and on the payload the gateway verifies.
const here = dirname(fileURLToPath(import.meta.url))
const v = JSON.parse(readFileSync(join(here, '../../gateway/testdata/altcha_vector.json'), 'utf8'))

// fromV1 is the widget's createChallengeFromV1 (altcha/dist/main/altcha.js).
function fromV1(c) {
  const data = Object.fromEntries(new URLSearchParams(c.salt.split('?')[1] || '').entries())
  return {
    parameters: {
      algorithm: c.algorithm,
      cost: 1,
      data,
      expiresAt: data.expires ? parseInt(data.expires, 10) : undefined,
      keyLength: 32,
      nonce: Buffer.from(new TextEncoder().encode(c.salt)).toString('hex'),
      keyPrefix: c.challenge,
      salt: '',
    },
    signature: c.signature,
  }
}

describe('ALTCHA challenge of the gateway, solved by the widget solver', () => {
  it('finds the number the gateway hid', async () => {
    const sol = await solveChallenge({ challenge: fromV1(v.challenge), counterMode: 'string', deriveKey: sha.deriveKey, timeout: 60_000 })
    expect(sol).not.toBeNull()
    expect(sol.counter).toBe(v.number)
    expect(sol.derivedKey).toBe(v.challenge.challenge)
  })

  it('builds the payload the gateway verifies', () => {
    // The widget's createPayloadV1, base64 of JSON.
    const payload = { algorithm: 'SHA-256', challenge: v.challenge.challenge, number: v.number, salt: v.challenge.salt, signature: v.challenge.signature, took: 1 }
    const want = JSON.parse(Buffer.from(v.payload, 'base64').toString('utf8'))
    expect(payload).toEqual(want)
  })
})
