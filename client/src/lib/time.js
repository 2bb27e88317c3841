// Countdown helpers.

/**
 * remaining splits ms into days, hours, minutes, seconds (never negative).
 * @param {number} ms
 */
export function remaining(ms) {
  const s = Math.max(0, Math.floor(ms / 1000))
  return { days: Math.floor(s / 86400), hours: Math.floor((s % 86400) / 3600), minutes: Math.floor((s % 3600) / 60), seconds: s % 60 }
}

/** formatCountdown renders ms as "2d 03:04:05", "03:04:05" or "04:05". */
export function formatCountdown(ms) {
  const r = remaining(ms)
  const pad = (n) => String(n).padStart(2, '0')
  const hms = r.hours > 0 || r.days > 0 ? `${pad(r.hours)}:${pad(r.minutes)}:${pad(r.seconds)}` : `${pad(r.minutes)}:${pad(r.seconds)}`
  return r.days > 0 ? `${r.days}d ${hms}` : hms
}

