// useNow is a clock ref ticking every second, shared by all countdowns.
import { onScopeDispose, ref } from 'vue'

const now = ref(Date.now())
let users = 0
let timer = null

export function useNow() {
  if (users++ === 0) timer = setInterval(() => (now.value = Date.now()), 250)
  now.value = Date.now()
  onScopeDispose(() => {
    if (--users === 0) {
      clearInterval(timer)
      timer = null
    }
  })
  return now
}
