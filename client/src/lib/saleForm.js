// The admin sale form: what the form's fields become in the API body, and the
// checks the gateway would refuse with 400 (answered here with friendlier text).
import { parseMoney } from './money.js'

/**
 * saleBody is the POST /api/admin/products body of the form's values (the
 * edit body when editing: no stock or shards, which an edit cannot change).
 * An empty end means open until sold out: left out of a creation, null in
 * an edit. Throws on an unparseable date.
 */
export function saleBody(f, currency, editing = false) {
  const b = {
    name: String(f.name ?? '').trim(),
    price: parseMoney(f.price, currency),
    perUserLimit: Number(f.perUserLimit),
    maxPerOrder: Number(f.maxPerOrder),
    saleStart: new Date(f.saleStart).toISOString(),
  }
  if (String(f.saleEnd ?? '').trim()) b.saleEnd = new Date(f.saleEnd).toISOString()
  else if (editing) b.saleEnd = null // an edit that clears the end: open until sold out
  const img = String(f.imageUrl ?? '').trim()
  const desc = String(f.description ?? '').trim()
  if (img) b.imageUrl = img
  if (desc) b.description = desc
  if (!editing) {
    b.stock = Number(f.stock)
    b.shards = Number(f.shards)
  }
  return b
}

/** validateSale returns what is wrong with body b, or ''. */
export function validateSale(b) {
  if (!b.name) return 'Give the product a name.'
  if (!Number.isSafeInteger(b.price) || b.price < 0) return 'Enter a price such as 19.99.'
  for (const [k, label, lo] of [
    ['stock', 'Stock', 0],
    ['shards', 'Stock shards', 1],
    ['perUserLimit', 'Limit per buyer', 0],
    ['maxPerOrder', 'Max per order', 1],
  ]) {
    if (k in b && (!Number.isSafeInteger(b[k]) || b[k] < lo)) return `${label} must be a whole number of at least ${lo}.`
  }
  if (b.shards > 16) return 'At most 16 stock shards.'
  if (b.perUserLimit > 0 && b.maxPerOrder > b.perUserLimit) return 'Max per order cannot exceed the limit per buyer.'
  if (b.imageUrl && !/^https?:\/\/[^\s/?#]+/i.test(b.imageUrl)) return 'The picture must be an http:// or https:// address.'
  if (b.description && [...b.description].length > 2000) return 'The description can have at most 2000 characters.'
  if (b.saleEnd && Date.parse(b.saleEnd) <= Date.parse(b.saleStart)) return 'The sale must end after it starts.'
  return ''
}

/**
 * EDITABLE says which fields an edit may change in each sale state: before
 * the sale opens every one; after it opened the name, picture, description,
 * limit per buyer and the end (later, or now through "End sale"); the
 * operator API answers 409 SALE_STARTED for others.
 */
const OPENED = ['name', 'imageUrl', 'description', 'saleEnd', 'perUserLimit']
export const EDITABLE = {
  upcoming: ['name', 'imageUrl', 'description', 'price', 'saleStart', 'saleEnd', 'perUserLimit', 'maxPerOrder'],
  live: OPENED,
  paused: OPENED,
  soldout: OPENED,
  ended: ['name', 'imageUrl', 'description'],
}

/**
 * validateEdit returns what is wrong with PATCH body patch of product p in
 * state, or '': after opening the end may only move later (ending now is
 * "End sale"), and the new limit per buyer must still allow maxPerOrder.
 */
export function validateEdit(patch, p, state) {
  if (state !== 'upcoming' && patch.saleEnd && p?.saleEnd && Date.parse(patch.saleEnd) < Date.parse(p.saleEnd))
    return 'A running sale can only end later; to stop it now use “End sale”.'
  if (patch.perUserLimit > 0 && (patch.maxPerOrder ?? p?.maxPerOrder ?? 1) > patch.perUserLimit)
    return 'The limit per buyer cannot be below the maximum per order.'
  return ''
}

/**
 * editBody is the PATCH body of an edit: the editable fields of body b (a
 * saleBody) whose value differs from product p. A cleared picture or
 * description is sent as "" (none).
 */
export function editBody(b, p, state) {
  const out = {}
  for (const k of EDITABLE[state] ?? []) {
    if (k === 'saleEnd' && b.saleEnd === null) {
      if (p.saleEnd != null) out.saleEnd = null // open until sold out from now on
      continue
    }
    const v = b[k] ?? (k === 'imageUrl' || k === 'description' ? '' : undefined)
    if (v === undefined) continue
    const cur = p[k] ?? (k === 'imageUrl' || k === 'description' ? '' : undefined)
    // The form's times have minute precision: a time within the same minute is unchanged.
    const same = k === 'saleStart' || k === 'saleEnd' ? cur != null && Math.floor(Date.parse(cur) / 60_000) === Math.floor(Date.parse(v) / 60_000) : cur === v
    if (!same) out[k] = v
  }
  return out
}
