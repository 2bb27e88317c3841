-- room_take.lua: give a buyer a place in a product's waiting room, or tell
-- the place the buyer already has. Idempotent per user while the ticket lives.
--
-- KEYS[1] stock    hash   stampede:{p:<pid>:0}:stock     fields room ("1" = the room is on), available
-- KEYS[2] state    hash   stampede:{p:<pid>:0}:room      fields issued (last ticket given), upto (tickets
--                         up to it were admitted), rate (milli-admissions per second of the last
--                         advance), window (ms an admission lasts), expired, owed (places of expired
--                         admissions not yet passed on), admitted
-- KEYS[3] line     zset   stampede:{p:<pid>:0}:room:line    member userId, score ticket: still waiting
-- KEYS[4] tickets  hash   stampede:{p:<pid>:0}:room:tickets field userId = "<ticket> <issuedMs>"
-- KEYS[5] admitted zset   stampede:{p:<pid>:0}:room:adm     member userId, score admission deadline (ms)
--
-- ARGV[1] userId (decimal)
--
-- Returns {code, ticket, position, deadlineMs, rateMilli, issuedMs}:
--   0 WAITING    position = ticket - upto (1 = next in line); a new ticket if the user had none
--                live (none, or the last one was used or expired)
--   1 ADMITTED   the user may order until deadlineMs (Redis clock)
--   2 ROOM_OFF   the product has no waiting room on: buy directly
--   3 NOT_FOUND  no stock hash
--   4 SOLD_OUT   available is 0: no new ticket is given; a waiting user keeps the place
--                (ticket, position set) and moves again if released units come back
-- A ticket lives while waiting or admitted; it is finished once an order used the admission
-- (reserve.lua removes the user from KEYS[5]) or the admission expired. An admission found past
-- its deadline here is expired on the spot (counted in expired and owed: its place passes on).

local s = redis.call('HMGET', KEYS[1], 'room', 'available')
if not s[2] then
  return {3, 0, 0, 0, 0, 0}
end
if s[1] ~= '1' then
  return {2, 0, 0, 0, 0, 0}
end
local available = tonumber(s[2]) or 0
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local st = redis.call('HMGET', KEYS[2], 'upto', 'rate')
local upto = tonumber(st[1]) or 0
local rate = tonumber(st[2]) or 0
local uid = ARGV[1]

local rec = redis.call('HGET', KEYS[4], uid)
if rec then
  local tk, at = string.match(rec, '^(%d+) (%d+)$')
  tk, at = tonumber(tk), tonumber(at)
  if tk and tk > upto then
    if available <= 0 then
      return {4, tk, tk - upto, 0, rate, at}
    end
    return {0, tk, tk - upto, 0, rate, at}
  end
  if tk then
    local dl = tonumber(redis.call('ZSCORE', KEYS[5], uid))
    if dl and dl > now then
      return {1, tk, 0, dl, rate, at}
    end
    if dl then
      redis.call('ZREM', KEYS[5], uid)
      redis.call('HINCRBY', KEYS[2], 'expired', 1)
      redis.call('HINCRBY', KEYS[2], 'owed', 1)
    end
  end
end
if available <= 0 then
  return {4, 0, 0, 0, rate, 0}
end
local tk = redis.call('HINCRBY', KEYS[2], 'issued', 1)
redis.call('HSET', KEYS[4], uid, tk .. ' ' .. now)
redis.call('ZADD', KEYS[3], tk, uid)
return {0, tk, tk - upto, 0, rate, now}
