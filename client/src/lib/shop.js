// The shop's configuration from GET /api/config: the push WebSocket URL and
// the currency of every price. Loaded once; pages read it reactively, so
// prices re-render in the right currency when the answer arrives.
import { reactive } from 'vue'
import { api } from './api.js'
import { formatMoney } from './money.js'

export const shop = reactive({ currency: 'USD', pushUrl: '', loaded: false })

let loading = null

/** loadConfig fetches /api/config once (again after a failure). */
export function loadConfig() {
  if (!loading) {
    loading = api.config().then(
      (cfg) => {
        if (typeof cfg?.currency === 'string' && /^[A-Z]{3}$/.test(cfg.currency)) shop.currency = cfg.currency
        if (typeof cfg?.pushUrl === 'string') shop.pushUrl = cfg.pushUrl
        shop.loaded = true
        return shop
      },
      (err) => {
        loading = null
        throw err
      },
    )
  }
  return loading
}

/** money formats integer minor units in the shop's currency. */
export function money(minor) {
  return formatMoney(minor, shop.currency)
}
