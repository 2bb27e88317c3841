-- room_take.lua: give buyers a place in a product's waiting room (or a draw entry), or tell
-- each the place it already has. One call takes a batch of requests for one product (the
-- gateway's concurrent requests, lua.TakeMany): the room's shared fields and the clock are read
-- once, the buyers' records in one HMGET, and the new records, places and pre-queue entries
-- written in one command each, so a ticket costs Redis a few Lua operations rather than seven
-- commands. The answers are those of the requests run one after another, in order, at one
-- instant: a user twice in a batch is answered the ticket the first request gave. Idempotent per
-- user while the ticket lives (a draw entry lives for the whole sale: one per user).
--
-- KEYS[1] stock    hash   stampede:{p:<pid>:0}:stock   fields room ("1": on, admission checked by
--                         reserve.lua here; "2": on for a sharded product, admission claimed by
--                         room_claim.lua), available, start, end (unix ms), paused ("1": rateMilli
--                         is answered 0, nobody being admitted)
-- KEYS[2] state    hash   stampede:{p:<pid>:0}:room    issued (last place given), upto (places up to
--                         it were admitted or finished), rate, mode (fifo | random | draw), pqms
--                         (pre-queue length, ms; 0 = from whenever the room is on), pre (tickets
--                         pre-queued), closed ("1" once the opening passed: pre is final), base
--                         (issued at the close: pre-queued places are base+1 … base+pre),
--                         shuffled ("1" once the pre-queue's places, or keys, and the seed are
--                         published), cutoff (draw: last place that can win), pow (proof-of-work
--                         cost, 0 = none), left (sharded products: units left in every shard, as
--                         the pacer last read them) — room_admit.lua names the rest
-- KEYS[3] line     zset   stampede:{p:<pid>:0}:room:line    userId by place (fifo, draw) or by
--                         random key (random)
-- KEYS[4] tickets  hash   stampede:{p:<pid>:0}:room:tickets userId = "<place> <issuedMs> <ticketId> <flags>",
--                         place 0 = not placed yet (pre-queued before the shuffle, or waiting in a
--                         random room), flags: p = pre-queued, x = its admission expired unused
-- KEYS[5] admitted zset   stampede:{p:<pid>:0}:room:adm     userId by admission deadline (ms)
-- KEYS[6] pre      hash   stampede:{p:<pid>:0}:room:pre     ticketId = userId of every pre-queued ticket
-- KEYS[7] fresh    hash   stampede:{p:<pid>:0}:room:fresh   random mode: userId = ticketId, waiting
--                         for the pacer to give it its key
-- KEYS[8…]  string stampede:{p:<pid>:0}:room:pow:<challenge> marks a solved proof-of-work as
--                         used, one key per request that brings one
--           string stampede:{p:<pid>:0}:user:<uid> the units the user holds (reserve.lua), one
--                         key per request that checks the per-user limit (one-shard products)
--
-- ARGV, five per request (request i at 5i-4 … 5i):
--   userId (decimal)
--   ticket id (16 hex digits) to give if the user gets a new ticket
--   the index in KEYS of the used-mark of a proof-of-work the gateway verified for this user and
--   product (8 or more), 0 if the request brings none
--   ms the used-mark lives (until the challenge expires)
--   the index in KEYS of the user's units-held key (8 or more), 0 not to check the limit
--
-- Returns a header of four values, rateMilli (the pacer's last rate, admissions per 1000 s; 0
-- while paused), mode, startMs (the opening) and nowMs (Redis clock), then one answer per request,
-- in order (no request: an empty array). The answers a sale mostly gives are one integer: n >= 1,
-- a new fifo ticket WAITING at position n; 0, a new pre-queued ticket (PRE_QUEUE) — both the
-- request's ticket id, issued at nowMs; -1, SOLD_OUT to a buyer without a ticket (none given):
-- with ten values for every request Redis spent 25–40 % more on a take
-- (lua.BenchmarkRoomTake, 64 a run: 4.5–5.1 µs a ticket, 3.5–3.7 with the integer), and the
-- client parsed ten values. Any other answer is an array of eight values: code,
-- ticketId, position, deadlineMs, issuedMs, shufflePosition, waiting, opensMs (startMs, or for
-- NOT_OPEN when the pre-queue opens):
--   0 WAITING     position = place - upto (1 = next); random mode: position 0, waiting = tickets
--                 in the pool
--   1 ADMITTED    the user may order until deadlineMs (Redis clock)
--   2 ROOM_OFF    no waiting room on: buy directly
--   3 NOT_FOUND   no stock hash
--   4 SOLD_OUT    nothing is left: a waiting user keeps the place (ticket, position set); a user
--                 without one gets none (ticketId "")
--   5 PRE_QUEUE   before the opening (startMs): the ticket has no position yet
--   6 SHUFFLING   the opening passed and the pre-queue's shuffle is not published yet
--   7 NOT_OPEN    the pre-queue opens only at startMs - pqms (returned as opensMs): no ticket
--   8 DRAW_CLOSED a draw takes no entry once it closed (at startMs)
--   9 EXPIRED     draw: the win was not used within its window and passed on
--  10 ORDERED     draw: the win was used by an order
--  11 LOST        draw: the entry was not drawn (place past the winners and the reserve list)
--  12 POW_REQUIRED the room asks a proof-of-work for a new ticket and the request brings none
--  13 POW_REUSED  the proof-of-work was already used (for any ticket): no ticket
--  14 RETRY       the ticket id is already a pre-queued ticket's: call again with another
--  15 NOT_ACTIVE  the sale has ended: no ticket, and a ticket's place (in line or pre-queued) or
--                 live admission is over
--  16 LIMIT       the user already holds the per-user limit (stock field limit > 0) in units: no
--                 new ticket (an admission could only be wasted)
-- shufflePosition is a pre-queued ticket's place in the published shuffle (place - base), the
-- number a buyer recomputes from public data; 0 otherwise.
-- A fifo or random room's ticket is finished once an order used its admission (reserve.lua or
-- room_claim.lua removes the user from KEYS[5]) or the admission expired; the user's next take
-- then gives a new ticket at the end of the line (a draw gives none: EXPIRED or ORDERED).

local n = math.floor(#ARGV / 5)
local out = {}
if n == 0 then
  return out
end
-- answer sets request k's answer (out[4 + k]; the header out[1 … 4] is set at the end); rate,
-- mode and start are the room's once read. fresh sets the short answer of a new ticket.
local rate, mode, start, now = 0, '', 0, 0
local k, code = 0, 0
local function answer(c, tid, pos, dl, at, spos, waiting, opens)
  code = c
  out[4 + k] = {c, tid, pos, dl, at, spos, waiting, opens or start}
end
local function fresh(c, v)
  code = c
  out[4 + k] = v
end
local function header()
  out[1], out[2], out[3], out[4] = rate, mode, start, now
  return out
end
local s = redis.call('HMGET', KEYS[1], 'room', 'available', 'start', 'end', 'paused', 'limit')
if not s[2] or (s[1] ~= '1' and s[1] ~= '2') then
  for i = 1, n do
    k = i
    answer(s[2] and 2 or 3, '', 0, 0, 0, 0, 0)
  end
  return header()
end
local t = redis.call('TIME')
now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nowS = tostring(now)
local stop
start, stop = tonumber(s[3]) or 0, tonumber(s[4]) or 0
local st = redis.call('HMGET', KEYS[2], 'upto', 'rate', 'mode', 'pqms', 'closed', 'pre', 'issued', 'shuffled',
  'cutoff', 'pow', 'left', 'base', 'expired', 'owed')
-- The counters this call adds to must be integers: a corrupt one fails the whole batch before
-- anything is written (one at a time, HINCRBY failed the requests that reached it).
for i, name in pairs({[6] = 'pre', [7] = 'issued', [13] = 'expired', [14] = 'owed'}) do
  if st[i] and not string.match(st[i], '^%-?%d+$') then
    return redis.error_reply('ERR room_take.lua script: field ' .. name .. ' of ' .. KEYS[2] .. ' is not an integer')
  end
end
local upto = tonumber(st[1]) or 0
rate, mode = tonumber(st[2]) or 0, st[3] or 'fifo'
if s[5] == '1' then
  rate = 0 -- paused: nobody is admitted, so no wait can be estimated
end
local closed = st[5] == '1'
local shuffled = st[8] == '1'
local cutoff = tonumber(st[9]) or 0
local base = tonumber(st[12]) or 0
local issued = tonumber(st[7]) or 0
local pqms = tonumber(st[4]) or 0
local powOn = (tonumber(st[10]) or 0) > 0
local available = tonumber(s[2]) or 0
local limit = tonumber(s[6]) or 0
if s[1] == '2' then
  available = tonumber(st[11]) or 1 -- not read by a pacer yet: not known to be sold out
end

-- close: the opening has passed (Redis clock). Freezes the pre-queue: its tickets take the
-- places base+1 … base+pre at the shuffle, later fifo tickets the places after them.
if now >= start and not closed then
  local pre = tonumber(st[6]) or 0
  redis.call('HSET', KEYS[2], 'closed', '1', 'base', issued, 'issued', issued + pre)
  closed, base, issued = true, issued, issued + pre
end
local issued0 = issued

-- The batch's records: read in one HMGET; what a request writes is kept in `written` (read
-- before the stored record by a later request of the same user) and stored at the end.
local uids = {}
for i = 1, n do
  uids[i] = ARGV[5 * i - 4]
end
local stored = redis.call('HMGET', KEYS[4], unpack(uids))
local written = {}
local lineAdd = {} -- place, userId, … for one ZADD
local preAdd = {} -- ticketId, userId, … for one HSET
local preTid = {}

-- bulk runs cmd on key with the flat list args, in chunks (unpack's stack is bounded).
local function bulk(cmd, key, args)
  for j = 1, #args, 1000 do
    redis.call(cmd, key, unpack(args, j, math.min(j + 999, #args)))
  end
end
-- pool counts the tickets waiting in a random room: the line and the fresh tickets (places this
-- batch gave are written first, so the count is the one a request alone would see).
local function pool()
  if #lineAdd > 0 then
    bulk('ZADD', KEYS[3], lineAdd)
    lineAdd = {}
  end
  return redis.call('ZCARD', KEYS[3]) + redis.call('HLEN', KEYS[7])
end

-- take answers request i: the user's live ticket, or a new one.
local function take(i)
  local uid, ntid = uids[i], ARGV[5 * i - 3]
  local rec = written[uid]
  if rec == nil then
    rec = stored[i]
  end
  if rec then
    local place, at, tid, flags = string.match(rec, '^(%d+) (%d+) (%x+) ?(%a*)$')
    place, at = tonumber(place), tonumber(at)
    if place then
      local spos = 0
      if mode ~= 'random' and string.find(flags, 'p', 1, true) and shuffled and place > 0 then
        spos = place - base
      end
      if place == 0 then
        if not closed then
          return answer(5, tid, 0, 0, at, 0, 0)
        end
        if not shuffled then
          return answer(6, tid, 0, 0, at, 0, 0)
        end
        -- random mode: waiting in the pool (keyed by the pacer)
        if available <= 0 then
          return answer(4, tid, 0, 0, at, 0, pool())
        end
        return answer(0, tid, 0, 0, at, 0, pool())
      end
      if mode == 'draw' and place > cutoff then
        return answer(11, tid, 0, 0, at, spos, 0)
      end
      if place > upto then
        if available <= 0 then
          return answer(4, tid, place - upto, 0, at, spos, 0)
        end
        return answer(0, tid, place - upto, 0, at, spos, 0)
      end
      local dl = tonumber(redis.call('ZSCORE', KEYS[5], uid))
      if dl and dl > now then
        return answer(1, tid, 0, dl, at, spos, 0)
      end
      if dl then -- past its deadline, not yet expired by a pacer step: expire it here
        redis.call('ZREM', KEYS[5], uid)
        redis.call('HINCRBY', KEYS[2], 'expired', 1)
        redis.call('HINCRBY', KEYS[2], 'owed', 1)
        flags = flags .. 'x'
        written[uid] = place .. ' ' .. at .. ' ' .. tid .. ' ' .. flags
      end
      if mode == 'draw' then
        if string.find(flags, 'x', 1, true) then
          return answer(9, tid, 0, 0, at, spos, 0)
        end
        return answer(10, tid, 0, 0, at, spos, 0)
      end
    end
  end

  -- A new ticket (or draw entry).
  if now >= stop then
    return answer(15, '', 0, 0, 0, 0, 0)
  end
  local pre = now < start and not closed
  if not pre then
    if mode == 'draw' then
      return answer(8, '', 0, 0, 0, 0, 0)
    end
    if available <= 0 then
      return fresh(4, -1)
    end
  else
    if pqms > 0 and now < start - pqms then
      return answer(7, '', 0, 0, 0, 0, 0, start - pqms)
    end
    if preTid[ntid] or redis.call('HEXISTS', KEYS[6], ntid) == 1 then
      return answer(14, '', 0, 0, 0, 0, 0)
    end
  end
  if limit > 0 then
    local h = tonumber(ARGV[5 * i]) or 0
    if h >= 8 and KEYS[h] and (tonumber(redis.call('GET', KEYS[h])) or 0) >= limit then
      return answer(16, '', 0, 0, 0, 0, 0)
    end
  end
  if powOn then
    local k = tonumber(ARGV[5 * i - 2]) or 0
    if k < 8 or not KEYS[k] then
      return answer(12, '', 0, 0, 0, 0, 0)
    end
    if not redis.call('SET', KEYS[k], uid, 'NX', 'PX', math.max(tonumber(ARGV[5 * i - 1]) or 1, 1)) then
      return answer(13, '', 0, 0, 0, 0, 0)
    end
  end
  if pre then
    preTid[ntid] = true
    preAdd[#preAdd + 1] = ntid
    preAdd[#preAdd + 1] = uid
    written[uid] = '0 ' .. nowS .. ' ' .. ntid .. ' p'
    return fresh(5, 0)
  end
  if mode == 'random' then
    redis.call('HSET', KEYS[7], uid, ntid) -- at once: pool() counts it
    written[uid] = '0 ' .. nowS .. ' ' .. ntid .. ' '
    return answer(0, ntid, 0, 0, now, 0, pool())
  end
  issued = issued + 1
  local ps = tostring(issued)
  written[uid] = ps .. ' ' .. nowS .. ' ' .. ntid .. ' '
  lineAdd[#lineAdd + 1] = ps
  lineAdd[#lineAdd + 1] = uid
  local pos = issued - upto
  if pos >= 1 and pos < 2 ^ 53 and pos == math.floor(pos) then -- not for a corrupt upto: the full form
    return fresh(0, pos)
  end
  return answer(0, ntid, pos, 0, now, 0, 0)
end

-- Once the sale ended nobody waits or orders: a place in line, a pre-queued ticket (whose
-- shuffle no pacer will publish now) or a live admission is answered NOT_ACTIVE, as a new ticket
-- is (a draw's result and SOLD_OUT stay: they are final).
local ended = now >= stop
for i = 1, n do
  k = i
  take(i)
  if ended and (code == 0 or code == 1 or code == 5 or code == 6) then
    answer(15, '', 0, 0, 0, 0, 0)
  end
end

local rec = {}
for u, r in pairs(written) do
  rec[#rec + 1] = u
  rec[#rec + 1] = r
end
bulk('HSET', KEYS[4], rec)
bulk('ZADD', KEYS[3], lineAdd)
if #preAdd > 0 then
  bulk('HSET', KEYS[6], preAdd)
  redis.call('HINCRBY', KEYS[2], 'pre', #preAdd / 2)
end
if issued ~= issued0 then
  redis.call('HSET', KEYS[2], 'issued', issued)
end
return header()
