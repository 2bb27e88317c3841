-- room_take.lua: give a buyer a place in a product's waiting room (or a draw entry), or tell
-- the place the buyer already has. One call per request; idempotent per user while the ticket
-- lives (a draw entry lives for the whole sale: one per user).
--
-- KEYS[1] stock    hash   stampede:{p:<pid>:0}:stock   fields room ("1": on, admission checked by
--                         reserve.lua here; "2": on for a sharded product, admission claimed by
--                         room_claim.lua), available, start, end (unix ms)
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
-- KEYS[8] pow      string stampede:{p:<pid>:0}:room:pow:<challenge> marks a solved proof-of-work as
--                         used (any key when ARGV[3] is "")
--
-- ARGV[1] userId (decimal)
-- ARGV[2] ticket id (16 hex digits) to give if the user gets a new ticket
-- ARGV[3] the challenge of a proof-of-work the gateway verified for this user and product, "" if none
-- ARGV[4] ms the used-mark of ARGV[3] lives (until the challenge expires)
--
-- Returns {code, ticketId, position, deadlineMs, rateMilli, issuedMs, mode, shufflePosition,
-- startMs, waiting}:
--   0 WAITING     position = place - upto (1 = next); random mode: position 0, waiting = tickets
--                 in the pool
--   1 ADMITTED    the user may order until deadlineMs (Redis clock)
--   2 ROOM_OFF    no waiting room on: buy directly
--   3 NOT_FOUND   no stock hash
--   4 SOLD_OUT    nothing is left: a waiting user keeps the place (ticket, position set); a user
--                 without one gets none (ticketId "")
--   5 PRE_QUEUE   before the opening (startMs): the ticket has no position yet
--   6 SHUFFLING   the opening passed and the pre-queue's shuffle is not published yet
--   7 NOT_OPEN    the pre-queue opens only at startMs - pqms (returned as startMs): no ticket
--   8 DRAW_CLOSED a draw takes no entry once it closed (at startMs)
--   9 EXPIRED     draw: the win was not used within its window and passed on
--  10 ORDERED     draw: the win was used by an order
--  11 LOST        draw: the entry was not drawn (place past the winners and the reserve list)
--  12 POW_REQUIRED the room asks a proof-of-work for a new ticket and ARGV[3] is ""
--  13 POW_REUSED  the proof-of-work was already used (for any ticket): no ticket
--  14 RETRY       ARGV[2] is already a pre-queued ticket's id: call again with another
--  15 NOT_ACTIVE  the sale has ended: no ticket
-- shufflePosition is a pre-queued ticket's place in the published shuffle (place - base), the
-- number a buyer recomputes from public data; 0 otherwise.
-- A fifo or random room's ticket is finished once an order used its admission (reserve.lua or
-- room_claim.lua removes the user from KEYS[5]) or the admission expired; the user's next take
-- then gives a new ticket at the end of the line (a draw gives none: EXPIRED or ORDERED).

local s = redis.call('HMGET', KEYS[1], 'room', 'available', 'start', 'end', 'paused', 'limit')
if not s[2] then
  return {3, '', 0, 0, 0, 0, '', 0, 0, 0}
end
if s[1] ~= '1' and s[1] ~= '2' then
  return {2, '', 0, 0, 0, 0, '', 0, 0, 0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local start, stop = tonumber(s[3]) or 0, tonumber(s[4]) or 0
local st = redis.call('HMGET', KEYS[2], 'upto', 'rate', 'mode', 'pqms', 'closed', 'pre', 'issued', 'shuffled',
  'cutoff', 'pow', 'left', 'base')
local upto = tonumber(st[1]) or 0
local rate = tonumber(st[2]) or 0
if s[5] == '1' then
  rate = 0
end
local mode = st[3] or 'fifo'
local closed = st[5] == '1'
local shuffled = st[8] == '1'
local cutoff = tonumber(st[9]) or 0
local base = tonumber(st[12]) or 0
local available = tonumber(s[2]) or 0
if s[1] == '2' then
  available = tonumber(st[11]) or 1 -- not read by a pacer yet: not known to be sold out
end
local uid = ARGV[1]

local function answer(code, tid, pos, dl, at, spos, waiting)
  if (code == 0 or code == 1 or code == 5 or code == 6) and now >= stop then -- ended: no place, no admission
    return {15, '', 0, 0, rate, 0, mode, 0, start, 0}
  end
  return {code, tid, pos, dl, rate, at, mode, spos, start, waiting}
end
local function pool()
  return redis.call('ZCARD', KEYS[3]) + redis.call('HLEN', KEYS[7])
end
-- close: the opening has passed (Redis clock). Freezes the pre-queue: its tickets take the
-- places base+1 … base+pre at the shuffle, later fifo tickets the places after them.
local function close()
  if closed then
    return
  end
  local issued = tonumber(st[7]) or 0
  local pre = tonumber(st[6]) or 0
  redis.call('HSET', KEYS[2], 'closed', '1', 'base', issued, 'issued', issued + pre)
  closed, base = true, issued
end
if now >= start then
  close()
end

local rec = redis.call('HGET', KEYS[4], uid)
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
      redis.call('HSET', KEYS[4], uid, place .. ' ' .. at .. ' ' .. tid .. ' ' .. flags)
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
    return answer(4, '', 0, 0, 0, 0, 0)
  end
else
  local pq = tonumber(st[4]) or 0
  if pq > 0 and now < start - pq then
    return {7, '', 0, 0, rate, 0, mode, 0, start - pq, 0}
  end
  if redis.call('HEXISTS', KEYS[6], ARGV[2]) == 1 then
    return answer(14, '', 0, 0, 0, 0, 0)
  end
end
local limit = tonumber(s[6]) or 0
if limit > 0 and ARGV[5] == '1' and (tonumber(redis.call('GET', KEYS[9])) or 0) >= limit then
  return answer(16, '', 0, 0, 0, 0, 0)
end
if (tonumber(st[10]) or 0) > 0 then
  if ARGV[3] == '' then
    return answer(12, '', 0, 0, 0, 0, 0)
  end
  if not redis.call('SET', KEYS[8], uid, 'NX', 'PX', math.max(tonumber(ARGV[4]) or 1, 1)) then
    return answer(13, '', 0, 0, 0, 0, 0)
  end
end
local tid = ARGV[2]
if pre then
  redis.call('HSET', KEYS[6], tid, uid)
  redis.call('HINCRBY', KEYS[2], 'pre', 1)
  redis.call('HSET', KEYS[4], uid, '0 ' .. now .. ' ' .. tid .. ' p')
  return answer(5, tid, 0, 0, now, 0, 0)
end
if mode == 'random' then
  redis.call('HSET', KEYS[7], uid, tid)
  redis.call('HSET', KEYS[4], uid, '0 ' .. now .. ' ' .. tid .. ' ')
  return answer(0, tid, 0, 0, now, 0, pool())
end
local place = redis.call('HINCRBY', KEYS[2], 'issued', 1)
redis.call('HSET', KEYS[4], uid, place .. ' ' .. now .. ' ' .. tid .. ' ')
redis.call('ZADD', KEYS[3], place, uid)
return answer(0, tid, place - upto, 0, now, 0, 0)
