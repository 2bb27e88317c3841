-- room_admit.lua: the admission pacer's step. Expires admissions past their deadline and
-- admits the next buyers in ticket order, as many as the rate allows for the time since the
-- previous step (of any pacer: the time is kept here), plus the places of expired admissions.
-- Any number of pacers may call it concurrently: the budget is computed from the Redis clock
-- and the last step's time inside one script, so together they never admit faster than the
-- rate (and never faster than the room's ceiling).
--
-- KEYS[1] stock    hash   stampede:{p:<pid>:0}:stock     fields room, available
-- KEYS[2] state    hash   stampede:{p:<pid>:0}:room      (see room_take.lua) plus last (ms of the
--                         last step), carry (milli-admissions not yet spent), ceiling
--                         (milli-admissions per second, 0 = none)
-- KEYS[3] line     zset   stampede:{p:<pid>:0}:room:line    userId by ticket, waiting
-- KEYS[4] tickets  hash   stampede:{p:<pid>:0}:room:tickets userId = "<ticket> <issuedMs>"
-- KEYS[5] admitted zset   stampede:{p:<pid>:0}:room:adm     userId by admission deadline (ms)
--
-- ARGV[1] rate, milli-admissions per second (integer >= 0)
-- ARGV[2] most admissions (and most expiries) in this step
-- ARGV[3] most milliseconds since the last step credited (bounds the burst after a pause)
-- ARGV[4] admission window in ms, used when the room has none of its own
--
-- Returns {n, expired, upto, issued, available, rateMilli, uid1, rec1, uid2, rec2, ...}:
-- n buyers admitted now (uidN with its ticket record "<ticket> <issuedMs>", in ticket order),
-- expired admissions expired now; upto, issued, available after the step; rateMilli the rate
-- applied. {-1, 0, 0, 0, 0, 0} when the room is off. Nobody is admitted while available is 0
-- (the budget is not banked meanwhile), nor when nobody waits.

local s = redis.call('HMGET', KEYS[1], 'room', 'available')
if s[1] ~= '1' then
  return {-1, 0, 0, 0, 0, 0}
end
local available = tonumber(s[2]) or 0
local maxn = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local st = redis.call('HMGET', KEYS[2], 'issued', 'upto', 'last', 'carry', 'owed', 'ceiling', 'window')
local issued = tonumber(st[1]) or 0
local upto = tonumber(st[2]) or 0
local last = tonumber(st[3]) or now
local carry = tonumber(st[4]) or 0
local owed = tonumber(st[5]) or 0
local ceiling = tonumber(st[6]) or 0
local window = tonumber(st[7]) or tonumber(ARGV[4])

local due = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, maxn)
local expired = #due
if expired > 0 then
  redis.call('ZREM', KEYS[5], unpack(due))
  redis.call('HINCRBY', KEYS[2], 'expired', expired)
  owed = owed + expired
end

local rate = tonumber(ARGV[1])
if ceiling > 0 and rate > ceiling then
  rate = ceiling
end
local elapsed = math.min(math.max(now - last, 0), tonumber(ARGV[3]))
local acc = carry + rate * elapsed / 1000
local budget = math.floor(acc / 1000)
carry = acc - budget * 1000
local waiting = issued - upto
local n = 0
if available <= 0 or waiting <= 0 then
  carry, owed = 0, 0
else
  n = math.min(budget + owed, waiting, maxn)
  owed = math.max(owed - n, 0)
end

local out = {n, expired, upto + n, issued, available, rate}
if n > 0 then
  local uids = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. upto, upto + n)
  if #uids > 0 then
    local recs = redis.call('HMGET', KEYS[4], unpack(uids))
    local adm = {}
    for i, u in ipairs(uids) do
      adm[2 * i - 1] = now + window
      adm[2 * i] = u
      out[5 + 2 * i] = u
      out[6 + 2 * i] = recs[i] or ''
    end
    redis.call('ZADD', KEYS[5], unpack(adm))
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', upto + n)
  end
  out[1] = #uids
  upto = upto + n
  redis.call('HINCRBY', KEYS[2], 'admitted', #uids)
end
redis.call('HSET', KEYS[2], 'upto', upto, 'last', now, 'carry', carry, 'owed', owed, 'rate', rate)
out[3] = upto
return out
