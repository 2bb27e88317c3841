// The signed-in buyer: bearer token and userId, kept in localStorage.
import { reactive } from 'vue'

const KEY = 'stampede.session'

/** jwtClaims decodes a JWT's payload without verifying it (display only). */
export function jwtClaims(token) {
  try {
    const part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/')
    const json = atob(part + '='.repeat((4 - (part.length % 4)) % 4))
    return JSON.parse(json)
  } catch {
    return null
  }
}

function storage() {
  try {
    return globalThis.localStorage ?? null
  } catch {
    return null
  }
}

function load() {
  try {
    const s = JSON.parse(storage()?.getItem(KEY) ?? 'null')
    if (s?.token && jwtClaims(s.token)?.exp * 1000 > Date.now()) return s
  } catch {
    /* ignore */
  }
  return { token: '', userId: 0 }
}

const initial = load()

export const session = reactive({
  token: initial.token,
  userId: initial.userId,
  /** true while the token says role admin */
  get admin() {
    return jwtClaims(this.token)?.role === 'admin'
  },
  get signedIn() {
    return Boolean(this.token)
  },
  /** set stores a new token. */
  set(token, userId) {
    this.token = token
    this.userId = userId
    storage()?.setItem(KEY, JSON.stringify({ token, userId }))
  },
  clear() {
    this.token = ''
    this.userId = 0
    storage()?.removeItem(KEY)
  },
  /** expired is called on a 401: the token is no good any more. */
  expired() {
    this.clear()
  },
})
