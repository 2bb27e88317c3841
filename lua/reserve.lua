-- reserve.lua: take stock for one purchase intent, atomically.
--
-- KEYS[1] stock    hash   stampede:{p:<pid>:<shard>}:stock
--                         fields available, total, price, limit (per user, 0 = none),
--                         maxq (per order), start, end (unix ms), paused ("1" while an admin
--                         paused the sale: sale.lua writes it to every shard)
-- KEYS[2] request  string stampede:{p:<pid>:<shard>}:req:<uid>:<requestId> =
--                         "<orderNo> <quantity>" or "<orderNo> <quantity> <status>": the
--                         idempotency record of (user, product, requestId); status is the
--                         last one the pipeline reported (status.lua), absent = PROCESSING
-- KEYS[3] user     string stampede:{p:<pid>:<shard>}:user:<uid> = units this user holds in
--                         this sale (the per-user limit's count: release.lua lowers it when an
--                         order is cancelled or failed); it lives until the sale's end (field
--                         end) plus ARGV[5], so the limit holds for the whole sale however long
-- KEYS[4] order    hash   stampede:{p:<pid>:<shard>}:order:<orderNo> (u, r, q, pr, t)
-- KEYS[5] intake   stream stampede:{p:<pid>:<shard>}:intake
-- KEYS[6] buyers   set    stampede:{p:<pid>:<shard>}:buyers = the userIds of every intent
--                         accepted here, plus one member "e<orderNo>" (the orderNo that
--                         created the set: its incarnation, see buyers.lua); its TTL is
--                         renewed to ARGV[5] with every acceptance, so it outlives every
--                         request record of the shard. Gateways answer sold-out requests
--                         of users not in it from memory (gateway/buyers.go)
-- KEYS[7] optional, one of:
--         admitted zset stampede:{p:<pid>:0}:room:adm (waiting room, room_admit.lua), ARGV[7]
--                         absent: userId by admission deadline (ms). Passed by a gateway that
--                         knows the product's room is on (stock field room = "1"); an accepted
--                         order uses the admission (removes the user).
--         hold string    stampede:{p:<pid>:<shard>}:hold:<uid>:<token>, ARGV[7] = "claimed": a
--                         sharded product's shards carry room = "2" instead: the gateway claimed
--                         the admission on shard 0 before (room_claim.lua, lua/admission.go) under
--                         token. The key says what was reserved under the token: absent =
--                         nothing yet; a requestId = that intent's reservation (written here
--                         with it); "~" = revoked (hold_revoke.lua: the admission was given back)
--
-- ARGV[1] orderNo to use if this intent is new
-- ARGV[2] userId (decimal)
-- ARGV[3] requestId
-- ARGV[4] quantity (decimal integer)
-- ARGV[5] TTL in seconds of the request and order records (>= the pay timeout)
-- ARGV[6] optional intake mode: absent or "stream" appends to KEYS[5]; "sync" skips the
--         XADD (the gateway writes the order to MySQL itself, STAMPEDE_INTAKE=sync) and
--         the RESERVED answer carries two more values: unit price and accepted time (ms)
-- ARGV[7] optional "claimed": the buyer's admission to a sharded product's room was claimed;
--         KEYS[7] is the claim's hold
-- ARGV[8] with ARGV[7]: TTL in seconds of the hold written with the reservation
--
-- Returns {code, orderNo, available}:
--   0 RESERVED      stock taken, reservation appended to the intake stream, orderNo = ARGV[1]
--                   (sync mode: not appended; {0, orderNo, available, price, acceptedMs})
--   1 DUPLICATE     same user, requestId and quantity seen before: orderNo is the stored one;
--                   {1, orderNo, available, status} with the record's last known status
--                   ("PROCESSING" when the pipeline has not reported one) and the shard's
--                   available units (-1 if unknown: no stock hash, or not an integer), so
--                   that a gateway can tell a storm of replays that the product is sold out
--   2 KEY_REUSED    same user and requestId with a different quantity: orderNo is the stored one
--   3 NOT_FOUND     no stock hash: the product is unknown to this shard
--   4 NOT_ACTIVE    outside [start, end) on the Redis server clock
--   5 SOLD_OUT      available is 0
--   6 INSUFFICIENT  0 < available < quantity
--   7 LIMIT         the user would hold more than limit units
--   8 BAD_QUANTITY  quantity < 1 or > maxq, or quantity × price > 2^53 − 1 (the amount would
--                   not be exact in a JSON client, or would overflow int64: only products
--                   stored before the gateway bounded price and maxPerOrder can get there)
--   9 CORRUPT       a numeric field of the stock hash (or the user's counter, or the
--                   request record) is not an integer: {9, '<field>', 0}. The product's
--                   data needs repair; nothing else is affected (the gateway answers 500
--                   STOCK_CORRUPT for this product only)
--  10 ROOM_ON       the stock hash says the waiting room is on and KEYS[7] was not passed
--                   (room = "1"), or ARGV[7] is not "claimed" (room = "2"): checked after the
--                   stock, before the limit; call again with KEYS[7] or after a claim
--  11 NOT_ADMITTED  the waiting room is on and the user holds no admission whose deadline
--                   (KEYS[7]) is in the future
--  12 PAUSED        inside the sale window, but the stock hash says paused = "1": checked
--                   after the window, before the stock
--  13 REVOKED       ARGV[7] "claimed" and the claim's hold was revoked (hold_revoke.lua): the
--                   admission was given back; claim again. Checked right after the record, as
--                   is a hold of another intent (11 NOT_ADMITTED: the claim bought that one)
-- Nothing is written unless the code is 0.

local q = tonumber(ARGV[4])

-- int: v as a number if it is a decimal integer (what HINCRBY could work on), else nil.
local function int(v)
  if type(v) ~= 'string' or not string.find(v, '^-?%d+$') then
    return nil
  end
  return tonumber(v)
end

local seen = redis.call('GET', KEYS[2])
if seen then
  local no, sq, st = string.match(seen, '^(%S+) (%S+) ?(%S*)$')
  if not no then
    return {9, 'request', 0}
  end
  if sq == ARGV[4] then
    if st == '' then
      st = 'PROCESSING'
    end
    return {1, no, int(redis.call('HGET', KEYS[1], 'available')) or -1, st}
  end
  return {2, no, 0}
end

local claimed = ARGV[7] == 'claimed'
if claimed then
  local h = redis.call('GET', KEYS[7])
  if h == '~' then
    return {13, '', 0}
  elseif h then
    return {11, '', 0}
  end
end

local s = redis.call('HMGET', KEYS[1], 'available', 'price', 'limit', 'maxq', 'start', 'end', 'room', 'paused')
if not s[1] then
  return {3, '', 0}
end
local names = {'available', 'price', 'limit', 'maxq', 'start', 'end'}
for i = 1, 6 do
  if not int(s[i]) then
    return {9, names[i], 0}
  end
end
local available = tonumber(s[1])
if not q or q < 1 or q > tonumber(s[4]) or q ~= math.floor(q) then
  return {8, '', available}
end
-- Doubles: a product of integers below 2^53 is exact, one at or above rounds to at least 2^53.
if q * tonumber(s[2]) > 9007199254740991 then
  return {8, '', available}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now < tonumber(s[5]) or now >= tonumber(s[6]) then
  return {4, '', available}
end
if s[8] == '1' then
  return {12, '', available}
end
if available <= 0 then
  return {5, '', 0}
end
if available < q then
  return {6, '', available}
end
local room = s[7] == '1'
if room then
  if not KEYS[7] or claimed then
    return {10, '', available}
  end
  local dl = tonumber(redis.call('ZSCORE', KEYS[7], ARGV[2]))
  if not dl or dl <= now then
    return {11, '', available}
  end
elseif s[7] == '2' and not claimed then
  return {10, '', available}
end
local limit = tonumber(s[3])
local held = int(redis.call('GET', KEYS[3]) or '0')
if not held then
  return {9, 'user', 0}
end
if limit > 0 and held + q > limit then
  return {7, '', available}
end

local ttl = tonumber(ARGV[5])
if room then
  redis.call('ZREM', KEYS[7], ARGV[2])
elseif claimed then
  redis.call('SET', KEYS[7], ARGV[3], 'EX', tonumber(ARGV[8]))
end
available = redis.call('HINCRBY', KEYS[1], 'available', -q)
redis.call('SET', KEYS[3], held + q, 'EX', math.max(ttl, math.ceil((tonumber(s[6]) - now) / 1000) + ttl))
redis.call('SET', KEYS[2], ARGV[1] .. ' ' .. ARGV[4], 'EX', ttl)
redis.call('HSET', KEYS[4], 'u', ARGV[2], 'r', ARGV[3], 'q', ARGV[4], 'pr', s[2], 't', now)
redis.call('EXPIRE', KEYS[4], ttl)
if redis.call('EXPIRE', KEYS[6], ttl) == 1 then -- the set exists: TTL renewed
  redis.call('SADD', KEYS[6], ARGV[2])
else -- a new set, with its incarnation member
  redis.call('SADD', KEYS[6], ARGV[2], 'e' .. ARGV[1])
  redis.call('EXPIRE', KEYS[6], ttl)
end
if ARGV[6] == 'sync' then
  return {0, ARGV[1], available, tonumber(s[2]), now}
end
redis.call('XADD', KEYS[5], '*', 'o', ARGV[1], 'u', ARGV[2], 'r', ARGV[3], 'q', ARGV[4], 'pr', s[2], 't', now)
return {0, ARGV[1], available}
