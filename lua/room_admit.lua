-- room_admit.lua: the admission pacer's step. Closes the pre-queue at the opening, expires
-- admissions past their deadline and admits the next buyers — in place order (fifo, draw) or
-- lowest random key first (random) — as many as the rate allows for the time since the previous
-- step (of any pacer: the time is kept here), plus the places of expired admissions, and never
-- more than the units not yet spoken for. Any number of pacers may call it concurrently: the
-- budget is computed from the Redis clock and the last step's time inside one script, so
-- together they never admit faster than the rate (nor than the room's ceiling).
--
-- KEYS[1] stock    hash   stampede:{p:<pid>:0}:stock  fields room ("1" or "2", see room_take.lua),
--                         available, start (unix ms), paused ("1" while an admin paused the sale)
-- KEYS[2] state    hash   stampede:{p:<pid>:0}:room   (see room_take.lua) plus last (ms of the last
--                         step), carry (milli-admissions not yet spent), ceiling (milli-admissions
--                         per second, 0 = none), window (ms an admission lasts), owed (places of
--                         expired admissions not yet passed on), admitted, expired, pausedat (ms
--                         the pacer first saw the sale paused)
-- KEYS[3] line     zset   userId by place (fifo, draw) or random key (random), waiting
-- KEYS[4] tickets  hash   userId = "<place> <issuedMs> <ticketId> <flags>"
-- KEYS[5] admitted zset   userId by admission deadline (ms)
-- KEYS[6] fresh    hash   random mode: userId = ticketId not keyed yet
-- KEYS[7] log      stream random mode: one entry per step that admitted, field u = the userIds,
--                         comma-separated (the push feed tells those buyers; capped ~10,000 entries)
--
-- ARGV[1] rate, milli-admissions per second (integer >= 0); draw rooms ignore it (every unit
--         not spoken for is offered at once)
-- ARGV[2] most admissions (and most expiries) in this step
-- ARGV[3] most milliseconds since the last step credited (bounds the burst after a pause)
-- ARGV[4] admission window in ms, used when the room has none of its own
-- ARGV[5] units left in every shard (sharded product, room = "2"), "" for a one-shard product
--         (its stock's available is read here)
-- ARGV[6] overbook: live admissions allowed beyond the units left while any is left (fifo and
--         random rooms; a draw admits exactly the units)
-- ARGV[7], ARGV[8], … random mode: pairs userId, key score of fresh tickets (KEYS[6]) to put in
--         the line; a pair whose user is no longer fresh is skipped
--
-- Returns {code, expired, upto, issued, available, rateMilli, waiting, uid1, rec1, uid2, rec2, ...}:
--   code 0 stepped (the pairs are the users admitted now, with their ticket records, in admission
--   order); -1 the room is off; 1 SHUFFLE: the opening passed and the pre-queue's shuffle is not
--   published yet (pacer: publish it, room_place.lua and room_publish.lua); 2 PAUSED: the sale is
--   paused; 3 NOT_OPEN: before the opening. Nobody is admitted unless the code is 0. waiting is
--   the tickets not yet admitted (draw: up to the cutoff).
-- Bound: a step admits at most (available + overbook − live admissions) buyers, so live
-- admissions never exceed the units left by more than ARGV[6] (a draw: by none; sharded: plus the
-- admissions claimed and not yet reserved).
-- While paused nobody is admitted and no admission expires; at the first step after the pause
-- every live admission's deadline moves by the pause's length.

local s = redis.call('HMGET', KEYS[1], 'room', 'available', 'start', 'paused')
if s[1] ~= '1' and s[1] ~= '2' then
  return {-1, 0, 0, 0, 0, 0, 0}
end
local maxn = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local st = redis.call('HMGET', KEYS[2], 'issued', 'upto', 'last', 'carry', 'owed', 'ceiling', 'window', 'mode',
  'closed', 'shuffled', 'cutoff', 'pausedat', 'pre')
local issued = tonumber(st[1]) or 0
local upto = tonumber(st[2]) or 0
local last = tonumber(st[3]) or now
local carry = tonumber(st[4]) or 0
local owed = tonumber(st[5]) or 0
local ceiling = tonumber(st[6]) or 0
local window = tonumber(st[7]) or tonumber(ARGV[4])
local mode = st[8] or 'fifo'
local available = tonumber(s[2]) or 0
if s[1] == '2' then
  available = tonumber(ARGV[5]) or 0
  redis.call('HSET', KEYS[2], 'left', available)
end
local rate = tonumber(ARGV[1])
if ceiling > 0 and rate > ceiling then
  rate = ceiling
end
local function idle(code)
  redis.call('HSET', KEYS[2], 'last', now, 'carry', 0, 'rate', rate)
  return {code, 0, upto, issued, available, rate, 0}
end

if now < (tonumber(s[3]) or 0) then
  return idle(3)
end
if st[9] ~= '1' then -- the opening passed and no take saw it yet: close the pre-queue
  local pre = tonumber(st[13]) or 0
  redis.call('HSET', KEYS[2], 'closed', '1', 'base', issued, 'issued', issued + pre)
  issued = issued + pre
end
if st[10] ~= '1' then
  return idle(1)
end
if mode == 'random' then
  for i = 7, #ARGV - 1, 2 do
    if redis.call('HDEL', KEYS[6], ARGV[i]) == 1 then
      redis.call('ZADD', KEYS[3], ARGV[i + 1], ARGV[i])
    end
  end
end
if s[4] == '1' then
  if not st[12] then
    redis.call('HSET', KEYS[2], 'pausedat', now)
  end
  return idle(2)
end
if st[12] then -- resumed: the pause does not count against live admissions
  local shift = now - tonumber(st[12])
  local live = redis.call('ZRANGE', KEYS[5], 0, -1, 'WITHSCORES')
  for i = 1, #live, 2000 do
    local args = {}
    for j = i, math.min(i + 1999, #live), 2 do
      args[#args + 1] = tonumber(live[j + 1]) + shift
      args[#args + 1] = live[j]
    end
    redis.call('ZADD', KEYS[5], unpack(args))
  end
  redis.call('HDEL', KEYS[2], 'pausedat')
  last = now
end

-- Expire admissions past their deadline: their places pass on (owed).
local due = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, maxn)
local expired = #due
if expired > 0 then
  redis.call('ZREM', KEYS[5], unpack(due))
  redis.call('HINCRBY', KEYS[2], 'expired', expired)
  owed = owed + expired
  local recs = redis.call('HMGET', KEYS[4], unpack(due))
  local marks = {}
  for i, u in ipairs(due) do
    if recs[i] then
      marks[#marks + 1] = u
      marks[#marks + 1] = recs[i] .. 'x'
    end
  end
  if #marks > 0 then
    redis.call('HSET', KEYS[4], unpack(marks))
  end
end

local elapsed = math.min(math.max(now - last, 0), tonumber(ARGV[3]))
local budget
if mode == 'draw' then
  budget, carry = maxn, 0
else
  local acc = carry + rate * elapsed / 1000
  budget = math.floor(acc / 1000)
  carry = acc - budget * 1000
end
local waiting
if mode == 'random' then
  waiting = redis.call('ZCARD', KEYS[3])
elseif mode == 'draw' then
  waiting = math.min(issued, tonumber(st[11]) or 0) - upto
else
  waiting = issued - upto
end
local over = tonumber(ARGV[6]) or 0
if mode == 'draw' then
  over = 0
end
local free = available + over - redis.call('ZCARD', KEYS[5])
local n = 0
if available <= 0 or waiting <= 0 then
  carry, owed = 0, 0
else
  n = math.max(math.min(budget + owed, waiting, maxn, free), 0)
  owed = math.max(owed - n, 0)
end

local out = {0, expired, upto, issued, available, rate, waiting}
if n > 0 then
  local adm = {}
  local uids
  if mode == 'random' then
    local popped = redis.call('ZPOPMIN', KEYS[3], n)
    uids = {}
    for i = 1, #popped, 2 do
      uids[#uids + 1] = popped[i]
    end
    local recs = redis.call('HMGET', KEYS[4], unpack(uids))
    local placed = {}
    for i, u in ipairs(uids) do
      local rec = recs[i] or ''
      local at, tid, flags = string.match(rec, '^%d+ (%d+) (%x+) ?(%a*)$')
      rec = (upto + i) .. ' ' .. (at or now) .. ' ' .. (tid or '') .. ' ' .. (flags or '')
      placed[#placed + 1] = u
      placed[#placed + 1] = rec
      out[6 + 2 * i] = u
      out[7 + 2 * i] = rec
    end
    redis.call('HSET', KEYS[4], unpack(placed))
    redis.call('XADD', KEYS[7], 'MAXLEN', '~', 10000, '*', 'u', table.concat(uids, ','))
    upto = upto + #uids
  else
    uids = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. upto, upto + n)
    if #uids > 0 then
      local recs = redis.call('HMGET', KEYS[4], unpack(uids))
      for i, u in ipairs(uids) do
        out[6 + 2 * i] = u
        out[7 + 2 * i] = recs[i] or ''
      end
      redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', upto + n)
    end
    upto = upto + n
  end
  for i, u in ipairs(uids) do
    adm[2 * i - 1] = now + window
    adm[2 * i] = u
  end
  if s[1] == '2' and #uids > 0 then
    -- A sharded room's buyer may hold an admission already: one a claim gave back
    -- (room_claim_giveback.lua) after the buyer, its claim pending after a fault, took a new
    -- ticket. A buyer holds one at a time: the new deadline, and the other passes on as an
    -- expired one (admitted = live + expired + claimed).
    local dup = 0
    for _, u in ipairs(uids) do
      if redis.call('ZSCORE', KEYS[5], u) then
        dup = dup + 1
      end
    end
    if dup > 0 then
      redis.call('HINCRBY', KEYS[2], 'expired', dup)
      owed = owed + dup
    end
  end
  if #uids > 0 then
    redis.call('ZADD', KEYS[5], unpack(adm))
    redis.call('HINCRBY', KEYS[2], 'admitted', #uids)
  end
  out[7] = waiting - #uids
end
redis.call('HSET', KEYS[2], 'upto', upto, 'last', now, 'carry', carry, 'owed', owed, 'rate', rate)
out[3] = upto
return out
