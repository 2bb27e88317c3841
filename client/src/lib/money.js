// Prices in the shop's currency. Amounts are integer minor units (docs/spec.md §3) of
// the ISO 4217 currency GET /api/config names (shop.js); Intl.NumberFormat
// knows how many minor digits a currency has (2 for USD and EUR, 0 for JPY,
// 3 for KWD), so the same cents render right in every currency.

const formatters = new Map()

function formatter(currency, locale) {
  const key = `${locale ?? ''}|${currency}`
  let f = formatters.get(key)
  if (!f) {
    try {
      f = new Intl.NumberFormat(locale, { style: 'currency', currency })
    } catch {
      f = new Intl.NumberFormat(locale, { style: 'currency', currency: 'USD' })
    }
    formatters.set(key, f)
  }
  return f
}

/** minorDigits is the number of minor-unit digits of currency (2 for USD). */
export function minorDigits(currency) {
  return formatter(currency).resolvedOptions().maximumFractionDigits
}

/**
 * formatMoney renders integer minor units of currency, e.g. 1999 USD → "$19.99".
 * @param {number} minor
 * @param {string} [currency] ISO 4217 code
 * @param {string} [locale] BCP 47 tag; default the browser's
 */
export function formatMoney(minor, currency = 'USD', locale = undefined) {
  if (!Number.isFinite(minor)) return ''
  const f = formatter(currency, locale)
  return f.format(minor / 10 ** f.resolvedOptions().maximumFractionDigits)
}

/**
 * parseMoney turns what an admin typed ("19.99", "19,99", "1 999") into
 * integer minor units of currency, or NaN if it is not an amount with at most
 * the currency's minor digits.
 */
export function parseMoney(text, currency = 'USD') {
  const digits = minorDigits(currency)
  const t = String(text ?? '').trim().replace(/[\s\u00a0']/g, '')
  const m = /^(\d+)(?:[.,](\d*))?$/.exec(t)
  if (!m || (m[2] ?? '').length > digits) return Number.NaN
  const minor = Number(m[1]) * 10 ** digits + Number((m[2] ?? '').padEnd(digits, '0') || 0)
  return Number.isSafeInteger(minor) ? minor : Number.NaN
}

/** toMajorText renders minor units as the plain number an input shows ("19.99"). */
export function toMajorText(minor, currency = 'USD') {
  const digits = minorDigits(currency)
  return digits === 0 ? String(minor) : (minor / 10 ** digits).toFixed(digits)
}
